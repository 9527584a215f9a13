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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..inventory.model import ClaimSpec, Inventory
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


@dataclass
class ClaimUse:
    """What a pod's ``spec.resourceClaims`` hold, by entry (its field path)."""

    #: path -> (vendor profile, DeviceClass) of entries with a non-admin GPU request.
    gpus: dict[str, tuple[Device, str]] = field(default_factory=dict)
    #: Entries whose only GPU requests are admin access (monitoring).
    observers: list[str] = field(default_factory=list)
    #: Entries that could not be resolved (counted as GPU holders when the policy says claims are).
    unknown: list[str] = field(default_factory=list)
    #: Entries that hold no GPU at all (CPU, NIC and other drivers).
    others: list[str] = field(default_factory=list)
    #: (path, DeviceClass) of requests naming a class a synced inventory does not have.
    missing: list[tuple[str, str]] = field(default_factory=list)
    #: path -> (DeviceClass, devices per request; None for All) of the GPU requests, for feasibility.
    wants: dict[str, tuple[str, int | None]] = field(default_factory=dict)


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
            continue
        verdict, device, device_class = _classify(claim, policy, inventory)
        if inventory is not None:
            use.missing += [
                (path, c) for r in claim.requests for c in r.device_classes if c not in inventory.device_classes
            ]
        if verdict == "gpu" and device is not None:
            use.gpus[path] = (device, device_class)
            count = next((r.count for r in claim.requests if device_class in r.device_classes), 1)
            use.wants[path] = (device_class, count)
        elif verdict == "observer":
            use.observers.append(path)
        elif verdict == "other":
            use.others.append(path)
        else:
            use.unknown.append(path)
    return use
