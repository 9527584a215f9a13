"""What a GPU-hour is worth and how the sums are kept: MIG geometry, prices, and the per-group accumulators."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

SOURCE_PROF = "GR_ENGINE_ACTIVE"
SOURCE_DEV = "GPU_UTIL"

# kube-state-metrics names an extended resource by replacing every character outside [a-zA-Z0-9_]
# with "_" (internal/store/utils.go SanitizeLabelName): nvidia.com/gpu -> nvidia_com_gpu,
# nvidia.com/gpu.shared -> nvidia_com_gpu_shared, nvidia.com/mig-1g.10gb -> nvidia_com_mig_1g_10gb.
WHOLE = "nvidia_com_gpu"
SHARED = "nvidia_com_gpu_shared"
MIG_PREFIX = "nvidia_com_mig_"
_SANITIZE = re.compile(r"[^a-zA-Z0-9_]")
_SLICES = re.compile(r"^(\d+)g\.")

# Compute slices per GPU, by product name (dcgm-exporter's modelName, as NVML reports it). NVIDIA's MIG user
# guide, "Supported GPUs" (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html), lists the
# maximum number of instances: 7 on A100, H100, H20, H200, B200, GB200; 4 on A30 and RTX PRO 6000 Blackwell
# (profiles 1g.24gb, 2g.48gb, 4g.96gb); 2 on RTX PRO 5000 and RTX PRO 4500 Blackwell. First match wins.
MIG_SLICES: tuple[tuple[str, int], ...] = (
    ("RTX PRO 6000", 4),
    ("RTX PRO 5000", 2),
    ("RTX PRO 4500", 2),
    ("A30", 4),
    ("A100", 7),
    ("H100", 7),
    ("H200", 7),
    ("H20", 7),
    ("GH200", 7),
    ("B200", 7),
    ("GB200", 7),
    ("B300", 7),
)
DEFAULT_SLICES = 7


_GB = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
_PROFILE_MEMORY = re.compile(r"^\d+g\.(\d+)gb")
# Framebuffer of models whose NVML name does not say it (NVIDIA's product pages).
_MEMORY_GIB = (("T4", 16), ("L40S", 48), ("L40", 48), ("L4", 24), ("A10G", 24), ("A10", 24), ("RTX PRO 6000", 96))


def model_memory_mib(model: str, profile: str = "") -> float | None:
    """Framebuffer of a MIG profile (``1g.10gb``: 10 GiB) or of a GPU by its product name, in MiB."""
    if profile:
        match = _PROFILE_MEMORY.match(profile)
        return float(match.group(1)) * 1024 if match else None
    match = _GB.search(model)
    if match:
        return float(match.group(1)) * 1024
    for fragment, gib in _MEMORY_GIB:
        if fragment in model:
            return float(gib * 1024)
    return None


def sanitize(name: str) -> str:
    return _SANITIZE.sub("_", name)


def mig_slices(model: str) -> int | None:
    """Compute slices of a MIG-capable GPU by its product name, or None for a model not in the table."""
    for fragment, slices in MIG_SLICES:
        if fragment in model:
            return slices
    return None


def mig_fraction(profile: str, *, model: str = "") -> tuple[float, bool]:
    """The share of the physical GPU a MIG profile ``<g>g.<mem>`` holds, g of the model's compute slices, and
    whether the model is known. An unknown model takes the profile's own numbers: g of 7 (the A100/H100
    geometry), and never less than the share its own slice count implies (a 4g profile is at least 4 of 7)."""
    match = _SLICES.match(profile)
    if not match:
        return 1.0, True
    slices = mig_slices(model)
    g = int(match.group(1))
    return min(1.0, g / (slices or DEFAULT_SLICES)), slices is not None


K = TypeVar("K", bound=Hashable)


def split_by_use(use: Mapping[K, float | None], held: float) -> dict[K, float] | None:
    """``--weight-by-use``: the part of a time-sliced or MPS GPU its pods hold (their replicas' share, ``held``)
    split between them in proportion to each one's use, dcgm-exporter's per-pod ``DCGM_FI_DEV_GPU_UTIL`` on the
    device in the step (NVML's per-process SM utilisation summed per pod, since NVIDIA/dcgm-exporter#594). None
    where a pod has no figure or all are 0 (nobody measurably used it): the caller splits by replicas held."""
    if not use or any(value is None for value in use.values()):
        return None
    weights = {pod: max(0.0, float(value or 0.0)) for pod, value in use.items()}
    total = sum(weights.values())
    if total <= 0.0:
        return None
    return {pod: held * weight / total for pod, weight in weights.items()}


def mig_profile_of(resource: str) -> str:
    """``nvidia_com_mig_1g_10gb`` -> ``1g.10gb`` (``_me`` suffixes come back as ``+me``)."""
    parts = resource[len(MIG_PREFIX) :].split("_")
    return ".".join(parts[:2]) + "".join(f"+{p}" for p in parts[2:])


@dataclass(frozen=True)
class Prices:
    """GPU prices per hour, keyed by dcgm-exporter's ``modelName``, a MIG profile (per slice-hour), or
    ``<modelName>/<profile>``; ``default`` prices whatever else, including GPU-hours without telemetry.
    ``per_node`` (a whole GPU-hour on that node, from a node label or a per-node price series, resolved by
    the queries) comes first: an instance type's price is the bill's."""

    per_hour: Mapping[str, float]
    currency: str = "USD"
    node_label: str | None = None  # byNodeLabel.label, e.g. node.kubernetes.io/instance-type
    per_label_value: Mapping[str, float] = field(default_factory=dict)  # byNodeLabel.perHour
    node_series: str | None = None  # nodePriceSeries: a metric {node} in price per GPU-hour
    per_node: Mapping[str, float] = field(default_factory=dict)

    def device(self, *, model: str, profile: str, fraction: float, node: str = "") -> float | None:
        """Price of one hour of one device (a whole GPU, or one MIG instance)."""
        if node in self.per_node:
            return self.per_node[node] * fraction
        if profile:
            for key in (f"{model}/{profile}", profile):
                if key in self.per_hour:
                    return self.per_hour[key]
        whole = self.per_hour.get(model, self.per_hour.get("default"))
        return None if whole is None else whole * fraction

    def unknown(self, *, fraction: float, node: str = "") -> float | None:
        if node in self.per_node:
            return self.per_node[node] * fraction
        default = self.per_hour.get("default")
        return None if default is None else default * fraction


@dataclass(frozen=True)
class Unit:
    """One allocated unit as billed: its kind, its share of a physical GPU, and its price per device-hour."""

    kind: str  # "whole", "shared", or a MIG profile
    share: float  # of a physical GPU, after splitting among the replicas that share it
    price: float | None
    price_share: float = 1.0  # of the device's hour that this pod pays for
    model: str = ""
    fraction: float = 1.0  # of the physical GPU the device is (a MIG instance's g/slices)


@dataclass
class Row:
    """The figures of one group (or of the whole fleet)."""

    group: str
    whole_gpus: int = 0  # most whole GPUs held at once
    mig_slices: dict[str, int] = field(default_factory=dict)  # most MIG instances held at once, per profile
    shared: int = 0  # most time-sliced replicas held at once
    fraction: float = 0.0  # most GPUs held at once as fractions (KAI, HAMi): the sum of their shares
    allocated_hours: float = 0.0  # GPU-hours (a MIG slice counts as its share of the GPU)
    busy_hours: float = 0.0
    idle_hours: float = 0.0
    no_telemetry_hours: float = 0.0
    avg_utilisation: float | None = None  # percent, here; the JSON gives ratios
    p95_utilisation: float | None = None
    peak_memory_mib: float | None = None
    cost: float | None = None
    idle_cost: float | None = None
    no_telemetry_cost: float | None = None
    unpriced_hours: float = 0.0
    source: str = "none"
    workload: str | None = None  # with --group pod: the pod's workload (namespace/kind/name)

    @property
    def telemetry_hours(self) -> float:
        return self.busy_hours + self.idle_hours

    @property
    def idle_share(self) -> float:
        """Idle GPU-hours over the GPU-hours that had telemetry (hours without it are never idle)."""
        return self.idle_hours / self.telemetry_hours if self.telemetry_hours else 0.0

    @property
    def telemetry_share(self) -> float:
        return self.telemetry_hours / self.allocated_hours if self.allocated_hours else 0.0


class Histogram:
    """GPU-hours per 0.1 % of utilisation, sparse: a weighted percentile in memory bounded by the bins used
    (a workload at one utilisation holds one bin, not 1,001)."""

    def __init__(self) -> None:
        self.bins: dict[int, float] = {}

    def add(self, utilisation: float, hours: float) -> None:
        key = round(utilisation * 10)
        self.bins[key] = self.bins.get(key, 0.0) + hours

    def merge(self, other: Histogram) -> None:
        for key, hours in other.bins.items():
            self.bins[key] = self.bins.get(key, 0.0) + hours

    def percentile(self, quantile: float) -> float:
        total = sum(self.bins.values())
        running = 0.0
        for key in sorted(self.bins):
            running += self.bins[key]
            if running >= quantile * total - 1e-12:
                return key / 10
        return 100.0


@dataclass
class Workload:
    """One workload (gpugate's workload-kind/-name, else the bare pod): what it held and left idle."""

    namespace: str
    kind: str
    name: str
    team: str
    cost_center: str
    allocated_hours: float = 0.0
    idle_hours: float = 0.0
    telemetry_hours: float = 0.0
    utilisation_hours: float = 0.0  # sum of utilisation x GPU-hours, for the mean
    cost: float | None = None
    idle_cost: float | None = None
    peak_memory_mib: float | None = None
    samples: int = 0  # device-steps with a utilisation value
    histogram: Histogram = field(default_factory=Histogram)
    # (model, kind) -> [GPU-hours, unit-hours]: what it held, and for how long (a replica or slice for an hour)
    held: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    @property
    def avg_utilisation(self) -> float | None:
        return self.utilisation_hours / self.telemetry_hours if self.telemetry_hours else None

    @property
    def p95_utilisation(self) -> float | None:
        return self.histogram.percentile(0.95) if self.telemetry_hours else None

    @property
    def coverage(self) -> float:
        return self.telemetry_hours / self.allocated_hours if self.allocated_hours else 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    def account(
        self, *, hours: float, utilisation: float | None, idle: bool, cost: float | None, unit: Unit, unit_hours: float
    ) -> None:
        self.allocated_hours += hours
        held = self.held.setdefault((unit.model, unit.kind), [0.0, 0.0])
        held[0] += hours
        held[1] += unit_hours
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        if utilisation is None:
            return
        utilisation = min(100.0, max(0.0, utilisation))
        self.telemetry_hours += hours
        self.utilisation_hours += utilisation * hours
        self.histogram.add(utilisation, hours)
        if idle:
            self.idle_hours += hours
            if cost is not None:
                self.idle_cost = (self.idle_cost or 0.0) + cost


@dataclass
class Bucket:
    """One ``--bucket`` interval of the fleet or of a group."""

    start: float
    allocated_hours: float = 0.0
    busy_hours: float = 0.0
    idle_hours: float = 0.0
    no_telemetry_hours: float = 0.0
    unallocated_hours: float = 0.0
    cost: float = 0.0
    idle_cost: float = 0.0
    unallocated_cost: float = 0.0


class Accumulator:
    """Sums for one group (or the fleet): hours, cost, a utilisation histogram, peaks, buckets and a timeline."""

    def __init__(self, name: str) -> None:
        self.row = Row(group=name)
        self.histogram = Histogram()
        self.utilisation_hours = 0.0
        self.prof_hours = 0.0
        self.dev_hours = 0.0
        self.cost = 0.0
        self.idle_cost = 0.0
        self.no_telemetry_cost = 0.0
        self.allocated: dict[int, float] = defaultdict(float)
        self.util_hours: dict[int, float] = defaultdict(float)
        self.tele: dict[int, float] = defaultdict(float)
        self.buckets: dict[int, Bucket] = {}
        self.counts: dict[str, set[Hashable]] = defaultdict(set)

    def add(
        self,
        *,
        index: int,
        hours: float,
        utilisation: float | None,
        source: str,
        threshold: float,
        cost: float | None,
        bucket: int | None,
        timeline: bool,
    ) -> bool:
        """Add one unit's step; True when it was idle."""
        row = self.row
        row.allocated_hours += hours
        if timeline:
            self.allocated[index] += hours
        found = self._bucket(bucket)
        if found is not None:
            found.allocated_hours += hours
            found.cost += cost or 0.0
        if cost is None:
            row.unpriced_hours += hours
        else:
            self.cost += cost
        if utilisation is None:
            row.no_telemetry_hours += hours
            self.no_telemetry_cost += cost or 0.0
            if found is not None:
                found.no_telemetry_hours += hours
            return False
        utilisation = min(100.0, max(0.0, utilisation))
        if timeline:
            self.tele[index] += hours
            self.util_hours[index] += utilisation * hours
        self.utilisation_hours += utilisation * hours
        self.histogram.add(utilisation, hours)
        if source == SOURCE_PROF:
            self.prof_hours += hours
        else:
            self.dev_hours += hours
        idle = utilisation < threshold
        if idle:
            row.idle_hours += hours
            self.idle_cost += cost or 0.0
        else:
            row.busy_hours += hours
        if found is not None:
            if idle:
                found.idle_hours += hours
                found.idle_cost += cost or 0.0
            else:
                found.busy_hours += hours
        return idle

    def _bucket(self, start: int | None) -> Bucket | None:
        if start is None:
            return None
        found = self.buckets.get(start)
        if found is None:
            found = self.buckets[start] = Bucket(float(start))
        return found

    def merge_step(self, other: Accumulator) -> None:
        """Take in what another accumulator held during this step (the fleet total's peaks)."""
        for kind, held in other.counts.items():
            self.counts[kind] |= held

    def merge(self, other: Accumulator) -> None:
        """Add another accumulator's sums (the fleet total is the sum of its groups; peaks come per step)."""
        row, theirs = self.row, other.row
        row.allocated_hours += theirs.allocated_hours
        row.busy_hours += theirs.busy_hours
        row.idle_hours += theirs.idle_hours
        row.no_telemetry_hours += theirs.no_telemetry_hours
        row.unpriced_hours += theirs.unpriced_hours
        self.histogram.merge(other.histogram)
        self.utilisation_hours += other.utilisation_hours
        self.prof_hours += other.prof_hours
        self.dev_hours += other.dev_hours
        self.cost += other.cost
        self.idle_cost += other.idle_cost
        self.no_telemetry_cost += other.no_telemetry_cost
        for mine, yours in ((self.allocated, other.allocated), (self.util_hours, other.util_hours)):
            for index, value in yours.items():
                mine[index] += value
        for index, value in other.tele.items():
            self.tele[index] += value

    def close_step(self) -> None:
        row = self.row
        for kind, held in self.counts.items():
            count = len(held)
            if kind == "whole":
                row.whole_gpus = max(row.whole_gpus, count + len(self.counts.get("dra", ())))
            elif kind == "dra":
                row.whole_gpus = max(row.whole_gpus, count + len(self.counts.get("whole", ())))
            elif kind == "fraction":
                # held as (pod, device, share): the GPUs they add up to
                row.fraction = max(row.fraction, sum(float(entry[-1]) for entry in held))  # type: ignore[index, misc]
            elif kind == "shared":
                row.shared = max(row.shared, count)
            else:
                row.mig_slices[kind] = max(row.mig_slices.get(kind, 0), count)
        self.counts.clear()

    def finish(self, *, priced: bool) -> Row:
        row = self.row
        telemetry = row.telemetry_hours
        if telemetry:
            row.avg_utilisation = self.utilisation_hours / telemetry
            row.p95_utilisation = self.histogram.percentile(0.95)
            if self.prof_hours and self.dev_hours:
                row.source = f"mixed ({100 * self.prof_hours / telemetry:.0f}% {SOURCE_PROF})"
            else:
                row.source = SOURCE_PROF if self.prof_hours else SOURCE_DEV
        if priced:
            row.cost, row.idle_cost, row.no_telemetry_cost = self.cost, self.idle_cost, self.no_telemetry_cost
        return row

    def timeline_allocated(self, steps: int) -> list[float]:
        return [self.allocated.get(i, 0.0) for i in range(steps)]

    def timeline_utilisation(self, steps: int) -> list[float | None]:
        return [self.util_hours[i] / self.tele[i] if self.tele.get(i) else None for i in range(steps)]
