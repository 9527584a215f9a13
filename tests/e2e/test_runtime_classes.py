"""GPU runtime classes through the real apiserver, deploy/ registered: a pod without GPUs under the GPU
Operator's ``nvidia-cdi`` or ``nvidia-legacy`` or k3s's ``nvidia-experimental`` (policies' default
``gpuRuntimeClasses``) is refused like one under ``nvidia``; a workload template under them reaches gpugate
(matchConditions) and is refused by its rule; with gpugate down, the backstop inside the apiserver still refuses
the pod. A RuntimeClass of another name with a GPU runtime's handler (an alias ``my-gpu`` with ``handler:
nvidia``) is recognised by its handler: a pod without GPUs under it is refused by gpugate-runtime-handlers, with
gpugate up or down, and a GPU pod under it is formed and admitted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harness.gpugate import Stack
from tests.harness.polling import eventually

from .objects import container, deployment, gpugate_denial, pod

pytestmark = pytest.mark.e2e
# NVIDIA/gpu-operator assets/pre-requisites/0210_*, 0220_*; k3s-io/k3s manifests/runtimes.yaml
OTHER_CLASSES = ("nvidia-cdi", "nvidia-legacy", "nvidia-experimental")
ALIAS, HANDLER = "my-gpu", "nvidia"


@pytest.fixture
def runtime_classes(stack: Stack) -> Stack:
    for name in OTHER_CLASSES:  # the RuntimeClass admission plugin refuses a pod naming a missing one
        stack.cluster.ensure_runtime_class(name)
    stack.cluster.ensure_runtime_class(ALIAS, HANDLER)
    return stack


def _refused_under(stack: Stack, namespace: str, runtime: str) -> Any:
    """The refusal of a pod without GPUs under ``runtime``, once the apiserver has the RuntimeClass as a
    parameter of gpugate-runtime-handlers (its informer reads a new one a moment after it is stored)."""
    sent = pod("cpu", namespace, container("app"), runtimeClassName=runtime)

    def refused() -> Any:
        result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
        return None if result.ok else result

    return eventually(refused, timeout=30)


def test_a_pod_without_gpus_under_an_alias_of_the_nvidia_runtime_is_refused_by_its_handler(
    runtime_classes: Stack, namespace: str
) -> None:
    result = _refused_under(runtime_classes, namespace, ALIAS)
    assert result, f"a pod without GPUs under {ALIAS} (handler {HANDLER}) was admitted"
    assert "ValidatingAdmissionPolicy 'gpugate-runtime-handlers'" in result.stderr, result
    assert f'the GPU runtime class "{ALIAS}" (RuntimeClass "{ALIAS}" has handler "{HANDLER}"' in result.stderr, result


def test_a_gpu_pod_under_an_alias_of_the_nvidia_runtime_is_admitted(runtime_classes: Stack, namespace: str) -> None:
    """The alias is the user's choice of runtime class for a GPU pod: kept (not overwritten), judged as a GPU pod."""
    sent = pod("gpu", namespace, container("app", gpus="1"), runtimeClassName=ALIAS)

    def formed() -> Any:
        result = runtime_classes.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=sent, check=False)
        return result if result.ok else None

    result = eventually(formed, timeout=30)  # gpugate's inventory reads the new RuntimeClass from its watch
    assert result, f"a GPU pod under {ALIAS} was refused"
    stored = json.loads(result.stdout)
    assert stored["spec"]["runtimeClassName"] == ALIAS  # the user's choice, kept
    assert stored["metadata"]["annotations"]["gpugate.io/policy"]  # formed by gpugate


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
        alias = _refused_under(stack, namespace, ALIAS)
        assert alias, f"with gpugate down a pod without GPUs under {ALIAS} was admitted"
        assert "ValidatingAdmissionPolicy 'gpugate-runtime-handlers'" in alias.stderr, alias
        sent = pod("cpu", namespace, container("app"), runtimeClassName="nvidia-cdi")
        result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
        assert not result.ok, f"with gpugate down a pod without GPUs under nvidia-cdi was admitted:\n{result}"
        assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
        assert 'GPU runtime class "nvidia-cdi"' in result.stderr, result
        plain = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod("web", namespace), check=False)
        assert plain.ok, f"a plain pod was affected by gpugate being down:\n{plain}"
    finally:
        stack.gpugate.start()
