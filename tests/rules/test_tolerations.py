"""Tolerations (webhook/rules/tolerations.py): appended without duplicates for GPU pods; GPU-taint tolerations
on CPU pods deny/strip/allow, for the policy's own taint keys and effects; when two tolerations are the same,
and how a refused one is shown."""

from __future__ import annotations

import pytest

from tests.support import container, gpu_pod, mutated, nvidia, pod, standard, validated

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


POOL = "example.com/gpu-pool"


@pytest.mark.parametrize(
    ("policy_toleration", "pod_toleration", "refused"),
    [
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": POOL, "operator": "Exists", "effect": "NoExecute"},
            False,
        ),
        (
            {"key": POOL, "operator": "Exists"},  # no effect: the taint is kept off GPU nodes whatever its effect
            {"key": POOL, "operator": "Exists", "effect": "NoExecute"},
            True,
        ),
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "example.com/other", "operator": "Exists", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_a_policys_own_taint_keeps_cpu_pods_off_gpu_nodes(policy_toleration, pod_toleration, refused):
    policy = standard(devices=nvidia(tolerations=[policy_toleration]))
    verdict = validated(pod(container("web"), tolerations=[pod_toleration]), policy)
    assert verdict.allowed is not refused, verdict.message
    if refused:
        assert f"tolerates the GPU node taint ({POOL}" in verdict.message


@pytest.mark.parametrize(
    "near_miss",
    [
        {**GPU_TAINT, "key": "nvidia.com/gpu.shared"},
        {**GPU_TAINT, "operator": "Equal"},
        {**GPU_TAINT, "operator": "Equal", "value": "present"},
        {**GPU_TAINT, "effect": "NoExecute"},
        {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 60},
    ],
)
def test_a_toleration_that_differs_in_one_field_is_not_taken_for_the_policys(near_miss):
    result, _ = mutated(gpu_pod(1, tolerations=[near_miss]), standard())
    assert result["spec"]["tolerations"] == [near_miss, GPU_TAINT]


def test_tolerations_that_differ_only_in_value_are_different():
    policy = standard(devices=nvidia(tolerations=[{**GPU_TAINT, "operator": "Equal", "value": "present"}]))
    mine = {**GPU_TAINT, "operator": "Equal", "value": "absent"}
    result, _ = mutated(gpu_pod(1, tolerations=[mine]), policy)
    assert result["spec"]["tolerations"] == [mine, {**GPU_TAINT, "operator": "Equal", "value": "present"}]


def test_tolerations_that_differ_only_in_toleration_seconds_are_different():
    policy = standard(devices=nvidia(tolerations=[{**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 300}]))
    mine = {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 60}
    result, _ = mutated(gpu_pod(1, tolerations=[mine]), policy)
    assert result["spec"]["tolerations"] == [mine, {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 300}]


@pytest.mark.parametrize(
    ("toleration", "shown"),
    [
        (
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
            "(nvidia.com/gpu=present:NoSchedule)",
        ),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, "(nvidia.com/gpu:*)"),
        ({"operator": "Exists"}, "(*:*)"),
    ],
)
def test_a_refused_toleration_is_shown_as_key_value_effect(toleration, shown):
    verdict = validated(pod(tolerations=[toleration]), standard())
    assert f"tolerates the GPU node taint {shown}" in verdict.message
