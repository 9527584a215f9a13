"""Fraction annotations through the real apiserver, deploy/ registered: a pod with KAI's gpu-fraction that
the default scheduler would place (the apiserver fills schedulerName: default-scheduler) is refused by
gpugate naming the annotation, the scheduler and the fix; tolerating the GPU taint, it is refused by the
backstop too, which runs first. With schedulerName: kai-scheduler it is admitted with the GPU toleration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harness.gpugate import Stack

from .objects import GPU_TOLERATION, container, gpugate_denial, pod

pytestmark = pytest.mark.e2e


def _fraction(namespace: str, **spec: Any) -> dict[str, Any]:
    sent = pod("half", namespace, container("app"), **spec)
    sent["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    return sent


def test_a_fraction_pod_of_the_default_scheduler_is_refused_with_the_fix(stack: Stack, namespace: str) -> None:
    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=_fraction(namespace), check=False)
    assert not result.ok, f"a gpu-fraction pod of the default scheduler was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    assert (
        "metadata.annotations[gpu-fraction]: pod: asks for part of a GPU with the annotation gpu-fraction, but its "
        'schedulerName "default-scheduler" does not implement it'
    ) in message, message
    assert "set spec.schedulerName: kai-scheduler" in message, message


def test_tolerating_the_gpu_taint_it_is_refused_by_the_backstop(stack: Stack, namespace: str) -> None:
    sent = _fraction(namespace, tolerations=[GPU_TOLERATION])
    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, result
    assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
    assert "must not tolerate a GPU node taint" in result.stderr, result


def test_a_kai_scheduled_fraction_pod_gets_the_gpu_toleration(stack: Stack, namespace: str) -> None:
    sent = _fraction(namespace, schedulerName="kai-scheduler")
    result = stack.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=sent, check=False)
    assert result.ok, result
    assert GPU_TOLERATION in json.loads(result.stdout)["spec"]["tolerations"]


def test_a_kai_fraction_pod_created_with_node_name_gets_no_gpu_and_is_refused(stack: Stack, namespace: str) -> None:
    """Created bound, the pod is never placed by kai-scheduler, so no fraction is allocated: gpugate injects
    neither the runtime class nor the toleration (the stored object would run under the NVIDIA runtime with the
    image's NVIDIA_VISIBLE_DEVICES=all otherwise) and refuses it, saying why."""
    sent = _fraction(namespace, schedulerName="kai-scheduler", nodeName="gpu-node-1")
    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, f"a kai-scheduler gpu-fraction pod created with spec.nodeName was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    assert 'created bound to the node "gpu-node-1" (spec.nodeName), so no scheduler places it' in message, message


def test_a_bound_fraction_pod_under_the_nvidia_runtime_is_refused_by_the_backstop(stack: Stack, namespace: str) -> None:
    sent = _fraction(namespace, schedulerName="kai-scheduler", nodeName="gpu-node-1", runtimeClassName="nvidia")
    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, result
    assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
    assert 'must not run under the GPU runtime class "nvidia"' in result.stderr, result


def test_an_update_adding_a_fraction_annotation_to_a_pending_pod_is_refused(stack: Stack, namespace: str) -> None:
    """Annotations are mutable: a pending kai-scheduler pod (nothing places it here) turned into a GPU holder by
    an UPDATE would hold a fraction gpugate never admitted it for."""
    sent = pod("later", namespace, container("app"), schedulerName="kai-scheduler")
    stack.kubectl("create", "-f", "-", stdin=sent)

    result = stack.kubectl("annotate", "pod", "later", "-n", namespace, "gpu-fraction=0.5", check=False)

    assert not result.ok, f"an UPDATE adding gpu-fraction was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None and "an update cannot add the annotation gpu-fraction" in message, result
    stored = json.loads(stack.kubectl("get", "pod", "later", "-n", namespace, "-o", "json").stdout)
    assert "gpu-fraction" not in (stored["metadata"].get("annotations") or {})
