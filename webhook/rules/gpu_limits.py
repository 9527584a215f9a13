"""GPU limits: at most ``limits.maxPerContainer`` GPUs in a container and ``limits.maxPerPod`` in a pod.

Guards the GPU resources of containers and init containers, and the GPU devices of the pod's DRA claims. A pod's
count is what the scheduler reserves (KEP-753, k8s.io/component-helpers resource.PodRequests): the sum over app
containers and sidecars (init containers with ``restartPolicy: Always``), or, if larger, any one init container
plus the sidecars started before it; plus every GPU its resolved claims take (each claim once, at its worst
case: ``exactly.count``, ``allocationMode: All`` as the largest node of its DeviceClass, ``firstAvailable`` as the
most of its alternatives; ``webhook.pods.claims.request_devices``). A container's count adds the claims (or the
claim requests) its ``resources.claims`` names. Only GPU DeviceClasses count, never admin access (monitoring).
A GPU request whose worst case gpugate cannot know (``All`` of a class no node publishes yet) is refused where
a limit applies: it could take any number.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..pods.claims import ClaimGPUs, Counted, request_devices
from ..pods.fields import CLAIM_REFERENCES, POD_RESOURCE_CLAIMS, RESOURCES
from ..pods.gpus import gpu_amounts, scheduled_gpus
from ..pods.objects import container_label, containers
from ..pods.quantity import format_quantity
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "gpu-limits"
record = rule(
    RULE,
    order=40,
    reads={
        "container.restartPolicy": str,
        "container.resources": {**RESOURCES, "claims": CLAIM_REFERENCES},
        "spec.resourceClaims": POD_RESOURCE_CLAIMS,
    },
    module=__name__,
)


def pod_gpu_count(spec: Mapping[str, Any], ctx: PodContext) -> Fraction:
    """GPUs the scheduler reserves for the pod, all GPU resources of the policy added up."""
    return sum(scheduled_gpus(spec, ctx.counts_as_gpu).values(), Fraction(0))


def _entries(spec: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """``spec.resourceClaims`` entry name -> (its path, the claim it names; a template's claim is its own)."""
    out: dict[str, tuple[str, str]] = {}
    entries = spec.get("resourceClaims")
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            path = f"spec.resourceClaims[{index}]"
            named = entry.get("resourceClaimName")
            out[entry["name"]] = (path, f"claim {named}" if isinstance(named, str) and named else path)
    return out


def _counted(claim: ClaimGPUs, ctx: PodContext, only: str | None = None) -> list[tuple[str, Counted]]:
    return [
        (r.request, request_devices(r, ctx.fleet, ctx.policy))
        for r in claim.requests
        if only is None or r.request == only
    ]


def _describe(entry: str, path: str, claim: ClaimGPUs, request: str, counted: Counted) -> str:
    return f'{path} claim "{entry}" ({claim.label}) request "{request}": {counted.how}'


class _ClaimCount:
    """The GPUs a set of claim requests takes: the known total, what is unknowable, and words for both."""

    def __init__(self) -> None:
        self.total = 0
        self.parts: list[str] = []
        self.unknown: list[tuple[str, str]] = []  # (path, description)

    def add(self, entry: str, path: str, claim: ClaimGPUs, ctx: PodContext, only: str | None = None) -> None:
        for request, counted in _counted(claim, ctx, only):
            text = _describe(entry, path, claim, request, counted)
            if counted.devices is None:
                self.unknown.append((path, text))
            else:
                self.total += counted.devices
                self.parts.append(text)


def _pod_claims(spec: Mapping[str, Any], ctx: PodContext) -> _ClaimCount:
    """Each GPU claim the pod names, once (two entries may name one ResourceClaim)."""
    out = _ClaimCount()
    seen: set[str] = set()
    claims = ctx.gpu.gpu_claims
    for entry, (path, claim_key) in _entries(spec).items():
        claim = claims.get(path)
        if claim is None or claim_key in seen:
            continue
        seen.add(claim_key)
        out.add(entry, path, claim, ctx)
    return out


def _container_claims(container: Mapping[str, Any], spec: Mapping[str, Any], ctx: PodContext) -> _ClaimCount:
    """The GPU claims (or requests of them) a container's ``resources.claims`` names."""
    out = _ClaimCount()
    resources = container.get("resources")
    refs = resources.get("claims") if isinstance(resources, Mapping) else None
    if not isinstance(refs, list) or not ctx.gpu.gpu_claims:
        return out
    entries = _entries(spec)
    seen: set[tuple[str, str]] = set()
    for ref in refs:
        if not isinstance(ref, Mapping) or ref.get("name") not in entries:
            continue
        entry = str(ref["name"])
        request = ref.get("request") if isinstance(ref.get("request"), str) and ref.get("request") else None
        path, _ = entries[entry]
        claim = ctx.gpu.gpu_claims.get(path)
        if claim is None or (entry, request or "") in seen or (entry, "") in seen:
            continue
        seen.add((entry, request or ""))
        out.add(entry, path, claim, ctx, request)
    return out


def _unknowable(ctx: PodContext, path: str, text: str, limit: int, scope: str, subject: str) -> Violation:
    return Violation(
        RULE,
        ctx.spec_field(path.removeprefix("spec.")),
        subject,
        f"{text}, so the GPUs it takes cannot be counted against the {limit} per {scope} that policy "
        f'"{ctx.policy.name}" allows',
        f"claim a number of devices: exactly.count (allocationMode ExactCount) of at most {limit}",
    )


@record.validator(pods="gpu")
def limit_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    spec = pod.spec
    limits = ctx.policy.limits
    violations = []
    if limits.max_per_container is not None:
        most = limits.max_per_container
        for fld, index, container in containers(spec):
            label = container_label(fld, container)
            amount = sum(gpu_amounts(container, ctx.counts_as_gpu).values(), Fraction(0))
            dra = _container_claims(container, spec, ctx)
            violations += [_unknowable(ctx, p, t, most, "container", label) for p, t in dra.unknown]
            if amount + dra.total > most:
                where = f"{fld}[{index}].resources" + (".claims" if dra.total and not amount else ".limits")
                through = f" ({', '.join(dra.parts)})" if dra.total else ""
                violations.append(
                    Violation(
                        RULE,
                        ctx.spec_field(where),
                        label,
                        f"requests {format_quantity(amount + dra.total)} GPUs{through}, more than the {most} per "
                        f'container that policy "{ctx.policy.name}" allows',
                        f"request at most {most}"
                        + (" (resources and the claims it names together)" if dra.total else "")
                        + ", or split the work across pods",
                    )
                )
    if limits.max_per_pod is not None:
        most = limits.max_per_pod
        dra = _pod_claims(spec, ctx)
        violations += [_unknowable(ctx, p, t, most, "pod", "pod") for p, t in dra.unknown]
        own = pod_gpu_count(spec, ctx)
        total = own + dra.total
        if total > most:
            through = ""
            if dra.total:
                through = f" ({format_quantity(own)} in its containers' resources, {dra.total} through claims: " + (
                    "; ".join(dra.parts) + ")"
                )
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field("resourceClaims" if dra.total else "containers"),
                    "pod",
                    f"requests {format_quantity(total)} GPUs in all{through}, more than the {most} per pod "
                    f'that policy "{ctx.policy.name}" allows',
                    f"request at most {most} GPUs per pod"
                    + (" (containers' resources and claims' devices together)" if dra.total else ""),
                )
            )
    return violations
