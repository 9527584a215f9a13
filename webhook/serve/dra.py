"""gpugate's DRA series on /metrics: the GPUs ResourceSlices publish, and per allocated device the pods it is
reserved for, from what ``gpugate serve`` already watches. ``gpugate report`` reads them (docs/report.md, "DRA
GPUs without telemetry"), so that a DRA GPU dcgm-exporter never reports is still billed to whoever holds it,
and counted in capacity when nobody does.

No exporter this report reads has either: kube-state-metrics has no ResourceClaim or ResourceSlice store, and its
custom-resource-state configuration resolves only kinds that have a CustomResourceDefinition
(kubernetes/kube-state-metrics internal/discovery/discovery.go; docs/metrics/extend/customresourcestate-metrics.md),
which resource.k8s.io's built-in kinds do not. dcgm-exporter names a claim only on the series of a device it
reports.

- ``gpugate_dra_gpu_device{node, driver, pool, device, uuid, parent_uuid, profile, model}`` = 1 per device of a
  GPU driver (a driver a device profile of the policies in force names, ``dra_drivers``, or a built-in vendor's)
  in the ResourceSlices of the fleet watch (``webhook.kube.inventory``), as its kubelet plugin publishes it
  (NVIDIA's: kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go, ``uuid``,
  ``productName``, a MIG device's ``parentUUID`` and ``profile``).
- ``gpugate_dra_gpu_allocated{claim_namespace, claim_name, claim_pod, request, share_id, driver, pool, device, ...}``
  per device of an allocated ResourceClaim (``status.allocation.devices.results``: request, driver, pool, device;
  resource.k8s.io/v1 DeviceRequestAllocationResult) and pod it is reserved for (``status.reservedFor`` entries of
  resource ``pods``; the pods are in the claim's namespace), with the device's labels above where a GPU slice
  publishes it, from the claims cache's ``allocations()``. A claim reserved for nobody yet has
  ``claim_pod=""``. Only devices of GPU drivers, and no admin-access allocation (it holds nothing). Its value is
  the claim's share of the device (:func:`shares`): 1 for a device allocated to one claim, and for a device
  several claims hold at once (KEP-5075 consumable capacity: the device's ``allowMultipleAllocations``, each
  result's ``shareID`` and ``consumedCapacity``) the largest part of any of the device's capacities the result
  consumed; the results that consumed none split what the others left evenly. ``share_id`` is the result's
  ``shareID`` ("" when the device is not shared): one series per allocation result and pod, as before, so the
  series count is still bounded by the claims' results x their pods; the share is the value, not a label.

The labels never say ``namespace`` or ``pod``: Prometheus puts the scrape target's own there (gpugate's pod), and
the report maps ``claim_namespace`` and ``claim_pod`` itself. Every worker watches the same cluster, so the worker
that answers a scrape renders these from its own watch (like kube-state-metrics, a state exporter: not
per-process values summed over workers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..inventory.model import Inventory
from ..pods.quantity import QuantityError, parse_quantity
from ..policy.model import PolicySet
from ..policy.vendors import BUILTIN_DRA

DEVICE = "gpugate_dra_gpu_device"
ALLOCATED = "gpugate_dra_gpu_allocated"
DEVICE_LABELS = ("node", "driver", "pool", "device", "uuid", "parent_uuid", "profile", "model")
ALLOCATED_LABELS = ("claim_namespace", "claim_name", "claim_pod", "request", "share_id", *DEVICE_LABELS)
#: (driver, pool, device)
DeviceName = tuple[str, str, str]


class Allocation(Protocol):
    """One device allocated to a ResourceClaim and the pods the claim is reserved for, as the claims cache's
    ``allocations()`` lists them (``webhook.kube.claims``: one per device of every allocated claim)."""

    @property
    def namespace(self) -> str: ...
    @property
    def claim(self) -> str: ...
    @property
    def request(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def admin_access(self) -> bool: ...
    @property
    def pods(self) -> tuple[str, ...]: ...
    @property
    def share_id(self) -> str: ...
    @property
    def consumed(self) -> tuple[tuple[str, str], ...]: ...


def gpu_drivers(policies: PolicySet) -> frozenset[str]:
    """The DRA drivers whose devices are GPUs: every device profile's ``dra_drivers``, and the built-in vendors'."""
    found = {driver for drivers, _classes in BUILTIN_DRA.values() for driver in drivers}
    for policy in policies.policies:
        for device in policy.devices.values():
            found.update(device.dra_drivers)
    return frozenset(found)


def device_series(inventory: Inventory, drivers: frozenset[str]) -> dict[tuple[str, str, str], dict[str, str]]:
    """(driver, pool, device) -> the labels of its ``gpugate_dra_gpu_device`` series, for every GPU-like device of
    a GPU driver's ResourceSlices. A slice not local to one node (``allNodes``, a node selector) has node ``""``."""
    out: dict[tuple[str, str, str], dict[str, str]] = {}
    for one in inventory.slices:
        if one.driver not in drivers:
            continue
        for device in one.gpus:
            out[one.driver, one.pool, device.name] = {
                "node": one.node or "",
                "driver": one.driver,
                "pool": one.pool,
                "device": device.name,
                "uuid": device.uuid,
                "parent_uuid": device.parent_uuid,
                "profile": device.profile,
                "model": device.product,
            }
    return out


def device_capacities(inventory: Inventory, drivers: frozenset[str]) -> dict[DeviceName, dict[str, float]]:
    """(driver, pool, device) -> capacity name -> value, for the GPU devices a ResourceSlice publishes as shared
    (``allowMultipleAllocations``): what the consumed capacity of each claim on them is a part of."""
    out: dict[DeviceName, dict[str, float]] = {}
    for one in inventory.slices:
        if one.driver not in drivers:
            continue
        for device in one.gpus:
            if device.shared:
                out[one.driver, one.pool, device.name] = _amounts(device.capacity)
    return out


def _amounts(pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    out = {}
    for name, text in pairs:
        try:
            out[name] = float(parse_quantity(text))
        except QuantityError:
            continue  # not a quantity: that capacity says nothing
    return out


def shares(allocations: Sequence[Allocation], capacities: dict[DeviceName, dict[str, float]]) -> list[float]:
    """Each allocation's share of its device, in order.

    A result without ``shareID`` or ``consumedCapacity`` has the device to itself: 1. On a device several claims
    hold (KEP-5075; resource.k8s.io/v1 ``DeviceRequestAllocationResult.ConsumedCapacity``: "The total consumed
    capacity for each device must not exceed the DeviceCapacity's Value"), a result's share is the largest part
    of any capacity of the device it consumed: the device is full when any one capacity is, so the scheduler
    admits no further claim past that (NVIDIA's kubelet plugin shares by ``memory``, and by ``shares`` with
    ``--consumable-shares=N``: kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/consumable_shares.go).
    Results that consumed nothing measurable (``--consumable-shares=unlimited``: memory's default is 0), or whose
    device's capacity is unknown, split what the sized ones left evenly: the GPU is time-sliced between them."""
    sized: list[float | None] = []
    by_device: dict[DeviceName, list[int]] = defaultdict(list)
    for n, allocated in enumerate(allocations):
        key = (allocated.driver, allocated.pool, allocated.device)
        if not allocated.share_id and not allocated.consumed:
            sized.append(1.0)
            continue
        by_device[key].append(n)
        capacity = capacities.get(key, {})
        parts = [
            amount / capacity[name]
            for name, amount in _amounts(allocated.consumed).items()
            if capacity.get(name, 0.0) > 0 and amount > 0
        ]
        sized.append(min(1.0, max(parts)) if parts else None)
    out = [share if share is not None else 0.0 for share in sized]
    for numbers in by_device.values():
        unsized = [n for n in numbers if sized[n] is None]
        if unsized:
            rest = max(0.0, 1.0 - sum(out[n] for n in numbers))
            for n in unsized:
                out[n] = rest / len(unsized)
    return out


def allocation_series(
    allocations: Iterable[Allocation],
    devices: dict[tuple[str, str, str], dict[str, str]],
    drivers: frozenset[str],
    capacities: dict[DeviceName, dict[str, float]] | None = None,
) -> list[tuple[dict[str, str], float]]:
    """The labels and value of every ``gpugate_dra_gpu_allocated`` series: per GPU device of each allocated claim
    and pod it is reserved for (one series with ``claim_pod=""`` while it is reserved for nobody), valued the
    claim's share of the device (:func:`shares`). An admin-access allocation (a monitoring agent's view of a
    device others hold, KEP-5018) holds nothing and is left out."""
    held = [a for a in allocations if a.driver in drivers and not a.admin_access]  # no CPU, NIC or memory device
    out = []
    for allocated, share in zip(held, shares(held, capacities or {}), strict=True):
        published = devices.get((allocated.driver, allocated.pool, allocated.device)) or {
            "node": "",
            "driver": allocated.driver,
            "pool": allocated.pool,
            "device": allocated.device,
            "uuid": "",
            "parent_uuid": "",
            "profile": "",
            "model": "",
        }
        for pod in allocated.pods or ("",):
            labels = {
                "claim_namespace": allocated.namespace,
                "claim_name": allocated.claim,
                "claim_pod": pod,
                "request": allocated.request,
                "share_id": allocated.share_id,
                **published,
            }
            out.append((labels, share))
    return out


class DraSeries(Collector):
    """The two families, rendered at each scrape from the fleet watcher's ResourceSlices and the claims cache.

    ``fleet``: what ``webhook.kube.inventory.FleetWatcher`` offers (``inventory()``, None until synced: then no
    series, rather than a partial fleet). ``claims``: the allocated devices now (None, or a callable that
    returns None: no claims cache, or one not listed yet, and no allocation family). ``policies``: the policy
    set in force, for the GPU drivers.
    """

    def __init__(
        self,
        fleet: Any,
        *,
        policies: Callable[[], PolicySet],
        claims: Callable[[], Iterable[Allocation] | None] | None = None,
    ) -> None:
        self.fleet = fleet
        self.policies = policies
        self.claims = claims

    def collect(self) -> Iterator[GaugeMetricFamily]:
        inventory = self.fleet.inventory() if self.fleet is not None else None
        if inventory is None:
            return
        drivers = gpu_drivers(self.policies())
        devices = device_series(inventory, drivers)
        published = GaugeMetricFamily(
            DEVICE,
            "1 per GPU device a ResourceSlice publishes (a device of a GPU driver), by node, driver, pool, device "
            "and the uuid, parent_uuid, profile and model its attributes state.",
            labels=DEVICE_LABELS,
        )
        for key in sorted(devices):
            labels = devices[key]
            published.add_metric([labels[k] for k in DEVICE_LABELS], 1.0)
        yield published
        current = self.claims() if self.claims is not None else None
        if current is None:
            return
        allocated = GaugeMetricFamily(
            ALLOCATED,
            "The claim's share of a GPU device of an allocated ResourceClaim (1 unless several claims share the "
            "device: KEP-5075 consumable capacity), per pod the claim is reserved for (claim_pod; empty while "
            "reserved for nobody), with the result's share_id and the device's labels of gpugate_dra_gpu_device.",
            labels=ALLOCATED_LABELS,
        )
        seen: set[tuple[str, ...]] = set()
        capacities = device_capacities(inventory, drivers)
        for labels, share in allocation_series(list(current), devices, drivers, capacities):
            values = tuple(labels[k] for k in ALLOCATED_LABELS)
            if values not in seen:  # a claim listing one device twice for one request is still one device
                seen.add(values)
                allocated.add_metric(list(values), share)
        yield allocated
