"""How a pod holds GPUs: the amounts its containers request, and the GPU use a policy sees in it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..policy.model import BUILTIN, Device, Policy
from .objects import containers, is_sidecar
from .quantity import QuantityError, parse_quantity


def gpu_amounts(container: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPU resource -> amount for one container: the limit, else the request; unparsable values skipped."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    out: dict[str, Fraction] = {}
    for section in ("requests", "limits"):  # limits last: they win, as scheduling uses request == limit
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for resource, raw in values.items():
            if is_gpu(resource):
                try:
                    out[resource] = parse_quantity(raw)
                except QuantityError:
                    continue
    return out


def requests_gpu(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> bool:
    """True when any container asks for a positive amount of a GPU resource."""
    return any(amount > 0 for _, _, c in containers(spec) for amount in gpu_amounts(c, is_gpu).values())


def gpu_resources_requested(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> set[str]:
    return {r for _, _, c in containers(spec) for r, amount in gpu_amounts(c, is_gpu).items() if amount > 0}


@dataclass(frozen=True)
class GPUUse:
    """How a pod holds GPUs under a policy: counted GPU resources, their vendors, and other holds."""

    #: GPU count resources requested with a positive amount.
    resources: frozenset[str]
    #: The vendors of the GPU and auxiliary resources the pod requests, in policy order.
    devices: tuple[Device, ...]
    #: Other ways the pod holds a GPU: "spec.resourceClaims", "annotation gpu-fraction", ...
    holders: tuple[str, ...] = ()

    @property
    def holds_gpu(self) -> bool:
        return bool(self.resources or self.devices or self.holders)

    @property
    def device(self) -> Device | None:
        """The one vendor whose profile applies; None for none or (a violation) several."""
        return self.devices[0] if len(self.devices) == 1 else None


def gpu_use(meta: Mapping[str, Any], spec: Mapping[str, Any], policy: Policy) -> GPUUse:
    counted: set[str] = set()
    vendors: dict[str, Device] = {}
    for _, _, container in containers(spec):
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            continue
        for section in ("requests", "limits"):
            values = resources.get(section)
            if not isinstance(values, Mapping):
                continue
            for resource, raw in values.items():
                device = policy.device_of(str(resource))
                if device is None:
                    continue
                try:
                    amount = parse_quantity(raw)
                except QuantityError:
                    continue
                if amount <= 0:
                    continue
                if device.counts(str(resource)):
                    counted.add(str(resource))
                vendors.setdefault(device.name, device)
    holders: list[str] = []
    if policy.holders.resource_claims and spec.get("resourceClaims"):
        holders.append("spec.resourceClaims")
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping):
        by_annotation = [f"annotation {a}" for a in policy.holders.annotations if a in annotations]
        holders += by_annotation
        device = policy.devices.get(policy.holders.annotation_device or "")
        if by_annotation and device is not None:
            vendors.setdefault(device.name, device)
    order = list(policy.devices)
    devices = tuple(sorted(vendors.values(), key=lambda d: order.index(d.name) if d.name in order else len(order)))
    return GPUUse(frozenset(counted), devices, tuple(holders))


def scheduled_gpus(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPUs a pod holds, per resource, counted as the scheduler counts: app containers and sidecars add up;
    an ordinary init container runs alone, so it counts only when it asks for more (k/k
    pkg/api/v1/resource/helpers.go PodRequests)."""
    app: Counter[str] = Counter()
    init_peak: dict[str, Fraction] = {}
    running_sidecars: Counter[str] = Counter()
    for fld, _, container in containers(spec):
        amounts = gpu_amounts(container, is_gpu)
        if fld == "containers":
            app.update(amounts)
        elif fld == "initContainers":
            if is_sidecar(container):
                running_sidecars.update(amounts)
                app.update(amounts)
            else:
                for resource, amount in amounts.items():
                    # an init container runs beside the sidecars started before it
                    peak = amount + running_sidecars.get(resource, 0)
                    init_peak[resource] = max(init_peak.get(resource, Fraction(0)), peak)
    out = {r: Fraction(v) for r, v in app.items()}
    for resource, peak in init_peak.items():
        out[resource] = max(out.get(resource, Fraction(0)), peak)
    return {r: v for r, v in out.items() if v > 0}


def counts_as_gpu(resource: str, policy: Policy) -> bool:
    """A GPU count resource under the policy or under the built-in defaults: where Kubernetes allows GPUs
    and how many it allows is the apiserver's rule, whatever the policy counts."""
    return policy.counts_as_gpu(resource) or BUILTIN.counts_as_gpu(resource)
