"""Runtime class: injected when absent, a different value is a violation, never overwritten."""

from __future__ import annotations

from tests.support import gpu_pod, mutated, pod, standard, validated


def test_runtime_class_is_injected_into_gpu_pods():
    result, decision = mutated(gpu_pod(1), standard())
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" in result["metadata"]["annotations"]["gpugate.io/mutated"]
    assert result["metadata"]["annotations"]["gpugate.io/policy"] == "standard"


def test_pods_without_gpus_get_no_runtime_class():
    _, decision = mutated(pod(), standard())
    assert decision.allowed and decision.patch is None


def test_a_different_runtime_class_is_kept_by_mutate_and_denied_by_validate():
    obj = gpu_pod(1, runtimeClassName="runc")
    result, decision = mutated(obj, standard())
    assert result["spec"]["runtimeClassName"] == "runc"
    verdict = validated(result, standard())
    assert not verdict.allowed
    assert (
        'spec.runtimeClassName: pod: runtimeClassName is "runc", but policy "standard" requires "nvidia"'
        in verdict.message
    )


def test_a_pod_that_skipped_mutation_is_denied_with_what_it_lacks():
    verdict = validated(gpu_pod(1), standard())
    assert not verdict.allowed
    assert "lacks runtimeClassName=nvidia" in verdict.message
    assert "lacks toleration nvidia.com/gpu:NoSchedule" in verdict.message


def test_a_pod_without_gpus_may_not_use_the_gpu_runtime_class():
    verdict = validated(pod(runtimeClassName="nvidia"), standard())
    assert not verdict.allowed
    assert (
        'spec.runtimeClassName: pod: requests no GPU but runs under the GPU runtime class "nvidia"' in verdict.message
    )
    assert validated(pod(runtimeClassName="kata"), standard()).allowed
    assert validated(pod(runtimeClassName="nvidia"), standard(nonGPUPods={"gpuRuntimeClass": "allow"})).allowed


def test_without_a_policy_the_runtime_class_of_cpu_pods_is_not_checked():
    from webhook.policy.model import PolicySet

    assert validated(pod(runtimeClassName="nvidia"), PolicySet()).allowed
