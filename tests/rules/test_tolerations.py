"""Tolerations: appended without duplicates for GPU pods; GPU-taint tolerations on CPU pods deny/strip/allow."""

from __future__ import annotations

import pytest

from tests.support import gpu_pod, mutated, nvidia, pod, standard, validated

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NOT_READY = {
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}


def test_policy_tolerations_are_appended_after_the_users():
    result, _ = mutated(gpu_pod(1, tolerations=[NOT_READY]), standard())
    assert result["spec"]["tolerations"] == [NOT_READY, GPU_TAINT]


def test_an_equal_toleration_is_not_added_twice():
    # ExtendedResourceToleration adds exactly this toleration before gpugate sees the pod.
    result, decision = mutated(gpu_pod(1, tolerations=[dict(GPU_TAINT)]), standard())
    assert result["spec"]["tolerations"] == [GPU_TAINT]
    assert "tolerations" not in result["metadata"]["annotations"]["gpugate.io/mutated"]


def test_equality_uses_the_defaults_of_operator():
    mine = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
    policy = standard(devices=nvidia(tolerations=[{**mine, "operator": "Equal"}]))
    result, _ = mutated(gpu_pod(1, tolerations=[mine]), policy)
    assert result["spec"]["tolerations"] == [mine]


@pytest.mark.parametrize(
    "toleration",
    [
        GPU_TAINT,
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"operator": "Exists"},  # tolerates every taint
        {"key": "nvidia.com/mig-1g.10gb", "operator": "Exists", "effect": "NoSchedule"},
    ],
)
def test_cpu_pods_tolerating_a_gpu_taint_are_denied(toleration):
    verdict = validated(pod(tolerations=[NOT_READY, toleration]), standard())
    assert not verdict.allowed
    assert "spec.tolerations[1]: pod: requests no GPU but tolerates the GPU node taint" in verdict.message


@pytest.mark.parametrize(
    "toleration",
    [
        NOT_READY,
        {"key": "example.com/dedicated", "operator": "Exists"},
        {"operator": "Exists", "effect": "NoExecute"},  # tolerates only NoExecute taints, not the GPU NoSchedule one
    ],
)
def test_cpu_pods_with_other_tolerations_pass(toleration):
    assert validated(pod(tolerations=[toleration]), standard()).allowed


def test_strip_removes_only_the_gpu_taint_tolerations_with_a_warning():
    result, decision = mutated(
        pod(tolerations=[NOT_READY, GPU_TAINT]), standard(nonGPUPods={"gpuTolerations": "strip"})
    )
    assert result["spec"]["tolerations"] == [NOT_READY]
    assert any("removed GPU-taint tolerations" in w for w in decision.warnings)
    assert validated(result, standard(nonGPUPods={"gpuTolerations": "strip"})).allowed


def test_allow_leaves_cpu_pods_alone():
    policy = standard(nonGPUPods={"gpuTolerations": "allow"})
    obj = pod(tolerations=[GPU_TAINT])
    assert mutated(obj, policy)[1].patch is None
    assert validated(obj, policy).allowed


def test_no_policy_means_no_toleration_checks():
    from webhook.policy.model import PolicySet

    assert validated(pod(tolerations=[GPU_TAINT]), PolicySet()).allowed
