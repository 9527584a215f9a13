"""GPU isolation through the real apiserver: a GPU pod's sidecar and init container, which request no
GPU, are stored with NVIDIA_VISIBLE_DEVICES=void; the GPU container is not."""

from __future__ import annotations

import json

import pytest

from tests.harness.gpugate import Stack

from .objects import IMAGE, container, pod

pytestmark = pytest.mark.e2e
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def test_containers_without_gpus_of_a_gpu_pod_are_stored_with_void(stack: Stack) -> None:
    cp = stack.cluster
    ns = cp.create_namespace("e2e-isolation")
    sent = pod(
        "trainer",
        ns,
        container("trainer", gpus="1"),
        container("log-shipper", env={"LEVEL": "info"}),
        initContainers=[container("fetch")],
    )
    cp.kubectl("apply", "-f", "-", stdin=sent)
    stored = json.loads(cp.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)
    spec = stored["spec"]
    assert VOID not in (spec["containers"][0].get("env") or [])
    assert spec["containers"][1]["env"] == [{"name": "LEVEL", "value": "info"}, VOID]
    assert spec["initContainers"][0]["env"] == [VOID]


def test_a_kubectl_debug_container_of_a_gpu_pod_is_stored_with_void(stack: Stack) -> None:
    """`kubectl debug` adds its container through an UPDATE of pods/ephemeralcontainers; the patch gpugate
    returns for it touches only spec.ephemeralContainers, the one field that update strategy keeps."""
    cp = stack.cluster
    ns = cp.create_namespace("e2e-isolation")
    cp.kubectl("apply", "-f", "-", stdin=pod("trainer", ns, container("trainer", gpus="1")))
    before = json.loads(cp.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)

    for name, extra in (("peek", []), ("peek-env", ["--env=LEVEL=debug"])):
        cp.kubectl("debug", "trainer", "-n", ns, f"--image={IMAGE}", f"--container={name}", "--profile=general", *extra)

    stored = json.loads(cp.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)
    debug = {c["name"]: c.get("env") for c in stored["spec"]["ephemeralContainers"]}
    assert debug == {"peek": [VOID], "peek-env": [{"name": "LEVEL", "value": "debug"}, VOID]}
    assert stored["spec"]["containers"] == before["spec"]["containers"]
