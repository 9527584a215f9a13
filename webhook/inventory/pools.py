"""The fleet by pool, and where the policies and the fleet disagree (drift). Pure: an inventory and policies in.

A pool is the nodes that offer the same GPUs the same way: one vendor, one product (the vendor's model label
value, or the product a DRA driver publishes), one stack (device plugin or DRA) and the same GPU resources.
``gpugate fleet`` prints them; ``gpugate policy init --from-cluster`` writes a class per pool; ``/readyz``,
a metric and ``gpugate fleet`` report drift: classes no node carries, GPU nodes no class covers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..policy.model import Device, Policy, PolicySet
from .model import Inventory, Node

#: Node labels NVIDIA's GPU Feature Discovery writes about sharing and MIG (NVIDIA/k8s-device-plugin
#: internal/lm): how a pool shares its GPUs and its MIG strategy.
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_REPLICAS = "nvidia.com/gpu.replicas"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
GFD_SHARING = "nvidia.com/gpu.sharing-strategy"


@dataclass
class Pool:
    vendor: str
    product: str
    stack: str  # "device-plugin" or "dra"
    resources: tuple[str, ...]
    nodes: list[str] = field(default_factory=list)
    #: resource -> per-node allocatable (DRA: devices published), as the nodes state it
    allocatable: dict[str, str] = field(default_factory=dict)
    memory: str = ""
    sharing: str = "exclusive"
    mig: str = ""
    drivers: tuple[str, ...] = ()
    #: The product is the vendor's model label value (not a fallback such as the instance type).
    labelled: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "product": self.product,
            "memory": self.memory,
            "sharing": self.sharing,
            "migStrategy": self.mig,
            "stack": self.stack,
            "nodes": len(self.nodes),
            "allocatable": self.allocatable,
            "drivers": list(self.drivers),
        }


def _vendor_of_node(node: Node, policy: Policy) -> tuple[Device, list[str]] | None:
    for device in policy.devices.values():
        owned = sorted(r for r in node.allocatable if device.counts(r) and node.allocatable[r] not in ("0", 0))
        if owned:
            return device, owned
    return None


def _dra_vendor(drivers: Iterable[str], policy: Policy) -> Device | None:
    for device in policy.devices.values():
        if any(d in device.dra_drivers for d in drivers):
            return device
    return None


def pools(fleet: Inventory, policy: Policy) -> list[Pool]:
    """The GPU pools of a fleet under a policy's device profiles (nodes without GPUs are no pool)."""
    found: dict[tuple[str, str, str, tuple[str, ...]], Pool] = {}
    for node in fleet.nodes:
        plugin = _vendor_of_node(node, policy)
        if plugin is not None:
            device, resources = plugin
            labelled = bool(node.labels.get(device.model_label or ""))
            product = node.labels.get(device.model_label or "", "") or node.labels.get(
                "node.kubernetes.io/instance-type", "unknown"
            )
            key = (device.name, product, "device-plugin", tuple(resources))
            pool = found.setdefault(
                key, Pool(device.name, product, "device-plugin", tuple(resources), labelled=labelled)
            )
            pool.nodes.append(node.name)
            pool.allocatable = {r: node.allocatable[r] for r in resources}
            pool.memory = node.labels.get(GFD_MEMORY, pool.memory)
            replicas = node.labels.get(GFD_REPLICAS, "1")
            if replicas not in ("", "1") or any(r.endswith(".shared") for r in resources):
                pool.sharing = f"time-sliced × {replicas}" if replicas not in ("", "1") else "shared"
            pool.mig = node.labels.get(GFD_MIG_STRATEGY, "") if node.labels.get(GFD_MIG_STRATEGY) != "none" else ""
            continue
        drivers = tuple(dict.fromkeys(s.driver for s in fleet.slices_on(node.name)))
        dra_device = _dra_vendor(drivers, policy)
        if dra_device is None:
            continue
        gpu_drivers = tuple(d for d in drivers if d in dra_device.dra_drivers)
        products = fleet.products_on(node.name, gpu_drivers)
        product = products[0] if products else node.labels.get("node.kubernetes.io/instance-type", "unknown")
        classes = tuple(sorted(c.name for c in fleet.device_classes.values() if set(c.drivers) & set(gpu_drivers)))
        key = (dra_device.name, product, "dra", classes)
        pool = found.setdefault(key, Pool(dra_device.name, product, "dra", classes, drivers=gpu_drivers))
        pool.nodes.append(node.name)
        pool.allocatable = {"devices": str(fleet.devices_on(node.name, gpu_drivers))}
        memories = [s.memory for s in fleet.slices_on(node.name) if s.driver in gpu_drivers and s.memory]
        pool.memory = memories[0] if memories else pool.memory
    return list(found.values())


def drift(fleet: Inventory, policies: PolicySet) -> list[str]:
    """Where the policies and the fleet disagree: classes whose nodes the fleet lacks, GPU nodes no class
    of the policy that governs the most namespaces covers (the lowest-priority one, usually the default)."""
    if not policies.policies:
        return []
    findings: list[str] = []
    fallback = policies.policies[-1]
    for policy in policies.policies:
        if policy.models is None:
            continue
        for model in policy.models.classes.values():
            device = policy.devices.get(model.device)
            label = device.model_label if device is not None else None
            if model.values and label:
                carried = {n.labels.get(label) for n in fleet.nodes}
                missing = [v for v in model.values if v not in carried]
                if len(missing) == len(model.values):
                    findings.append(
                        f'policy "{policy.name}" class "{model.name}": no node carries {label}={"|".join(model.values)}'
                    )
            for name in model.device_classes:
                if not re.search(r"[*?\[]", name) and name not in fleet.device_classes:
                    findings.append(f'policy "{policy.name}" class "{model.name}": DeviceClass "{name}" does not exist')
    if fallback.models is not None:
        for pool in pools(fleet, fallback):
            if not _covered(pool, fallback, fleet):
                findings.append(
                    f"{len(pool.nodes)} {pool.vendor} node(s) with {pool.product} ({pool.stack}) are in no class of "
                    f'policy "{fallback.name}"'
                )
    return findings


def _covered(pool: Pool, policy: Policy, fleet: Inventory) -> bool:
    models = policy.models
    if models is None:
        return True
    device = policy.devices.get(pool.vendor)
    label = device.model_label if device is not None else None
    for model in models.classes.values():
        if model.device != pool.vendor:
            continue
        if pool.stack == "dra":
            if set(model.device_classes) & set(pool.resources):
                return True
            continue
        if label and any(fleet_node_value == pool.product for fleet_node_value in model.values):
            return True
    return False


def class_documents(pool_list: list[Pool], policy: Policy) -> dict[str, Any]:
    """``spec.devices`` and ``spec.models`` of a policy describing these pools (``policy init``)."""
    classes: dict[str, Any] = {}
    for pool in pool_list:
        name = _class_name(pool.product, classes)
        if pool.stack == "dra":
            classes[name] = {"resources": _dra_resources(pool, policy), "deviceClasses": list(pool.resources)}
        else:
            classes[name] = {"values": [pool.product], "resources": list(pool.resources)}
            if len({p.vendor for p in pool_list}) > 1 or _owners(pool, policy) != 1:
                classes[name]["device"] = pool.vendor
    return {"classes": classes}


def _owners(pool: Pool, policy: Policy) -> int:
    return sum(1 for d in policy.devices.values() if all(d.counts(r) for r in pool.resources))


def _dra_resources(pool: Pool, policy: Policy) -> list[str]:
    device = policy.devices.get(pool.vendor)
    return [device.resources[0]] if device is not None and device.resources else []


def _class_name(product: str, taken: Mapping[str, Any]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")[:50] or "gpu"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name
