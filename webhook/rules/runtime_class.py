"""Runtime class: a GPU pod runs under the policy's ``runtimeClassName`` (e.g. ``nvidia``).

Guards ``spec.runtimeClassName`` of pods that request GPUs. Without the NVIDIA runtime class the driver
never reaches the container; the mutator sets it when absent, and a different value is a violation (the
user chose it on purpose, so gpugate does not overwrite it). A pod that requests no GPU must not run
under the policy's GPU runtime class (``nonGPUPods.gpuRuntimeClass: deny``): CUDA images set
``NVIDIA_VISIBLE_DEVICES=all`` themselves, so under the NVIDIA runtime such a pod sees every GPU of its
node unless the container toolkit refuses that variable from unprivileged pods.
"""

from __future__ import annotations

from typing import Any

from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation
from .registry import rule

RULE = "runtime-class"


def _describe(before: Any, after: Any) -> list[PodChange]:
    return [PodChange("runtimeClassName", f"runtimeClassName: {after}")] if before != after else []


RUNTIME_CLASS = Touch("runtimeClassName", "spec.runtimeClassName", in_place=False, describe=_describe)
record = rule(RULE, order=50, reads={"spec.runtimeClassName": str}, touches=[RUNTIME_CLASS], module=__name__)


def _wanted(ctx: PodContext) -> str | None:
    """The runtime class of the vendor whose GPUs the pod requests (none for DRA or fractional holds)."""
    device = ctx.gpu.device
    return device.runtime_class_name if device is not None else None


@record.validator(pods="gpu")
def require_runtime_class(pod: PodView, ctx: PodContext) -> list[Violation]:
    wanted = _wanted(ctx)
    actual = pod.spec.get("runtimeClassName")
    if wanted is None or actual in (None, "", wanted):
        return []
    return [
        Violation(
            RULE,
            ctx.spec_field("runtimeClassName"),
            "pod",
            f'runtimeClassName is "{actual}", but policy "{ctx.policy.name}" requires "{wanted}"',
            f'remove runtimeClassName (gpugate sets "{wanted}") or set it to "{wanted}"',
        )
    ]


@record.mutator(pods="gpu")
def inject_runtime_class(editor: PodEditor, ctx: PodContext) -> list[Change]:
    wanted = _wanted(ctx)
    if wanted is None or editor.spec.get("runtimeClassName"):
        return []
    editor.set_spec("runtimeClassName", wanted)
    return [Change("runtimeClassName", f"runtimeClassName={wanted}")]


@record.validator(pods="non-gpu")
def forbid_gpu_runtime_without_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    wanted = pod.spec.get("runtimeClassName")
    if ctx.policy.non_gpu_runtime_class != "deny" or wanted not in ctx.policy.gpu_runtime_classes:
        return []
    return [
        Violation(
            RULE,
            ctx.spec_field("runtimeClassName"),
            "pod",
            f'requests no GPU but runs under the GPU runtime class "{wanted}", which can expose the node\'s GPUs to it',
            "remove runtimeClassName, or request a GPU in resources.limits",
            security=True,
        )
    ]
