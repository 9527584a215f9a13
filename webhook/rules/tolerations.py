"""Tolerations: GPU pods get the policy's tolerations; pods without GPUs must not tolerate GPU taints.

Guards ``spec.tolerations``. GPU nodes carry a taint (``nvidia.com/gpu:NoSchedule`` by convention, the
resource name as key as ExtendedResourceToleration expects) that keeps other work off them. The mutator
appends each policy toleration unless an equal one is present, never reordering or replacing the user's
(Kubernetes "Admission Webhook Good Practices": treat unkeyed arrays as sets). A pod that requests no GPU
but tolerates a GPU taint squats on GPU nodes: ``nonGPUPods.gpuTolerations`` denies it, strips the
tolerations, or allows it. A pod whose claims are admin-access claims on GPUs (DCGM, dcgm-exporter under
the GPU Operator's DRA stack) observes GPUs without holding one: it may tolerate their taints.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from ..pods.fields import TOLERATION
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation
from .registry import rule

RULE = "gpu-taint-toleration"


def _normal(t: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        t.get("key") or "",
        t.get("operator") or "Equal",
        t.get("value") or "",
        t.get("effect") or "",
        t.get("tolerationSeconds"),
    )


def _describe(t: Mapping[str, Any]) -> str:
    key = t.get("key") or "*"
    value = f"={t['value']}" if t.get("value") else ""
    return f"{key}{value}:{t.get('effect') or '*'}"


def toleration_text(t: Mapping[str, Any]) -> str:
    """A toleration with its operator, as the audit lists what a pod lacks: ``key=value:effect``,
    ``key Exists:effect``."""
    text = str(t.get("key", "*"))
    if t.get("operator") == "Equal" or "value" in t:
        text += f"={t.get('value', '')}"
    elif t.get("operator"):
        text += f" {t['operator']}"
    if t.get("effect"):
        text += f":{t['effect']}"
    return text


def _changes(before: Any, after: Any) -> list[PodChange]:
    old, new = list(before or []), list(after or [])
    added = [PodChange("tolerations", f"toleration {toleration_text(t)}") for t in new if t not in old]
    removed = [
        PodChange("tolerations", f"toleration {toleration_text(t)} removed", action="remove")
        for t in old
        if t not in new
    ]
    return added + removed


TOLERATIONS = Touch("tolerations", "spec.tolerations", in_place=True, describe=_changes)
record = rule(RULE, order=60, reads={"spec.tolerations": [TOLERATION]}, touches=[TOLERATIONS], module=__name__)


@record.mutator(pods="gpu")
def add_gpu_tolerations(editor: PodEditor, ctx: PodContext) -> list[Change]:
    """The tolerations of the vendor whose GPUs the pod requests, through a device plugin, DRA claims on its
    DeviceClasses, or a GPU-sharing scheduler's annotation (its GPU nodes carry the same taint)."""
    device = ctx.gpu.device
    if device is None:
        return []
    existing = [t for t in editor.spec.get("tolerations") or [] if isinstance(t, Mapping)]
    present = {_normal(t) for t in existing}
    missing = [dict(t) for t in device.tolerations if _normal(t) not in present]
    if not missing:
        return []
    editor.set_spec("tolerations", [*(editor.spec.get("tolerations") or []), *missing])
    return [Change("tolerations", "toleration " + _describe(t)) for t in missing]


def _gpu_taints(ctx: PodContext) -> list[tuple[str, str]]:
    """(key glob, effect) of the taints that keep other work off GPU nodes under this policy."""
    taints = [(str(t.get("key", "")), str(t.get("effect", ""))) for t in ctx.policy.gpu_tolerations if t.get("key")]
    taints += [(glob, "NoSchedule") for glob in ctx.policy.gpu_resources]
    return taints


def tolerates_gpu_taint(toleration: Mapping[str, Any], ctx: PodContext) -> bool:
    key = toleration.get("key") or ""
    effect = toleration.get("effect") or ""
    for taint_key, taint_effect in _gpu_taints(ctx):
        key_ok = (key == "" and toleration.get("operator") == "Exists") or fnmatch.fnmatchcase(key, taint_key)
        if key_ok and (effect == "" or taint_effect == "" or effect == taint_effect):
            return True
    return False


def gpu_taint_tolerations(spec: Mapping[str, Any], ctx: PodContext) -> list[int]:
    return [
        i for i, t in enumerate(spec.get("tolerations") or []) if isinstance(t, Mapping) and tolerates_gpu_taint(t, ctx)
    ]


@record.validator(pods="non-gpu")
def forbid_gpu_tolerations_without_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.non_gpu_tolerations != "deny" or ctx.gpu.observer:
        return []  # admin-access claims (the GPU stack's monitoring) observe GPUs and must reach their nodes
    spec = pod.spec
    tolerations = spec.get("tolerations") or []
    return [
        Violation(
            RULE,
            ctx.spec_field(f"tolerations[{i}]"),
            "pod",
            f"requests no GPU but tolerates the GPU node taint ({_describe(tolerations[i])})",
            "remove the toleration, or request a GPU in resources.limits (or hold one through a "
            "resource claim on a GPU DeviceClass or a GPU-sharing scheduler's annotation)",
            security=True,
        )
        for i in gpu_taint_tolerations(spec, ctx)
    ]


@record.mutator(pods="non-gpu")
def strip_gpu_tolerations_without_gpus(editor: PodEditor, ctx: PodContext) -> list[Change]:
    if ctx.policy.non_gpu_tolerations != "strip" or ctx.gpu.observer:
        return []
    drop = set(gpu_taint_tolerations(editor.spec, ctx))
    if not drop:
        return []
    tolerations = editor.spec.get("tolerations") or []
    editor.set_spec("tolerations", [t for i, t in enumerate(tolerations) if i not in drop])
    removed = ", ".join(_describe(tolerations[i]) for i in sorted(drop))
    return [
        Change(
            "tolerations",
            f"removed GPU-taint tolerations {removed}",
            warning=f"removed GPU-taint tolerations ({removed}): the pod requests no GPU",
        )
    ]
