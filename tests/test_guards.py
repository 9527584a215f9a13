"""Behaviours that once hung on a single line the unit suite did not notice deleting: the UPDATE filter for
labels that only a CREATE can inject, and /validate's 503 when a namespace's labels are unknown. Each
test here fails when its line is deleted (see docs/reliability.md for how that was checked)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.support import STANDARD, gpu_pod, mutated, policies, review, validated
from webhook.policy.store import PolicyStore
from webhook.serve.app import create_app

TEAM = {"default": {"team": "vision"}}
ATTRIBUTION = {"labels": {"gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"}}}
# Two policies that differ only in attribution; the pod's `tier` label picks between them.
PLAIN_AND_ATTRIBUTED = policies(
    {
        "name": "plain",
        "priority": 200,
        "match": {"podSelector": {"matchLabels": {"tier": "plain"}}},
        **{k: v for k, v in STANDARD.items() if k != "attribution"},
    },
    {"name": "attributed", "priority": 100, **STANDARD, "attribution": ATTRIBUTION},
)


def test_an_update_is_not_refused_for_labels_only_a_create_could_have_injected():
    """A pod created under a policy without attribution, relabelled so that one with attribution now governs
    it: gpugate mutates pods on CREATE only, so the UPDATE cannot receive the team label. Refusing it would
    make the pod impossible to relabel; the attribution is checked on the next CREATE."""
    created, decision = mutated(gpu_pod(1, labels={"tier": "plain", "app": "x"}), PLAIN_AND_ATTRIBUTED, labels=TEAM)
    assert decision.allowed and decision.policy == "plain"
    assert "gpugate.io/team" not in created["metadata"]["labels"]
    relabelled = copy.deepcopy(created)
    del relabelled["metadata"]["labels"]["tier"]
    verdict = validated(relabelled, PLAIN_AND_ATTRIBUTED, labels=TEAM, operation="UPDATE", old=created)
    assert verdict.policy == "attributed"
    assert verdict.allowed, verdict.message


def test_the_same_pod_on_create_is_refused_without_its_team_label():
    """The other side of the filter: on CREATE a pod lacking the injected team label is refused."""
    created, _ = mutated(gpu_pod(1, labels={"tier": "plain", "app": "x"}), PLAIN_AND_ATTRIBUTED, labels=TEAM)
    relabelled = copy.deepcopy(created)
    del relabelled["metadata"]["labels"]["tier"]
    verdict = validated(relabelled, PLAIN_AND_ATTRIBUTED, labels=TEAM)
    assert not verdict.allowed and "lacks label gpugate.io/team=vision" in verdict.message


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    (tmp_path / "attributed.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "gpugate.io/v1",
                "kind": "GPUPolicy",
                "metadata": {"name": "attributed"},
                "spec": {**STANDARD, "attribution": ATTRIBUTION},
            }
        )
    )
    return tmp_path


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_unknown_namespace_labels_are_a_503_not_a_guess(policy_dir, endpoint):
    """When the namespace cache cannot say what a namespace's labels are, gpugate must not guess the team
    ("unassigned") nor let the pod through: it answers 503 so the apiserver's failurePolicy applies."""
    app = create_app(policies=PolicyStore(policy_dir), namespace_labels=lambda ns: None)
    resp = app.test_client().post(
        endpoint, data=json.dumps(review(gpu_pod(1), uid="u-503")), content_type="application/json"
    )
    out = resp.get_json()["response"]
    assert resp.status_code == 200 and out["uid"] == "u-503"
    assert out["allowed"] is False and out["status"]["code"] == 503
    assert out["status"]["reason"] == "ServiceUnavailable"
    assert 'labels of namespace "default"' in out["status"]["message"]
    assert "patch" not in out
