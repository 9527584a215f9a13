"""DRA devices under the limits, through the real kube-apiserver (resource.k8s.io/v1) and the shipped policies
(`default`: 8 GPUs per pod and per container), with gpugate's live inventory and claims cache: a pod naming a
`count: 16` claim, an `allocationMode: All` claim (counted as the largest node publishing the class) and a
`firstAvailable` one at its worst alternative are refused; a claim created after the pod that names it is
refused at its own creation.

A claim alone is judged against every policy a pod of its namespace may have, so the claims of the pod tests
are created in namespaces `e2e-dra-large-*`, where a policy this module adds (`dra-large`: pods labelled
`gpugate.io/size: large`, 16 GPUs) lets them exist; the unlabelled pods there have `default`'s 8."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import ControlPlane, KubectlResult
from tests.harness.gpugate import Stack
from tests.harness.polling import eventually

from .objects import gpugate_denial

pytestmark = pytest.mark.e2e

DRA_API = "resource.k8s.io/v1"
LARGE = {"gpugate.io/size": "large"}


@pytest.fixture(scope="module")
def large(fleet: Stack) -> Iterator[Stack]:
    """The shipped default policy, for namespaces e2e-dra-large-* and pods labelled large, with 16 GPUs."""
    shipped = yaml.safe_load((fleet.policy_dir / "00-default.yaml").read_text())
    shipped["metadata"]["name"] = "dra-large"
    shipped["spec"].update(
        priority=200,
        match={"namespaces": ["e2e-dra-large-*"], "podSelector": {"matchLabels": LARGE}},
        limits={"maxPerContainer": 16, "maxPerPod": 16},
    )
    written = fleet.policy_dir / "90-dra-large.yaml"
    written.write_text(yaml.safe_dump(shipped, sort_keys=False))
    probe = fleet.cluster.create_namespace("e2e-dra-large")
    try:
        # Hot reload: the policy is in force once a 16-GPU claim may exist there.
        assert eventually(lambda: create(fleet.cluster, template("probe", probe, exactly(16)), dry=True).ok, timeout=30)
        yield fleet
    finally:
        written.unlink()


def exactly(count: int, device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count}}


def template(name: str, namespace: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def claiming(name: str, namespace: str, claim: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": claim}],
            "containers": [{"name": "main", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }


def create(cp: ControlPlane, obj: dict[str, Any], *, dry: bool = False) -> KubectlResult:
    args = ["create", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry else [])
    return cp.kubectl(*args, stdin=obj, check=False)


def refused(result: KubectlResult) -> str:
    assert not result.ok, result
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    return message


def test_a_pod_naming_a_claim_of_sixteen_gpus_is_refused_under_eight_per_pod(large: Stack) -> None:
    cp = large.cluster
    ns = cp.create_namespace("e2e-dra-large")
    assert create(cp, template("sixteen", ns, exactly(16))).ok  # a large pod may hold it
    message = refused(create(cp, claiming("p", ns, "sixteen"), dry=True))
    assert 'Pod "p" in namespace' in message and 'violates GPU policy "default"' in message, message
    assert (
        "spec.resourceClaims: pod: requests 16 GPUs in all (0 in its containers' resources, 16 through claims: "
        'spec.resourceClaims[0] claim "gpus" (ResourceClaimTemplate "sixteen") request "gpu": 16 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod that policy "default" allows'
    ) in message, message
    assert 'spec.containers[0].resources.claims: container "main": requests 16 GPUs' in message, message
    assert create(cp, claiming("p", ns, "sixteen", LARGE), dry=True).ok  # the policy that allows 16


def test_all_counts_as_the_largest_node_publishing_its_class(large: Stack) -> None:
    """No node publishes gpu.nvidia.com devices at first: the largest node is the one the shipped a100-gke pool
    (05-node-pools.yaml) adds, of 1 GPU. Then a node's DRA driver publishes 12: All takes 12, which a large pod
    may hold and an unlabelled one may not. (Where nothing can tell, All is refused: tests/admission/test_claims.py.)"""
    cp = large.cluster
    ns = cp.create_namespace("e2e-dra-large")
    everything = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
    assert create(cp, template("all", ns, everything)).ok
    assert create(cp, claiming("p", ns, "all"), dry=True).ok  # 1 GPU
    published = resource_slice("e2e-dra-node", 12)
    assert cp.kubectl("create", "-f", "-", stdin=published, check=False).ok
    try:
        assert eventually(lambda: not create(cp, claiming("p", ns, "all"), dry=True).ok, timeout=30)
        message = refused(create(cp, claiming("p", ns, "all"), dry=True))
        assert (
            'request "gpu": all of DeviceClass "gpu.nvidia.com" (12 on its largest node)), more than the 8 per pod'
        ) in message, message
        assert create(cp, claiming("p", ns, "all", LARGE), dry=True).ok
    finally:
        cp.kubectl("delete", "resourceslice", published["metadata"]["name"], check=False)


def test_first_available_counts_its_worst_alternative(large: Stack) -> None:
    cp = large.cluster
    ns = cp.create_namespace("e2e-dra-large")
    pick = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "few", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "many", "deviceClassName": "gpu.nvidia.com", "count": 12},
        ],
    }
    assert create(cp, template("pick", ns, pick)).ok
    message = refused(create(cp, claiming("p", ns, "pick"), dry=True))
    assert (
        'request "gpu": the most of firstAvailable: 2 of DeviceClass "gpu.nvidia.com", 12 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod'
    ) in message, message


def test_a_claim_created_after_the_pod_that_names_it_is_refused_at_its_own_creation(fleet: Stack) -> None:
    """Before, the pod was admitted with its claim unknown and the claim was never judged."""
    cp = fleet.cluster
    ns = cp.create_namespace("e2e-dra-late")
    assert create(cp, claiming("early", ns, "late")).ok  # the template does not exist yet: nothing to count
    message = refused(create(cp, template("late", ns, exactly(16))))
    assert message.startswith(f'ResourceClaimTemplate "late" in namespace "{ns}" violates GPU policy "default"'), (
        message
    )
    assert (
        'spec.spec.devices.requests: claim: takes 16 GPUs in all (request "gpu": 16 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod that policy "default" allows: every pod naming it would be '
        "over the limit"
    ) in message, message
    # a CPU claim of many devices takes no GPU, and a claim within the limits is created as before
    assert create(cp, template("cpus", ns, exactly(64, "dra.cpu"))).ok
    assert create(cp, template("late", ns, exactly(8))).ok
    claim = {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": ns},
        "spec": {"devices": {"requests": [exactly(9)]}},
    }
    assert "takes 9 GPUs in all" in refused(create(cp, claim))


def resource_slice(node: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(devices)],
        },
    }


def resource_claim(name: str, namespace: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }


def naming(name: str, namespace: str, *entries: dict[str, str]) -> dict[str, Any]:
    """A pod whose one container uses every claim entry it names."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": list(entries),
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu:22.04",
                    "resources": {"claims": [{"name": e["name"]} for e in entries]},
                }
            ],
        },
    }


def test_claims_created_after_the_pod_that_names_them_add_up(fleet: Stack) -> None:
    """A pod naming two claims of 6 GPUs each under `default`'s 8 per pod, created before both: /mutate labels it
    gpugate.io/claims-pending=Several, the first claim is created (6), the second is refused (12), found by one
    label-selected list of the namespace's pods. Before, each claim was judged alone and both were created. The
    label cannot be removed to hide the pod."""
    cp = fleet.cluster
    ns = cp.create_namespace("e2e-dra-pending")
    made = create(
        cp,
        naming("p", ns, {"name": "a", "resourceClaimName": "first"}, {"name": "b", "resourceClaimName": "second"}),
    )
    assert made.ok, made
    assert made.json()["metadata"]["labels"]["gpugate.io/claims-pending"] == "Several"
    assert create(cp, resource_claim("first", ns, exactly(6))).ok
    message = refused(create(cp, resource_claim("second", ns, exactly(6))))
    assert message.startswith(
        f'ResourceClaim "second" in namespace "{ns}", named by pod "p", which was admitted before the claim existed '
        '(label gpugate.io/claims-pending), would put the pod over GPU policy "default"'
    ), message
    assert (
        "spec.resourceClaims: pod: requests 12 GPUs in all (0 in its containers' resources, 12 through claims: "
        'spec.resourceClaims[0] claim "a" (ResourceClaim "first") request "gpu": 6 of DeviceClass "gpu.nvidia.com"; '
        'spec.resourceClaims[1] claim "b" (ResourceClaim "second") request "gpu": 6 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod that policy "default" allows'
    ) in message, message
    assert 'To fix: create ResourceClaim "second" with fewer GPU devices' in message, message
    # the tenant cannot shed the label (in every mode: tests/rules/test_claims_pending.py)
    shed = cp.kubectl("label", "pod", "p", "-n", ns, "gpugate.io/claims-pending-", check=False)
    assert not shed.ok and "label gpugate.io/claims-pending=Several was removed" in shed.stderr, shed
    assert create(cp, resource_claim("second", ns, exactly(2))).ok  # 8 in all: within the limit


def test_a_claim_made_from_a_template_is_added_to_its_owner_pod(fleet: Stack) -> None:
    """A pod names a claim that exists (6 GPUs) and a template that does not yet: admitted with 6. The template (6)
    is created; the claim kube-controller-manager then makes from it for the pod (annotation
    resource.kubernetes.io/pod-claim-name, a controller ownerReference to the pod: kubernetes
    pkg/controller/resourceclaim/controller.go; made here as it makes it, this control plane runs no controllers)
    is added to its owner, read by name, and refused: 12 GPUs."""
    cp = fleet.cluster
    ns = cp.create_namespace("e2e-dra-owner")
    assert create(cp, resource_claim("shared", ns, exactly(6))).ok
    made = create(
        cp,
        naming(
            "p",
            ns,
            {"name": "own", "resourceClaimTemplateName": "per-pod"},
            {"name": "s", "resourceClaimName": "shared"},
        ),
    )
    assert made.ok, made
    # a template: no list needed, the claim made from it names its owner
    assert "gpugate.io/claims-pending" not in (made.json()["metadata"].get("labels") or {})
    assert create(cp, template("per-pod", ns, exactly(6))).ok
    claim = resource_claim("p-own-x7k2q", ns, exactly(6))
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "own"}
    claim["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "p",
            "uid": made.json()["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    message = refused(create(cp, claim))
    assert message.startswith(
        f'ResourceClaim "p-own-x7k2q" in namespace "{ns}", made from ResourceClaimTemplate "per-pod" for pod "p", '
        'which owns it, would put the pod over GPU policy "default"'
    ), message
    assert "requests 12 GPUs in all (0 in its containers' resources, 12 through claims:" in message, message
    assert 'To fix: give ResourceClaimTemplate "per-pod" fewer GPU devices' in message, message
