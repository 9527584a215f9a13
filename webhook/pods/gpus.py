"""How a pod holds GPUs: the amounts its containers request, and the GPU use a policy sees in it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..inventory.model import Inventory
from ..policy.model import BUILTIN, Device, Policy
from ..policy.vendors import DEFAULT_SCHEDULER, IMPLICIT_DRA_PREFIX
from .claims import ClaimGPUs, ClaimLookup, claims_of, dra_resource_vendor
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
class DRAUse:
    """What a pod holds through DRA, beyond device-plugin resources (None on GPUUse for an ordinary pod)."""

    #: Counted resources served only through DRA (``deviceclass.resource.kubernetes.io/<class>``, or a GPU
    #: DeviceClass's own ``extendedResourceName`` that no device profile lists): no device-plugin pool has them.
    resources: frozenset[str] = frozenset()
    #: GPU DeviceClasses the pod's claims use.
    device_classes: tuple[str, ...] = ()
    #: The pod holds admin-access claims on GPUs (monitoring): it observes GPUs, holds none.
    observer: bool = False
    #: Claim path -> (GPU DeviceClass, devices; None for All).
    claim_wants: Mapping[str, tuple[str, int | None]] = field(default_factory=dict)
    #: (claim path, DeviceClass) of requests naming a class a synced inventory lacks.
    missing_classes: tuple[tuple[str, str], ...] = ()
    #: Claim path -> the GPU requests of the claim, with their counts (the limits count them).
    gpu_claims: Mapping[str, ClaimGPUs] = field(default_factory=dict)
    #: Names of the ResourceClaims the pod names that could not be read (not created yet, or not in budget).
    absent_claims: tuple[str, ...] = ()


@dataclass(frozen=True)
class GPUUse:
    """How a pod holds GPUs under a policy: counted GPU resources, their vendors, and other holds."""

    #: GPU count resources requested with a positive amount.
    resources: frozenset[str]
    #: The vendors of the GPU and auxiliary resources the pod requests, in policy order.
    devices: tuple[Device, ...]
    #: Other ways the pod holds a GPU: "spec.resourceClaims[0]", "annotation gpu-fraction", ...
    holders: tuple[str, ...] = ()
    #: DRA-backed resources and claims, when the pod has any (kept apart: most pods have none).
    dra: DRAUse | None = None
    #: Fraction annotations the pod carries that hold nothing: the scheduler that places it does not implement
    #: them (``gpuHolders.annotationSchedulers``).
    ignored_annotations: tuple[str, ...] = ()
    #: The annotations are ignored because the pod is created bound (``spec.nodeName``): no scheduler places it.
    bound: bool = False
    #: The scheduler that will place the pod (scheduler_of); None when only the operator making it will know.
    scheduler: str | None = None

    @property
    def dra_resources(self) -> frozenset[str]:
        return self.dra.resources if self.dra is not None else frozenset()

    @property
    def device_classes(self) -> tuple[str, ...]:
        return self.dra.device_classes if self.dra is not None else ()

    @property
    def observer(self) -> bool:
        return self.dra is not None and self.dra.observer

    @property
    def claim_wants(self) -> Mapping[str, tuple[str, int | None]]:
        return self.dra.claim_wants if self.dra is not None else {}

    @property
    def gpu_claims(self) -> Mapping[str, ClaimGPUs]:
        return self.dra.gpu_claims if self.dra is not None else {}

    @property
    def absent_claims(self) -> tuple[str, ...]:
        return self.dra.absent_claims if self.dra is not None else ()

    @property
    def missing_classes(self) -> tuple[tuple[str, str], ...]:
        return self.dra.missing_classes if self.dra is not None else ()

    @property
    def holds_gpu(self) -> bool:
        return bool(self.resources or self.devices or self.holders)

    @property
    def device(self) -> Device | None:
        """The one vendor whose profile applies; None for none or (a violation) several."""
        return self.devices[0] if len(self.devices) == 1 else None

    @property
    def device_plugin_resources(self) -> frozenset[str]:
        """The counted resources a device plugin serves (or DRA through the same name, KEP-5004)."""
        return self.resources if self.dra is None else self.resources - self.dra.resources

    @property
    def fractional(self) -> bool:
        return bool(self.holders) and any(h.startswith("annotation ") for h in self.holders)

    def counts(self, resource: str, policy: Policy) -> bool:
        """A GPU count resource for this pod: the policy's, or one DRA serves as a GPU."""
        return (self.dra is not None and resource in self.dra.resources) or policy.counts_as_gpu(resource)


# Over 60 lines: every way a pod holds a GPU (resources, DRA claims, annotations), read in one pass.
def gpu_use(
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    policy: Policy,
    *,
    namespace: str = "",
    inventory: Inventory | None = None,
    claims: ClaimLookup | None = None,
    defaulted: bool = True,
    created: bool = False,
    operator_scheduler: str | None = None,
) -> GPUUse:
    """``defaulted``: the apiserver fills this pod spec's defaults (a Pod, a built-in kind's template), so an unset
    ``schedulerName`` is the default scheduler; in a workload CRD's template it is unknown (see scheduler_of).
    ``created``: the spec is what a pod is created with (a CREATE, or any pod template), so a ``spec.nodeName`` in it
    binds the pod at creation: no scheduler places it and no fraction annotation holds anything (a pod a
    scheduler bound has one too, so an UPDATE is read without this). ``operator_scheduler``: the scheduler the
    operator gives pods whose template names none (pods.operated.operator_scheduler)."""
    counted: set[str] = set()
    dra: set[str] = set()
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
                name = str(resource)
                device = policy.device_of(name)
                if device is None:
                    if "/" not in name:
                        continue  # cpu, memory, ephemeral-storage, hugepages-*
                    device = dra_resource_vendor(name, policy, inventory)
                    if device is None:
                        continue
                    served_by_dra = True
                else:
                    served_by_dra = name.startswith(IMPLICIT_DRA_PREFIX)
                try:
                    amount = parse_quantity(raw)
                except QuantityError:
                    continue
                if amount <= 0:
                    continue
                if served_by_dra or device.counts(name):
                    counted.add(name)
                if served_by_dra:
                    dra.add(name)
                vendors.setdefault(device.name, device)
    holders: list[str] = []
    observer = False
    classes: list[str] = []
    use = None
    if spec.get("resourceClaims"):
        use = claims_of(spec, namespace=namespace, policy=policy, inventory=inventory, lookup=claims)
        for path, (device, device_class) in use.gpus.items():
            holders.append(path)
            vendors.setdefault(device.name, device)
            classes.append(device_class)
        if policy.holders.resource_claims:
            holders += use.unknown
        observer = bool(use.observers) and not use.gpus
    annotations = meta.get("annotations") or {}
    ignored: tuple[str, ...] = ()
    bound = False
    scheduler = scheduler_of(spec, defaulted=defaulted, operator=operator_scheduler)
    if isinstance(annotations, Mapping):
        present = tuple(a for a in policy.holders.annotations if a in annotations)
        bound = created and bool(spec.get("nodeName"))
        if present and (bound or (scheduler is not None and scheduler not in policy.holders.annotation_schedulers)):
            present, ignored = (), present
        holders += [f"annotation {a}" for a in present]
        device = policy.devices.get(policy.holders.annotation_device or "")
        if present and device is not None:
            vendors.setdefault(device.name, device)
    order = list(policy.devices)
    devices = tuple(sorted(vendors.values(), key=lambda d: order.index(d.name) if d.name in order else len(order)))
    dra_use = None
    if dra or use is not None:
        dra_use = DRAUse(
            frozenset(dra),
            tuple(dict.fromkeys(classes)),
            observer,
            use.wants if use is not None else {},
            tuple(use.missing) if use is not None else (),
            use.gpu_claims if use is not None else {},
            tuple(use.absent) if use is not None else (),
        )
    return GPUUse(
        frozenset(counted),
        devices,
        tuple(holders),
        dra_use,
        ignored,
        bound=bool(ignored) and bound,
        scheduler=scheduler,
    )


def scheduler_of(spec: Mapping[str, Any], *, defaulted: bool = True, operator: str | None = None) -> str | None:
    """The scheduler that will place the pod: its ``schedulerName``; unset, the one its operator sets from the
    object's own fields (``operator``: a Volcano Job's ``spec.schedulerName``), the default scheduler where the
    apiserver defaults the spec, and unknown (None) in a workload CRD's template, whose controller may set it
    from its own configuration on the pods it creates (KubeRay's KAI plugin does: ray-project/kuberay
    ray-operator/controllers/ray/batchscheduler/kai-scheduler/kai_scheduler.go ``AddMetadataToChildResource``).
    Those pods are judged again when they are created."""
    name = spec.get("schedulerName")
    if isinstance(name, str) and name:
        return name
    if operator:
        return operator
    return DEFAULT_SCHEDULER if defaulted else None


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
