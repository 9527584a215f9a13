"""gpugate's DRA series through the real apiserver: a ResourceSlice of NVIDIA's DRA driver created with kubectl
(resource.k8s.io/v1, shaped as kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go
publishes a GPU: ``type``, ``uuid``, ``productName``) reaches ``gpugate serve``'s watch and its /metrics as
``gpugate_dra_gpu_device``, the series ``gpugate report`` counts a DRA node's GPUs from; deleting it removes
the series. A slice of a CPU driver beside it publishes nothing. A ResourceClaim whose status is written as the
scheduler writes it (``status.allocation.devices.results``, ``status.reservedFor``; the status subresource)
becomes ``gpugate_dra_gpu_allocated`` per pod it is reserved for, with the device's labels, through the claims
cache's watch; deallocated, the series goes. A device published with ``allowMultipleAllocations`` and claims
whose results carry ``shareID`` and ``consumedCapacity`` (KEP-5075, as the scheduler writes them) give each
claim's share as the value, through the same watches."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.gpugate import Stack

pytestmark = pytest.mark.e2e


def _slice(name: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": "e2e-h200-0",
            "pool": {"name": "e2e-h200-0", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


GPU = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-e2e00000-0000-0000-0000-000000000000"},
        "productName": {"string": "NVIDIA H200"},
    },
    "capacity": {"memory": {"value": "143771Mi"}},
}


def series(stack: Stack, name: str) -> list[dict[str, str]]:
    found = []
    for family in text_string_to_metric_families(stack.gpugate.metrics()):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("pool") == "e2e-h200-0":
                found.append(dict(sample.labels))
    return sorted(found, key=lambda labels: sorted(labels.items()))


def wait_for(stack: Stack, expected: list[dict[str, str]], name: str = "gpugate_dra_gpu_device") -> None:
    # Every worker of gpugate serve watches on its own, and any of them answers a scrape: wait until two
    # scrapes in a row agree.
    deadline = time.monotonic() + 30.0
    while not (series(stack, name) == expected and series(stack, name) == expected):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: {series(stack, name)}, expected {expected}")
        time.sleep(0.2)


PUBLISHED = {
    "node": "e2e-h200-0",
    "driver": "gpu.nvidia.com",
    "pool": "e2e-h200-0",
    "device": "gpu-0",
    "uuid": "GPU-e2e00000-0000-0000-0000-000000000000",
    "parent_uuid": "",
    "profile": "",
    "model": "NVIDIA H200",
}


def test_a_published_gpu_is_a_series_of_gpugates_metrics_until_its_slice_goes(stack: Stack) -> None:
    gpu = _slice("e2e-h200-0-gpu.nvidia.com", "gpu.nvidia.com", [GPU])
    cpu = _slice("e2e-h200-0-dra.cpu", "dra.cpu", [{"name": "cpu0", "attributes": {"numaNode": {"int": 0}}}])
    stack.kubectl("apply", "-f", "-", stdin=[gpu, cpu])
    try:
        wait_for(stack, [PUBLISHED])
    finally:
        stack.kubectl("delete", "resourceslice", "e2e-h200-0-gpu.nvidia.com", "e2e-h200-0-dra.cpu", check=False)
    wait_for(stack, [])


def test_an_allocated_claim_is_a_series_per_pod_it_is_reserved_for(stack: Stack, namespace: str) -> None:
    gpu = _slice("e2e-h200-0-gpu.nvidia.com", "gpu.nvidia.com", [GPU])
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train-gpu", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    stack.kubectl("apply", "-f", "-", stdin=[gpu, claim])
    try:
        status = {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "e2e-h200-0", "device": "gpu-0"}
                        ]
                    }
                },
                "reservedFor": [
                    {"resource": "pods", "name": "train-0", "uid": "00000000-0000-0000-0000-00000000e2e0"},
                    {"resource": "pods", "name": "train-1", "uid": "00000000-0000-0000-0000-00000000e2e1"},
                ],
            }
        }
        stack.kubectl(
            "patch",
            "resourceclaim",
            "train-gpu",
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )
        held = {"claim_namespace": namespace, "claim_name": "train-gpu", "request": "gpu", "share_id": "", **PUBLISHED}
        wait_for(
            stack,
            [held | {"claim_pod": "train-0"}, held | {"claim_pod": "train-1"}],
            name="gpugate_dra_gpu_allocated",
        )
        # Released (the scheduler's deallocation clears reservedFor, then the allocation): no series.
        released = {"status": {"reservedFor": None, "allocation": None}}
        stack.kubectl(
            "patch",
            "resourceclaim",
            "train-gpu",
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(released),
        )
        wait_for(stack, [], name="gpugate_dra_gpu_allocated")
    finally:
        stack.kubectl("delete", "resourceslice", "e2e-h200-0-gpu.nvidia.com", check=False)


SHARED_GPU = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-e2e00000-0000-0000-0000-000000000000"},
        "productName": {"string": "NVIDIA H200"},
    },
    # kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/consumable_shares.go, --consumable-shares=memory
    "allowMultipleAllocations": True,
    "capacity": {
        "memory": {
            "value": "143771Mi",
            "requestPolicy": {"default": "143771Mi", "validRange": {"min": "1Mi", "max": "143771Mi", "step": "1Mi"}},
        }
    },
}


def shares(stack: Stack) -> dict[tuple[str, str], float]:
    found = {}
    for family in text_string_to_metric_families(stack.gpugate.metrics()):
        for sample in family.samples:
            if sample.name == "gpugate_dra_gpu_allocated" and sample.labels.get("pool") == "e2e-h200-0":
                found[sample.labels["claim_name"], sample.labels["share_id"]] = sample.value
    return found


def test_claims_sharing_a_device_by_consumed_capacity_export_their_shares(stack: Stack, namespace: str) -> None:
    gpu = _slice("e2e-h200-0-gpu.nvidia.com", "gpu.nvidia.com", [SHARED_GPU])
    claims = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "capacity": {"requests": {"memory": memory}},
                            },
                        }
                    ]
                }
            },
        }
        for name, memory in (("half", "71885Mi"), ("quarter", "35942Mi"))
    ]
    stack.kubectl("apply", "-f", "-", stdin=[gpu, *claims])
    try:
        for n, (name, memory) in enumerate((("half", "71885Mi"), ("quarter", "35942Mi"))):
            result = {
                "request": "gpu",
                "driver": "gpu.nvidia.com",
                "pool": "e2e-h200-0",
                "device": "gpu-0",
                "shareID": f"7d3a9c1e-0000-4000-8000-00000000000{n}",
                "consumedCapacity": {"memory": memory},
            }
            status = {
                "status": {
                    "allocation": {"devices": {"results": [result]}},
                    "reservedFor": [
                        {"resource": "pods", "name": f"{name}-0", "uid": f"00000000-0000-0000-0000-00000000e2f{n}"}
                    ],
                }
            }
            stack.kubectl(
                "patch",
                "resourceclaim",
                name,
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(status),
            )
        expected = {
            ("half", "7d3a9c1e-0000-4000-8000-000000000000"): 71885 / 143771,
            ("quarter", "7d3a9c1e-0000-4000-8000-000000000001"): 35942 / 143771,
        }
        deadline = time.monotonic() + 30.0
        while shares(stack) != pytest.approx(expected) or shares(stack) != pytest.approx(expected):
            if time.monotonic() > deadline:
                raise AssertionError(f"gpugate_dra_gpu_allocated: {shares(stack)}, expected {expected}")
            time.sleep(0.2)
    finally:
        stack.kubectl("delete", "resourceslice", "e2e-h200-0-gpu.nvidia.com", check=False)
