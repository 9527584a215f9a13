"""Scenario 4: the webhook configurations from deploy/ keep gpugate off the path of everything
that does not touch GPUs (matchConditions) and of kube-system (namespaceSelector): such pods never
reach gpugate — its request counter does not move — and are stored as sent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.gpugate import Stack

from .objects import GPU, container, gpu_pod, pod

pytestmark = pytest.mark.e2e


def assert_untouched_by_gpugate(stored: dict[str, Any], sent: dict[str, Any]) -> None:
    meta, spec = stored["metadata"], stored["spec"]
    assert meta.get("labels", {}) == sent["metadata"]["labels"]
    assert not [k for k in meta.get("annotations", {}) if k.startswith("gpugate.io/")], meta
    assert "runtimeClassName" not in spec
    assert "nodeSelector" not in spec
    assert "affinity" not in spec
    assert not [t for t in spec.get("tolerations", []) if t.get("key") == GPU], spec.get("tolerations")
    for got, want in zip(spec["containers"], sent["spec"]["containers"], strict=True):
        limits = want.get("resources", {}).get("limits", {})
        assert got.get("resources", {}).get("limits", {}) == limits
        # The apiserver's defaulting copies limits into missing requests; nothing else may change.
        assert got.get("resources", {}).get("requests", {}) == want.get("resources", {}).get("requests", limits)
        assert got.get("env", []) == want.get("env", [])


def test_counter_sees_gpu_pods(stack: Stack, namespace: str) -> None:
    """The probe the other tests rely on: a GPU pod does move the counter."""
    before = stack.gpugate.admission_requests()
    stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=gpu_pod("probe", namespace))
    assert stack.gpugate.admission_requests() > before


def test_pod_without_gpus_never_reaches_gpugate(stack: Stack, namespace: str) -> None:
    sent = pod("web", namespace, container("nginx"), labels={"app": "web", "gpugate.io/team": "anything"})
    before = stack.gpugate.admission_requests()

    stack.kubectl("create", "-f", "-", stdin=sent)

    assert stack.gpugate.admission_requests() == before
    stored = stack.kubectl("get", "pod", "web", "-n", namespace, "-o", "json").json()
    assert_untouched_by_gpugate(stored, sent)


def test_gpu_pod_in_kube_system_never_reaches_gpugate(stack: Stack) -> None:
    sent = gpu_pod("dcgm-probe", "kube-system", gpus="1")
    before = stack.gpugate.admission_requests()

    stack.kubectl("create", "-f", "-", stdin=sent)

    try:
        assert stack.gpugate.admission_requests() == before
        stored = stack.kubectl("get", "pod", "dcgm-probe", "-n", "kube-system", "-o", "json").json()
        assert_untouched_by_gpugate(stored, sent)
    finally:
        stack.kubectl(
            "delete",
            "pod",
            "dcgm-probe",
            "-n",
            "kube-system",
            "--grace-period=0",
            "--force",
            "--wait=false",
            check=False,
        )
