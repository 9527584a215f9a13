"""The report's figures from dcgm-exporter and kube-state-metrics series, integrated step by step (pure: no I/O).

Every evaluation time ``t`` of a range query stands for the interval ``(t - step, t]``. At each step the
GPUs a pod holds are joined to the pod's attribution labels *at that step*, so a pod that ended or was
renamed mid-window is billed for the steps it held GPUs, not for the window. docs/report.md explains
each rule and where it comes from.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from .series import Labels, Series

DEFAULT_THRESHOLD = 10.0  # percent; a GPU busy less than this during a step is idle for that step
UNLABELLED = "unlabelled"
GROUPS = ("team", "cost-center", "workload", "namespace")

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

# The per-pod label keys on kube_pod_labels (kube-state-metrics: "label_" + sanitised key) and on DCGM
# series (dcgm-exporter --kubernetes-enable-pod-labels: sanitised key, no prefix).
ATTRIBUTION_KEYS = ("team", "cost_center", "workload_kind", "workload_name")


def ksm_label(key: str) -> str:
    return f"label_gpugate_io_{key}"


def dcgm_label(key: str) -> str:
    return f"gpugate_io_{key}"


def mig_fraction(profile: str, *, model: str = "") -> float:
    """The share of the physical GPU a MIG profile holds: ``<g>g.*`` is g of 7 compute slices (A100,
    H100, H200, B200), g of 4 on an A30. NVIDIA's MIG user guide lists the profiles per GPU."""
    match = _SLICES.match(profile)
    if not match:
        return 1.0
    return min(1.0, int(match.group(1)) / (4 if "A30" in model else 7))


def mig_profile_of(resource: str) -> str:
    """``nvidia_com_mig_1g_10gb`` -> ``1g.10gb`` (``_me`` suffixes come back as ``+me``)."""
    parts = resource[len(MIG_PREFIX) :].split("_")
    return ".".join(parts[:2]) + "".join(f"+{p}" for p in parts[2:])


@dataclass(frozen=True)
class Prices:
    """GPU prices per hour, keyed by dcgm-exporter's ``modelName``, a MIG profile (per slice-hour), or
    ``<modelName>/<profile>``; ``default`` prices whatever else, including GPU-hours without telemetry."""

    per_hour: Mapping[str, float]
    currency: str = "USD"

    def device(self, *, model: str, profile: str, fraction: float) -> float | None:
        """Price of one hour of one device (a whole GPU, or one MIG instance)."""
        if profile:
            for key in (f"{model}/{profile}", profile):
                if key in self.per_hour:
                    return self.per_hour[key]
        whole = self.per_hour.get(model, self.per_hour.get("default"))
        return None if whole is None else whole * fraction

    def unknown(self, *, fraction: float) -> float | None:
        default = self.per_hour.get("default")
        return None if default is None else default * fraction


@dataclass(frozen=True)
class Inputs:
    """What the report is computed from; :mod:`webhook.report.queries` fetches it."""

    steps: Sequence[float]  # evaluation times, ascending; each stands for (t - step, t]
    step: float  # seconds
    requests: Sequence[Series]  # {namespace, pod, resource}: units requested by a Pending/Running bound pod
    pod_labels: Sequence[Series]  # kube_pod_labels {namespace, pod, label_gpugate_io_*}
    engine_active: Sequence[Series]  # DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio 0..1) {UUID, GPU_I_ID, ..., pod}
    gpu_util: Sequence[Series]  # DCGM_FI_DEV_GPU_UTIL (percent)
    memory_peak: Sequence[Series] = ()  # max DCGM_FI_DEV_FB_USED (MiB) over the window, per device and pod


@dataclass
class Row:
    """The figures of one group (or of the whole fleet)."""

    group: str
    whole_gpus: int = 0  # most whole GPUs held at once
    mig_slices: dict[str, int] = field(default_factory=dict)  # most MIG instances held at once, per profile
    shared: int = 0  # most time-sliced replicas held at once
    allocated_hours: float = 0.0  # GPU-hours (a MIG slice counts as its share of the GPU)
    busy_hours: float = 0.0
    idle_hours: float = 0.0
    no_telemetry_hours: float = 0.0
    avg_utilisation: float | None = None
    p95_utilisation: float | None = None
    peak_memory_mib: float | None = None
    cost: float | None = None
    idle_cost: float | None = None
    unpriced_hours: float = 0.0
    source: str = "none"

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


@dataclass
class Workload:
    """One workload (gpugate's workload-kind/-name, else the bare pod) and what it left idle."""

    namespace: str
    kind: str
    name: str
    team: str
    cost_center: str
    allocated_hours: float = 0.0
    idle_hours: float = 0.0
    telemetry_hours: float = 0.0
    utilisation_hours: float = 0.0  # sum of utilisation x GPU-hours, for the mean

    @property
    def avg_utilisation(self) -> float | None:
        return self.utilisation_hours / self.telemetry_hours if self.telemetry_hours else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass
class Timeline:
    """Per step, for the charts: GPU-equivalents allocated, and their mean utilisation where known."""

    times: list[float]
    allocated: dict[str, list[float]]
    utilisation: dict[str, list[float | None]]


@dataclass
class Report:
    start: float
    end: float
    step: float
    group_by: str
    threshold: float
    rows: list[Row]
    total: Row
    workloads: list[Workload]
    timeline: Timeline
    currency: str | None
    notes: list[str]


@dataclass(frozen=True)
class _Unit:
    """One allocated unit as billed: its kind, its share of a physical GPU, and its price per device-hour."""

    kind: str  # "whole", "shared", or a MIG profile
    share: float  # of a physical GPU, after splitting among the pods that share it
    price: float | None
    price_share: float  # of the device's hour that this pod pays for


def _account(
    unit: _Unit,
    target: _Accumulator,
    workload: Workload,
    *,
    held: Hashable,
    index: int,
    step_hours: float,
    utilisation: float | None,
    source: str,
    threshold: float,
) -> None:
    hours = unit.share * step_hours
    # What was held at once: a device counts once however many pods the step saw on it.
    target.counts[unit.kind].add(held)
    target.add(
        index=index,
        hours=hours,
        utilisation=utilisation,
        source=source,
        threshold=threshold,
        price=unit.price,
        price_hours=step_hours * unit.price_share,
    )
    workload.allocated_hours += hours
    if utilisation is not None:
        workload.telemetry_hours += hours
        workload.utilisation_hours += utilisation * hours
        if utilisation < threshold:
            workload.idle_hours += hours


class _Accumulator:
    """Sums for one group; the histogram (0.1 % bins) gives the weighted p95 in bounded memory."""

    def __init__(self, name: str, steps: int) -> None:
        self.row = Row(group=name)
        self.histogram = [0.0] * 1001
        self.utilisation_hours = 0.0
        self.prof_hours = 0.0
        self.dev_hours = 0.0
        self.cost = 0.0
        self.idle_cost = 0.0
        self.allocated = [0.0] * steps
        self.util_hours = [0.0] * steps
        self.tele = [0.0] * steps
        self.counts: dict[str, set[Hashable]] = defaultdict(set)

    def add(
        self,
        *,
        index: int,
        hours: float,
        utilisation: float | None,
        source: str,
        threshold: float,
        price: float | None,
        price_hours: float,
    ) -> None:
        row = self.row
        row.allocated_hours += hours
        self.allocated[index] += hours
        cost = None if price is None else price * price_hours
        if cost is None:
            row.unpriced_hours += hours
        else:
            self.cost += cost
        if utilisation is None:
            row.no_telemetry_hours += hours
            return
        utilisation = min(100.0, max(0.0, utilisation))
        self.tele[index] += hours
        self.util_hours[index] += utilisation * hours
        self.utilisation_hours += utilisation * hours
        self.histogram[round(utilisation * 10)] += hours
        if source == SOURCE_PROF:
            self.prof_hours += hours
        else:
            self.dev_hours += hours
        if utilisation < threshold:
            row.idle_hours += hours
            if cost is not None:
                self.idle_cost += cost
        else:
            row.busy_hours += hours

    def merge_step(self, other: _Accumulator) -> None:
        """Take in what another accumulator held during this step (the fleet total's peaks)."""
        for kind, held in other.counts.items():
            self.counts[kind] |= held

    def merge(self, other: _Accumulator) -> None:
        """Add another accumulator's sums (the fleet total is the sum of its groups; peaks come per step)."""
        row, theirs = self.row, other.row
        row.allocated_hours += theirs.allocated_hours
        row.busy_hours += theirs.busy_hours
        row.idle_hours += theirs.idle_hours
        row.no_telemetry_hours += theirs.no_telemetry_hours
        row.unpriced_hours += theirs.unpriced_hours
        self.histogram = [a + b for a, b in zip(self.histogram, other.histogram, strict=True)]
        self.utilisation_hours += other.utilisation_hours
        self.prof_hours += other.prof_hours
        self.dev_hours += other.dev_hours
        self.cost += other.cost
        self.idle_cost += other.idle_cost
        for mine, yours in (
            (self.allocated, other.allocated),
            (self.util_hours, other.util_hours),
            (self.tele, other.tele),
        ):
            for index, value in enumerate(yours):
                mine[index] += value

    def close_step(self) -> None:
        row = self.row
        for kind, held in self.counts.items():
            count = len(held)
            if kind == "whole":
                row.whole_gpus = max(row.whole_gpus, count)
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
            row.p95_utilisation = _weighted_percentile(self.histogram, 0.95)
            if self.prof_hours and self.dev_hours:
                row.source = f"mixed ({100 * self.prof_hours / telemetry:.0f}% {SOURCE_PROF})"
            else:
                row.source = SOURCE_PROF if self.prof_hours else SOURCE_DEV
        if priced:
            row.cost, row.idle_cost = self.cost, self.idle_cost
        return row


def _weighted_percentile(histogram: Sequence[float], quantile: float) -> float:
    total = sum(histogram)
    running = 0.0
    for index, weight in enumerate(histogram):
        running += weight
        if running >= quantile * total - 1e-12:
            return index / 10
    return 100.0


def _index(series: Sequence[Series], steps: Mapping[float, int]) -> list[list[tuple[int, float]]]:
    """Samples regrouped by step index (Prometheus returns them per series), as (series number, value)."""
    out: list[list[tuple[int, float]]] = [[] for _ in steps]
    for number, one in enumerate(series):
        for t, value in one.samples.items():
            index = steps.get(t)
            if index is not None and not math.isnan(value):
                out[index].append((number, value))
    return out


Pod = tuple[str, str]
DeviceKey = tuple[str, str]


@dataclass(frozen=True)
class _DeviceSeries:
    """What one dcgm-exporter series says besides its values; worked out once, not at every step."""

    key: DeviceKey
    profile: str
    model: str
    pod: Pod | None
    virtual: bool
    attribution: dict[str, str] | None  # gpugate's labels copied by dcgm-exporter, if any


def _device_series(labels: Labels) -> _DeviceSeries:
    # dcgm-exporter names the GPU's UUID label "UUID" ("uuid" with --use-old-namespace); a MIG
    # instance is the pair (parent UUID, GPU_I_ID) (internal/pkg/rendermetrics/render_metrics.go).
    key = (labels.get("UUID") or labels.get("uuid") or "", labels.get("GPU_I_ID", ""))
    pod = (labels.get("namespace", ""), labels.get("pod", "")) if labels.get("pod") else None
    return _DeviceSeries(
        key=key,
        profile=labels.get("GPU_I_PROFILE", ""),
        model=labels.get("modelName", ""),
        pod=pod,
        virtual=bool(labels.get("vgpu")),
        attribution=_attribution(labels, dcgm_label),
    )


def _attribution(labels: Labels, name: Callable[[str], str]) -> dict[str, str] | None:
    """gpugate's labels on a series (kube_pod_labels' or dcgm-exporter's spelling), or None without a team."""
    if not labels.get(name("team")):
        return None
    return {key: labels.get(name(key), "") for key in ATTRIBUTION_KEYS}


def compute_report(
    inputs: Inputs,
    *,
    group_by: str = "team",
    threshold: float = DEFAULT_THRESHOLD,
    prices: Prices | None = None,
    top: int = 10,
) -> Report:
    """The report: one row per group, the fleet total, the top idle workloads, and a timeline."""
    if group_by not in GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(GROUPS)}, not {group_by!r}")
    steps = list(inputs.steps)
    step_index = {t: i for i, t in enumerate(steps)}
    step_hours = inputs.step / 3600.0
    requests = _index(inputs.requests, step_index)
    labels = _index(inputs.pod_labels, step_index)
    engine = _index(inputs.engine_active, step_index)
    util = _index(inputs.gpu_util, step_index)
    engine_series = [_device_series(s.labels) for s in inputs.engine_active]
    util_series = [_device_series(s.labels) for s in inputs.gpu_util]
    request_series = [
        ((s.labels.get("namespace", ""), s.labels.get("pod", "")), s.labels.get("resource", ""))
        for s in inputs.requests
    ]
    label_series = [
        ((s.labels.get("namespace", ""), s.labels.get("pod", "")), _attribution(s.labels, ksm_label))
        for s in inputs.pod_labels
    ]
    notes: list[str] = []

    groups: dict[str, _Accumulator] = {}
    total = _Accumulator("total", len(steps))
    workloads: dict[str, Workload] = {}
    last_group: dict[Pod, str] = {}
    known_units: dict[Pod, list[_Unit]] = {}
    owners: dict[tuple[Pod, int, int], tuple[_Accumulator, Workload]] = {}
    unit_cache: dict[tuple[str, str, int, str], _Unit] = {}

    def owner(pod: Pod, ksm: dict[str, str] | None, dcgm: dict[str, str] | None) -> tuple[_Accumulator, Workload]:
        """The group and workload a pod's step is billed to (kube_pod_labels first, then dcgm-exporter's copies)."""
        cache_key = (pod, id(ksm), id(dcgm))
        found = owners.get(cache_key)
        if found is None:
            attribution = ksm or dcgm or {}
            team = attribution.get("team") or UNLABELLED
            cost_center = attribution.get("cost_center") or UNLABELLED
            kind = attribution.get("workload_kind") or "Pod"
            name = attribution.get("workload_name") or pod[1]
            workload_key = f"{pod[0]}/{kind}/{name}"
            workload = workloads.get(workload_key)
            if workload is None:
                workload = workloads[workload_key] = Workload(pod[0], kind, name, team, cost_center)
            group = {"team": team, "cost-center": cost_center, "namespace": pod[0], "workload": workload_key}[group_by]
            if group not in groups:
                groups[group] = _Accumulator(group, len(steps))
            found = owners[cache_key] = (groups[group], workload)
        return found

    for i in range(len(steps)):
        # Per device: the profiling value, the GPU_UTIL value, the pods holding it. Virtual-GPU mode copies
        # each field to every pod sharing the GPU (and keeps a device-level series); the copies carry the
        # same value, so the device's value is their maximum.
        prof: dict[DeviceKey, float] = {}
        dev: dict[DeviceKey, float] = {}
        # Outside virtual-GPU mode one series is one pod's: in a hand-over step each pod keeps its own value.
        prof_of_pod: dict[tuple[DeviceKey, Pod], float] = {}
        dev_of_pod: dict[tuple[DeviceKey, Pod], float] = {}
        meta: dict[DeviceKey, _DeviceSeries] = {}
        holders: dict[DeviceKey, set[Pod]] = defaultdict(set)
        virtual: set[DeviceKey] = set()
        dcgm_attribution: dict[Pod, dict[str, str]] = {}
        for samples, info, values, of_pod, scale in (
            (engine[i], engine_series, prof, prof_of_pod, 100.0),
            (util[i], util_series, dev, dev_of_pod, 1.0),
        ):
            for number, value in samples:
                series = info[number]
                key = series.key
                value *= scale
                if value > values.get(key, -1.0):
                    values[key] = value
                if key not in meta:
                    meta[key] = series
                if series.pod:
                    of_pod[key, series.pod] = value
                    holders[key].add(series.pod)
                    if series.virtual:
                        virtual.add(key)
                    if series.attribution:
                        dcgm_attribution[series.pod] = series.attribution

        pod_devices: dict[Pod, list[DeviceKey]] = defaultdict(list)
        for key in sorted(holders):
            for pod in holders[key]:
                pod_devices[pod].append(key)
        pod_requests: dict[Pod, list[str]] = defaultdict(list)
        for number, value in requests[i]:
            pod, resource = request_series[number]
            pod_requests[pod].extend([resource] * round(value))
        ksm_attribution: dict[Pod, dict[str, str] | None] = {}
        for number, _ in labels[i]:
            pod, attribution = label_series[number]
            # A labelled series wins over an unlabelled one (a kube-state-metrics replica without the
            # allowlist during a rollout), as in deploy/monitoring's namespace_pod:gpugate_attribution:info.
            if attribution or pod not in ksm_attribution:
                ksm_attribution[pod] = attribution

        for pod in sorted(pod_requests.keys() | pod_devices.keys()):
            accumulator, workload = owner(pod, ksm_attribution.get(pod), dcgm_attribution.get(pod))
            last_group[pod] = accumulator.row.group
            # The units the pod requested, one entry per unit; devices seen in telemetry use them up.
            units = sorted(pod_requests.get(pod, ()))
            seen: list[_Unit] = []
            for key in pod_devices.get(pod, ()):
                device = meta[key]
                sharers = len(holders[key])
                if device.profile:
                    wanted = (MIG_PREFIX + _SANITIZE.sub("_", device.profile), WHOLE)  # mixed, then single strategy
                    kind_of = device.profile
                else:
                    wanted = (WHOLE, SHARED) if sharers == 1 else (SHARED, WHOLE)
                    kind_of = "whole"
                for resource in wanted:
                    if resource in units:
                        units.remove(resource)
                        if resource == SHARED:
                            kind_of = "shared"
                        break
                # Several pods on one device in one step without dcgm-exporter's vgpu label is a hand-over
                # (one pod ended, the next started): the hours are split, but the GPU is not a shared one.
                if key in virtual and not device.profile:
                    kind_of = "shared"
                unit_key = (device.model, device.profile, sharers, kind_of)
                unit = unit_cache.get(unit_key)
                if unit is None:
                    fraction = mig_fraction(device.profile, model=device.model) if device.profile else 1.0
                    price = (
                        prices.device(model=device.model, profile=device.profile, fraction=fraction) if prices else None
                    )
                    # A device is counted once: pods that share it (time-slicing) split its hours evenly.
                    unit = unit_cache[unit_key] = _Unit(
                        kind=kind_of, share=fraction / sharers, price=price, price_share=1 / sharers
                    )
                seen.append(unit)
                own = key not in virtual and sharers > 1
                utilisation = prof_of_pod.get((key, pod)) if own else prof.get(key)
                source = SOURCE_PROF
                if utilisation is None:
                    utilisation, source = (dev_of_pod.get((key, pod)) if own else dev.get(key)), SOURCE_DEV
                _account(
                    unit,
                    accumulator,
                    workload,
                    held=(pod, key) if kind_of == "shared" else key,
                    index=i,
                    step_hours=step_hours,
                    utilisation=utilisation,
                    source=source,
                    threshold=threshold,
                )
            if seen:
                known_units[pod] = seen
            # Requested units no telemetry accounts for: allocated, but neither busy nor idle. What the pod's
            # devices were when last seen says what they are (a MIG slice under the single strategy is
            # requested as nvidia.com/gpu), else the resource name does.
            remembered = known_units.get(pod, [])[len(seen) :]
            for n, resource in enumerate(units):
                if n < len(remembered):
                    unit = remembered[n]
                elif resource.startswith(MIG_PREFIX):
                    fraction = mig_fraction(mig_profile_of(resource))
                    unit = _Unit(
                        kind=mig_profile_of(resource),
                        share=fraction,
                        price=prices.unknown(fraction=fraction) if prices else None,
                        price_share=1.0,
                    )
                else:
                    unit = _Unit(
                        kind="shared" if resource == SHARED else "whole",
                        share=1.0,
                        price=prices.unknown(fraction=1.0) if prices else None,
                        price_share=1.0,
                    )
                _account(
                    unit,
                    accumulator,
                    workload,
                    held=(pod, resource, n),
                    index=i,
                    step_hours=step_hours,
                    utilisation=None,
                    source="",
                    threshold=threshold,
                )
        for accumulator in groups.values():
            total.merge_step(accumulator)
            accumulator.close_step()
        total.close_step()

    for peak in inputs.memory_peak:
        pod = (peak.labels.get("namespace", ""), peak.labels.get("pod", ""))
        if pod not in last_group or not peak.samples:
            continue
        value = max(peak.samples.values())
        for row in (groups[last_group[pod]].row, total.row):
            row.peak_memory_mib = max(row.peak_memory_mib or 0.0, value)

    for accumulator in groups.values():
        total.merge(accumulator)
    priced = prices is not None
    rows = sorted(
        (acc.finish(priced=priced) for acc in groups.values()),
        key=lambda row: (-row.idle_hours, -row.allocated_hours, row.group),
    )
    total_row = total.finish(priced=priced)
    if total_row.allocated_hours and total_row.telemetry_share < 0.9:
        notes.append(
            f"only {100 * total_row.telemetry_share:.0f}% of allocated GPU-hours had telemetry; "
            "hours without it are neither busy nor idle"
        )
    if priced and total_row.unpriced_hours:
        notes.append(
            f"{total_row.unpriced_hours:.1f} GPU-hours have no price (add their model, profile or "
            "'default' to the price table)"
        )
    top_workloads = sorted((w for w in workloads.values() if w.idle_hours > 0), key=lambda w: (-w.idle_hours, w.key))[
        :top
    ]
    shown = [row.group for row in rows]
    timeline = Timeline(
        times=steps,
        allocated={name: groups[name].allocated for name in shown} | {"total": total.allocated},
        utilisation={
            name: _mean_series(acc.util_hours, acc.tele)
            for name, acc in [*((n, groups[n]) for n in shown), ("total", total)]
        },
    )
    return Report(
        start=steps[0] - inputs.step if steps else 0.0,
        end=steps[-1] if steps else 0.0,
        step=inputs.step,
        group_by=group_by,
        threshold=threshold,
        rows=rows,
        total=total_row,
        workloads=top_workloads,
        timeline=timeline,
        currency=prices.currency if prices else None,
        notes=notes,
    )


def _mean_series(weighted: Sequence[float], weights: Sequence[float]) -> list[float | None]:
    return [w / h if h else None for w, h in zip(weighted, weights, strict=True)]
