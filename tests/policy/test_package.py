"""The policy package as a whole: the policy language alone. The import contract in pyproject.toml keeps
threads and temporary directories out of it; this test keeps the environment out, which no import shows
(``os`` is imported for paths)."""

from __future__ import annotations

import ast

from tests.support import REPO

POLICY = REPO / "webhook" / "policy"
#: Ways to read the process environment: os.environ / os.getenv / os.environb / os.putenv and their bare names.
ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(source: str) -> list[int]:
    """Lines of ``source`` that touch the process environment."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            (isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT)
            or (isinstance(node, ast.Name) and node.id in ENVIRONMENT)
            or (isinstance(node, ast.ImportFrom) and any(alias.name in ENVIRONMENT for alias in node.names))
        ):
            lines.append(node.lineno)
    return lines


def test_the_policy_package_reads_no_environment() -> None:
    found = {
        path.relative_to(REPO).as_posix(): lines
        for path in sorted(POLICY.rglob("*.py"))
        if (lines := environment_reads(path.read_text()))
    }
    assert found == {}, f"the policy language takes its inputs as arguments; environment read at {found}"


def test_the_check_sees_each_way_of_reading_the_environment() -> None:
    assert environment_reads("import os\nos.environ.get('X')\n") == [2]
    assert environment_reads("import os\nx = os.getenv('X')\n") == [2]
    assert environment_reads("from os import environ\n") == [1]
    assert environment_reads("import os\nos.path.join('a', 'b')\n") == []


def test_the_policy_package_is_there_to_be_checked() -> None:
    assert {"loader.py", "model.py", "files.py"} <= {path.name for path in POLICY.glob("*.py")}
