"""gpugate's DRA series through the real apiserver: a ResourceSlice of NVIDIA's DRA driver created with kubectl
(resource.k8s.io/v1, shaped as kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go
publishes a GPU: ``type``, ``uuid``, ``productName``) reaches ``gpugate serve``'s watch and its /metrics as
``gpugate_dra_gpu_device``, the series ``gpugate report`` counts a DRA node's GPUs from; deleting it removes
the series. A slice of a CPU driver beside it publishes nothing."""

from __future__ import annotations

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


def devices(stack: Stack) -> list[dict[str, str]]:
    found = []
    for family in text_string_to_metric_families(stack.gpugate.metrics()):
        for sample in family.samples:
            if sample.name == "gpugate_dra_gpu_device" and sample.labels.get("node") == "e2e-h200-0":
                found.append(dict(sample.labels))
    return found


def wait_for(stack: Stack, expected: list[dict[str, str]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while devices(stack) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"gpugate_dra_gpu_device: {devices(stack)}, expected {expected}")
        time.sleep(0.2)


def test_a_published_gpu_is_a_series_of_gpugates_metrics_until_its_slice_goes(stack: Stack) -> None:
    gpu = _slice("e2e-h200-0-gpu.nvidia.com", "gpu.nvidia.com", [GPU])
    cpu = _slice("e2e-h200-0-dra.cpu", "dra.cpu", [{"name": "cpu0", "attributes": {"numaNode": {"int": 0}}}])
    stack.kubectl("apply", "-f", "-", stdin=[gpu, cpu])
    try:
        wait_for(
            stack,
            [
                {
                    "node": "e2e-h200-0",
                    "driver": "gpu.nvidia.com",
                    "pool": "e2e-h200-0",
                    "device": "gpu-0",
                    "uuid": "GPU-e2e00000-0000-0000-0000-000000000000",
                    "parent_uuid": "",
                    "profile": "",
                    "model": "NVIDIA H200",
                }
            ],
        )
    finally:
        stack.kubectl("delete", "resourceslice", "e2e-h200-0-gpu.nvidia.com", "e2e-h200-0-dra.cpu", check=False)
    wait_for(stack, [])
