"""GPU runtime classes through the real apiserver, deploy/ registered: a pod without GPUs under the GPU
Operator's ``nvidia-cdi`` or ``nvidia-legacy`` (policies' default ``gpuRuntimeClasses``) is refused like one
under ``nvidia``; a workload template under them reaches gpugate (matchConditions) and is refused by its
rule; with gpugate down, the backstop inside the apiserver still refuses the pod."""

from __future__ import annotations

import pytest

from tests.harness.gpugate import Stack

from .objects import container, deployment, gpugate_denial, pod

pytestmark = pytest.mark.e2e
OTHER_CLASSES = ("nvidia-cdi", "nvidia-legacy")  # NVIDIA/gpu-operator assets/pre-requisites/0210_*, 0220_*


@pytest.fixture
def runtime_classes(stack: Stack) -> Stack:
    for name in OTHER_CLASSES:  # the RuntimeClass admission plugin refuses a pod naming a missing one
        stack.cluster.ensure_runtime_class(name)
    return stack


@pytest.mark.parametrize("runtime", OTHER_CLASSES)
def test_a_pod_without_gpus_under_another_gpu_operator_runtime_class_is_refused(
    runtime_classes: Stack, namespace: str, runtime: str
) -> None:
    sent = pod("cpu", namespace, container("app"), runtimeClassName=runtime)
    result = runtime_classes.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, f"a pod without GPUs under {runtime} was admitted:\n{result}"
    assert f'GPU runtime class "{runtime}"' in result.stderr, result


def test_a_workload_without_gpus_under_nvidia_cdi_is_routed_and_refused_by_gpugate(
    runtime_classes: Stack, namespace: str
) -> None:
    """The backstop covers pods only: a template's verdict is gpugate's, so this proves the routing."""
    sent = deployment("cpu", namespace, pod("x", namespace, container("app"), runtimeClassName="nvidia-cdi"))
    result = runtime_classes.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, f"a Deployment without GPUs under nvidia-cdi was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    assert 'requests no GPU but runs under the GPU runtime class "nvidia-cdi"' in message, message


def test_with_gpugate_down_the_backstop_refuses_a_pod_without_gpus_under_nvidia_cdi(
    runtime_classes: Stack, namespace: str
) -> None:
    stack = runtime_classes
    stack.gpugate.stop()
    try:
        sent = pod("cpu", namespace, container("app"), runtimeClassName="nvidia-cdi")
        result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
        assert not result.ok, f"with gpugate down a pod without GPUs under nvidia-cdi was admitted:\n{result}"
        assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
        assert 'GPU runtime class "nvidia-cdi"' in result.stderr, result
        plain = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod("web", namespace), check=False)
        assert plain.ok, f"a plain pod was affected by gpugate being down:\n{plain}"
    finally:
        stack.gpugate.start()
