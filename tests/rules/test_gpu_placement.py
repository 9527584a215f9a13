"""GPU placement (webhook/rules/gpu_placement.py): no GPUs in pod-level resources or ephemeral containers."""

from __future__ import annotations

import pytest

from tests.rules.test_gpu_quantities import NO_POLICY
from tests.support import container, gpu_pod, mutated, pod, policy, validated
from webhook.policy.keys import LEGACY_API_VERSION


def test_gpus_in_pod_level_resources_are_refused():
    obj = gpu_pod(1, resources={"limits": {"nvidia.com/gpu": "1"}})
    _, decision = mutated(obj, NO_POLICY, check_schema=False)
    assert not decision.allowed
    assert "spec.resources.limits[nvidia.com/gpu]" in decision.message
    assert "extended resources are not allowed in pod-level resources" in decision.message


def test_gpus_in_ephemeral_containers_are_refused():
    obj = gpu_pod(
        1, ephemeralContainers=[{"name": "dbg", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    )
    _, decision = mutated(obj, NO_POLICY, check_schema=False)
    assert not decision.allowed
    assert 'spec.ephemeralContainers[0].resources: ephemeral container "dbg": Forbidden' in decision.message


@pytest.mark.parametrize("resource", ["example.com/fpga", "nvidia.com/gpu"])
def test_pod_level_gpu_resources_are_refused_whether_the_policy_or_kubernetes_counts_them(resource):
    """Pod-level resources cannot carry extended resources; a GPU there is refused whether it is a GPU by
    this policy's devices or by the built-in list."""
    fpga_only = policy(
        "fpga-only", gpuResources=["example.com/fpga"], api_version=LEGACY_API_VERSION
    )  # the 0.1 form: exactly these count as GPUs
    obj = pod(container("a"), resources={"limits": {resource: "1"}})
    verdict = validated(obj, fpga_only)
    assert not verdict.allowed and f"spec.resources.limits[{resource}]" in verdict.message
