"""The GPU inventory: what a cluster's Nodes, RuntimeClasses, DeviceClasses and ResourceSlices offer, reduced
to the few fields a decision needs. Pure: objects (plain dicts) in, frozen records out; no I/O.

The same reducers serve the live watch in ``gpugate serve`` (``webhook.kube.inventory``), a snapshot file
(``gpugate fleet snapshot``, ``gpugate check --fleet``) and the tests, so all three see one picture. Memory is
bounded: a node keeps its labels (interned: nodes of a pool share them), its taints and only the extended
resources of its allocatable; a ResourceSlice keeps its driver, node, pool, device count, product names and
memory capacity, never the devices themselves. Quantities stay as the objects state them: the readers
(feasibility, ``gpugate fleet``) parse them, so this module imports nothing of gpugate's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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


def _attribute(value: Any) -> str | None:
    """A DRA device attribute is a one-key object: {string: ...}, {version: ...}, {int: ...}, {bool: ...}."""
    if isinstance(value, Mapping):
        for kind in ("string", "version"):
            if isinstance(value.get(kind), str):
                return str(value[kind])
    return None


def slice_of(obj: Mapping[str, Any]) -> Slice:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    devices = [d for d in spec.get("devices") or [] if isinstance(d, Mapping)]
    products: list[str] = []
    memory: str | None = None
    for device in devices:
        basic = device.get("basic")
        body: Mapping[str, Any] = basic if isinstance(basic, Mapping) else device  # v1beta1 wraps in basic
        attributes = body.get("attributes") or {}
        for name in PRODUCT_ATTRIBUTES:
            product = _attribute(attributes.get(name)) if isinstance(attributes, Mapping) else None
            if product and product not in products and len(products) < PRODUCT_LIMIT:
                products.append(_intern(product))
                break
        capacity = body.get("capacity") or {}
        raw = (capacity.get("memory") or {}).get("value") if isinstance(capacity, Mapping) else None
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
    )


@dataclass(frozen=True)
class ClaimRequest:
    """One request of a ResourceClaim(Template): the DeviceClasses it may be served from, how many devices
    (None: ``allocationMode: All``), and whether it is an admin-access (monitoring) request."""

    device_classes: tuple[str, ...]
    count: int | None = 1
    admin_access: bool = False


@dataclass(frozen=True)
class ClaimSpec:
    kind: str  # ResourceClaim or ResourceClaimTemplate
    namespace: str
    name: str
    requests: tuple[ClaimRequest, ...]


def _request_of(raw: Mapping[str, Any]) -> ClaimRequest | None:
    """resource.k8s.io/v1 ``exactly`` / ``firstAvailable``; v1beta1 kept the fields on the request itself."""
    exactly = raw.get("exactly") if isinstance(raw.get("exactly"), Mapping) else None
    alternatives = [a for a in raw.get("firstAvailable") or [] if isinstance(a, Mapping)]
    options = [exactly] if exactly is not None else alternatives or [raw]
    classes = tuple(str(o["deviceClassName"]) for o in options if o.get("deviceClassName"))
    if not classes:
        return None
    counts: list[int | None] = []
    for option in options:
        mode = option.get("allocationMode") or "ExactCount"
        count = option.get("count", 1)
        counts.append(None if mode == "All" else count if isinstance(count, int) and count > 0 else 1)
    worst = None if None in counts else max(c for c in counts if c is not None)
    return ClaimRequest(classes, worst, any(o.get("adminAccess") is True for o in options))


def claim_of(obj: Mapping[str, Any]) -> ClaimSpec:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "ResourceClaim")
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    devices = spec.get("devices") or {} if isinstance(spec, Mapping) else {}
    requests = [_request_of(r) for r in devices.get("requests") or [] if isinstance(r, Mapping)]
    return ClaimSpec(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        requests=tuple(r for r in requests if r is not None),
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
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(objects: Iterable[Mapping[str, Any]]) -> Inventory:
        """The inventory of a list of Kubernetes objects (kinds other than the six it reads are ignored)."""
        nodes, runtime_classes, classes, slices, claims = [], set(), {}, [], {}
        for obj in objects:
            kind = obj.get("kind")
            if kind == "Node":
                nodes.append(node_of(obj))
            elif kind == "RuntimeClass":
                runtime_classes.add(str((obj.get("metadata") or {}).get("name", "")))
            elif kind == "DeviceClass":
                found = device_class_of(obj)
                classes[found.name] = found
            elif kind == "ResourceSlice":
                slices.append(slice_of(obj))
            elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
                claim = claim_of(obj)
                claims[(claim.kind, claim.namespace, claim.name)] = claim
        return Inventory(tuple(nodes), frozenset(runtime_classes), classes, tuple(slices), claims)

    def with_claims(self, objects: Iterable[Mapping[str, Any]]) -> Inventory:
        """This inventory plus the claims and claim templates among ``objects`` (a manifest's own)."""
        extra = Inventory.of(o for o in objects if o.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"))
        if not extra.claims:
            return self
        return Inventory(
            self.nodes, self.runtime_classes, self.device_classes, self.slices, {**self.claims, **extra.claims}
        )

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
