"""The GPU inventory: what a cluster's Nodes, RuntimeClasses, DeviceClasses and ResourceSlices offer, and what
the node pools that scale up (Karpenter NodePools, pools a policy declares) could add, reduced to the few fields
a decision needs. Pure: objects (plain dicts) in, frozen records out; no I/O.

The same reducers serve the live watch in ``gpugate serve`` (``webhook.kube.inventory``), a snapshot file
(``gpugate fleet snapshot``, ``gpugate check --fleet``) and the tests, so all three see one picture. Memory is
bounded: a node keeps its labels (interned: nodes of a pool share them), its taints and only the extended
resources of its allocatable; a ResourceSlice keeps its driver, node, pool, device count, product names and
memory capacity, and of its GPU-like devices (those that state a product or a UUID) the few attributes gpugate's
DRA series name them by (``SliceDevice``), at most ``DEVICE_LIMIT`` per slice; never the rest of its devices.
Quantities stay as the objects state them: the readers (feasibility, ``gpugate fleet``) parse them, so this
module imports nothing of gpugate's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

#: Labels a node may keep (a Node with more is truncated, never refused: kubelet and cloud controllers add
#: about 20-40). A selector on a label past this is judged "unknown", never "no node".
LABEL_LIMIT = 256
#: Product names kept per ResourceSlice; ``productName`` is the NVIDIA DRA driver's device attribute
#: (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go), ``productName``/``model``
#: the common spellings of other drivers.
PRODUCT_ATTRIBUTES = ("productName", "model", "product")
PRODUCT_LIMIT = 8
#: GPU-like devices kept per ResourceSlice (a node of 8 GPUs with every MIG placement published stays below it;
#: the DRA API allows 128 devices per slice in resource.k8s.io/v1, ResourceSliceMaxDevices).
DEVICE_LIMIT = 256
#: Capacity entries kept of one shared device (the API allows 32 attributes and capacities combined).
CAPACITY_LIMIT = 32
# A DeviceClass selector names its driver in CEL: device.driver == 'gpu.nvidia.com' (either quote).
_DRIVER_CEL = re.compile(r"""device\.driver\s*==\s*['"]([^'"]+)['"]""")


def _intern(value: Any) -> str:
    return sys.intern(str(value))


def _extended(resource: str) -> bool:
    """An extended (vendor) resource: a domain-prefixed name outside kubernetes.io, and not hugepages."""
    domain, slash, _ = resource.partition("/")
    return bool(slash) and not domain.endswith("kubernetes.io") and not resource.startswith("hugepages-")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def tolerated_by(self, tolerations: Iterable[Mapping[str, Any]]) -> bool:
        """core/v1 Toleration.ToleratesTaint: key (empty with Exists matches all), operator, value, effect."""
        for t in tolerations:
            if not isinstance(t, Mapping):
                continue
            effect = t.get("effect") or ""
            if effect and effect != self.effect:
                continue
            key = t.get("key") or ""
            operator = t.get("operator") or "Equal"
            if key == "" and operator == "Exists":
                return True
            if key != self.key:
                continue
            if operator == "Exists" or (t.get("value") or "") == self.value:
                return True
        return False


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    #: Extended resources only (``nvidia.com/gpu``, ``amd.com/gpu``...): name -> allocatable quantity, as the
    #: node reports it (parsed by the reader: this module stays below the quantity parser).
    allocatable: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    #: The node had more labels than LABEL_LIMIT: a selector on a missing key is unknown, not a miss.
    truncated: bool = False
    unschedulable: bool = False


def node_of(obj: Mapping[str, Any]) -> Node:
    meta = obj.get("metadata") or {}
    raw_labels = meta.get("labels") or {}
    items = list(raw_labels.items()) if isinstance(raw_labels, Mapping) else []
    labels = MappingProxyType({_intern(k): _intern(v) for k, v in items[:LABEL_LIMIT]})
    status = obj.get("status") or {}
    raw_alloc = status.get("allocatable") or {}
    allocatable = {
        _intern(resource): _intern(raw)
        for resource, raw in (raw_alloc.items() if isinstance(raw_alloc, Mapping) else ())
        if _extended(str(resource)) and isinstance(raw, (str, int))
    }
    spec = obj.get("spec") or {}
    taints = tuple(
        Taint(_intern(t.get("key", "")), _intern(t.get("value", "")), _intern(t.get("effect", "")))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    return Node(
        name=str(meta.get("name", "")),
        labels=labels,
        allocatable=MappingProxyType(allocatable),
        taints=taints,
        truncated=len(items) > LABEL_LIMIT,
        unschedulable=bool(spec.get("unschedulable")),
    )


@dataclass(frozen=True)
class DeviceClass:
    name: str
    #: The drivers its CEL selectors name (``device.driver == '...'``); empty when it names none.
    drivers: tuple[str, ...]
    #: KEP-5004: the extended resource this class serves (resource.k8s.io/v1 DeviceClassSpec).
    extended_resource_name: str | None = None


def device_class_of(obj: Mapping[str, Any]) -> DeviceClass:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    drivers: list[str] = []
    for selector in spec.get("selectors") or []:
        cel = (selector.get("cel") or {}).get("expression") if isinstance(selector, Mapping) else None
        if isinstance(cel, str):
            drivers += [d for d in _DRIVER_CEL.findall(cel) if d not in drivers]
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name=str(meta.get("name", "")),
        drivers=tuple(_intern(d) for d in drivers),
        extended_resource_name=_intern(extended) if isinstance(extended, str) and extended else None,
    )


@dataclass(frozen=True)
class SliceDevice:
    """One GPU-like device of a ResourceSlice, by the attributes NVIDIA's DRA driver publishes
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go: ``uuid``, ``productName``,
    ``type`` gpu/mig/vfio; a MIG device's ``parentUUID`` and ``profile``)."""

    name: str
    uuid: str = ""
    parent_uuid: str = ""
    profile: str = ""
    product: str = ""
    type: str = ""
    #: KEP-5075 consumable capacity: the device may be allocated to several claims at once
    #: (resource.k8s.io/v1 Device ``allowMultipleAllocations``), each consuming part of its ``capacity``.
    shared: bool = False
    #: Its ``capacity`` entries as published, (name, quantity text), in name order: what a claim's
    #: ``consumedCapacity`` is a part of (NVIDIA's driver: ``memory``, and ``shares`` with
    #: ``--consumable-shares=N``). Only on a shared device; at most CAPACITY_LIMIT entries.
    capacity: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Slice:
    """One ResourceSlice: whose devices, on which node (None: not node-local), how many, which products."""

    name: str
    driver: str
    node: str | None
    pool: str
    devices: int
    products: tuple[str, ...] = ()
    #: The ``memory`` capacity of its devices as published (the first stated; None when they state none).
    memory: str | None = None
    all_nodes: bool = False
    #: Its GPU-like devices (a product or UUID attribute), for gpugate's DRA series; at most DEVICE_LIMIT.
    gpus: tuple[SliceDevice, ...] = ()


def _attribute(value: Any) -> str | None:
    """A DRA device attribute is a one-key object: {string: ...}, {version: ...}, {int: ...}, {bool: ...}."""
    if isinstance(value, Mapping):
        for kind in ("string", "version"):
            if isinstance(value.get(kind), str):
                return str(value[kind])
    return None


def _capacities(capacity: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A device's ``capacity`` map as (name, value text) pairs: ``{memory: {value: 80Gi, requestPolicy: ...}}``."""
    out = []
    for name in sorted(capacity)[:CAPACITY_LIMIT]:
        entry = capacity[name]
        value = entry.get("value") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and isinstance(value, (str, int)) and not isinstance(value, bool):
            out.append((_intern(name), str(value)))
    return tuple(out)


def slice_of(obj: Mapping[str, Any]) -> Slice:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    devices = [d for d in spec.get("devices") or [] if isinstance(d, Mapping)]
    products: list[str] = []
    memory: str | None = None
    gpus: list[SliceDevice] = []
    for device in devices:
        basic = device.get("basic")
        body: Mapping[str, Any] = basic if isinstance(basic, Mapping) else device  # v1beta1 wraps in basic
        attributes = body.get("attributes") or {}
        if not isinstance(attributes, Mapping):
            attributes = {}
        named = ""
        for name in PRODUCT_ATTRIBUTES:
            product = _attribute(attributes.get(name))
            if product:
                named = named or product
            if product and product not in products and len(products) < PRODUCT_LIMIT:
                products.append(_intern(product))
                break
        uuid = _attribute(attributes.get("uuid")) or ""
        capacity = body.get("capacity") or {}
        if not isinstance(capacity, Mapping):
            capacity = {}
        shared = body.get("allowMultipleAllocations") is True
        if (named or uuid) and len(gpus) < DEVICE_LIMIT:
            gpus.append(
                SliceDevice(
                    name=str(device.get("name", "")),
                    uuid=uuid,
                    parent_uuid=_attribute(attributes.get("parentUUID")) or "",
                    profile=_intern(_attribute(attributes.get("profile")) or ""),
                    product=_intern(named),
                    type=_intern(_attribute(attributes.get("type")) or ""),
                    shared=shared,
                    capacity=_capacities(capacity) if shared else (),
                )
            )
        entry = capacity.get("memory")
        raw = entry.get("value") if isinstance(entry, Mapping) else None
        if memory is None and isinstance(raw, (str, int)):
            memory = str(raw)
    pool = spec.get("pool") or {}
    node = spec.get("nodeName")
    return Slice(
        name=str(meta.get("name", "")),
        driver=_intern(spec.get("driver", "")),
        node=_intern(node) if isinstance(node, str) and node else None,
        pool=_intern(pool.get("name", "")) if isinstance(pool, Mapping) else "",
        devices=len(devices),
        products=tuple(products),
        memory=memory,
        all_nodes=bool(spec.get("allNodes")),
        gpus=tuple(gpus),
    )


@dataclass(frozen=True)
class ClaimOption:
    """One way a request may be served: ``exactly`` (v1), one ``firstAvailable`` subrequest, or a v1beta1
    request's own fields. ``count`` None is ``allocationMode: All`` (every matching device of a node)."""

    device_class: str
    count: int | None = 1
    admin_access: bool = False
    #: The subrequest's name (``firstAvailable``); empty for ``exactly``.
    name: str = ""


@dataclass(frozen=True)
class ClaimRequest:
    """One request of a ResourceClaim(Template): the DeviceClasses it may be served from, how many devices
    (None: ``allocationMode: All``; the most of its alternatives), and whether it is an admin-access
    (monitoring) request. ``options`` keeps each alternative (a ``firstAvailable`` list has several)."""

    device_classes: tuple[str, ...]
    count: int | None = 1
    admin_access: bool = False
    name: str = ""
    options: tuple[ClaimOption, ...] = ()


@dataclass(frozen=True)
class ClaimSpec:
    kind: str  # ResourceClaim or ResourceClaimTemplate
    namespace: str
    name: str
    requests: tuple[ClaimRequest, ...]


def _count_of(option: Mapping[str, Any]) -> int | None:
    """Devices one alternative asks for: None for ``allocationMode: All``; ``count`` (default 1) otherwise."""
    if option.get("allocationMode") == "All":
        return None
    count = option.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _request_of(raw: Mapping[str, Any]) -> ClaimRequest | None:
    """resource.k8s.io/v1 ``exactly`` / ``firstAvailable``; v1beta1 kept the fields on the request itself."""
    exactly = raw.get("exactly") if isinstance(raw.get("exactly"), Mapping) else None
    listed = raw.get("firstAvailable")
    alternatives = [a for a in (listed if isinstance(listed, list) else []) if isinstance(a, Mapping)]
    options = [exactly] if exactly is not None else alternatives or [raw]
    kept = tuple(
        ClaimOption(
            _intern(o["deviceClassName"]),
            _count_of(o),
            o.get("adminAccess") is True,
            _intern(o["name"]) if isinstance(o.get("name"), str) and o is not exactly and o is not raw else "",
        )
        for o in options
        if isinstance(o.get("deviceClassName"), str) and o.get("deviceClassName")
    )
    if not kept:
        return None
    counts = [o.count for o in kept]
    worst = None if None in counts else max(c for c in counts if c is not None)
    name = raw.get("name")
    return ClaimRequest(
        tuple(o.device_class for o in kept),
        worst,
        any(o.admin_access for o in kept),
        _intern(name) if isinstance(name, str) else "",
        kept,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def claim_of(obj: Mapping[str, Any]) -> ClaimSpec:
    """Any object (a tenant's, possibly malformed: fields of the wrong type are read as absent)."""
    meta = _mapping(obj.get("metadata"))
    kind = str(obj.get("kind") or "ResourceClaim")
    spec = _mapping(obj.get("spec"))
    if kind == "ResourceClaimTemplate":
        spec = _mapping(spec.get("spec"))
    raw = _mapping(spec.get("devices")).get("requests")
    requests = [_request_of(r) for r in (raw if isinstance(raw, list) else []) if isinstance(r, Mapping)]
    return ClaimSpec(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        requests=tuple(r for r in requests if r is not None),
    )


#: The NodeSelectorRequirement operators (core/v1).
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class Requirement:
    """One NodeSelectorRequirement a pool puts on every node it creates (Karpenter's ``requirements``)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class ScalablePool:
    """A node pool that can add nodes: what every node it creates would carry, as far as gpugate can know it
    before the node exists. A pod one of these pools could host is never refused as infeasible: the pending
    pod is what makes the autoscaler add the node.

    ``labels`` are on every node; ``requirements`` narrow the labels the pool may choose (Karpenter picks an
    instance type within them); ``open_keys`` are labels every node carries with a value gpugate cannot know
    (Karpenter's well-known labels, kubelet's own). ``gpus`` is resource -> the most one node can hold, None
    when the pool may offer the resource but gpugate cannot tell how much; ``gpus_unknown`` says the pool
    names no GPU at all (a general NodePool), so it may offer any GPU resource in any amount.
    """

    name: str
    #: "NodePool" (Karpenter, read live) or "GPUNodePool" (declared in the policy directory).
    source: str
    labels: Mapping[str, str] = field(default_factory=dict)
    requirements: tuple[Requirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    gpus: Mapping[str, int | None] = field(default_factory=dict)
    gpus_unknown: bool = False
    open_keys: frozenset[str] = frozenset()
    #: The most nodes it may have (declared pools; Karpenter bounds a NodePool by resource ``limits``).
    max_nodes: int | None = None

    def describe(self) -> str:
        """How a message names the pool: ``NodePool "l40s"``, ``pool "a100-gke" (scales from zero)``."""
        return f'NodePool "{self.name}"' if self.source == "NodePool" else f'node pool "{self.name}"'

    def may_satisfy(self, key: str, operator: str, values: Iterable[str]) -> bool:
        """Whether some node of this pool could satisfy one NodeSelectorRequirement of a pod: the pool's
        own label or requirements on the key intersect it (Karpenter's ``Requirements.Compatible``: a key
        the pool does not define is allowed only when it is well known, or when the pod asks for its
        absence). Unknown operators never match, as in the scheduler."""
        wanted = tuple(str(v) for v in values)
        if operator not in OPERATORS:
            return False
        constraints = [Requirement(key, "In", (self.labels[key],))] if key in self.labels else []
        constraints += [r for r in self.requirements if r.key == key]
        if not constraints:
            if key in self.open_keys:
                return operator != "DoesNotExist"
            return operator in ("NotIn", "DoesNotExist")
        if any(c.operator == "DoesNotExist" for c in constraints):
            return operator in ("NotIn", "DoesNotExist")
        if operator == "DoesNotExist":
            return False
        finite = [set(c.values) for c in constraints if c.operator == "In"]
        if finite:
            candidates = set.intersection(*finite)
            return any(self._value_allowed(v, constraints) and _satisfies(v, operator, wanted) for v in candidates)
        if operator == "In":
            return any(self._value_allowed(v, constraints) for v in wanted)
        return True  # NotIn, Exists, Gt, Lt against an open range: some value fits

    @staticmethod
    def _value_allowed(value: str, constraints: Iterable[Requirement]) -> bool:
        return all(_satisfies(value, c.operator, c.values) for c in constraints if c.operator != "Exists")

    def admits_selector(self, selector: Mapping[str, Any]) -> bool:
        return all(self.may_satisfy(str(k), "In", (str(v),)) for k, v in selector.items())

    def admits_term(self, term: Mapping[str, Any]) -> bool:
        """A required node-affinity term: every matchExpression satisfiable (matchFields name a node, which a
        node not yet created cannot be chosen by)."""
        if term.get("matchFields"):
            return False
        return all(
            self.may_satisfy(str(e.get("key") or ""), str(e.get("operator") or ""), e.get("values") or ())
            for e in term.get("matchExpressions") or []
            if isinstance(e, Mapping)
        )


def _satisfies(value: str, operator: str, values: Iterable[str]) -> bool:
    values = tuple(values)
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return True
    if operator in ("Gt", "Lt") and values:
        have, bound = _as_int(value), _as_int(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


#: Karpenter's well-known labels, which a NodePool need not define for a pod to select on them: the core set
#: (kubernetes-sigs/karpenter pkg/apis/v1/labels.go, WellKnownLabels) and the AWS provider's instance labels
#: (aws/karpenter-provider-aws pkg/apis/v1/labels.go). Any other key the NodePool does not define makes
#: Karpenter refuse the pod for that NodePool ("label ... does not have known values",
#: pkg/scheduling/requirements.go Compatible).
KARPENTER_WELL_KNOWN = frozenset(
    {
        "karpenter.sh/nodepool",
        "karpenter.sh/capacity-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
        *(
            f"karpenter.k8s.aws/{name}"
            for name in (
                "instance-hypervisor",
                "instance-encryption-in-transit-supported",
                "instance-category",
                "instance-family",
                "instance-generation",
                "instance-size",
                "instance-local-nvme",
                "instance-cpu",
                "instance-cpu-manufacturer",
                "instance-cpu-sustained-clock-speed-mhz",
                "instance-memory",
                "instance-ebs-bandwidth",
                "instance-network-bandwidth",
                "instance-gpu-name",
                "instance-gpu-manufacturer",
                "instance-gpu-count",
                "instance-gpu-memory",
                "instance-accelerator-name",
                "instance-accelerator-manufacturer",
                "instance-accelerator-count",
                "instance-tenancy",
            )
        ),
    }
)
#: The GPU labels Karpenter's AWS provider derives from an instance type's GPUs (pkg/providers/instancetype/
#: types.go: the name and manufacturer lower-kebab-cased, the count as a number; all three DoesNotExist on an
#: instance type without GPUs), and the resource each manufacturer's GPUs are advertised as (the provider's
#: WellKnownResources: nvidia.com/gpu, amd.com/gpu).
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
KARPENTER_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
KARPENTER_GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
#: Labels kubelet and the cloud put on every node, whose value a declared pool need not state.
NODE_COMMON_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
    }
)


def _requirement_of(raw: Mapping[str, Any]) -> Requirement | None:
    key, operator = raw.get("key"), raw.get("operator")
    if not isinstance(key, str) or not key or operator not in OPERATORS:
        return None
    values = tuple(_intern(v) for v in raw.get("values") or [] if isinstance(v, (str, int)))
    return Requirement(_intern(key), str(operator), values)


def _largest_count(pool: ScalablePool, key: str) -> int | bool | None:
    """The most GPUs a node of the pool may have by a count label: an int, None (unbounded), False (none)."""
    constraints = [Requirement(key, "In", (pool.labels[key],))] if key in pool.labels else []
    constraints += [r for r in pool.requirements if r.key == key]
    if any(c.operator == "DoesNotExist" for c in constraints):
        return False
    finite = [set(c.values) for c in constraints if c.operator == "In"]
    if finite:
        allowed = [
            n
            for v in set.intersection(*finite)
            if (n := _as_int(v)) is not None and pool._value_allowed(v, constraints)
        ]
        return max(allowed) if allowed and max(allowed) > 0 else False
    below = [n - 1 for c in constraints if c.operator == "Lt" and c.values and (n := _as_int(c.values[0])) is not None]
    return min(below) if below else None


def declared_pool(
    name: str,
    *,
    labels: Iterable[tuple[str, str]],
    taints: Iterable[tuple[str, str, str]],
    allocatable: Iterable[tuple[str, int]],
    max_nodes: int | None,
) -> ScalablePool:
    """A pool the policy directory declares (``GPUNodePool``): a cluster-autoscaler node group or a managed
    node pool whose node template lives in the cloud's API, so gpugate is told its nodes' labels, taints and
    GPUs. Kubelet's own labels (hostname, zone, arch, os) are on its nodes with values gpugate cannot know."""
    return ScalablePool(
        name,
        "GPUNodePool",
        MappingProxyType({_intern(k): _intern(v) for k, v in labels}),
        (),
        tuple(Taint(_intern(k), _intern(v), _intern(e)) for k, v, e in taints),
        gpus=MappingProxyType({_intern(r): n for r, n in allocatable}),
        open_keys=NODE_COMMON_LABELS,
        max_nodes=max_nodes,
    )


def nodepool_of(obj: Mapping[str, Any]) -> ScalablePool:
    """A Karpenter NodePool (karpenter.sh/v1, kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go): the labels and
    requirements of ``spec.template``, its taints (not ``startupTaints``, which Karpenter expects to be removed),
    and what its GPU labels and ``spec.limits`` say about the GPUs one node can hold."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    raw_labels = (template.get("metadata") or {}).get("labels") or {}
    name = str(meta.get("name", ""))
    labels = {_intern(k): _intern(v) for k, v in raw_labels.items()} if isinstance(raw_labels, Mapping) else {}
    labels["karpenter.sh/nodepool"] = _intern(name)
    body = template.get("spec") or {}
    requirements = tuple(
        r for r in (_requirement_of(x) for x in body.get("requirements") or [] if isinstance(x, Mapping)) if r
    )
    taints = tuple(
        Taint(_intern(t.get("key", "")), _intern(t.get("value", "")), _intern(t.get("effect", "")))
        for t in body.get("taints") or []
        if isinstance(t, Mapping)
    )
    pool = ScalablePool(
        name, "NodePool", MappingProxyType(labels), requirements, taints, open_keys=KARPENTER_WELL_KNOWN
    )
    limits = spec.get("limits") or {}
    limits = limits if isinstance(limits, Mapping) else {}
    count = _largest_count(pool, KARPENTER_GPU_COUNT)
    names_gpus = any(
        k in labels or any(r.key == k for r in requirements)
        for k in (KARPENTER_GPU_NAME, KARPENTER_GPU_COUNT, KARPENTER_GPU_MANUFACTURER)
    )
    gpu_limits = {str(r): _as_int(str(v)) for r, v in limits.items() if r in KARPENTER_GPU_RESOURCES.values()}
    gpus: dict[str, int | None] = {}
    if count is not False and (names_gpus or gpu_limits):
        makers = [
            m for m, _ in KARPENTER_GPU_RESOURCES.items() if pool.may_satisfy(KARPENTER_GPU_MANUFACTURER, "In", (m,))
        ]
        for maker in makers or list(KARPENTER_GPU_RESOURCES):
            resource = KARPENTER_GPU_RESOURCES[maker]
            bound = gpu_limits.get(resource)
            most = count if isinstance(count, int) and not isinstance(count, bool) else None
            if bound is not None:
                most = bound if most is None else min(most, bound)
            if most != 0:
                gpus[resource] = most
    return ScalablePool(
        name,
        "NodePool",
        MappingProxyType(labels),
        requirements,
        taints,
        gpus=MappingProxyType(gpus),
        gpus_unknown=not names_gpus and not gpu_limits,
        open_keys=KARPENTER_WELL_KNOWN,
    )


@dataclass(frozen=True)
class Inventory:
    """What the cluster offers right now (or offered when a snapshot was taken)."""

    nodes: tuple[Node, ...] = ()
    runtime_classes: frozenset[str] = frozenset()
    device_classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    slices: tuple[Slice, ...] = ()
    #: Claims and claim templates known up front (a snapshot, or a manifest's own objects), by
    #: (kind, namespace, name). The live server reads the ones a pod names when it names them.
    claims: Mapping[tuple[str, str, str], ClaimSpec] = field(default_factory=dict)
    #: Node pools that can add nodes: Karpenter NodePools and the pools a policy directory declares.
    pools: tuple[ScalablePool, ...] = ()
    #: Kinds gpugate may not read (``nodepools`` when its RBAC forbids them): what they would add is unknown.
    unread: frozenset[str] = frozenset()
    #: Each RuntimeClass's ``handler`` by its name (the CRI runtime handler its pods run under): what makes an
    #: alias of ``nvidia`` a GPU runtime class (``webhook.pods.runtime_classes``).
    runtime_handlers: Mapping[str, str] = field(default_factory=dict)
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(objects: Iterable[Mapping[str, Any]]) -> Inventory:
        """The inventory of a list of Kubernetes objects (kinds other than the seven it reads are ignored)."""
        nodes, runtime_classes, classes, slices, claims, pools = [], set(), {}, [], {}, []
        handlers: dict[str, str] = {}
        for obj in objects:
            kind = obj.get("kind")
            if kind == "Node":
                nodes.append(node_of(obj))
            elif kind == "NodePool" and str(obj.get("apiVersion", "")).startswith("karpenter.sh/"):
                pools.append(nodepool_of(obj))
            elif kind == "RuntimeClass":
                name = str((obj.get("metadata") or {}).get("name", ""))
                runtime_classes.add(name)
                handlers[name] = str(obj.get("handler") or "")
            elif kind == "DeviceClass":
                found = device_class_of(obj)
                classes[found.name] = found
            elif kind == "ResourceSlice":
                slices.append(slice_of(obj))
            elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
                claim = claim_of(obj)
                claims[(claim.kind, claim.namespace, claim.name)] = claim
        return Inventory(
            tuple(nodes),
            frozenset(runtime_classes),
            classes,
            tuple(slices),
            claims,
            tuple(pools),
            runtime_handlers=handlers,
        )

    def with_claims(self, objects: Iterable[Mapping[str, Any]]) -> Inventory:
        """This inventory plus the claims and claim templates among ``objects`` (a manifest's own)."""
        extra = Inventory.of(o for o in objects if o.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"))
        if not extra.claims:
            return self
        return replace(self, claims={**self.claims, **extra.claims}, _cache={})

    def with_pools(self, key: Any, pools: Callable[[], Iterable[ScalablePool]]) -> Inventory:
        """This inventory plus more pools that scale (those a policy directory declares): built once per
        inventory and ``key`` (hashable: what the pools are made from), so decisions keep sharing its memos."""
        found = self._cache.get(("with-pools", key))
        if found is None:
            extra = tuple(pools())
            found = replace(self, pools=(*self.pools, *extra), _cache={}) if extra else self
            self._cache[("with-pools", key)] = found
        return found

    def class_for_resource(self, resource: str) -> DeviceClass | None:
        """The DeviceClass that serves an extended resource: by ``extendedResourceName`` (the newest wins in
        the scheduler; here the last listed), or the implicit ``deviceclass.resource.kubernetes.io/<name>``."""
        key = ("resource", resource)
        if key not in self._cache:
            found = None
            for c in self.device_classes.values():
                if c.extended_resource_name == resource:
                    found = c
            if found is None and resource.startswith("deviceclass.resource.kubernetes.io/"):
                found = self.device_classes.get(resource.partition("/")[2])
            self._cache[key] = found
        return self._cache[key]  # type: ignore[no-any-return]

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per inventory: readers' facts about it (it is immutable once built)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def slices_on(self, node: str) -> tuple[Slice, ...]:
        key = ("slices", node)
        if key not in self._cache:
            self._cache[key] = tuple(s for s in self.slices if s.node == node or s.all_nodes)
        return self._cache[key]  # type: ignore[no-any-return]

    def devices_on(self, node: str, drivers: Iterable[str]) -> int:
        """DRA devices of these drivers published for a node (ResourceSlices; their allocation is the
        scheduler's, so this is what the node could ever offer, not what is free)."""
        wanted = set(drivers)
        return sum(s.devices for s in self.slices_on(node) if s.driver in wanted)

    def products_on(self, node: str, drivers: Iterable[str]) -> tuple[str, ...]:
        wanted = set(drivers)
        return tuple(dict.fromkeys(p for s in self.slices_on(node) if s.driver in wanted for p in s.products))
