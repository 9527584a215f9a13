"""Scenario 2: GPU quantities the device plugin cannot honour are refused by gpugate's mutating
webhook — which is the only webhook that ever sees them, because the apiserver's own validation
runs after the mutating phase — with a message naming the container and the fix."""

from __future__ import annotations

import pytest

from tests.harness.gpugate import Stack

from .objects import container, gpugate_denial, pod

pytestmark = pytest.mark.e2e

CASES = {
    # id: (limit, request, what the message must say beyond the container name)
    "fractional": ("500m", None, ["must be an integer", "nvidia.com/gpu.shared"]),
    "request-without-limit": (None, "1", ["limits", "nvidia.com/gpu"]),
    "request-not-limit": ("2", "1", ["must be equal to nvidia.com/gpu limit of 2"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unschedulable_gpu_quantities_are_refused(stack: Stack, namespace: str, case: str) -> None:
    limit, request, wording = CASES[case]
    sent = pod("bad", namespace, container("sidecar"), container("cuda-worker", gpus=limit, requests=request))

    result = stack.kubectl("create", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"the pod was admitted:\n{result}"
    prefix = 'admission webhook "mutate.gpugate.io" denied the request: '
    assert prefix in result.stderr, result
    message = gpugate_denial(result.stderr) or ""
    assert "cuda-worker" in message, f"the message must name the container: {message}"
    assert "sidecar" not in message, f"the message names a container that is fine: {message}"
    for words in wording:
        assert words in message, f"{words!r} missing from: {message}"
    gone = stack.kubectl("get", "pod", "bad", "-n", namespace, check=False)
    assert "NotFound" in gone.stderr, gone
