"""A policy directory read (webhook/policy/files.py, through the bounded YAML of documents.py): a file beyond
the YAML bounds is an issue naming the file, and `gpugate policy validate` says so without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError

POLICY = (REPO / "policies" / "00-default.yaml").read_text()
DEEP = "spec: " + "[" * 5000 + "]" * 5000 + "\n"  # libyaml stops at 1000 levels; PyYAML's composer recursed
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "default.yaml").write_text(POLICY)
    return directory


@pytest.mark.parametrize("text", [DEEP, "spec: " + "[" * 500 + "]" * 500, LAUGHS, "a: &a [*a]\n", "n: " + "9" * 5000])
def test_a_policy_file_beyond_the_yaml_bounds_is_an_issue_naming_the_file(policy_dir, text):
    (policy_dir / "zz-hostile.yaml").write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policies(policy_dir)
    assert [issue.file for issue in caught.value.issues] == ["zz-hostile.yaml"]


def test_policy_validate_names_the_file_without_a_traceback(policy_dir):
    (policy_dir / "deep.yaml").write_text(DEEP)
    proc = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "policy", "validate", str(policy_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if "deep.yaml" in line], proc.stderr
