"""What one node must hold for a pod, and what the nodes (or the pools that scale up) of a GPU model class can
hold: the facts feasibility judges with and model selection chooses a class by. Pure: an inventory in.

A pod's amount per node is the scheduler's sum (KEP-753): app containers plus restartable init containers
(sidecars), or one init container plus the sidecars, whichever is more. A node offers what its allocatable
(device plugin) or its ResourceSlices (DRA, KEP-5004) say, whatever is in use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from ..inventory.model import Inventory, Node, ScalablePool
from ..policy.classes import ModelClass
from ..policy.model import Device
from .gpus import gpu_amounts
from .objects import containers, is_sidecar
from .quantity import QuantityError, parse_quantity


def per_node_amounts(spec: Mapping[str, Any], counts_as_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPU resource -> what one node must hold for the pod (ephemeral containers hold none)."""
    apps: dict[str, Fraction] = {}
    inits: dict[str, Fraction] = {}
    for fld, _, container in containers(spec):
        if fld == "ephemeralContainers":
            continue
        for resource, amount in gpu_amounts(container, counts_as_gpu).items():
            if amount <= 0:
                continue
            if fld == "containers" or is_sidecar(container):
                apps[resource] = apps.get(resource, Fraction(0)) + amount
            else:
                inits[resource] = max(inits.get(resource, Fraction(0)), amount)
    return {r: max(apps.get(r, Fraction(0)), inits.get(r, Fraction(0))) for r in {*apps, *inits}}


_AMOUNTS: dict[str, Fraction] = {}


def _amount(raw: str) -> Fraction:
    """A node's allocatable quantity; nodes of a fleet report a handful of distinct strings, so remember them."""
    found = _AMOUNTS.get(raw)
    if found is None:
        try:
            found = parse_quantity(raw)
        except QuantityError:
            found = Fraction(0)
        if len(_AMOUNTS) < 1024:
            _AMOUNTS[raw] = found
    return found


def capacity(fleet: Inventory, node: Node, resource: str) -> Fraction:
    """What a node could ever give of a resource: its allocatable, else the devices its ResourceSlices publish
    for the DeviceClass that serves the resource (KEP-5004: a node without the resource in its allocatable
    gets it from DRA)."""
    if resource in node.allocatable:
        return _amount(node.allocatable[resource])
    served = fleet.class_for_resource(resource)
    if served is None or not served.drivers:
        return Fraction(0)
    return Fraction(fleet.devices_on(node.name, served.drivers))


def _class_selects(cls: ModelClass, device: Device, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in cls.node_selector.items()):
        return False
    return not cls.values or (device.model_label is not None and labels.get(device.model_label) in cls.values)


def _pool_selects(cls: ModelClass, device: Device, pool: ScalablePool) -> bool:
    if not pool.admits_selector(cls.node_selector):
        return False
    return not cls.values or (device.model_label is not None and pool.may_satisfy(device.model_label, "In", cls.values))


def class_largest(fleet: Inventory, cls: ModelClass, device: Device, resource: str) -> Fraction | None:
    """The most of ``resource`` one node of the class holds: its nodes now, and the nodes the pools that scale
    up could add for it. None when gpugate cannot tell (no node or pool of the class is known, or a pool's
    GPUs are unknown): a class is then never ruled out by size."""

    def compute() -> Fraction | None:
        nodes = [n for n in fleet.nodes if _class_selects(cls, device, n.labels)]
        sizes = [capacity(fleet, n, resource) for n in nodes]
        for pool in fleet.pools:
            if not _pool_selects(cls, device, pool):
                continue
            if pool.gpus_unknown or (resource in pool.gpus and pool.gpus[resource] is None):
                return None
            if resource in pool.gpus:
                sizes.append(Fraction(pool.gpus[resource] or 0))
        return max(sizes) if sizes and max(sizes) > 0 else None

    found: Fraction | None = fleet.memo(("class-largest", cls.name, device.name, resource, id(cls)), compute)
    return found


def class_bound(
    fleet: Inventory, cls: ModelClass, device: Device, resource: str, pools: list[ScalablePool]
) -> Fraction | None:
    """What a pod of the class is bounded by in every reading of the fleet: the most of ``resource`` one node of the
    class holds now or once one of ``pools`` scales up for it, 0 when none of them offers it (feasibility then
    refuses the pod whatever its tolerations). None when gpugate cannot tell: a node whose labels were cut (it may
    be the class's), a pool of the class whose GPUs are unknown."""
    if any(n.truncated for n in fleet.nodes):
        return None
    sizes = [capacity(fleet, n, resource) for n in fleet.nodes if _class_selects(cls, device, n.labels)]
    for pool in pools:
        if not _pool_selects(cls, device, pool):
            continue
        if pool.gpus_unknown or (resource in pool.gpus and pool.gpus[resource] is None):
            return None
        if resource in pool.gpus:
            sizes.append(Fraction(pool.gpus[resource] or 0))
    return max(sizes, default=Fraction(0))
