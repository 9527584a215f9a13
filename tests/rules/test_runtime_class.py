"""Runtime class: injected when absent, a different value is a violation, never overwritten."""

from __future__ import annotations

from typing import Any

from tests.support import apply, gpu_pod, mutated, pod, request, standard, validated
from webhook.admission.decision import Environment
from webhook.admission.engine import mutate, validate
from webhook.inventory.model import Inventory
from webhook.policy.model import PolicySet

#: RuntimeClasses as k3s ships them (k3s-io/k3s manifests/runtimes.yaml), and aliases an operator made.
FLEET = Inventory.of(
    {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}
    for name, handler in {
        "nvidia": "nvidia",
        "nvidia-experimental": "nvidia-experimental",
        "nvidia-cdi": "nvidia-cdi",
        "my-gpu": "nvidia",
        "sandbox": "kata-nvidia",
        "sandbox-2": "kata-nvidia",
        "crun": "crun",
        "kata": "kata",
    }.items()
)


def validated_in(obj: dict[str, Any], policy_set: PolicySet, fleet: Inventory | None = FLEET) -> Any:
    """/validate with the live inventory ``fleet``."""
    return validate(request(obj), Environment(policies=policy_set, fleet=lambda: fleet))


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
    # NVIDIA/gpu-operator creates nvidia-cdi and nvidia-legacy beside nvidia when CDI is on (its default); k3s and
    # RKE2 ship nvidia-experimental (k3s-io/k3s manifests/runtimes.yaml).
    for name in ("nvidia-cdi", "nvidia-legacy", "nvidia-experimental"):
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
    assert loaded.gpu_runtime_classes == DEFAULT_GPU_RUNTIME_CLASSES
    assert DEFAULT_GPU_RUNTIME_CLASSES == ("nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental")


def test_an_invalid_runtime_class_name_in_the_list_is_a_policy_error():
    from webhook.policy.loader import parse_policy
    from webhook.policy.reader import PolicyIssue

    issues: list[PolicyIssue] = []
    document = {"kind": "GPUPolicy", "metadata": {"name": "p"}, "spec": {"gpuRuntimeClasses": ["Not_A_Name"]}}
    assert parse_policy({"apiVersion": "gpugate.io/v2", **document}, file="p.yaml", index=0, issues=issues) is None
    assert [str(i) for i in issues] == [
        "p.yaml: document 0: spec.gpuRuntimeClasses[0]: 'Not_A_Name' is not a valid RuntimeClass name"
    ]


def test_an_alias_of_a_gpu_runtime_is_a_gpu_runtime_class_by_its_handler():
    """``my-gpu`` (handler nvidia) is not in any list: the live inventory's handler tells."""
    verdict = validated_in(pod(runtimeClassName="my-gpu"), standard())
    assert not verdict.allowed
    assert (
        'spec.runtimeClassName: pod: requests no GPU but runs under the GPU runtime class "my-gpu" (RuntimeClass '
        '"my-gpu" has handler "nvidia", a GPU runtime\'s), which can expose the node\'s GPUs to it; remove '
        "runtimeClassName, or request a GPU in resources.limits" in verdict.message
    )
    # Other handlers are not GPU runtimes; a GPU pod under the alias is judged as a GPU pod (not refused here).
    for name in ("crun", "kata"):
        assert validated_in(pod(runtimeClassName=name), standard()).allowed, name
    # Without the inventory only names count: gpugate never refuses on missing data.
    assert validated_in(pod(runtimeClassName="my-gpu"), standard(), fleet=None).allowed


def test_the_handler_is_judged_in_every_mode_and_switched_off_only_by_the_policy():
    for mode in ("warn", "audit"):
        verdict = validated_in(pod(runtimeClassName="my-gpu"), standard(mode=mode))
        assert not verdict.allowed, mode
        assert 'has handler "nvidia"' in verdict.message, mode
    assert validated_in(pod(runtimeClassName="my-gpu"), standard(nonGPUPods={"gpuRuntimeClass": "allow"})).allowed


def test_a_class_sharing_the_handler_of_a_policys_own_gpu_runtime_class_is_one_too():
    listed = standard(gpuRuntimeClasses=["sandbox"])
    verdict = validated_in(pod(runtimeClassName="sandbox-2"), listed)
    assert not verdict.allowed
    assert 'GPU runtime class "sandbox-2" (RuntimeClass "sandbox-2" has handler "kata-nvidia"' in verdict.message
    assert validated_in(pod(runtimeClassName="sandbox-2"), standard()).allowed  # not a GPU handler for this one
    # The list replaces the default names, never what a handler is: nvidia-cdi is still the NVIDIA runtime.
    assert not validated_in(pod(runtimeClassName="nvidia-cdi"), listed).allowed


def test_a_gpu_pod_under_an_alias_of_the_required_runtime_class_keeps_it():
    """``my-gpu`` has the handler of ``nvidia``, the class the policy requires: the same runtime, no wrong choice;
    a class of another handler is still one, and without the inventory a different name is a different choice."""
    environment = Environment(policies=standard(), fleet=lambda: FLEET)
    sent = gpu_pod(1, runtimeClassName="my-gpu")
    formed = apply(sent, mutate(request(sent), environment).patch)
    assert formed["spec"]["runtimeClassName"] == "my-gpu"  # kept, never overwritten
    assert validate(request(formed), environment).allowed
    other = gpu_pod(1, runtimeClassName="crun")
    verdict = validate(request(apply(other, mutate(request(other), environment).patch)), environment)
    assert 'spec.runtimeClassName: pod: runtimeClassName is "crun", but policy "standard" requires "nvidia"' in (
        verdict.message
    )
    blind = validated_in(formed, standard(), fleet=None)
    assert 'runtimeClassName is "my-gpu", but policy "standard" requires "nvidia"' in blind.message
