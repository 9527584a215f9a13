"""Runtime class: a GPU pod runs under the policy's ``runtimeClassName`` (e.g. ``nvidia``).

Guards ``spec.runtimeClassName`` of pods that request GPUs. Without the NVIDIA runtime class the driver
never reaches the container; the mutator sets it when absent, and a different value is a violation (the
user chose it on purpose, so gpugate does not overwrite it). Only the stacks that need it get it (the device
profile's ``runtimeClassPods``: device-plugin pods, fractional holds; never DRA-served pods), and with a
synced inventory only when the RuntimeClass exists. A pod that requests no GPU must not run
under a GPU runtime class (``nonGPUPods.gpuRuntimeClass: deny``): the policy's ``gpuRuntimeClasses`` (by
default the GPU Operator's ``nvidia``, ``nvidia-cdi`` and ``nvidia-legacy``, and k3s's ``nvidia-experimental``),
every device's ``runtimeClassName``, and, with the inventory, any RuntimeClass whose handler is a GPU runtime's
(an alias ``my-gpu`` with ``handler: nvidia``; ``webhook.pods.runtime_classes``). CUDA images set
``NVIDIA_VISIBLE_DEVICES=all`` themselves, so under the NVIDIA runtime such a pod sees every GPU of its node
unless the container toolkit refuses that variable from unprivileged pods.
"""

from __future__ import annotations

from typing import Any

from ..pods.affinity import required_terms
from ..pods.fields import NODE_SELECTOR_TERM, STRINGS
from ..pods.runtime_classes import gpu_runtime
from ..policy.classes import ModelClass
from ..policy.keys import MODEL_LABEL
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation
from .registry import rule

RULE = "runtime-class"


def _describe(before: Any, after: Any) -> list[PodChange]:
    return [PodChange("runtimeClassName", f"runtimeClassName: {after}")] if before != after else []


RUNTIME_CLASS = Touch("runtimeClassName", "spec.runtimeClassName", in_place=False, describe=_describe)
record = rule(
    RULE,
    order=50,
    reads={
        "spec.runtimeClassName": str,
        # which class the pod lands in, to keep the runtime class off DRA pools
        "metadata.labels": STRINGS,
        "metadata.annotations": STRINGS,
        "spec.nodeSelector": STRINGS,
        "spec.affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_SELECTOR_TERM]}
            }
        },
    },
    touches=[RUNTIME_CLASS],
    module=__name__,
)


def _wanted(pod: PodView | PodEditor, ctx: PodContext) -> str | None:
    """The runtime class of the vendor whose GPUs the pod requests, when its stack needs one: device-plugin
    pods and fractional holds, as the profile's ``runtimeClassPods`` says; never DRA-served pods (the driver
    injects devices through CDI). With a synced inventory, only a RuntimeClass that exists: the apiserver's
    RuntimeClass admission plugin refuses a pod naming a missing one."""
    gpu = ctx.gpu
    device = gpu.device
    if device is None or device.runtime_class_name is None:
        return None
    if ctx.fleet is not None and device.runtime_class_name not in ctx.fleet.runtime_classes:
        return None
    if "fractional" in device.runtime_class_pods and gpu.fractional:
        return device.runtime_class_name
    if "device-plugin" not in device.runtime_class_pods or not gpu.device_plugin_resources:
        return None
    if _dra_pool(pod, ctx):
        return None  # plain nvidia.com/gpu bound for a DRA class's pool: DRA serves it (KEP-5004)
    return device.runtime_class_name


def _dra_pool(pod: PodView | PodEditor, ctx: PodContext) -> bool:
    """The pod lands in a model class whose pools are DRA only (DeviceClasses, no model label values)."""
    models = ctx.policy.models
    if models is None or not models.has_dra_classes:
        return False
    named = pod.labels.get(MODEL_LABEL)
    if named:
        return _is_dra(models.classes.get(named))
    device = ctx.gpu.device
    if device is None:
        return False
    spec = pod.spec
    annotated = bool(device.choice_annotations) and any(a in pod.annotations for a in device.choice_annotations)
    if not spec.get("nodeSelector") and not spec.get("affinity") and not annotated:
        return models.default_is_dra(device.name, ctx.gpu.device_plugin_resources)  # the common case
    terms = required_terms(spec)
    chosen = {*(spec.get("nodeSelector") or {}), *(a for a in device.choice_annotations if a in pod.annotations)}
    chosen |= {e.get("key") for t in terms for e in t.get("matchExpressions") or [] if isinstance(e, dict)}
    if not chosen & {device.model_label, *device.model_aliases, *device.choice_annotations}:
        return models.default_is_dra(device.name, ctx.gpu.device_plugin_resources)  # no own choice
    if not chosen & models.dra_choice_keys:
        return False  # an own choice, on keys no DRA-only class is chosen by
    return _is_dra(ctx.model.model_class)  # the class the pod lands in (rules.choice)


def _is_dra(chosen: ModelClass | None) -> bool:
    return chosen is not None and bool(chosen.device_classes) and not chosen.values


@record.validator(pods="gpu")
def require_runtime_class(pod: PodView, ctx: PodContext) -> list[Violation]:
    actual = pod.spec.get("runtimeClassName")
    device = ctx.gpu.device
    if actual in (None, "") or device is None or actual == device.runtime_class_name:
        return []  # absent (the mutator's to add), or the one gpugate would set: never a wrong choice
    wanted = _wanted(pod, ctx)
    if wanted is None or _same_handler(actual, wanted, ctx):
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


def _same_handler(actual: Any, wanted: str, ctx: PodContext) -> bool:
    """An alias of the runtime class the policy requires: a live RuntimeClass with the same handler (``my-gpu``
    with ``handler: nvidia`` for ``nvidia``) runs the pod under the same runtime, so it is no wrong choice."""
    handlers = ctx.fleet.runtime_handlers if ctx.fleet is not None else {}
    return isinstance(actual, str) and bool(handlers.get(wanted)) and handlers.get(actual) == handlers.get(wanted)


@record.mutator(pods="gpu")
def inject_runtime_class(editor: PodEditor, ctx: PodContext) -> list[Change]:
    if editor.spec.get("runtimeClassName"):
        return []
    wanted = _wanted(editor, ctx)
    if wanted is None:
        return []
    editor.set_spec("runtimeClassName", wanted)
    return [Change("runtimeClassName", f"runtimeClassName={wanted}")]


@record.validator(pods="non-gpu")
def forbid_gpu_runtime_without_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    wanted = pod.spec.get("runtimeClassName")
    if ctx.policy.non_gpu_runtime_class != "deny":
        return []
    found = gpu_runtime(wanted, ctx.policy, ctx.fleet)
    if found is None:
        return []
    how = "" if found.handler is None else f' (RuntimeClass "{wanted}" has handler "{found.handler}", a GPU runtime\'s)'
    return [
        Violation(
            RULE,
            ctx.spec_field("runtimeClassName"),
            "pod",
            f'requests no GPU but runs under the GPU runtime class "{wanted}"{how}, which can expose the node\'s '
            "GPUs to it",
            "remove runtimeClassName, or request a GPU in resources.limits",
            security=True,
        )
    ]
