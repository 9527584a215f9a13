"""The live GPU inventory on the simulated reference fleet (kwok Nodes, ResourceSlices, the real kube-scheduler):
`gpugate serve` with cluster access watches the fleet by itself, refuses a pod no node could host with the
message that names the largest node, lets the real scheduler allocate a DRA claim from the ResourceSlices of
the DRA pool, and, before its inventory has synced, gives no feasibility verdict at all."""

from __future__ import annotations

import os
import shutil
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.controlplane import BinariesMissing
from tests.harness.gpugate import GPUGate, point_at, register, render_deploy
from tests.harness.polling import eventually
from tests.harness.scheduling import FleetCluster
from tests.scheduling import placements
from webhook.admission import Environment, mutate, validate
from webhook.kube.claims import Allocation, ClaimsCache, allocations
from webhook.kube.cluster import api_client
from webhook.kube.inventory import FleetWatcher
from webhook.policy.files import load_policies

pytestmark = pytest.mark.e2e

NVIDIA_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FleetCluster, GPUGate]]:
    try:
        cluster, gate = placements.start_fleet(tmp_path_factory.mktemp("inventory"))
    except BinariesMissing as e:
        if shutil.which("go") is None and not os.environ.get("CI"):
            pytest.skip(f"!!! SCHEDULED TESTS SKIPPED: {e}, and Go is not installed to build them")
        pytest.fail(f"{e}: run tests/e2e/build.sh (or `make tools`) first", pytrace=False)
    try:
        register(cluster.cp, point_at(render_deploy(cluster.cp), gate))
        yield cluster, gate
    finally:
        gate.stop()
        cluster.stop()


def _readyz(gate: GPUGate) -> str:
    context = ssl.create_default_context(cafile=str(gate.ca))
    with urllib.request.urlopen(f"{gate.url}/readyz", context=context, timeout=5) as response:
        return str(response.read().decode())


def _pod(name: str, namespace: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"terminationGracePeriodSeconds": 0, **spec},
    }


def _claiming(cluster: FleetCluster, ns: str, name: str, device_class: str, count: int, **spec: Any) -> Any:
    """A ResourceClaimTemplate on ``device_class`` and a pod claiming from it, created; the pod's kubectl result."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "d", "exactly": {"deviceClassName": device_class, "count": count}}]}
            }
        },
    }
    assert cluster.kubectl("create", "-f", "-", stdin=template, check=False).ok
    body = {
        "resourceClaims": [{"name": "d", "resourceClaimTemplateName": name}],
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "d"}]}}
        ],
        **spec,
    }
    return cluster.kubectl("create", "-f", "-", stdin=_pod(name, ns, body), check=False)


L4 = {"gpugate.io/model": "l4"}


def _container(**limits: Any) -> dict[str, Any]:
    return {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}


def test_the_server_s_inventory_syncs_and_readyz_says_nothing_more(fleet: tuple[FleetCluster, GPUGate]) -> None:
    _, gate = fleet
    assert eventually(lambda: "inventory not synced" not in _readyz(gate), timeout=30), _readyz(gate)
    assert _readyz(gate).startswith("ok")


def test_a_pod_no_node_can_host_is_refused_naming_the_largest_node(fleet: tuple[FleetCluster, GPUGate]) -> None:
    cluster, _ = fleet
    ns = cluster.create_namespace("too-big")
    eight = {"containers": [_container(**{"nvidia.com/gpu": 8})]}
    result = cluster.kubectl("create", "-f", "-", stdin=_pod("eight", ns, eight, L4), check=False)
    assert not result.ok, result
    assert "largest: 4 × nvidia.com/gpu on NVIDIA-L4 nodes" in result.stderr, result.stderr
    # the same eight GPUs on a class whose nodes hold eight are admitted and scheduled there
    big = _pod("eight-h100", ns, eight, {"gpugate.io/model": "h100"})
    assert cluster.kubectl("create", "-f", "-", stdin=big, check=False).ok
    # and naming no class, the first default whose nodes hold eight (l4 holds 4, then h100)
    assert cluster.kubectl("create", "-f", "-", stdin=_pod("eight-any", ns, eight), check=False).ok
    stored = cluster.api.get("Pod", "eight-any", ns)
    assert stored["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_pools_at_zero_nodes_that_can_scale_up_are_waited_for(fleet: tuple[FleetCluster, GPUGate]) -> None:
    """The Karpenter NodePool (read live from the apiserver) and the GKE pool declared in policy have no node:
    their pods are admitted with a warning and stay Pending; what neither pool could host is refused."""
    cluster, _ = fleet
    ns = cluster.create_namespace("scale-from-zero")
    l40s = _pod("l40s", ns, {"containers": [_container(**{"nvidia.com/gpu": 4})]}, {"gpugate.io/model": "l40s"})
    created = cluster.kubectl("create", "-f", "-", stdin=l40s, check=False)
    assert created.ok, created
    assert 'NodePool "l40s" can add one (Pending until then)' in created.stderr, created.stderr
    gke = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    one = _pod("a100", ns, {"nodeSelector": gke, "containers": [_container(**{"nvidia.com/gpu": 1})]})
    created = cluster.kubectl("create", "-f", "-", stdin=one, check=False)
    assert created.ok and 'node pool "a100-gke" can add one' in created.stderr, created
    two = _pod("a100-two", ns, {"nodeSelector": gke, "containers": [_container(**{"nvidia.com/gpu": 2})]})
    refused = cluster.kubectl("create", "-f", "-", stdin=two, check=False)
    assert not refused.ok
    assert 'node pool "a100-gke" (up to 1 × nvidia.com/gpu per node)' in refused.stderr, refused.stderr

    def pending() -> bool:
        pods = [cluster.api.get("Pod", n, ns) for n in ("l40s", "a100")]
        return all(
            any(c.get("reason") == "Unschedulable" for c in p.get("status", {}).get("conditions", [])) for p in pods
        )

    assert eventually(pending, timeout=60), "the scheduler did not report both pods Unschedulable"


def test_a_dra_claim_is_allocated_by_the_scheduler_from_the_resource_slices(
    fleet: tuple[FleetCluster, GPUGate],
) -> None:
    cluster, _ = fleet
    ns = cluster.create_namespace("dra-claim")
    created = _claiming(cluster, ns, "claims-two", "gpu.nvidia.com", 2)
    assert created.ok, created
    stored = cluster.api.get("Pod", "claims-two", ns)
    # gpugate resolved the claim to NVIDIA's GPU DeviceClass: the NVIDIA toleration, no runtime class
    assert NVIDIA_TOLERATION in stored["spec"]["tolerations"]
    assert "runtimeClassName" not in stored["spec"]

    def bound() -> str | None:
        pod = cluster.api.get("Pod", "claims-two", ns)
        return str(pod["spec"].get("nodeName") or "") or None

    assert eventually(bound, timeout=60), cluster.api.get("Pod", "claims-two", ns).get("status")
    node = bound()
    assert node is not None and node.startswith("h200-"), node
    claims = cluster.api.list("ResourceClaim", ns)
    [claim] = claims
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["driver"] for r in results} == {"gpu.nvidia.com"}

    # The watch-fed claims cache of gpugate serve (webhook/kube/claims.py) over the same cluster: the allocated
    # devices with the pod the claim is reserved for, as the report's metric reads them.
    cache = ClaimsCache(api_client(str(cluster.cp.kubeconfig)))
    cache.start()
    try:

        def listed() -> list[Allocation]:
            return [a for a in allocations(cache) if a.namespace == ns]

        assert eventually(lambda: len(listed()) == 2, timeout=30), listed()
        found = listed()
        assert {(a.claim, a.request, a.device_class, a.driver, a.pods) for a in found} == {
            (claim["metadata"]["name"], results[0]["request"], "gpu.nvidia.com", "gpu.nvidia.com", ("claims-two",))
        }
        assert sorted(a.device for a in found) == sorted(r["device"] for r in results)
        assert cache.get("ResourceClaim", ns, claim["metadata"]["name"]) is not None
    finally:
        cache.stop()


def test_a_cpu_claim_tolerating_the_gpu_taint_is_refused(fleet: tuple[FleetCluster, GPUGate]) -> None:
    cluster, _ = fleet
    ns = cluster.create_namespace("cpu-claim")
    result = _claiming(cluster, ns, "squatter", "dra.cpu", 2, tolerations=[NVIDIA_TOLERATION])
    assert not result.ok and "requests no GPU but tolerates the GPU node taint" in result.stderr, result


def test_before_the_inventory_syncs_there_is_no_feasibility_verdict(fleet: tuple[FleetCluster, GPUGate]) -> None:
    """The watcher gpugate serve runs, against the same cluster: a decision made before its first lists
    admits the pod the synced one refuses."""
    cluster, _ = fleet
    watcher = FleetWatcher(api_client(str(cluster.cp.kubeconfig)))
    policies = load_policies(placements.REPO / "policies")
    env = Environment(policies=policies, fleet=watcher.inventory, claims=watcher.claim)
    pod = _pod("eight", "default", {"containers": [_container(**{"nvidia.com/gpu": 8})]}, L4)

    def verdict() -> Any:
        mutated = mutate({"uid": "u", "operation": "CREATE", "namespace": "default", "object": pod}, env)
        import jsonpatch

        final = jsonpatch.apply_patch(pod, mutated.patch or [])
        return validate({"uid": "u", "operation": "CREATE", "namespace": "default", "object": final}, env)

    assert watcher.inventory() is None and verdict().allowed  # not synced: admitted, as before gpugate knew
    watcher.start()
    try:
        assert eventually(watcher.synced, timeout=30)
        stats = watcher.stats()
        assert stats["nodes"] == len(cluster.api.list("Node")) and stats["resourceslices"] >= 1
        decided = verdict()
        assert not decided.allowed and "largest: 4 × nvidia.com/gpu on NVIDIA-L4 nodes" in decided.message
    finally:
        watcher.stop()
