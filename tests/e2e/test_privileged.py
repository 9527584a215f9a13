"""Privileged GPU containers through the real apiserver: a GPU pod created with a privileged container
passes the mutating webhook and is refused by ``validate.gpugate.io`` (the final object), naming the
container and the fix; the same pod unprivileged is admitted."""

from __future__ import annotations

import pytest

from tests.harness.gpugate import Stack

from .objects import container, gpu_pod

pytestmark = pytest.mark.e2e


def test_a_gpu_pod_with_a_privileged_container_is_refused_at_validate(stack: Stack, namespace: str) -> None:
    sent = gpu_pod("trainer", namespace)
    sent["spec"]["containers"].append({**container("profiler"), "securityContext": {"privileged": True}})
    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert not result.ok, f"a GPU pod with a privileged container was admitted:\n{result}"
    marker = 'admission webhook "validate.gpugate.io" denied the request: '
    assert marker in result.stderr, result
    message = result.stderr.split(marker, 1)[1]
    assert (
        'spec.containers[1].securityContext.privileged: container "profiler": is privileged in a GPU pod, so it '
        "sees every GPU of its node"
    ) in message, message
    assert "remove securityContext.privileged" in message, message

    sent["spec"]["containers"][1]["securityContext"] = {"privileged": False}
    admitted = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    assert admitted.ok, admitted
