"""Which DRA requests of a pod are GPUs: DRA-backed extended resources and resource claims, resolved to their
DeviceClass, its driver and the vendor whose device profile names that driver. Pure; no I/O.

A ResourceClaim is not a GPU by itself: DRA also serves CPUs (kubernetes-sigs/dra-driver-cpu, DeviceClass
``dra.cpu``) and NICs, and the GPU stacks' own monitoring (DCGM, dcgm-exporter) holds ``adminAccess`` claims on
every GPU (NVIDIA/gpu-operator manifests/state-dcgm-exporter; KEP-5018). So a claim makes a GPU pod only when
one of its non-admin requests can be served from a GPU DeviceClass; admin-access requests make an observer,
which may tolerate GPU taints but holds no GPU. What cannot be resolved (no inventory, a claim not found) falls
back to the policy's ``gpuHolders.resourceClaims``: gpugate never refuses on missing data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..inventory.model import ClaimRequest, ClaimSpec, Inventory
from ..policy.model import Device, Policy
from ..policy.vendors import IMPLICIT_DRA_PREFIX

#: (kind, namespace, name) -> the claim or claim template, or None when it cannot be known right now.
ClaimLookup = Callable[[str, str, str], ClaimSpec | None]


@dataclass(frozen=True)
class ClassVendor:
    """Whose GPUs a DeviceClass serves: ``device`` None and ``known`` True is a class that serves no GPU."""

    device: Device | None
    known: bool


def vendor_of_class(name: str, policy: Policy, inventory: Inventory | None) -> ClassVendor:
    """The device profile whose GPUs a DeviceClass serves: from its driver when the inventory knows the class,
    else from the profiles' known class names; unknown when neither can tell."""
    if inventory is not None and name in inventory.device_classes:
        drivers = inventory.device_classes[name].drivers
        for device in policy.devices.values():
            if any(d in device.dra_drivers for d in drivers):
                return ClassVendor(device, True)
        if drivers:
            return ClassVendor(None, True)
    for device in policy.devices.values():
        if device.gpu_class(name):
            return ClassVendor(device, True)
    return ClassVendor(None, False)  # a class the inventory lacks (or no inventory): unknown, never a refusal


def dra_resource_vendor(resource: str, policy: Policy, inventory: Inventory | None) -> Device | None:
    """The vendor of a DRA-backed extended resource a policy's profiles do not list themselves: the implicit
    ``deviceclass.resource.kubernetes.io/<class>`` name, or a GPU DeviceClass's ``extendedResourceName``."""
    if inventory is not None:
        found = inventory.class_for_resource(resource)
        if found is not None:
            return vendor_of_class(found.name, policy, inventory).device
    if resource.startswith(IMPLICIT_DRA_PREFIX):
        return vendor_of_class(resource[len(IMPLICIT_DRA_PREFIX) :], policy, inventory).device
    return None


@dataclass(frozen=True)
class RequestGPUs:
    """The GPUs one request of a claim takes: its name and, per alternative that a GPU DeviceClass serves,
    (DeviceClass, devices; None for ``allocationMode: All``). Admin-access alternatives hold no GPU and are left
    out; a ``firstAvailable`` request takes the most of its alternatives (the scheduler may pick any)."""

    request: str
    options: tuple[tuple[str, int | None], ...]


@dataclass(frozen=True)
class ClaimGPUs:
    """The GPU requests of one resolved claim, and how messages name it (``ResourceClaimTemplate "eight"``)."""

    label: str
    requests: tuple[RequestGPUs, ...]


def _alternatives(request: ClaimRequest) -> tuple[tuple[str, int | None, bool], ...]:
    """(DeviceClass, devices, admin access) of each alternative; a ClaimRequest built by hand may list only
    its classes, which then share its count."""
    if request.options:
        return tuple((o.device_class, o.count, o.admin_access) for o in request.options)
    return tuple((c, request.count, request.admin_access) for c in request.device_classes)


def _class_count(claim: ClaimSpec, device_class: str) -> int | None:
    """Devices the first request naming ``device_class`` asks of it (None: All), counting only that class's
    alternatives (a ``firstAvailable`` list may also name a CPU class with another count)."""
    for request in claim.requests:
        counts = [count for name, count, _ in _alternatives(request) if name == device_class]
        if counts:
            return None if None in counts else max(c for c in counts if c is not None)
    return 1


def gpu_requests(claim: ClaimSpec, policy: Policy, inventory: Inventory | None) -> ClaimGPUs:
    """The requests of ``claim`` that take GPUs (a GPU DeviceClass, not admin access), with their counts."""
    requests = []
    for request in claim.requests:
        options = tuple(
            (name, count)
            for name, count, admin in _alternatives(request)
            if not admin and vendor_of_class(name, policy, inventory).device is not None
        )
        if options:
            requests.append(RequestGPUs(request.name, options))
    return ClaimGPUs(f'{claim.kind} "{claim.name}"', tuple(requests))


def class_largest_node(inventory: Inventory | None, device_class: str, policy: Policy) -> int | None:
    """The most devices of a DeviceClass one node offers: the node publishing most devices of the class's
    drivers (ResourceSlices; slices not local to one node added to it), or a node a pool that scales could add
    (its GPUs of the class's extended resource, or of a resource the class's vendor profile counts). None when
    gpugate cannot know it: no inventory, a class it lacks or that names no driver, no node publishing any, or a
    pool that may add a node with any number."""
    if inventory is None:
        return None
    found = inventory.device_classes.get(device_class)
    if found is None or not found.drivers:
        return None
    vendor = vendor_of_class(device_class, policy, inventory).device
    counts: Callable[[str], bool] = vendor.counts if vendor is not None else (lambda _resource: False)

    drivers = found.drivers

    def published() -> int:
        # Per node, the devices its slices of these drivers publish; a slice not local to one node (allNodes,
        # or a nodeSelector: network-attached devices) may serve any node, so it adds to the largest.
        per_node: Counter[str] = Counter()
        anywhere = 0
        for piece in inventory.slices:
            if piece.driver in drivers:
                if piece.node and not piece.all_nodes:
                    per_node[piece.node] += piece.devices
                else:
                    anywhere += piece.devices
        return max(per_node.values(), default=0) + anywhere

    most: int = inventory.memo(("class-largest-node", device_class), published)
    served = {found.extended_resource_name, f"{IMPLICIT_DRA_PREFIX}{found.name}"} - {None}
    for pool in inventory.pools:
        for resource, amount in pool.gpus.items():
            if resource in served or counts(resource):
                if amount is None:
                    return None
                most = max(most, amount)
    return most or None


@dataclass(frozen=True)
class Counted:
    """The GPUs a request takes at worst: ``devices`` (None: unknowable) and how that was worked out."""

    devices: int | None
    how: str


def request_devices(request: RequestGPUs, inventory: Inventory | None, policy: Policy) -> Counted:
    """A request at its worst case: ``exactly.count``; ``allocationMode: All`` as the largest node of its
    DeviceClass; a ``firstAvailable`` list as the most of its alternatives."""
    worst: int | None = 0
    parts = []
    for device_class, count in request.options:
        if count is not None:
            parts.append(f'{count} of DeviceClass "{device_class}"')
            worst = None if worst is None else max(worst, count)
            continue
        largest = class_largest_node(inventory, device_class, policy)
        if largest is None:
            parts.append(f'all of DeviceClass "{device_class}" (how many one node has is unknown)')
            worst = None
        else:
            parts.append(f'all of DeviceClass "{device_class}" ({largest} on its largest node)')
            worst = None if worst is None else max(worst, largest)
    how = parts[0] if len(parts) == 1 else "the most of firstAvailable: " + ", ".join(parts)
    return Counted(worst, how)


@dataclass
class ClaimUse:
    """What a pod's ``spec.resourceClaims`` hold, by entry (its field path)."""

    #: path -> (vendor profile, DeviceClass) of entries with a non-admin GPU request.
    gpus: dict[str, tuple[Device, str]] = field(default_factory=dict)
    #: Entries whose only GPU requests are admin access (monitoring).
    observers: list[str] = field(default_factory=list)
    #: Entries that could not be resolved (counted as GPU holders when the policy says claims are).
    unknown: list[str] = field(default_factory=list)
    #: Names of the ResourceClaims (``resourceClaimName``) that could not be read at all: not created yet, or not
    #: read within the request's budget (``gpugate.io/claims-pending`` names them).
    absent: list[str] = field(default_factory=list)
    #: Entries that hold no GPU at all (CPU, NIC and other drivers).
    others: list[str] = field(default_factory=list)
    #: (path, DeviceClass) of requests naming a class a synced inventory does not have.
    missing: list[tuple[str, str]] = field(default_factory=list)
    #: path -> (DeviceClass, devices per request; None for All) of the GPU requests, for feasibility.
    wants: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    #: path -> the GPU requests of each GPU claim with their counts, for the limits.
    gpu_claims: dict[str, ClaimGPUs] = field(default_factory=dict)


def _classify(claim: ClaimSpec, policy: Policy, inventory: Inventory | None) -> tuple[str, Device | None, str]:
    """("gpu" | "observer" | "other" | "unknown", vendor, DeviceClass) of one claim."""
    unknown = False
    observed: tuple[Device, str] | None = None
    for request in claim.requests:
        for name in request.device_classes:
            vendor = vendor_of_class(name, policy, inventory)
            if vendor.device is None:
                unknown = unknown or not vendor.known
                continue
            if not request.admin_access:
                return "gpu", vendor.device, name
            observed = observed or (vendor.device, name)
    if unknown:
        return "unknown", None, ""
    if observed is not None:
        return "observer", observed[0], observed[1]
    return "other", None, ""


def claims_of(
    spec: Mapping[str, Any],
    *,
    namespace: str,
    policy: Policy,
    inventory: Inventory | None,
    lookup: ClaimLookup | None,
) -> ClaimUse:
    use = ClaimUse()
    entries = spec.get("resourceClaims")
    if not isinstance(entries, list):
        return use
    for index, entry in enumerate(entries):
        path = f"spec.resourceClaims[{index}]"
        if not isinstance(entry, Mapping):
            continue
        if entry.get("resourceClaimTemplateName"):
            key = ("ResourceClaimTemplate", namespace, str(entry["resourceClaimTemplateName"]))
        elif entry.get("resourceClaimName"):
            key = ("ResourceClaim", namespace, str(entry["resourceClaimName"]))
        else:
            use.unknown.append(path)
            continue
        claim = (inventory.claims.get(key) if inventory is not None else None) or (lookup(*key) if lookup else None)
        if claim is None:
            use.unknown.append(path)
            if key[0] == "ResourceClaim" and key[2] not in use.absent:
                use.absent.append(key[2])
            continue
        verdict, device, device_class = _classify(claim, policy, inventory)
        if inventory is not None:
            use.missing += [
                (path, c) for r in claim.requests for c in r.device_classes if c not in inventory.device_classes
            ]
        if verdict == "gpu" and device is not None:
            use.gpus[path] = (device, device_class)
            count = _class_count(claim, device_class)
            use.wants[path] = (device_class, count)
            use.gpu_claims[path] = gpu_requests(claim, policy, inventory)
        elif verdict == "observer":
            use.observers.append(path)
        elif verdict == "other":
            use.others.append(path)
        else:
            use.unknown.append(path)
    return use
