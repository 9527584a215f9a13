"""Scenario 8: gpugate is down. GPU pods fail as the shipped failurePolicy says, with an error a
person can read; pods without GPUs and kube-system never notice; the ValidatingAdmissionPolicy
backstop, evaluated inside the apiserver, still refuses a CPU pod that tolerates the GPU taint.
gpugate is started again afterwards, so the order of tests does not matter."""

from __future__ import annotations

import pytest

from tests.harness.gpugate import Stack, webhook

from .objects import GPU, GPU_TOLERATION, container, gpu_pod, pod

pytestmark = pytest.mark.e2e


def test_gpugate_unavailable(stack: Stack, namespace: str) -> None:
    mutate = webhook(stack.deploy, "MutatingWebhookConfiguration", "mutate.gpugate.io")
    validate = webhook(stack.deploy, "ValidatingWebhookConfiguration", "validate.gpugate.io")
    # "Fail" is the admissionregistration/v1 default when the field is absent.
    mutate_policy, validate_policy = mutate.get("failurePolicy", "Fail"), validate.get("failurePolicy", "Fail")
    assert any(o.get("kind") == "ValidatingAdmissionPolicy" for o in stack.deploy), "deploy/ ships no backstop"

    stack.gpugate.stop()
    try:
        gpu = stack.kubectl("create", "-f", "-", stdin=gpu_pod("trainer", namespace), check=False)
        if mutate_policy == "Fail":
            assert not gpu.ok, f"mutate failurePolicy Fail, gpugate down, yet the GPU pod was admitted:\n{gpu}"
            assert 'failed calling webhook "mutate.gpugate.io"' in gpu.stderr, gpu
        elif validate_policy == "Fail":
            # The mutating call is skipped (Ignore); the pod then reaches the validating phase,
            # where the in-process backstop runs before the (failing) validating webhook.
            assert not gpu.ok, f"validate failurePolicy Fail, gpugate down, yet the GPU pod was admitted:\n{gpu}"
            assert (
                "ValidatingAdmissionPolicy" in gpu.stderr
                or 'failed calling webhook "validate.gpugate.io"' in gpu.stderr
            ), gpu
        else:
            assert gpu.ok, f"both failurePolicies are Ignore, yet the GPU pod was refused:\n{gpu}"
        if not gpu.ok:
            assert "gpugate" in gpu.stderr, f"the error should tell a person gpugate is involved:\n{gpu}"

        cpu = stack.kubectl("create", "-f", "-", stdin=pod("web", namespace, container("nginx")), check=False)
        assert cpu.ok, f"a pod without GPUs was affected by gpugate being down:\n{cpu}"

        system = stack.kubectl("create", "-f", "-", stdin=gpu_pod("dcgm-down", "kube-system"), check=False)
        assert system.ok, f"a kube-system pod was affected by gpugate being down:\n{system}"
        stack.kubectl(
            "delete",
            "pod",
            "dcgm-down",
            "-n",
            "kube-system",
            "--grace-period=0",
            "--force",
            "--wait=false",
            check=False,
        )

        squatter = pod("squatter", namespace, container("app"), tolerations=[GPU_TOLERATION])
        refused = stack.kubectl("create", "-f", "-", stdin=squatter, check=False)
        assert not refused.ok, f"with gpugate down a CPU pod tolerating {GPU} was admitted:\n{refused}"
        assert "ValidatingAdmissionPolicy" in refused.stderr, (
            f"expected the ValidatingAdmissionPolicy backstop to refuse it:\n{refused}"
        )
    finally:
        stack.gpugate.start()
