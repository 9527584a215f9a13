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
- ``gpugate_dra_gpu_allocated{claim_namespace, claim_name, claim_pod, request, driver, pool, device, ...}`` = 1 per
  device of an allocated ResourceClaim (``status.allocation.devices.results``: request, driver, pool, device;
  resource.k8s.io/v1 DeviceRequestAllocationResult) and pod it is reserved for (``status.reservedFor`` entries of
  resource ``pods``; the pods are in the claim's namespace), with the device's labels above where a GPU slice
  publishes it. A claim reserved for nobody yet has ``claim_pod=""``. Only devices of GPU drivers.

The labels never say ``namespace`` or ``pod``: Prometheus puts the scrape target's own there (gpugate's pod), and
the report maps ``claim_namespace`` and ``claim_pod`` itself. Every worker watches the same cluster, so the worker
that answers a scrape renders these from its own watch (like kube-state-metrics, a state exporter: not
per-process values summed over workers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..inventory.model import Inventory
from ..policy.model import PolicySet
from ..policy.vendors import BUILTIN_DRA

DEVICE = "gpugate_dra_gpu_device"
ALLOCATED = "gpugate_dra_gpu_allocated"
DEVICE_LABELS = ("node", "driver", "pool", "device", "uuid", "parent_uuid", "profile", "model")
ALLOCATED_LABELS = ("claim_namespace", "claim_name", "claim_pod", "request", *DEVICE_LABELS)


@dataclass(frozen=True)
class AllocatedDevice:
    """One device of an allocated claim, as its ``status.allocation.devices.results`` entry names it."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class AllocatedClaim:
    """An allocated ResourceClaim: its devices and the pods ``status.reservedFor`` names (in its namespace)."""

    namespace: str
    name: str
    devices: tuple[AllocatedDevice, ...]
    pods: tuple[str, ...]


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


def allocation_series(
    claims: Iterable[AllocatedClaim],
    devices: dict[tuple[str, str, str], dict[str, str]],
    drivers: frozenset[str],
) -> list[dict[str, str]]:
    """The labels of every ``gpugate_dra_gpu_allocated`` series: per GPU device of each allocated claim and pod it
    is reserved for (one series with ``claim_pod=""`` while it is reserved for nobody)."""
    out = []
    for claim in claims:
        for allocated in claim.devices:
            if allocated.driver not in drivers:
                continue  # a CPU, NIC or memory claim: no GPU
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
            for pod in claim.pods or ("",):
                out.append(
                    {
                        "claim_namespace": claim.namespace,
                        "claim_name": claim.name,
                        "claim_pod": pod,
                        "request": allocated.request,
                        **published,
                    }
                )
    return out


class DraSeries(Collector):
    """The two families, rendered at each scrape from the fleet watcher's ResourceSlices and the claims cache.

    ``fleet``: what ``webhook.kube.inventory.FleetWatcher`` offers (``inventory()``, None until synced: then no
    series, rather than a partial fleet). ``claims``: the allocated claims now (None: no claims cache, no
    allocation series). ``policies``: the policy set in force, for the GPU drivers.
    """

    def __init__(
        self,
        fleet: Any,
        *,
        policies: Callable[[], PolicySet],
        claims: Callable[[], Iterable[AllocatedClaim]] | None = None,
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
        if self.claims is None:
            return
        allocated = GaugeMetricFamily(
            ALLOCATED,
            "1 per GPU device of an allocated ResourceClaim and pod the claim is reserved for (claim_pod; empty "
            "while reserved for nobody), with the device's labels of gpugate_dra_gpu_device.",
            labels=ALLOCATED_LABELS,
        )
        seen: set[tuple[str, ...]] = set()
        for labels in allocation_series(self.claims(), devices, drivers):
            values = tuple(labels[k] for k in ALLOCATED_LABELS)
            if values not in seen:  # one claim listing a device twice (two requests) is still one device held
                seen.add(values)
                allocated.add_metric(list(values), 1.0)
        yield allocated
