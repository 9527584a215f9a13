"""ResourceClaims and ResourceClaimTemplates judged on their own (webhook/admission/claims.py): a claim created
after the pod that names it is refused at its own creation when it is over the limits of every policy a pod of
its namespace may have; a CPU claim or an admin-access one takes no GPU; ``All`` counts as the largest node of
its class or is refused; and ``gpugate check`` judges a manifest's claims the same way. Through the real
apiserver: tests/e2e/test_dra_limits.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from tests.support import REPO, apply, container, pod, policies, request, standard
from webhook.admission import Environment, mutate, validate
from webhook.admission.offline import check_objects
from webhook.inventory.model import claim_of
from webhook.inventory.snapshot import load_snapshot
from webhook.policy.files import load_policies
from webhook.policy.keys import CLAIMS_PENDING_LABEL

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


# ---- several claims created after the pod that names them (gpugate.io/claims-pending) ---------------------------


def claiming_pod(*entries: dict[str, Any], name: str = "p", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod in namespace ml whose one container uses every claim entry it names."""
    made = pod(
        container(resources={"claims": [{"name": e["name"]} for e in entries]}),
        name=name,
        namespace="ml",
        labels=labels,
        resourceClaims=list(entries),
    )
    made["metadata"]["uid"] = f"uid-{name}"
    return made


class Cluster:
    """What the server reads for a claim's CREATE: claims that exist, and the pods of namespace ml."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.claims: dict[tuple[str, str, str], Any] = {}
        self.pods = list(pods)
        self.lists: list[tuple[str, str]] = []
        self.reads: list[tuple[str, str]] = []

    def add(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.claims[(obj["kind"], meta["namespace"], meta["name"])] = claim_of(obj)

    def pending(self, namespace: str, claim_name: str) -> list[Mapping[str, Any]] | None:
        """As the label selector gpugate.io/claims-pending in (<name>, Several) selects."""
        self.lists.append((namespace, claim_name))
        wanted = {claim_name, "Several"}
        return [p for p in self.pods if p["metadata"].get("labels", {}).get(CLAIMS_PENDING_LABEL) in wanted]

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((namespace, name))
        return next((p for p in self.pods if p["metadata"]["name"] == name), None)

    def env(self, policy_set: Any = FLEET) -> Environment:
        return Environment(
            policies=policy_set,
            namespace_labels=lambda _ns: {},
            fleet=lambda: SNAPSHOT,
            claims=lambda kind, ns, name: self.claims.get((kind, ns, name)),
            pending_pods=self.pending,
            pod=self.pod,
        )

    def admit(self, obj: dict[str, Any], policy_set: Any = FLEET) -> dict[str, Any]:
        """A pod through /mutate (its patch applied) and /validate, as the apiserver stores it."""
        decision = mutate(request(obj), self.env(policy_set))
        stored = apply(obj, decision.patch)
        assert decision.allowed and validate(request(stored), self.env(policy_set)).allowed
        self.pods.append(stored)
        return stored

    def create(self, obj: dict[str, Any], policy_set: Any = FLEET) -> Any:
        verdict = validate(request(obj), self.env(policy_set))
        if verdict.allowed:
            self.add(obj)
        return verdict


def test_claims_created_after_the_pod_that_names_them_add_up():
    """Two claims of 6 GPUs each under 8 per pod: each alone passes, the second one created is refused because the
    pod admitted before them now holds 12. Before, the pod was judged with both unknown and each claim alone."""
    cluster = Cluster()
    stored = cluster.admit(
        claiming_pod({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    )
    assert stored["metadata"]["labels"][CLAIMS_PENDING_LABEL] == "Several"
    assert cluster.create(claim(requests(gpus(6)), name="one")).allowed
    verdict = cluster.create(claim(requests(gpus(6)), name="two"))
    assert not verdict.allowed and verdict.code == 403
    assert verdict.message == (
        'ResourceClaim "two" in namespace "ml", named by pod "p", which was admitted before the claim existed (label '
        'gpugate.io/claims-pending), would put the pod over GPU policy "default" (00-default.yaml#0):\n'
        '- spec.containers[0].resources.claims: container "main": requests 12 GPUs (spec.resourceClaims[0] claim "a" '
        '(ResourceClaim "one") request "gpu": 6 of DeviceClass "gpu.nvidia.com", spec.resourceClaims[1] claim "b" '
        '(ResourceClaim "two") request "gpu": 6 of DeviceClass "gpu.nvidia.com"), more than the 8 per container that '
        'policy "default" allows; request at most 8 (resources and the claims it names together), or split the work '
        "across pods\n"
        "- spec.resourceClaims: pod: requests 12 GPUs in all (0 in its containers' resources, 12 through claims: "
        'spec.resourceClaims[0] claim "a" (ResourceClaim "one") request "gpu": 6 of DeviceClass "gpu.nvidia.com"; '
        'spec.resourceClaims[1] claim "b" (ResourceClaim "two") request "gpu": 6 of DeviceClass "gpu.nvidia.com"), '
        'more than the 8 per pod that policy "default" allows; request at most 8 GPUs per pod (containers\' '
        "resources and claims' devices together)\n"
        'To fix: create ResourceClaim "two" with fewer GPU devices, or delete pod "p" and create it again naming '
        "fewer GPUs in all (a pod's claims cannot change)."
    )
    assert cluster.lists == [("ml", "one"), ("ml", "two")]  # one list per claim's CREATE
    assert cluster.create(claim(requests(gpus(2)), name="two")).allowed  # 8 in all: within the limit


def test_container_resources_count_with_the_claims():
    cluster = Cluster()
    with_gpus = claiming_pod({"name": "a", "resourceClaimName": "one"})
    with_gpus["spec"]["containers"][0]["resources"].update(limits={"nvidia.com/gpu": 4}, requests={"nvidia.com/gpu": 4})
    stored = cluster.admit(with_gpus)
    assert stored["metadata"]["labels"][CLAIMS_PENDING_LABEL] == "one"
    verdict = cluster.create(claim(requests(gpus(5)), name="one"))
    assert not verdict.allowed
    assert "requests 9 GPUs in all (4 in its containers' resources, 5 through claims:" in verdict.message


def test_a_claim_made_from_a_template_is_added_to_its_owner_pod():
    """kube-controller-manager makes a claim from a template for one pod (annotation resource.kubernetes.io/pod-claim-name,
    a controller ownerReference to the pod): it is added to that pod, read by name, with the pod's other claims."""
    cluster = Cluster()
    cluster.add(claim(requests(gpus(6)), name="shared"))
    cluster.admit(
        claiming_pod({"name": "own", "resourceClaimTemplateName": "t"}, {"name": "s", "resourceClaimName": "shared"})
    )
    assert cluster.create(template(requests(gpus(6)))).allowed  # alone within the limits
    made = claim(requests(gpus(6)), name="p-own-x7k2q")
    made["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "own"}
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True, "blockOwnerDeletion": True}
    ]
    verdict = cluster.create(made)
    assert not verdict.allowed
    assert verdict.message.startswith(
        'ResourceClaim "p-own-x7k2q" in namespace "ml", made from ResourceClaimTemplate "t" for pod "p", which owns '
        'it, would put the pod over GPU policy "default" (00-default.yaml#0):'
    ), verdict.message
    assert (
        'requests 12 GPUs in all (0 in its containers\' resources, 12 through claims: spec.resourceClaims[0] claim "own" '
        '(ResourceClaim "p-own-x7k2q") request "gpu": 6 of DeviceClass "gpu.nvidia.com"; spec.resourceClaims[1] claim '
        '"s" (ResourceClaim "shared") request "gpu": 6 of'
    ) in verdict.message
    assert 'To fix: give ResourceClaimTemplate "t" fewer GPU devices' in verdict.message
    assert cluster.reads == [("ml", "p")] and cluster.lists == []  # the owner read by name, no list
    # another pod of that name (the owner is gone): nothing to add it to
    made["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-deleted-pod"
    assert cluster.create(made).allowed


def test_what_the_claim_makes_over_the_limits_is_judged_in_the_pods_mode():
    for mode in ("warn", "audit"):
        cluster = Cluster()
        policy_set = standard(mode=mode, limits={"maxPerPod": 8})
        with_gpus = claiming_pod({"name": "a", "resourceClaimName": "one"})
        with_gpus["spec"]["containers"][0]["resources"].update(
            limits={"nvidia.com/gpu": 4}, requests={"nvidia.com/gpu": 4}
        )
        cluster.admit(with_gpus, policy_set)
        verdict = cluster.create(claim(requests(gpus(5)), name="one"), policy_set)
        assert verdict.allowed and verdict.mode == mode
        if mode == "warn":
            assert any(w.startswith("gpugate: ResourceClaim one: pod p: ") for w in verdict.warnings), verdict.warnings
            assert any("requests 9 GPUs in all" in w for w in verdict.warnings), verdict.warnings
        else:
            assert "requests 9 GPUs in all" in verdict.audit_annotations["violations"]


def test_pods_that_do_not_name_it_are_finished_or_cannot_be_listed_are_left_alone():
    cluster = Cluster()
    cluster.admit(claiming_pod({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"}))
    cluster.add(claim(requests(gpus(6)), name="one"))
    done = cluster.pods[0]
    done["status"] = {"phase": "Succeeded"}
    assert cluster.create(claim(requests(gpus(6)), name="two")).allowed  # it will never run again
    del done["status"]
    cluster.pods[0]["metadata"]["labels"][CLAIMS_PENDING_LABEL] = "Several"
    other = Cluster(*cluster.pods)
    other.claims = cluster.claims
    verdict = validate(request(claim(requests(gpus(6)), name="three")), other.env())
    assert verdict.allowed  # labelled Several, but it does not name "three"
    unlisted = dataclasses.replace(other.env(), pending_pods=lambda _ns, _name: None)
    assert validate(request(claim(requests(gpus(6)), name="two")), unlisted).allowed  # never a refusal on missing data
    assert not validate(request(claim(requests(gpus(6)), name="two")), other.env()).allowed
