"""Runtime class: a GPU pod runs under the policy's ``runtimeClassName`` (e.g. ``nvidia``).

Guards ``spec.runtimeClassName`` of pods that request GPUs. Without the NVIDIA runtime class the driver
never reaches the container; the mutator sets it when absent, and a different value is a violation (the
user chose it on purpose, so gpugate does not overwrite it). Only the stacks that need it get it (the device
profile's ``runtimeClassPods``: device-plugin pods, fractional holds; never DRA-served pods), and with a
synced inventory only when the RuntimeClass exists. A pod that requests no GPU must not run
under the policy's GPU runtime class (``nonGPUPods.gpuRuntimeClass: deny``): CUDA images set
``NVIDIA_VISIBLE_DEVICES=all`` themselves, so under the NVIDIA runtime such a pod sees every GPU of its
node unless the container toolkit refuses that variable from unprivileged pods.
"""

from __future__ import annotations

from .base import Change, PodContext, PodEditor, PodView, Violation
from .registry import mutator, validator

RULE = "runtime-class"


def _wanted(pod: PodView, ctx: PodContext) -> str | None:
    """The runtime class of the vendor whose GPUs the pod requests, when its stack needs one: device-plugin
    pods and fractional holds, as the profile's ``runtimeClassPods`` says; never DRA-served pods (the driver
    injects devices through CDI). With a synced inventory, only a RuntimeClass that exists: the apiserver's
    RuntimeClass admission plugin refuses a pod naming a missing one."""
    device = ctx.gpu.device
    if device is None or device.runtime_class_name is None:
        return None
    needs = ("device-plugin" in device.runtime_class_pods and bool(ctx.gpu.device_plugin_resources)) or (
        "fractional" in device.runtime_class_pods and ctx.gpu.fractional
    )
    if needs and not ctx.gpu.fractional and _dra_pool(pod, ctx):
        return None  # plain nvidia.com/gpu bound for a DRA class's pool: DRA serves it (KEP-5004)
    if not needs:
        return None
    if ctx.fleet is not None and device.runtime_class_name not in ctx.fleet.runtime_classes:
        return None
    return device.runtime_class_name


def _dra_pool(pod: PodView, ctx: PodContext) -> bool:
    """The pod lands in a model class whose pools are DRA only (DeviceClasses, no model label values)."""
    if ctx.policy.models is None:
        return False
    # Imported here: importing model_selection first would register its mutator before this module's.
    from .model_selection import resolve

    chosen = resolve(pod, ctx).model_class
    return chosen is not None and bool(chosen.device_classes) and not chosen.values


@validator(RULE, pods="gpu")
def require_runtime_class(pod: PodView, ctx: PodContext) -> list[Violation]:
    wanted = _wanted(pod, ctx)
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


@mutator(RULE, pods="gpu")
def inject_runtime_class(editor: PodEditor, ctx: PodContext) -> list[Change]:
    wanted = _wanted(PodView(editor.metadata, editor.spec), ctx)
    if wanted is None or editor.spec.get("runtimeClassName"):
        return []
    editor.set_spec("runtimeClassName", wanted)
    return [Change("runtimeClassName", f"runtimeClassName={wanted}")]


@validator(RULE, pods="non-gpu")
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
        )
    ]
