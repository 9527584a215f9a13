"""YAML read in bounded work (webhook/policy/documents.py), by `gpugate check` and by the policy loader
(tests/policy/test_files.py): aliases that expand a manifest a million-fold, recursive anchors, deep nesting
and endless integers are one-line input errors (exit 2) within a CPU budget, never a hang, a traceback or
gigabytes of memory."""

from __future__ import annotations

import sys

import pytest

from tests.budget import run_bounded
from webhook.policy.documents import DocumentTooLarge, load_all

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: x\n"
# Ten times ten times ... (nine levels): about 300 bytes that PyYAML builds as 10**9 shared references.
LAUGHS = (
    POD
    + "    args: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
)

HOSTILE = {
    "aliases": LAUGHS,
    "a recursive anchor": POD + "    args: &r [*r]\n",
    "deep nesting": POD + "    args: " + "[" * 900 + "]" * 900 + "\n",
    "an integer of 5000 digits": POD + "    resources: {limits: {nvidia.com/gpu: " + "9" * 5000 + "}}\n",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_check_refuses_a_manifest_beyond_the_yaml_bounds_in_one_line(tmp_path, name):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(HOSTILE[name])
    proc = run_bounded(
        [sys.executable, "-m", "webhook.cli", "check", "--policies", "policies", "-f", str(manifest)], cpu_seconds=20
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stderr.startswith(f"gpugate check: {manifest}: ") and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") <= 4, proc.stderr  # the YAML error and its place, not a dump


def test_aliases_within_ten_times_the_document_are_read_as_yaml_reads_them():
    docs = load_all("a: &x {b: [1, 2]}\nc: *x\nd: *x\n")
    assert docs == [{"a": {"b": [1, 2]}, "c": {"b": [1, 2]}, "d": {"b": [1, 2]}}]


def test_a_refusal_says_where_it_is():
    with pytest.raises(DocumentTooLarge) as caught:
        load_all("a: 1\n---\nb: &r [*r]\n")
    assert "recursive anchor" in str(caught.value) and "line 3" in str(caught.value)
