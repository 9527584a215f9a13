"""The JSON-type guard (webhook/admission/shapes.py) on every kind gpugate reads: the built-in workloads and
the kinds a policy directory declares with GPUWorkloadKind. A wrong type is a 400 that names the field,
whatever the kind, and never reaches a rule."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, review
from webhook.serve.app import create_app
from webhook.serve.policies import PolicyStore

TRAIN_JOB_KIND = """\
apiVersion: gpugate.io/v2
kind: GPUWorkloadKind
metadata:
  name: trainjobs
spec:
  group: example.com
  kind: TrainJob
  podTemplates: [spec.template]
"""


def template(node_selector: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "train"}},
        "spec": {
            "nodeSelector": node_selector,
            "containers": [{"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def deployment(node_selector: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}, "template": template(node_selector)},
    }


def train_job(node_selector: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "TrainJob",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"template": template(node_selector)},
    }


@pytest.fixture
def client(tmp_path: Path) -> Any:
    for policy in (REPO / "policies").glob("*.yaml"):
        shutil.copy(policy, tmp_path / policy.name)
    (tmp_path / "zz-trainjob.yaml").write_text(TRAIN_JOB_KIND)
    app = create_app(policies=PolicyStore(tmp_path, interval=0))
    return app.test_client()


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("make", [deployment, train_job], ids=["Deployment", "TrainJob"])
def test_a_wrong_type_in_a_template_is_a_400_naming_the_field_for_built_in_and_declared_kinds(
    client: Any, endpoint: str, make: Any
) -> None:
    resp = client.post(endpoint, json=review(make(["x"]), uid="u-1"))
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "u-1" and out["allowed"] is False
    assert out["status"]["code"] == 400 and out["status"]["reason"] == "BadRequest"
    assert "request.object.spec.template.spec.nodeSelector: expected a map, got a list" in out["status"]["message"]


@pytest.mark.parametrize("make", [deployment, train_job], ids=["Deployment", "TrainJob"])
def test_the_same_object_with_the_right_types_is_judged(client: Any, make: Any) -> None:
    resp = client.post("/validate", json=review(make({"pool": "a"}), uid="u-2"))
    out = resp.get_json()["response"]
    assert out["uid"] == "u-2" and out.get("status", {}).get("code") != 400, out
