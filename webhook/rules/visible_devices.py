"""Device visibility: no container sets ``NVIDIA_VISIBLE_DEVICES`` itself, and no container of a GPU pod
that holds no GPU sees the pod's GPUs.

Guards ``env`` of containers, init containers and ephemeral containers. Under the NVIDIA container
runtime that variable decides which GPUs a container sees; the device plugin sets it for the GPUs it
allocated. A user-set value (``all``, a device index or UUID) reaches GPUs the pod never requested.
``void`` and ``none`` expose no GPU and are allowed.

A GPU pod runs under the NVIDIA runtime class as a whole, and CUDA images set ``NVIDIA_VISIBLE_DEVICES=all``
themselves, so a container of it that requests no GPU (a sidecar, an init container) would see every GPU of
the node. The mutator gives each such container ``NVIDIA_VISIBLE_DEVICES=void`` (later ``env`` entries win
over the image's and over ``envFrom``), unless the policy lists it in ``spec.security.sharedGPUContainers``.
Also for pods holding NVIDIA GPUs through DRA: its drivers give devices only to the containers that reference
the claim (``resources.claims``), so each other container gets ``void`` too. Not for fractional holds: KAI's
binder gives every container of the pod the fraction's own ``NVIDIA_VISIBLE_DEVICES``.

Ephemeral containers (``kubectl debug``) cannot request resources, so each one an UPDATE of the
``pods/ephemeralcontainers`` subresource adds gets the same ``void``; only those (not in the old pod, by name):
the apiserver refuses any change to an existing one (k/k pkg/apis/core/validation/validation.go,
ValidatePodEphemeralContainersUpdate).

An ``envFrom`` source without a prefix, or with one that can begin a name with ``NVIDIA_``, can set the
variable unseen (from a ConfigMap or Secret key only the kubelet reads), and it wins over the device plugin's
value. It can set the toolkit's other device variables just as well (``NVIDIA_IMEX_CHANNELS``, ``NVIDIA_GDS``,
..., ``webhook.rules.device_variables``). In a GPU pod (unless its GPUs are all another vendor's), which runs
under the NVIDIA runtime as a whole, that is refused for every container that sees GPUs: one without an
``env`` entry of ``NVIDIA_VISIBLE_DEVICES`` (an ``env`` entry wins over ``envFrom``), i.e. one that holds GPUs or
that ``sharedGPUContainers`` names. And for every container that gets ``void`` (one without GPUs), unless its
``env`` names each of the other device variables: the ``void`` settles ``NVIDIA_VISIBLE_DEVICES`` only, and the
toolkit reads ``NVIDIA_IMEX_CHANNELS`` whatever ``NVIDIA_VISIBLE_DEVICES`` says (NVIDIA/nvidia-container-toolkit
internal/config/image/cuda_image.go, ``ImexChannelRequests``, which asks nothing of the visible devices).
Variables the policy's ``spec.security.deviceVariables`` allows are not counted;
``spec.security.visibleDevicesEnvFrom: allow`` makes an exception for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..pods.fields import CLAIM_REFERENCES, ENV, POD_RESOURCE_CLAIMS, RESOURCES, STRINGS
from ..pods.gpus import gpu_amounts
from ..pods.objects import container_label, containers
from ..policy.model import BUILTIN
from ..policy.vendors import KAI_SHARED_CONFIGMAP_ANNOTATION, NVIDIA_DEVICE_VARIABLES
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation
from .registry import rule

RULE = "visible-devices"
VARIABLE = "NVIDIA_VISIBLE_DEVICES"
HARMLESS = frozenset({"void", "none"})
VOID = "void"
NVIDIA_PREFIX = "NVIDIA_"
VOIDED = {"name": VARIABLE, "value": VOID}


def _voided(fld: str) -> Any:
    def describe(before: Any, after: Any) -> list[PodChange]:
        old = before if isinstance(before, list) else []
        out = []
        for index, container in enumerate(after if isinstance(after, list) else []):
            was = old[index] if index < len(old) and isinstance(old[index], Mapping) else {}
            if (
                isinstance(container, Mapping)
                and VOIDED in (container.get("env") or [])
                and VOIDED not in (was.get("env") or [])
            ):
                out.append(PodChange(fld, f"{container_label(fld, container)}: {VARIABLE}={VOID}"))
        return out

    return describe


CONTAINERS = Touch("containers", "spec.containers", in_place=False, describe=_voided("containers"), security=True)
INIT_CONTAINERS = Touch(
    "initContainers", "spec.initContainers", in_place=False, describe=_voided("initContainers"), security=True
)
EPHEMERAL_CONTAINERS = Touch(
    "ephemeralContainers",
    "spec.ephemeralContainers",
    in_place=False,
    describe=_voided("ephemeralContainers"),
    security=True,
)
record = rule(
    RULE,
    order=90,
    reads={
        "container.env": ENV,
        "container.envFrom": [{"prefix": str, "configMapRef": {"name": str}, "secretRef": {"name": str}}],
        "container.resources": {**RESOURCES, "claims": CLAIM_REFERENCES},
        "spec.resourceClaims": POD_RESOURCE_CLAIMS,
        "spec.schedulerName": str,
        "metadata.annotations": STRINGS,
    },
    touches=[CONTAINERS, INIT_CONTAINERS, EPHEMERAL_CONTAINERS],
    module=__name__,
)


def _voids_containers(ctx: PodContext) -> bool:
    """Whether the mutator gives this pod's containers without GPUs ``void``: pods holding NVIDIA GPUs through
    resources (device plugin, or DRA-backed extended resources) or resource claims. Not fractional holds: KAI's
    binder gives every container of the pod the fraction's ``NVIDIA_VISIBLE_DEVICES`` itself."""
    gpu = ctx.gpu
    device = gpu.device
    return device is not None and device.name == "nvidia" and not gpu.fractional and bool(gpu.resources or gpu.holders)


def _gpu_claim_names(spec: Mapping[str, Any], ctx: PodContext) -> frozenset[str]:
    """Names of the pod's ``spec.resourceClaims`` entries that hold (or may hold) a GPU: the holders
    ``spec.resourceClaims[i]``, GPU claims and, under ``gpuHolders.resourceClaims``, unresolved ones."""
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list):
        return frozenset()
    names = set()
    for holder in ctx.gpu.holders:
        if holder.startswith("spec.resourceClaims[") and holder.endswith("]"):
            index = holder[len("spec.resourceClaims[") : -1]
            if index.isdigit() and int(index) < len(claims) and isinstance(claims[int(index)], Mapping):
                names.add(str(claims[int(index)].get("name")))
    return frozenset(names)


def _hidden(container: Mapping[str, Any], ctx: PodContext, spec: Mapping[str, Any]) -> bool:
    """A container of such a pod that requests no GPU, references no GPU claim (``resources.claims``) and that
    no ``sharedGPUContainers`` entry names. DRA's drivers give devices only to the containers that reference
    the claim; under an NVIDIA runtime the others would still honour a CUDA image's ``NVIDIA_VISIBLE_DEVICES``."""
    if container.get("name") in ctx.policy.shared_gpu_containers:
        return False
    if any(amount > 0 for amount in gpu_amounts(container, ctx.counts_as_gpu).values()):
        return False
    if not ctx.gpu.holders:
        return True
    resources = container.get("resources")
    refs = resources.get("claims") if isinstance(resources, Mapping) else None
    if not isinstance(refs, list) or not refs:
        return True
    held = _gpu_claim_names(spec, ctx)
    return not any(isinstance(r, Mapping) and r.get("name") in held for r in refs)


@record.mutator(pods="gpu")
def hide_gpus_from_containers_without_any(editor: PodEditor, ctx: PodContext) -> list[Change]:
    if not _voids_containers(ctx):
        return []
    changes = []
    existing = _ephemeral_names(ctx.old.spec) if ctx.old is not None else frozenset()
    for fld in ("initContainers", "containers", "ephemeralContainers"):
        items = editor.spec.get(fld)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if not isinstance(container, Mapping) or not _hidden(container, ctx, editor.spec):
                continue
            if fld == "ephemeralContainers" and container.get("name") in existing:
                continue  # added before: the apiserver keeps it as it is
            env = container.get("env")
            if env is not None and not isinstance(env, list):
                continue
            if any(isinstance(e, Mapping) and e.get("name") == VARIABLE for e in env or []):
                continue  # set already: void/none stays, anything else is the validator's
            editor.set_container_env(fld, index, [*(env or []), dict(VOIDED)])
            changes.append(Change(fld, f"{container_label(fld, container)}: {VARIABLE}={VOID}"))
    return changes


def _ephemeral_names(spec: Mapping[str, Any]) -> frozenset[str]:
    items = spec.get("ephemeralContainers")
    return (
        frozenset(str(c.get("name")) for c in items if isinstance(c, Mapping))
        if isinstance(items, list)
        else frozenset()
    )


# Runs with or without a governing policy: seeing GPUs a pod did not request is never right. Enforced in
# every mode; only the policy's spec.security.visibleDevicesOverride: allow makes an exception.
@record.validator(pods="any", needs_policy=False)
def forbid_visible_devices_override(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.visible_devices_override == "allow":
        return []
    violations = []
    for fld, index, container in containers(pod.spec):
        for e, env in enumerate(container.get("env") or []):
            if not isinstance(env, Mapping) or env.get("name") != VARIABLE:
                continue
            if "valueFrom" not in env and str(env.get("value", "")) in HARMLESS:
                continue
            if _set_by_kai(pod, ctx, fld, index, env):
                continue
            shown = env.get("value") if "valueFrom" not in env else "<from a reference>"
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].env[{e}]"),
                    container_label(fld, container),
                    f"sets {VARIABLE}={shown}, which would expose GPUs the pod did not request",
                    f"remove {VARIABLE}; request GPUs with resources.limits and the device plugin sets it",
                    security=True,
                )
            )
    return violations


# The kubelet puts the device plugin's variables first and the container's own after them, env over envFrom
# (k/k pkg/kubelet/kubelet_pods.go GenerateRunContainerOptions, makeEnvironmentVariables: "Env will override
# EnvFrom variables"); containerd appends them to the image's ENV (internal/cri/server/container_create.go) and
# the NVIDIA toolkit keeps the last value of a name (internal/config/image/builder.go WithEnv). So an envFrom
# that can make NVIDIA_VISIBLE_DEVICES replaces the value the device plugin chose, unless an env entry names
# the variable itself (gpugate's void, or a value the check above judges).
@record.validator(pods="gpu", needs_policy=False)
def forbid_env_from_that_can_set_nvidia_variables(pod: PodView, ctx: PodContext) -> list[Violation]:
    devices = ctx.gpu.devices
    if ctx.policy.visible_devices_env_from == "allow" or (devices and all(d.name != "nvidia" for d in devices)):
        return []  # AMD's and Intel's runtimes read no NVIDIA_* variable
    # A workload's template is checked as written: its pods get the void at /mutate, if a policy governs them.
    voided: bool | None = None  # worked out at the first container with an envFrom (most pods have none)
    doors = [VARIABLE, *(v for v in NVIDIA_DEVICE_VARIABLES if v not in ctx.policy.device_variables)]
    violations = []
    for fld, index, container in containers(pod.spec):
        sources = container.get("envFrom")
        if not sources:
            continue
        named = {e.get("name") for e in container.get("env") or [] if isinstance(e, Mapping)}
        if voided is None:
            voided = ctx.policy is not BUILTIN and _voids_containers(ctx)
        hidden = bool(voided) and _hidden(container, ctx, pod.spec)
        if VARIABLE in named and not hidden:
            continue  # its own entry wins (KAI's fraction from its ConfigMap, or a value the check above judges)
        if hidden:
            named.add(VARIABLE)  # it gets the void at /mutate, which covers that variable only
        open_ = [name for name in doors if name not in named]
        if not open_:
            continue
        for e, source in enumerate(sources):
            if not isinstance(source, Mapping):
                continue
            prefix = str(source.get("prefix") or "")
            ref = next((k for k in ("configMapRef", "secretRef") if isinstance(source.get(k), Mapping)), None)
            if ref is None or not can_make_nvidia_variable(prefix):
                continue
            name = source[ref].get("name", "?")
            how = f'prefix "{prefix}"' if prefix else "no prefix"
            if hidden:  # a container without GPUs, given NVIDIA_VISIBLE_DEVICES=void
                what = (
                    f"so a key can set {', '.join(open_[:3])}{' or another' if len(open_) > 3 else ''} device "
                    "variable of the NVIDIA toolkit, which this pod's NVIDIA runtime reads to hand the container "
                    f"devices of the node (its {VARIABLE}=void does not cover them)"
                )
            else:
                what = (
                    f"so a key can set {VARIABLE} (or any NVIDIA_* variable) in a container that sees GPUs: it "
                    "overrides the device plugin's value and exposes GPUs the pod did not request"
                )
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].envFrom[{e}]"),
                    container_label(fld, container),
                    f'takes every key of {ref} "{name}" as a variable ({how}), {what}',
                    'give it a prefix that cannot start with NVIDIA_ (e.g. "APP_"), or list the keys it needs '
                    "under env instead; for a trusted namespace, spec.security.visibleDevicesEnvFrom: allow, "
                    "together with accept-nvidia-visible-devices-envvar-when-unprivileged = false in the NVIDIA "
                    "Container Toolkit on GPU nodes",
                    security=True,
                )
            )
    return violations


# A pod without GPUs: only a source whose own prefix makes NVIDIA_ names (``NVIDIA_``, ``NVIDIA_VISIBLE_``, ``NV``)
# is refused. One without a prefix is everyday CPU-pod practice, and the apiserver routes to gpugate only what its
# matchConditions can see, which a ConfigMap's keys are not; the NVIDIA toolkit's
# accept-nvidia-visible-devices-envvar-when-unprivileged = false is what closes that (docs/security.md). Where the
# NVIDIA runtime is a node's default handler (as the GPU Operator configures it), such a pod meets the toolkit too.
@record.validator(pods="non-gpu", needs_policy=False)
def forbid_nvidia_prefixed_env_from(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.visible_devices_env_from == "allow":
        return []
    violations = []
    for fld, index, container in containers(pod.spec):
        for e, source in enumerate(container.get("envFrom") or []):
            if not isinstance(source, Mapping):
                continue
            prefix = str(source.get("prefix") or "")
            if not prefix or not can_make_nvidia_variable(prefix):
                continue
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].envFrom[{e}]"),
                    container_label(fld, container),
                    f'takes keys of a ConfigMap or Secret as variables with the prefix "{prefix}", so it sets NVIDIA_* '
                    "variables, which the NVIDIA runtime reads to hand a container GPUs and other devices of its node",
                    'give it a prefix that cannot start with NVIDIA_ (e.g. "APP_"); for a trusted namespace, '
                    "spec.security.visibleDevicesEnvFrom: allow",
                    security=True,
                )
            )
    return violations


def can_make_nvidia_variable(prefix: str) -> bool:
    """Whether ``prefix`` + some key can be a name that starts with ``NVIDIA_``."""
    return NVIDIA_PREFIX.startswith(prefix) or prefix.startswith(NVIDIA_PREFIX)


def _set_by_kai(pod: PodView, ctx: PodContext, fld: str, index: int, env: Mapping[str, Any]) -> bool:
    """KAI Scheduler's webhook gives each container of a fractional-GPU pod ``NVIDIA_VISIBLE_DEVICES`` from
    a ConfigMap its binder fills when the pod is bound: ``<annotation>-<index>`` (``-i<index>`` for init
    containers), the annotation ``runai/shared-gpu-configmap`` set by the same webhook on a pod holding a
    GPU by a fraction annotation and scheduled by ``kai-scheduler`` (or another of the policy's
    ``gpuHolders.annotationSchedulers``, such as a KAI scheduling shard), whose binder writes that ConfigMap
    (KAI-Scheduler pkg/binder/common/gpu_access.go). Only that exact shape is accepted; the NVIDIA toolkit's
    ``accept-nvidia-visible-devices-envvar-when-unprivileged=false`` is what closes the variable to tenants
    for good (policies/README.md)."""
    prefix = pod.annotations.get(KAI_SHARED_CONFIGMAP_ANNOTATION)
    if (
        not prefix
        or pod.spec.get("schedulerName") not in ctx.policy.holders.annotation_schedulers
        or not any(h.startswith("annotation ") for h in ctx.gpu.holders)
    ):
        return False
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    suffix = f"-i{index}" if fld == "initContainers" else f"-{index}"
    return bool(ref) and ref.get("name") == f"{prefix}{suffix}" and ref.get("key") == VARIABLE
