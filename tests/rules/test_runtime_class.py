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


def test_the_gpu_operators_other_runtime_classes_count_as_gpu_runtime_classes():
    # NVIDIA/gpu-operator creates nvidia-cdi and nvidia-legacy beside nvidia when CDI is on (its default).
    for name in ("nvidia-cdi", "nvidia-legacy"):
        verdict = validated(pod(runtimeClassName=name), standard())
        assert not verdict.allowed, name
        assert (
            f'spec.runtimeClassName: pod: requests no GPU but runs under the GPU runtime class "{name}"'
            in verdict.message
        )


def test_gpu_runtime_classes_are_the_policys_list_plus_each_devices_own():
    listed = standard(gpuRuntimeClasses=["gpu-sandbox"])
    assert not validated(pod(runtimeClassName="gpu-sandbox"), listed).allowed
    assert not validated(pod(runtimeClassName="nvidia"), listed).allowed  # the nvidia device's runtimeClassName
    assert validated(pod(runtimeClassName="nvidia-cdi"), listed).allowed  # the list replaces the default
    assert validated(pod(runtimeClassName="kata"), listed).allowed


def test_a_policy_without_the_field_keeps_loading_with_the_gpu_operators_names():
    from webhook.policy.vendors import DEFAULT_GPU_RUNTIME_CLASSES

    [loaded] = standard().policies
    assert loaded.gpu_runtime_classes == DEFAULT_GPU_RUNTIME_CLASSES == ("nvidia", "nvidia-cdi", "nvidia-legacy")


def test_an_invalid_runtime_class_name_in_the_list_is_a_policy_error():
    from webhook.policy.loader import parse_policy
    from webhook.policy.reader import PolicyIssue

    issues: list[PolicyIssue] = []
    document = {"kind": "GPUPolicy", "metadata": {"name": "p"}, "spec": {"gpuRuntimeClasses": ["Not_A_Name"]}}
    assert parse_policy({"apiVersion": "gpugate.io/v2", **document}, file="p.yaml", index=0, issues=issues) is None
    assert [str(i) for i in issues] == [
        "p.yaml: document 0: spec.gpuRuntimeClasses[0]: 'Not_A_Name' is not a valid RuntimeClass name"
    ]
