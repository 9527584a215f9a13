"""ResourceClaims and ResourceClaimTemplates judged on their own (webhook/admission/claims.py): a claim created
after the pod that names it is refused at its own creation when it is over the limits of every policy a pod of
its namespace may have; a CPU claim or an admin-access one takes no GPU; ``All`` counts as the largest node of
its class or is refused; and ``gpugate check`` judges a manifest's claims the same way. Through the real
apiserver: tests/e2e/test_dra_limits.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import REPO, policies, request, standard
from webhook.admission import Environment, validate
from webhook.admission.offline import check_objects
from webhook.inventory.snapshot import load_snapshot
from webhook.policy.files import load_policies

FLEET = load_policies(REPO / "policies")
SNAPSHOT = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")


def requests(*items: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(items)}}


def gpus(count: int, name: str = "gpu", device_class: str = "gpu.nvidia.com", **more: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count, **more}}


def claim(spec: dict[str, Any], *, name: str = "c", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def template(spec: dict[str, Any], *, name: str = "t", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def judged(obj: dict[str, Any], *, policy_set: Any = FLEET, fleet: Any = SNAPSHOT, **kw: Any) -> Any:
    env = Environment(policies=policy_set, namespace_labels=lambda _ns: {}, fleet=lambda: fleet)
    return validate(request(obj, **kw), env)


def test_a_template_of_sixteen_gpus_is_refused_under_eight_per_pod():
    verdict = judged(template(requests(gpus(16))))
    assert not verdict.allowed and verdict.code == 403
    assert verdict.message == (
        'ResourceClaimTemplate "t" in namespace "ml" violates GPU policy "default" (00-default.yaml#0):\n'
        '- spec.spec.devices.requests[0]: request "gpu": takes 16 GPUs (16 of DeviceClass "gpu.nvidia.com"), more '
        'than the 8 per container that policy "default" allows: every container naming it would be over the '
        "limit; request at most 8 devices, or split them over several requests\n"
        '- spec.spec.devices.requests: claim: takes 16 GPUs in all (request "gpu": 16 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod that policy "default" allows: every pod naming it would be '
        "over the limit; claim at most 8 GPU devices, or split the work across pods"
    )
    assert judged(template(requests(gpus(8)))).allowed


def test_requests_of_one_claim_add_up_toward_the_pod_limit():
    verdict = judged(claim(requests(gpus(4), gpus(6, name="more"))))
    assert not verdict.allowed
    assert 'spec.devices.requests: claim: takes 10 GPUs in all (request "gpu": 4 of' in verdict.message
    assert "per container" not in verdict.message  # each request alone is within 8


def test_cpu_and_admin_access_requests_take_no_gpu():
    assert judged(claim(requests(gpus(64, device_class="dra.cpu")))).allowed
    assert judged(claim(requests(gpus(1, adminAccess=True) | {"exactly": {"deviceClassName": "gpu.nvidia.com",
        "allocationMode": "All", "adminAccess": True}}))).allowed  # fmt: skip


def test_all_is_the_largest_node_and_unknowable_all_is_refused():
    all_gpus = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
    assert judged(claim(requests(all_gpus))).allowed  # 8 on the fleet's largest h200 node
    verdict = judged(claim(requests(all_gpus)), fleet=None)
    assert not verdict.allowed
    assert (
        'spec.devices.requests[0]: request "gpu": takes all of DeviceClass "gpu.nvidia.com" (how many one node has '
        'is unknown), so the GPUs it takes cannot be counted against the 8 per pod that policy "default" allows; '
        "claim a number of devices: exactly.count (allocationMode ExactCount) of at most 8"
    ) in verdict.message


def test_first_available_counts_its_worst_gpu_alternative():
    pick = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "large", "deviceClassName": "gpu.nvidia.com", "count": 12},
        ],
    }
    verdict = judged(template(requests(pick)))
    assert not verdict.allowed and "takes 12 GPUs (the most of firstAvailable: 2 of" in verdict.message


TWO = policies(
    {"name": "research", "priority": 10, "match": {"podSelector": {"matchLabels": {"team": "research"}}},
     "limits": {"maxPerPod": 16}},
    {"name": "everyone", "limits": {"maxPerPod": 8}},
)  # fmt: skip


def test_a_claim_is_refused_only_when_every_policy_a_pod_may_have_refuses_it():
    """Pods labelled team=research may hold 16 GPUs: a 16-GPU claim may be theirs, a 24-GPU one no pod's."""
    assert judged(claim(requests(gpus(16))), policy_set=TWO).allowed
    verdict = judged(claim(requests(gpus(24))), policy_set=TWO)
    assert not verdict.allowed
    assert verdict.message.startswith(
        'ResourceClaim "c" in namespace "ml" violates GPU policy "research" (test.yaml#0) (and every other policy a '
        "pod of this namespace may have: everyone):"
    ), verdict.message


def test_warn_mode_warns_and_audit_mode_records():
    warned = judged(claim(requests(gpus(16))), policy_set=standard(mode="warn"))
    assert warned.allowed and any("takes 16 GPUs in all" in w for w in warned.warnings), warned.warnings
    audited = judged(claim(requests(gpus(16))), policy_set=standard(mode="audit"))
    assert audited.allowed and "takes 16 GPUs in all" in audited.audit_annotations["violations"]


def test_an_update_is_refused_only_for_what_it_made_worse():
    old = claim(requests(gpus(16)))
    new = {**old, "metadata": {**old["metadata"], "labels": {"a": "b"}}}
    assert judged(new, operation="UPDATE", old=old).allowed


@pytest.mark.parametrize(
    "spec",
    [
        None,
        [],
        "x",
        {"devices": []},
        {"devices": {"requests": "x"}},
        {"devices": {"requests": [None, 3, {"name": 3, "exactly": []}, {"firstAvailable": 7}]}},
        {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": 7, "count": "16"}}]}},
        {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": True}}]}},
    ],
)
def test_malformed_claims_are_judged_without_a_crash(spec: Any):
    verdict = judged({**claim({}), "spec": spec})
    assert verdict.allowed and verdict.code == 200


def test_check_judges_a_manifests_claims():
    results = check_objects(
        [template(requests(gpus(16)), namespace="")], policies=FLEET, namespace_labels={}, fleet=SNAPSHOT
    )
    [result] = results
    assert not result.allowed and not result.skipped
    assert 'ResourceClaimTemplate "t" in namespace "default" violates GPU policy "default"' in result.decision.message
