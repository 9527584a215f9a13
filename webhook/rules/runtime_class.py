"""Runtime class: a GPU pod runs under the policy's ``runtimeClassName`` (e.g. ``nvidia``).

Guards ``spec.runtimeClassName`` of pods that request GPUs. Without the NVIDIA runtime class the driver
never reaches the container; the mutator sets it when absent, and a different value is a violation (the
user chose it on purpose, so gpugate does not overwrite it). A pod that requests no GPU must not run
under the policy's GPU runtime class (``nonGPUPods.gpuRuntimeClass: deny``): CUDA images set
``NVIDIA_VISIBLE_DEVICES=all`` themselves, so under the NVIDIA runtime such a pod sees every GPU of its
node unless the container toolkit refuses that variable from unprivileged pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Change, PodContext, PodEditor, Violation

RULE = "runtime-class"


def require_runtime_class(spec: Mapping[str, Any], ctx: PodContext) -> list[Violation]:
    wanted = ctx.policy.runtime_class_name
    actual = spec.get("runtimeClassName")
    if wanted is None or actual in (None, "", wanted):
        return []
    return [Violation(RULE, ctx.spec_field("runtimeClassName"), "pod",
                      f'runtimeClassName is "{actual}", but policy "{ctx.policy.name}" requires "{wanted}"',
                      f'remove runtimeClassName (gpugate sets "{wanted}") or set it to "{wanted}"')]


def inject_runtime_class(editor: PodEditor, ctx: PodContext) -> list[Change]:
    wanted = ctx.policy.runtime_class_name
    if wanted is None or editor.spec.get("runtimeClassName"):
        return []
    editor.set_spec("runtimeClassName", wanted)
    return [Change("runtimeClassName", f"runtimeClassName={wanted}")]


def forbid_gpu_runtime_without_gpus(spec: Mapping[str, Any], ctx: PodContext) -> list[Violation]:
    wanted = ctx.policy.runtime_class_name
    if wanted is None or ctx.policy.non_gpu_runtime_class != "deny" or spec.get("runtimeClassName") != wanted:
        return []
    return [Violation(RULE, ctx.spec_field("runtimeClassName"), "pod",
                      f'requests no GPU but runs under the GPU runtime class "{wanted}", which can expose the '
                      "node's GPUs to it", "remove runtimeClassName, or request a GPU in resources.limits")]
