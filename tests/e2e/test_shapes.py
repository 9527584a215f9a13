"""GPU shapes the apiserver accepts silently but a GPU fleet must not (docs/admission-contract.md §5): a zero
GPU limit, GPUs only in an init container, whole GPUs mixed with MIG slices in one pod, more GPUs
than the policy allows; and renamed time-sliced GPUs (nvidia.com/gpu.shared) steered to the plain product:
GPU Feature Discovery appends -SHARED only when the shared resource is not renamed (the t4 and a10g classes
in policies/00-default.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.gpugate import Stack

from .objects import GPU, IMAGE, NODE_LABEL, container, gpugate_denial, model_selection, pod

pytestmark = pytest.mark.e2e


def _limits(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": {"limits": limits}}


SHAPES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "zero-gpus": (pod("bad", "", _limits("cuda", {GPU: "0"})), ["cuda"]),
    "gpu-only-in-init-container": (
        pod("bad", "", container("app"), initContainers=[_limits("warmup", {GPU: "1"})]),
        ["initContainers"],
    ),
    "gpu-mixed-with-mig": (
        pod("bad", "", _limits("cuda", {GPU: "1"}), _limits("slice", {"nvidia.com/mig-1g.10gb": "1"})),
        ["nvidia.com/mig-1g.10gb"],
    ),
    "over-max-per-container": (pod("bad", "", _limits("cuda", {GPU: "5"})), ["cuda", "4"]),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_wrong_gpu_shapes_are_refused(stack: Stack, namespace: str, shape: str) -> None:
    sent, wording = SHAPES[shape]
    sent = {**sent, "metadata": {**sent["metadata"], "namespace": namespace}}

    result = stack.kubectl("create", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"{shape}: admitted:\n{result}"
    # gpugate is up, so the answer must be its own (the backstop's messages assume it is down).
    message = gpugate_denial(result.stderr)
    assert message is not None, f"{shape}: expected gpugate's denial:\n{result}"
    for words in wording:
        assert words in message, f"{words!r} missing from: {message}"


def test_renamed_time_sliced_gpu_is_steered_to_the_plain_product(stack: Stack, namespace: str) -> None:
    sent = pod("sliced", namespace, _limits("cuda", {"nvidia.com/gpu.shared": "1"}))

    dry = stack.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=sent)

    shown = dry.json()
    assert model_selection(shown) == ["NVIDIA-L4"], shown["spec"].get("nodeSelector")
    assert shown["spec"]["nodeSelector"][NODE_LABEL] == "NVIDIA-L4"
    assert shown["spec"].get("runtimeClassName") == "nvidia"
