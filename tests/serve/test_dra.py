"""gpugate's DRA series (webhook/serve/dra.py): the GPUs ResourceSlices publish and the devices allocated claims
hold, per pod they are reserved for, as /metrics renders them.

The ResourceSlices are shaped as NVIDIA's DRA kubelet plugin publishes them on resource.k8s.io/v1
(kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go: a GPU's ``type``, ``uuid``,
``productName``; a MIG device's ``type: mig``, ``parentUUID``, ``profile``, ``uuid``), beside a slice of
kubernetes-sigs/dra-driver-cpu (``dra.cpu``), whose devices are no GPUs. A claim's allocation is
``status.allocation.devices.results`` (request, driver, pool, device) and ``status.reservedFor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO
from webhook.inventory.model import Inventory, slice_of
from webhook.policy.model import PolicySet
from webhook.serve import metrics
from webhook.serve.app import create_app
from webhook.serve.dra import ALLOCATED, DEVICE, DraSeries, device_series, gpu_drivers
from webhook.serve.policies import PolicyStore


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def nvidia_slice() -> dict[str, Any]:
    gpu = {
        "name": "gpu-0",
        "attributes": {
            "type": _string("gpu"),
            "uuid": _string("GPU-4b0c1a1e-0000-0000-0000-000000000000"),
            "productName": _string("NVIDIA H200"),
            "brand": _string("Nvidia"),
        },
        "capacity": {"memory": {"value": "143771Mi"}},
    }
    mig = {
        "name": "gpu-1-mig-1g18gb-0",
        "attributes": {
            "type": _string("mig"),
            "uuid": _string("MIG-9d1f0000-0000-0000-0000-000000000000"),
            "parentUUID": _string("GPU-77aa0000-0000-0000-0000-000000000000"),
            "profile": _string("1g.18gb"),
            "productName": _string("NVIDIA H200"),
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "h200-0-gpu.nvidia.com-x2v4q"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "h200-0",
            "pool": {"name": "h200-0", "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu, mig],
        },
    }


def cpu_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "h200-0-dra.cpu-8kq2d"},
        "spec": {
            "driver": "dra.cpu",
            "nodeName": "h200-0",
            "pool": {"name": "h200-0", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"cpu{n}", "attributes": {"numaNode": {"int": 0}}} for n in range(4)],
        },
    }


class Fleet:
    """What DraSeries reads of the fleet watcher (webhook/kube/inventory.py): the inventory once synced."""

    def __init__(self, inventory: Inventory | None) -> None:
        self.current = inventory

    def inventory(self) -> Inventory | None:
        return self.current

    def stats(self) -> dict[str, int]:
        return {}

    def synced(self) -> bool:
        return self.current is not None

    def unsynced(self) -> list[str]:
        return []


def fleet() -> Fleet:
    return Fleet(
        Inventory(
            nodes=(),
            runtime_classes=frozenset(),
            device_classes={},
            slices=(slice_of(nvidia_slice()), slice_of(cpu_slice())),
        )
    )


@dataclass(frozen=True)
class Allocation:
    """One allocated device as the claims cache lists it (webhook/kube/claims.py ``allocations``)."""

    namespace: str
    claim: str
    request: str
    driver: str
    pool: str
    device: str
    pods: tuple[str, ...]
    admin_access: bool = False
    device_class: str = ""
    share_id: str = ""
    consumed: tuple[tuple[str, str], ...] = ()


CLAIMS = (
    # one GPU shared by two pods of the claim
    Allocation("ml", "train-gpu-7x2k", "gpu", "gpu.nvidia.com", "h200-0", "gpu-0", ("train-0", "train-1")),
    # a monitoring agent's admin-access view of the same GPU holds nothing
    Allocation("ml", "dcgm-view", "gpu", "gpu.nvidia.com", "h200-0", "gpu-0", ("dcgm-0",), admin_access=True),
    # a MIG device, reserved for nobody yet
    Allocation("ml", "mig-claim", "slice", "gpu.nvidia.com", "h200-0", "gpu-1-mig-1g18gb-0", ()),
    # CPUs only: no GPU series
    Allocation("ml", "cpus", "cpus", "dra.cpu", "h200-0", "cpu0", ("train-0",)),
)


def families(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("gpugate_dra_"):
                assert sample.value == 1.0
                out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_only_gpu_devices_are_published_each_with_what_names_it() -> None:
    found = families(metrics.render(DraSeries(fleet(), policies=PolicySet))[0].decode())
    assert sorted(found[DEVICE], key=lambda labels: labels["device"]) == [
        {
            "node": "h200-0",
            "driver": "gpu.nvidia.com",
            "pool": "h200-0",
            "device": "gpu-0",
            "uuid": "GPU-4b0c1a1e-0000-0000-0000-000000000000",
            "parent_uuid": "",
            "profile": "",
            "model": "NVIDIA H200",
        },
        {
            "node": "h200-0",
            "driver": "gpu.nvidia.com",
            "pool": "h200-0",
            "device": "gpu-1-mig-1g18gb-0",
            "uuid": "MIG-9d1f0000-0000-0000-0000-000000000000",
            "parent_uuid": "GPU-77aa0000-0000-0000-0000-000000000000",
            "profile": "1g.18gb",
            "model": "NVIDIA H200",
        },
    ]
    assert ALLOCATED not in found  # no claims cache: no allocation family at all, rather than an empty claim


def test_each_allocated_gpu_device_is_a_series_per_pod_it_is_reserved_for() -> None:
    series = DraSeries(fleet(), policies=PolicySet, claims=lambda: CLAIMS)
    found = families(metrics.render(series)[0].decode())
    held = sorted(
        (s["claim_name"], s["claim_pod"], s["device"], s["uuid"], s["model"], s["node"]) for s in found[ALLOCATED]
    )
    assert held == [
        ("mig-claim", "", "gpu-1-mig-1g18gb-0", "MIG-9d1f0000-0000-0000-0000-000000000000", "NVIDIA H200", "h200-0"),
        ("train-gpu-7x2k", "train-0", "gpu-0", "GPU-4b0c1a1e-0000-0000-0000-000000000000", "NVIDIA H200", "h200-0"),
        ("train-gpu-7x2k", "train-1", "gpu-0", "GPU-4b0c1a1e-0000-0000-0000-000000000000", "NVIDIA H200", "h200-0"),
    ]
    assert {s["claim_namespace"] for s in found[ALLOCATED]} == {"ml"}
    assert all("namespace" not in s and "pod" not in s for s in found[ALLOCATED])  # the scrape's own labels


def test_a_claim_on_a_device_no_slice_publishes_still_names_it() -> None:
    gone = Allocation("ml", "old", "gpu", "gpu.nvidia.com", "h200-9", "gpu-3", ("p",))
    found = families(metrics.render(DraSeries(fleet(), policies=PolicySet, claims=lambda: [gone]))[0].decode())
    [one] = found[ALLOCATED]
    assert (one["pool"], one["device"], one["uuid"], one["node"]) == ("h200-9", "gpu-3", "", "")


def test_nothing_before_the_fleet_has_synced() -> None:
    body = metrics.render(DraSeries(Fleet(None), policies=PolicySet, claims=lambda: CLAIMS))[0].decode()
    assert DEVICE not in body and ALLOCATED not in body


def test_a_policys_own_dra_driver_counts_as_a_gpu_driver(tmp_path: Path) -> None:
    assert "gpu.nvidia.com" in gpu_drivers(PolicySet())
    assert device_series(fleet().current or Inventory((), frozenset(), {}, ()), frozenset({"dra.cpu"})) == {}
    store = PolicyStore(str(REPO / "policies"))
    assert gpu_drivers(store.current()) >= {"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"}


def test_the_series_are_on_metrics_of_a_worker_with_a_fleet() -> None:
    from webhook.serve.status import Status

    store = PolicyStore(str(REPO / "policies"))
    status = Status(store, fleet=fleet(), claims=lambda: CLAIMS)
    client = create_app(policies=store, fleet=status.fleet, status=status).test_client()
    found = families(client.get("/metrics").get_data(as_text=True))
    assert len(found[DEVICE]) == 2 and len(found[ALLOCATED]) == 3


def test_no_allocation_family_while_the_claims_cache_has_not_listed() -> None:
    body = metrics.render(DraSeries(fleet(), policies=PolicySet, claims=lambda: None))[0].decode()
    assert DEVICE in body and ALLOCATED not in body


def shared_slice() -> dict[str, Any]:
    """Two H100 as NVIDIA's kubelet plugin publishes them with ``--consumable-shares`` (KEP-5075;
    kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/consumable_shares.go): gpu-0 with
    ``--consumable-shares=4`` (``memory`` with a requestPolicy defaulting to 0, and ``shares: 4`` defaulting
    to 1), gpu-1 with ``unlimited`` (memory only, default 0)."""

    def gpu(n: int, capacity: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": f"gpu-{n}",
            "attributes": {
                "type": _string("gpu"),
                "uuid": _string(f"GPU-c{n}000000-0000-0000-0000-000000000000"),
                "productName": _string("NVIDIA H100 80GB HBM3"),
            },
            "allowMultipleAllocations": True,
            "capacity": capacity,
        }

    memory = {
        "value": "81559Mi",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "81559Mi", "step": "1Mi"}},
    }
    shares = {"value": "4", "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "h100-0-gpu.nvidia.com-c7r2m"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "h100-0",
            "pool": {"name": "h100-0", "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu(0, {"memory": memory, "shares": shares}), gpu(1, {"memory": memory})],
        },
    }


def share(claim: str, device: str, consumed: dict[str, str], pods: tuple[str, ...]) -> Allocation:
    return Allocation(
        "ml",
        claim,
        "gpu",
        "gpu.nvidia.com",
        "h100-0",
        device,
        pods,
        share_id=f"uid-{claim}",
        consumed=tuple(sorted(consumed.items())),
    )


def values(text: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == ALLOCATED:
                labels = sample.labels
                out[labels["claim_name"], labels["claim_pod"], labels["share_id"]] = sample.value
    return out


def test_a_claims_share_of_a_device_several_claims_hold_is_the_series_value() -> None:
    shared = Fleet(
        Inventory(nodes=(), runtime_classes=frozenset(), device_classes={}, slices=(slice_of(shared_slice()),))
    )
    claims = (
        # gpu-0, four shares: one share and no memory (1/4); one share and 40,779.5 MiB, half the memory (the
        # larger: 1/2); two shares split between the claim's two pods (2/4, each pod's series carries the claim's)
        share("one", "gpu-0", {"memory": "0", "shares": "1"}, ("one-0",)),
        share("half", "gpu-0", {"memory": "40779Mi", "shares": "1"}, ("half-0",)),
        # gpu-1, unlimited: two claims that consumed nothing time-slice it, one consumed a quarter of its memory
        share("ts-a", "gpu-1", {"memory": "0"}, ("ts-a-0",)),
        share("ts-b", "gpu-1", {"memory": "0"}, ("ts-b-0",)),
        share("quarter", "gpu-1", {"memory": "20878592Ki"}, ("q-0",)),
        # not shared: the whole device
        Allocation("ml", "whole", "gpu", "gpu.nvidia.com", "h100-0", "gpu-9", ("w-0",)),
    )
    found = values(metrics.render(DraSeries(shared, policies=PolicySet, claims=lambda: claims))[0].decode())
    assert found == pytest.approx(
        {
            ("one", "one-0", "uid-one"): 0.25,
            ("half", "half-0", "uid-half"): 40779 / 81559,
            ("ts-a", "ts-a-0", "uid-ts-a"): (1 - 0.25) / 2,
            ("ts-b", "ts-b-0", "uid-ts-b"): (1 - 0.25) / 2,
            ("quarter", "q-0", "uid-quarter"): 0.25,
            ("whole", "w-0", ""): 1.0,
        },
        abs=1e-4,
    )


def test_shares_on_a_device_no_slice_states_the_capacity_of_split_evenly() -> None:
    claims = [share(name, "gpu-7", {"memory": "10Gi"}, (f"{name}-0",)) for name in ("a", "b", "c")]
    found = values(metrics.render(DraSeries(fleet(), policies=PolicySet, claims=lambda: claims))[0].decode())
    assert found == pytest.approx({(n, f"{n}-0", f"uid-{n}"): 1 / 3 for n in ("a", "b", "c")})
