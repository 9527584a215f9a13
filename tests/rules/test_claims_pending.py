"""``gpugate.io/claims-pending`` (webhook/rules/attribution.py): /mutate gives a pod naming ResourceClaims it cannot
read yet their name (``Several`` for more, or a name that is not a label value), so that each claim is added to the
pod when it is created (tests/admission/test_claims.py); a value the tenant wrote is replaced, and in every mode a
pod that lacks the label /mutate gives it, or an UPDATE that adds, changes or removes it, is refused. Through the
apiserver: tests/e2e/test_dra_limits.py."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tests.support import apply, container, env, mutated, pod, request, standard, validated
from webhook.admission import mutate
from webhook.inventory.model import claim_of
from webhook.policy.keys import CLAIMS_PENDING_LABEL
from webhook.rules.attribution import claims_pending_value

MODES = ["enforce", "warn", "audit"]


def claiming(*names: str, labels: dict[str, str] | None = None, template: str | None = None) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [{"name": f"c{i}", "resourceClaimName": n} for i, n in enumerate(names)]
    if template:
        entries.append({"name": "t", "resourceClaimTemplateName": template})
    uses = [{"name": e["name"]} for e in entries]
    return pod(container(resources={"claims": uses}), labels=labels, resourceClaims=entries)


def label(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(CLAIMS_PENDING_LABEL)


@pytest.mark.parametrize(
    ("names", "value"),
    [
        (("train",), "train"),
        (("train", "eval"), "Several"),
        (("train", "train"), "train"),  # two entries naming one claim
        (("x" * 64,), "Several"),  # a claim name of 64 characters is no label value
        (("Several",), "Several"),
    ],
)
def test_a_pod_naming_claims_gpugate_cannot_read_carries_their_name(names, value):
    result, decision = mutated(claiming(*names), standard())
    assert decision.allowed and label(result) == value
    assert claims_pending_value(list(dict.fromkeys(names))) == value


def test_claims_that_exist_and_templates_need_no_label():
    """A claim gpugate can read was counted at the pod's admission; a template created after its pod becomes the
    claim kube-controller-manager makes from it, which names its owner pod (read by name, no label needed)."""
    known = claim_of(
        {
            "kind": "ResourceClaim",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        }
    )
    found = dataclasses.replace(env(standard()), claims=lambda kind, ns, name: known if name == "train" else None)
    obj = claiming("train", template="later")
    decision = mutate(request(obj), found)
    assert decision.allowed and label(apply(obj, decision.patch)) is None


def test_a_value_the_tenant_wrote_is_replaced_and_one_on_a_pod_naming_no_claim_removed():
    result, decision = mutated(claiming("train", labels={CLAIMS_PENDING_LABEL: "other"}), standard())
    assert label(result) == "train"
    assert f"label {CLAIMS_PENDING_LABEL}=other replaced with train: gpugate sets it" in decision.warnings
    gpu = pod(container(limits={"nvidia.com/gpu": 1}), labels={CLAIMS_PENDING_LABEL: "train"})
    result, decision = mutated(gpu, standard())
    assert label(result) is None
    assert any(w.startswith(f"label {CLAIMS_PENDING_LABEL}=train removed") for w in decision.warnings)


def test_a_value_that_still_covers_the_pods_claims_is_kept():
    """The claim may be created between the mutating and the validating call: the label /mutate wrote then stays."""
    result, _ = mutated(claiming("train", "eval"), standard())
    assert label(result) == "Several"
    assert validated(result, standard()).allowed


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_lacking_the_label_is_refused_in_every_mode(mode):
    """/mutate skipped (fail-open), or a tenant's own value that finds the pod for no claim it names."""
    for obj in (claiming("train"), claiming("train", labels={CLAIMS_PENDING_LABEL: "other"})):
        decision = validated(obj, standard(mode=mode))
        assert not decision.allowed and decision.code == 403, (mode, decision.warnings)
        assert f'lacks label {CLAIMS_PENDING_LABEL}=train that policy "standard" requires' in decision.message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("edit", ["added", "changed", "removed"])
def test_the_label_cannot_be_edited_on_update_in_any_mode(mode, edit):
    policy = standard(mode=mode)
    created, _ = mutated(claiming("train") if edit != "added" else pod(container(limits={"nvidia.com/gpu": 1})), policy)
    updated = copy.deepcopy(created)
    labels = updated["metadata"].setdefault("labels", {})
    if edit == "removed":
        del labels[CLAIMS_PENDING_LABEL]
    else:
        labels[CLAIMS_PENDING_LABEL] = "mine"
    decision = validated(updated, policy, operation="UPDATE", old=created)
    assert not decision.allowed and decision.code == 403, (mode, edit, decision.warnings)
    was = {"added": "label gpugate.io/claims-pending=mine was added", "changed": "label gpugate.io/claims-pending=train was changed to mine", "removed": "label gpugate.io/claims-pending=train was removed"}[edit]  # fmt: skip
    assert (
        f"metadata.labels[{CLAIMS_PENDING_LABEL}]: pod: {was}: gpugate sets it when it admits a pod naming "
        "ResourceClaims it cannot read yet, so that their GPUs are added to the pod's when they are created; leave "
        f"{CLAIMS_PENDING_LABEL} as gpugate wrote it"
    ) in decision.message
    assert validated(created, policy, operation="UPDATE", old=created).allowed  # unchanged: nothing to refuse


def test_a_status_update_cannot_remove_it_either():
    created, _ = mutated(claiming("train"), standard(mode="warn"))
    updated = copy.deepcopy(created)
    del updated["metadata"]["labels"][CLAIMS_PENDING_LABEL]
    decision = validated(updated, standard(mode="warn"), operation="UPDATE", old=created, sub_resource="status")
    assert not decision.allowed and "a status update cannot change gpugate's label" in decision.message
