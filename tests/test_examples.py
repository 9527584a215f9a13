"""The shipped example manifests give the verdicts written beside them, through the real `gpugate check`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support import REPO, schema_check

EXAMPLES = REPO / "policies" / "examples"
EXPECTED = yaml.safe_load((EXAMPLES / "expected.yaml").read_text())
# Manifests written after ones GPU vendors and workload projects publish (provenance in their headers).
REAL = REPO / "tests" / "fixtures" / "real-manifests"
REAL_EXPECTED = yaml.safe_load((REAL / "expected.yaml").read_text())


def gpugate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, cwd=REPO, input=stdin, timeout=60
    )


def at(obj, dotted):
    for key in re.split(r"(?<!\\)\.", dotted):
        key = key.replace("\\.", ".")
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


@pytest.mark.parametrize(("directory", "expected"), [(EXAMPLES, EXPECTED), (REAL, REAL_EXPECTED)])
def test_every_example_has_an_expected_verdict(directory, expected):
    listed = {case["file"] for case in expected}
    assert listed == {p.name for p in directory.glob("*.yaml")} - {"expected.yaml"}


@pytest.mark.parametrize(
    "case",
    [*EXPECTED, *({**c, "directory": REAL} for c in REAL_EXPECTED)],
    ids=[c["file"] + (" --fleet" if c.get("fleet") else "") for c in [*EXPECTED, *REAL_EXPECTED]],
)
def test_example_verdict(case):
    labels = [
        f"{ns}=" + ",".join(f"{k}={v}" for k, v in kv.items()) for ns, kv in (case.get("namespaceLabels") or {}).items()
    ]
    source = case.get("directory", EXAMPLES) / case["file"]
    args = ["check", "--policies", "policies", "-f", str(source), "-o", "json"]
    for item in labels:
        args += ["--namespace-labels", item]
    if case.get("fleet"):
        args += ["--fleet", str(EXAMPLES / case["fleet"])]
    proc = gpugate(*args)
    assert proc.returncode == {"allowed": 0, "denied": 1, "skipped": 0}[case["verdict"]], proc.stderr
    for text in case.get("contains", []):
        assert text in proc.stderr
    # What each pod will get is readable whole in `kubectl apply --dry-run=server`: no warning is cut, and
    # none is over the 256 characters past which the apiserver may truncate it.
    warned = [line.split("Warning: ", 1)[1] for line in proc.stderr.splitlines() if "Warning: " in line]
    for text in warned:
        assert not text.endswith("…") and len(text) <= 256, text
    if case["verdict"] == "denied":
        # A refused object is never printed: `| kubectl apply -f -` must not apply it. `printed:` names the
        # allowed objects of a manifest that holds both.
        out = json.loads(proc.stdout) if proc.stdout else {}
        names = [o["metadata"]["name"] for o in (out.get("items", [out]) if out.get("kind") == "List" else [out]) if o]
        assert names == case.get("printed", []), proc.stdout
        return
    stored = json.loads(proc.stdout)
    for obj in stored.get("items", [stored]) if stored.get("kind") == "List" else [stored]:
        if case["verdict"] == "allowed" and obj.get("apiVersion") in ("v1", "apps/v1", "batch/v1"):
            schema_check(obj)  # the upstream schema knows built-in kinds; CRDs are checked against theirs in e2e
    for path, value in (case.get("fields") or {}).items():
        assert at(stored, path) == value, path
    for path in case.get("absent") or []:
        with pytest.raises((KeyError, IndexError)):
            at(stored, path)
    if case["verdict"] == "skipped":
        assert stored == yaml.safe_load(source.read_text())  # left exactly as it was


def test_policy_validate_passes_on_the_shipped_policies():
    proc = gpugate("policy", "validate", "policies")
    assert proc.returncode == 0 and "3 valid policies" in proc.stdout


def test_policy_validate_names_file_document_and_field_on_a_broken_copy(tmp_path):
    broken = tmp_path / "policies"
    shutil.copytree(REPO / "policies", broken, ignore=shutil.ignore_patterns("examples"))
    text = (broken / "10-serving.yaml").read_text()
    (broken / "10-serving.yaml").write_text(
        text.replace("maxPerContainer: 4", "maxPerContainer: four")
        + "---\napiVersion: gpugate.io/v2\nkind: GPUPolicy\nmetadata: {name: default}\n"
    )
    proc = gpugate("policy", "validate", str(broken))
    assert proc.returncode == 1
    assert (
        "10-serving.yaml: document 0: spec.limits.maxPerContainer: must be a whole number of at least 1, got 'four'"
        in proc.stderr
    )
    assert (
        "10-serving.yaml: document 1: metadata.name: 'default' is already defined in 00-default.yaml document 0"
        in proc.stderr
    )


def test_check_exit_code_2_on_bad_input(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a map\n")
    proc = gpugate("check", "--policies", "policies", "-f", str(bad))
    assert proc.returncode == 2 and "not a Kubernetes object" in proc.stderr and "Traceback" not in proc.stderr
    assert gpugate("check", "--policies", "policies", "-f", str(tmp_path / "missing.yaml")).returncode == 2
    assert gpugate("check", "--policies", str(tmp_path), "-f", "-", stdin="kind: [").returncode == 2


def test_check_reads_several_objects_and_prints_patches():
    manifest = (EXAMPLES / "pod-gpu-basic.yaml").read_text() + "---\n" + (EXAMPLES / "pod-fractional.yaml").read_text()
    proc = gpugate("check", "--policies", "policies", "-f", "-", "-o", "patch", stdin=manifest)
    assert proc.returncode == 1
    patches = json.loads(proc.stdout)
    assert (
        len(patches) == 2
        and patches[1] == []
        and {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in patches[0]
    )
