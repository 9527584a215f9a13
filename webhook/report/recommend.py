"""``gpugate report --recommend``: per workload, the smallest class the fleet has that its use would fit.

From a workload's p95 utilisation and peak framebuffer memory over the window, and the classes the fleet
showed in the same window (a GPU model held whole, time-sliced, or as a MIG profile: never one it does not
have), pick the cheapest that fits, with the GPU-hours and cost it would have saved and how sure that is,
and the GPUPolicy that steers the workload there (docs/report.md walks through report -> recommend ->
``gpugate audit --compare-to`` -> apply). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ..policy.keys import API_VERSION, GROUP, TEAM_LABEL, WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL
from ..policy.vendors import BUILTIN_DEVICE_RESOURCES, DEFAULT_GPU_RUNTIME_CLASSES, MODEL_LABELS
from .accounting import SHARED, WHOLE, Prices, Workload, mig_fraction, model_memory_mib
from .model import Capacity, Report

HEADROOM = 1.25  # a class must hold 25% more than the p95 compute share and the peak memory
LIGHT_USE = 20.0  # percent p95: a workload this light may move to a smaller model, whose speed is unknown
POLICY_PRIORITY = 1000
#: The NVIDIA device plugin's GPU resources, whole, time-sliced and MIG: what a recommended class may use.
NVIDIA_RESOURCES = BUILTIN_DEVICE_RESOURCES["nvidia"][0]


@dataclass(frozen=True)
class FleetClass:
    """A class the fleet has: a model, held whole, time-sliced (``shared``) or as a MIG profile."""

    model: str
    kind: str
    share: float  # of a physical GPU that one unit of it is (a time-sliced replica: the fleet's mean)
    memory_mib: float | None
    resource: str  # what pods request for it (Kubernetes name)
    product: str  # GFD's nvidia.com/gpu.product value on its nodes

    @property
    def name(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", f"{self.model} {self.kind}".lower()).strip("-")[:63].strip("-")


def fleet_classes(capacity: Capacity) -> list[FleetClass]:
    """Every class dcgm-exporter showed in the window, allocated or not."""
    out = []
    for (model, kind), (hours, unit_hours) in sorted(capacity.classes.items()):
        # A KAI/HAMi fraction, a DRA device or a GPU seen only by its node is no class a GFD policy steers to.
        if kind in ("mig-unpartitioned", "fraction", "dra", "no-telemetry") or not model or not unit_hours:
            continue
        requested = capacity.requested_as.get((model, kind), "")
        plain = model.replace(" ", "-")
        if kind == "whole":
            resource, product, share = "nvidia.com/gpu", plain, 1.0
        elif kind == "shared":
            renamed = requested == SHARED
            resource = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
            product, share = (plain if renamed else f"{plain}-SHARED"), hours / unit_hours
        else:  # a MIG profile: single strategy requests it as nvidia.com/gpu (GFD: <parent>-MIG-<profile>)
            single = requested == WHOLE
            resource = "nvidia.com/gpu" if single else f"nvidia.com/mig-{kind}"
            product, share = (f"{plain}-MIG-{kind}" if single else plain), mig_fraction(kind, model=model)[0]
        memory = model_memory_mib(model, kind if kind not in ("whole", "shared") else "")
        out.append(FleetClass(model, kind, share, memory, resource, product))
    return out


def _price(prices: Prices | None, fleet_class: FleetClass) -> float | None:
    if prices is None:
        return None
    profile = fleet_class.kind if fleet_class.kind not in ("whole", "shared") else ""
    price = prices.device(model=fleet_class.model, profile=profile, fraction=fleet_class.share)
    if price is not None and fleet_class.kind == "shared":
        whole = prices.device(model=fleet_class.model, profile="", fraction=1.0)
        price = None if whole is None else whole * fleet_class.share
    return price


def _confidence(workload: Workload) -> dict[str, Any]:
    coverage = workload.coverage
    hours = workload.telemetry_hours
    level = "high" if coverage >= 0.9 and hours >= 20 else "medium" if coverage >= 0.5 and hours >= 4 else "low"
    return {"samples": workload.samples, "coverage": round(coverage, 4), "level": level}


def _current(workload: Workload, classes: Sequence[FleetClass]) -> tuple[FleetClass | None, float]:
    """The class the workload held most, and the unit-hours it held units for."""
    (model, kind), (_hours, unit_hours) = max(workload.held.items(), key=lambda item: item[1][0])
    found = next((c for c in classes if (c.model, c.kind) == (model, kind)), None)
    return found, unit_hours


def _fits(workload: Workload, current: FleetClass, candidate: FleetClass) -> bool:
    p95 = workload.p95_utilisation or 0.0
    peak = workload.peak_memory_mib or 0.0
    if candidate.memory_mib is None or candidate.memory_mib < peak * HEADROOM:
        return False
    if candidate.model == current.model:
        # compute: the share of this model's GPU the workload used at p95, with headroom
        return candidate.share >= p95 / 100 * current.share * HEADROOM and candidate.share < current.share
    return p95 <= LIGHT_USE and candidate.kind in ("whole", "shared")


def _smaller(prices: Prices | None, current: FleetClass, candidate: FleetClass) -> bool:
    """Cheaper per unit-hour when priced (a smaller model may be a larger share of its GPU), else a smaller
    share of a GPU of the same model."""
    now, then = _price(prices, current), _price(prices, candidate)
    if now is not None and then is not None:
        return then < now
    return candidate.model == current.model and candidate.share < current.share


def recommend(report: Report, *, prices: Prices | None) -> list[dict[str, Any]]:
    """One recommendation per workload with telemetry, largest saving first; those that fit nothing smaller
    say why, with ``recommended: null``."""
    classes = fleet_classes(report.capacity)
    out = []
    for workload in report.all_workloads:
        if not workload.telemetry_hours or not workload.held:
            continue
        out.append(_one(workload, classes, prices, report))
    return sorted(out, key=lambda r: (-r["gpu_hours_saved"], r["workload"]))


def _one(workload: Workload, classes: Sequence[FleetClass], prices: Prices | None, report: Report) -> dict[str, Any]:
    current, unit_hours = _current(workload, classes)
    record: dict[str, Any] = {
        "workload": workload.key,
        "namespace": workload.namespace,
        "kind": workload.kind,
        "name": workload.name,
        "team": workload.team,
        "current": {"model": current.model if current else "", "class": current.kind if current else ""},
        "recommended": None,
        "reason": "",
        "p95_utilisation": None if workload.p95_utilisation is None else round(workload.p95_utilisation / 100, 4),
        "peak_memory_mib": None if workload.peak_memory_mib is None else round(workload.peak_memory_mib),
        "allocated_gpu_hours": round(workload.allocated_hours, 3),
        "gpu_hours_saved": 0.0,
        "cost_saved": None if prices is None else 0.0,
        "confidence": _confidence(workload),
        "policy": None,
    }
    if current is None:
        record["reason"] = "its class is not one the fleet showed telemetry for"
        return record
    if workload.peak_memory_mib is None:
        record["reason"] = "no DCGM_FI_DEV_FB_USED samples: its memory need is unknown"
        return record
    fitting = [c for c in classes if c != current and _fits(workload, current, c) and _smaller(prices, current, c)]
    key = (lambda c: (_price(prices, c) or 0.0, c.share)) if prices else (lambda c: (c.share, c.model != current.model))
    if not fitting:
        record["reason"] = (
            f"p95 {workload.p95_utilisation:.0f}% of a {current.kind} {current.model} and "
            f"{workload.peak_memory_mib:,.0f} MiB peak memory fit no smaller class of the fleet"
        )
        return record
    best = min(fitting, key=key)
    new_hours = unit_hours * best.share
    record["recommended"] = {
        "model": best.model,
        "class": best.kind,
        "resource": best.resource,
        "memory_mib": None if best.memory_mib is None else round(best.memory_mib),
        "share": round(best.share, 4),
    }
    record["gpu_hours_saved"] = round(max(0.0, workload.allocated_hours - new_hours), 3)
    price = _price(prices, best)
    if prices is not None and workload.cost is not None and price is not None:
        record["cost_saved"] = round(max(0.0, workload.cost - unit_hours * price), 2)
    record["reason"] = (
        f"p95 {workload.p95_utilisation:.0f}% of a {current.kind} {current.model} ({current.share:.2f} GPU) and "
        f"{workload.peak_memory_mib:,.0f} MiB peak memory fit {best.kind} {best.model} ({best.share:.2f} GPU, "
        f"{(best.memory_mib or 0):,.0f} MiB) with {100 * (HEADROOM - 1):.0f}% headroom"
    )
    record["policy"] = policy_yaml(workload, best, window=(report.start, report.end))
    return record


def policy_yaml(workload: Workload, target: FleetClass, *, window: tuple[float, float]) -> str:
    """A GPUPolicy (the current format webhook/policy/loader.py reads, written with the names of policy.keys and
    policy.vendors) that governs the workload's pods and steers them to the class: its nodes' GFD product, the
    resource its pods request."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"rightsize-{workload.namespace}-{workload.kind}-{workload.name}".lower())
    document = {
        "apiVersion": API_VERSION,
        "kind": "GPUPolicy",
        "metadata": {
            "name": name.strip("-")[:253],
            "annotations": {f"{GROUP}/recommended-by": "gpugate report --recommend"},
        },
        "spec": {
            "priority": POLICY_PRIORITY,
            "mode": "enforce",
            "match": {
                "namespaces": [workload.namespace],
                "podSelector": {
                    "matchLabels": {
                        WORKLOAD_KIND_LABEL: workload.kind,
                        WORKLOAD_NAME_LABEL: workload.name,
                    }
                },
            },
            "devices": {
                "nvidia": {
                    "resources": list(NVIDIA_RESOURCES),
                    "runtimeClassName": DEFAULT_GPU_RUNTIME_CLASSES[0],
                    "tolerations": [{"key": NVIDIA_RESOURCES[0], "operator": "Exists", "effect": "NoSchedule"}],
                    "modelLabel": MODEL_LABELS["nvidia"],
                }
            },
            "models": {
                "default": target.name,
                "classes": {target.name: {"values": [target.product], "resources": [target.resource]}},
            },
            "attribution": {
                "labels": {
                    TEAM_LABEL: {"fromNamespaceLabel": "team", "default": "unassigned"},
                    f"{GROUP}/cost-center": {"fromNamespaceLabel": "cost-center", "default": "unassigned"},
                }
            },
        },
    }
    return yaml.safe_dump(document, sort_keys=False)
