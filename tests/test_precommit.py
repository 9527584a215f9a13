"""The pre-commit configuration: every hook is local and runs a tool the dev extra installs in .venv, so a
hook never downloads anything."""

from __future__ import annotations

import yaml

from tests.support import REPO


def test_every_hook_is_local_and_runs_a_tool_from_the_venv() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = config["repos"][0]["hooks"]
    assert {hook["id"] for hook in hooks} >= {"ruff-check", "ruff-format", "mypy", "lint-imports", "detect-private-key"}
    for hook in hooks:
        assert hook["language"] == "system", hook["id"]
        tool = hook["entry"].split()[0]
        assert tool.startswith(".venv/bin/"), hook["id"]
        assert (REPO / tool).is_file(), f"{hook['id']}: {tool} is not installed (make venv)"
