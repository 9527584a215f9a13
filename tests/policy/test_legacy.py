"""The policy format's own version (webhook/policy/legacy.py): gpugate.io/v2 is the current layout and only
that; gpugate.io/v1 files, in either layout, keep loading with a note saying what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO
from webhook.cli import main
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError
from webhook.serve.app import create_app
from webhook.serve.policies import PolicyStore

CURRENT = """\
apiVersion: {version}
kind: GPUPolicy
metadata: {{name: current}}
spec:
  devices:
    nvidia: {{runtimeClassName: nvidia, modelLabel: nvidia.com/gpu.product}}
"""
LAYOUT_0_1 = """\
apiVersion: {version}
kind: GPUPolicy
metadata: {{name: old}}
spec:
  runtimeClassName: nvidia
  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
  models: {{nodeLabel: nvidia.com/gpu.product, default: l4, classes: {{l4: [NVIDIA-L4]}}}}
"""
WORKLOAD_KIND = """\
apiVersion: {version}
kind: GPUWorkloadKind
metadata: {{name: trainjobs}}
spec: {{group: example.com, kind: TrainJob, podTemplates: [spec.template]}}
"""


def write(directory: Path, text: str) -> Path:
    (directory / "p.yaml").write_text(text)
    return directory


def test_the_current_version_loads_without_a_note(tmp_path: Path) -> None:
    policies = load_policies(write(tmp_path, CURRENT.format(version="gpugate.io/v2")))
    assert [p.name for p in policies.policies] == ["current"] and policies.notes == ()


def test_v1_in_the_current_layout_loads_with_a_note_to_set_the_version(tmp_path: Path) -> None:
    policies = load_policies(write(tmp_path, CURRENT.format(version="gpugate.io/v1")))
    assert [p.name for p in policies.policies] == ["current"]
    assert policies.notes == (
        "p.yaml: document 0: apiVersion: apiVersion gpugate.io/v1 is deprecated: set apiVersion: gpugate.io/v2 "
        "(nothing else changes)",
    )


def test_v1_in_the_0_1_layout_loads_with_a_note_naming_the_fields_to_move(tmp_path: Path) -> None:
    policies = load_policies(write(tmp_path, LAYOUT_0_1.format(version="gpugate.io/v1")))
    [policy] = policies.policies
    assert policy.devices["nvidia"].runtime_class_name == "nvidia"
    [note] = policies.notes
    assert "move runtimeClassName, tolerations, models.nodeLabel into spec.devices.<vendor>" in note
    assert "set apiVersion: gpugate.io/v2" in note and "migrating policy files" in note


def test_the_0_1_layout_under_v2_is_refused_with_what_to_move(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as err:
        load_policies(write(tmp_path, LAYOUT_0_1.format(version="gpugate.io/v2")))
    text = str(err.value)
    assert "spec.runtimeClassName: is the 0.1 field layout, which gpugate.io/v2 does not read" in text
    assert "spec.models.nodeLabel: is the 0.1 field layout" in text


def test_a_v1_workload_kind_loads_with_a_note(tmp_path: Path) -> None:
    policies = load_policies(write(tmp_path, WORKLOAD_KIND.format(version="gpugate.io/v1")))
    assert ("example.com", "TrainJob") in policies.workloads
    assert len(policies.notes) == 1 and "set apiVersion: gpugate.io/v2 (nothing else changes)" in policies.notes[0]


def test_policy_validate_prints_the_note_and_still_succeeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, LAYOUT_0_1.format(version="gpugate.io/v1"))
    assert main(["policy", "validate", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{tmp_path}: 1 valid policies (old)\n"
    assert err.startswith("note: p.yaml: document 0: apiVersion: apiVersion gpugate.io/v1 and the 0.1")


def test_readyz_says_that_documents_are_in_a_deprecated_form(tmp_path: Path) -> None:
    write(tmp_path, LAYOUT_0_1.format(version="gpugate.io/v1"))
    resp = create_app(policies=PolicyStore(tmp_path, interval=0)).test_client().get("/readyz")
    assert resp.status_code == 200
    assert resp.get_data(as_text=True) == (
        "ok (1 policy document in a deprecated form; gpugate policy validate says what to change)\n"
    )


@pytest.mark.parametrize("directory", ["policies", "deploy/base/policies", "charts/gpugate/files/policies"])
def test_the_shipped_policies_are_in_the_current_version(directory: str) -> None:
    assert load_policies(REPO / directory).notes == ()
