"""A clone of this repository alone builds, tests and explains itself: no file refers to a path outside it.

Scanned: every file git tracks or would track (so also files not committed yet), except this one, whose
patterns would match themselves. Markdown links are followed too: each relative link must name a file
or directory inside the clone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

THIS = Path(__file__).resolve()

# Documents that lived next to the repository during development and are not part of it, and the
# ways a path can leave the clone: a parent of the repository root, or an absolute path on the
# development machine.
SIBLING = "shared"  # the development folder beside the clone
OUTSIDE = re.compile(
    rf"\.\./{SIBLING}\b"
    r"|\bPRODUCT\.md\b"
    r"|\bapiserver-contract(\.md)?\b"
    r"|\breference-fleet(\.md)?\b"
    r"|\bSTYLE\.md\b"
    r"|(?<![\w.])/work/(main|wt|shared)\b"
    r"|(?<![\w.])/root/(?!\.cache\b)"
)

MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def repository_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    files = [REPO / name for name in listed if name]
    return sorted(p for p in files if p.is_file() and p.resolve() != THIS)


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def test_the_scan_sees_the_whole_repository() -> None:
    names = {p.relative_to(REPO).as_posix() for p in repository_files()}
    for expected in (
        "README.md",
        "Makefile",
        "webhook/cli.py",
        "docs/operations.md",
        "tests/support.py",
        "deploy/base/deployment.yaml",
        "policies/README.md",
    ):
        assert expected in names


def test_no_file_refers_to_a_path_outside_the_repository() -> None:
    found: dict[str, list[str]] = {}
    for path in repository_files():
        text = text_of(path)
        if text is None:
            continue
        name = path.relative_to(REPO).as_posix()
        for number, line in enumerate(text.splitlines(), 1):
            for match in OUTSIDE.finditer(line):
                found.setdefault(name, []).append(f"{name}:{number}: {match.group(0)!r} in {line.strip()[:120]}")
    hits = [hit for name_hits in found.values() for hit in name_hits]
    assert not hits, "files that refer outside the repository; move the facts into docs/:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "pattern",
    [f"../{SIBLING}/fixtures", "PRODUCT.md §2", "see apiserver-contract.md", "/work/main/tests", "reference-fleet.md"],
)
def test_the_patterns_catch_what_they_are_for(pattern: str) -> None:
    assert OUTSIDE.search(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        "~/.cache/gpugate-tools",
        "/root/.cache/gpugate-e2e",
        "docs/admission-contract.md",
        "https://example.com/work/main",
        "policies/README.md",
    ],
)
def test_the_patterns_leave_inside_paths_alone(pattern: str) -> None:
    assert not OUTSIDE.search(pattern)


def test_markdown_links_stay_inside_the_repository() -> None:
    broken = []
    for path in repository_files():
        if path.suffix != ".md":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for target in MARKDOWN_LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                resolved = (path.parent / target).resolve()
                name = path.relative_to(REPO).as_posix()
                if not resolved.is_relative_to(REPO.resolve()):
                    broken.append(f"{name}:{number}: {target} leaves the repository")
                elif not resolved.exists():
                    broken.append(f"{name}:{number}: {target} does not exist")
    assert not broken, "\n".join(broken)
