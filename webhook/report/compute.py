"""The report's figures from dcgm-exporter and kube-state-metrics series, integrated step by step (pure: no I/O).

Every evaluation time ``t`` of a range query stands for the interval ``(t - step, t]``. At each step the
GPUs a pod holds are joined to the pod's attribution labels *at that step*, so a pod that ended or was
renamed mid-window is billed for the steps it held GPUs, not for the window. The window arrives in chunks
of steps (:meth:`Integrator.add`); only sums per group, workload and bucket outlive a chunk, so memory is
bounded by groups and one chunk, not by series x steps. docs/report.md explains each rule and its source.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .accounting import (
    MIG_PREFIX,
    SHARED,
    SOURCE_DEV,
    SOURCE_PROF,
    WHOLE,
    Accumulator,
    Bucket,
    Prices,
    Row,
    Unit,
    Workload,
    mig_fraction,
    mig_profile_of,
    sanitize,
)
from .series import Labels, Series

DEFAULT_THRESHOLD = 10.0  # percent; a GPU busy less than this during a step is idle for that step
UNLABELLED = "unlabelled"
GROUPS = ("team", "cost-center", "workload", "namespace")
BUCKETS = {"1h": 3600, "1d": 86400}

# The per-pod label keys on kube_pod_labels (kube-state-metrics: "label_" + sanitised key) and on DCGM
# series (dcgm-exporter --kubernetes-enable-pod-labels: sanitised key, no prefix).
ATTRIBUTION_KEYS = ("team", "cost_center", "workload_kind", "workload_name")

__all__ = [
    "ATTRIBUTION_KEYS",
    "BUCKETS",
    "DEFAULT_THRESHOLD",
    "GROUPS",
    "UNLABELLED",
    "Inputs",
    "Integrator",
    "Prices",
    "Report",
    "Row",
    "Workload",
    "compute_report",
    "dcgm_label",
    "ksm_label",
    "mig_fraction",
    "mig_profile_of",
]


def ksm_label(key: str) -> str:
    return f"label_gpugate_io_{key}"


def dcgm_label(key: str) -> str:
    return f"gpugate_io_{key}"


@dataclass(frozen=True)
class Inputs:
    """One chunk of what the report is computed from; :mod:`webhook.report.queries` fetches it."""

    steps: Sequence[float]  # evaluation times, ascending; each stands for (t - step, t]
    step: float  # seconds
    requests: Sequence[Series]  # {namespace, pod, resource, node}: units requested by a Pending/Running bound pod
    pod_labels: Sequence[Series]  # kube_pod_labels {namespace, pod, label_gpugate_io_*}
    engine_active: Sequence[Series]  # DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio 0..1) {UUID, GPU_I_ID, ..., pod}
    gpu_util: Sequence[Series]  # DCGM_FI_DEV_GPU_UTIL (percent)
    memory_peak: Sequence[Series] = ()  # max DCGM_FI_DEV_FB_USED (MiB) over the window, per device and pod
    # Pods on device series that kube-state-metrics lists but that request no GPU: with honorLabels, the
    # series of a GPU nobody holds carry the exporter pod's own target labels. Those GPUs are unallocated.
    non_gpu_pods: Sequence[Series] = ()
    # node (dcgm-exporter's Hostname) -> (modelName, GPU_I_PROFILE) of its MIG instances over the window,
    # from the series index: under the single strategy a slice requested as nvidia.com/gpu is that profile.
    mig_nodes: Mapping[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class Capacity:
    """The fleet's GPU-hours as the bill has them: capacity = allocated + unallocated, per model and resource."""

    allocated_hours: float = 0.0
    unallocated_hours: float = 0.0
    allocated_cost: float = 0.0
    unallocated_cost: float = 0.0
    no_telemetry_cost: float = 0.0
    by_model: dict[str, dict[str, float]] = field(default_factory=dict)
    by_resource: dict[str, dict[str, float]] = field(default_factory=dict)
    # (model, kind) -> GPU-hours and unit-hours (device or replica held for an hour): the fleet's classes
    classes: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # How the fleet requests them: (model, kind) -> the Kubernetes resource name pods asked for
    requested_as: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def hours(self) -> float:
        return self.allocated_hours + self.unallocated_hours

    @property
    def cost(self) -> float:
        return self.allocated_cost + self.unallocated_cost

    def add(
        self, *, model: str, resource: str, hours: float, cost: float | None, allocated: bool, units: float = 0.0
    ) -> None:
        what = "allocated" if allocated else "unallocated"
        found = self.classes.setdefault((model, resource), [0.0, 0.0])
        found[0] += hours
        found[1] += units
        if allocated:
            self.allocated_hours += hours
            self.allocated_cost += cost or 0.0
        else:
            self.unallocated_hours += hours
            self.unallocated_cost += cost or 0.0
        for table, key in ((self.by_model, model or "unknown"), (self.by_resource, resource)):
            entry = table.setdefault(key, {})
            entry[f"{what}_hours"] = entry.get(f"{what}_hours", 0.0) + hours
            entry[f"{what}_cost"] = entry.get(f"{what}_cost", 0.0) + (cost or 0.0)


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
    capacity: Capacity = field(default_factory=Capacity)
    bucket: int | None = None
    buckets: dict[str, list[Bucket]] = field(default_factory=dict)  # "fleet" and each group
    all_workloads: list[Workload] = field(default_factory=list)
    recommendations: list[dict[str, Any]] | None = None  # --recommend (webhook/report/recommend.py)


Pod = tuple[str, str]
DeviceKey = tuple[str, str]


@dataclass(frozen=True)
class _DeviceSeries:
    """What one dcgm-exporter series says besides its values; worked out once per chunk, not at every step."""

    key: DeviceKey
    profile: str
    model: str
    host: str
    pod: Pod | None
    vgpu: str  # dcgm-exporter --kubernetes-virtual-gpus: the replica of a time-sliced GPU, else ""
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
        host=labels.get("Hostname", ""),
        pod=pod,
        vgpu=labels.get("vgpu", ""),
        attribution=_attribution(labels, dcgm_label),
    )


def _attribution(labels: Labels, name: object) -> dict[str, str] | None:
    """gpugate's labels on a series (kube_pod_labels' or dcgm-exporter's spelling), or None without a team."""
    spell = ksm_label if name is ksm_label else dcgm_label
    if not labels.get(spell("team")):
        return None
    return {key: labels.get(spell(key), "") for key in ATTRIBUTION_KEYS}


def _pod_of(labels: Labels) -> Pod:
    return (labels.get("namespace", ""), labels.get("pod", ""))


def _index(series: Sequence[Series], steps: Mapping[float, int]) -> list[list[tuple[int, float]]]:
    """Samples regrouped by step index (Prometheus returns them per series), as (series number, value)."""
    out: list[list[tuple[int, float]]] = [[] for _ in steps]
    for number, one in enumerate(series):
        for t, value in one.samples.items():
            index = steps.get(t)
            if index is not None and not math.isnan(value):
                out[index].append((number, value))
    return out


@dataclass
class _StepDevices:
    """What telemetry says about each device in one step."""

    prof: dict[DeviceKey, float] = field(default_factory=dict)  # the device's value (max over its copies)
    dev: dict[DeviceKey, float] = field(default_factory=dict)
    # Outside virtual-GPU mode one series is one pod's: in a hand-over step each pod keeps its own value.
    prof_of_pod: dict[tuple[DeviceKey, Pod], float] = field(default_factory=dict)
    dev_of_pod: dict[tuple[DeviceKey, Pod], float] = field(default_factory=dict)
    meta: dict[DeviceKey, _DeviceSeries] = field(default_factory=dict)
    # (pod, replica) per device: a pod holding two replicas of one time-sliced GPU holds two of its shares.
    holders: dict[DeviceKey, set[tuple[Pod, str]]] = field(default_factory=lambda: defaultdict(set))
    dcgm_attribution: dict[Pod, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Chunk:
    """One chunk's series, decoded once and indexed by step."""

    steps: list[float]
    requests: list[list[tuple[int, float]]]
    labels: list[list[tuple[int, float]]]
    engine: list[list[tuple[int, float]]]
    util: list[list[tuple[int, float]]]
    non_gpu: list[list[tuple[int, float]]]
    engine_series: list[_DeviceSeries]
    util_series: list[_DeviceSeries]
    request_series: list[tuple[Pod, str, str]]  # pod, resource, node
    label_series: list[tuple[Pod, dict[str, str] | None]]
    non_gpu_series: list[Pod]

    @classmethod
    def of(cls, inputs: Inputs) -> _Chunk:
        steps = list(inputs.steps)
        where = {t: i for i, t in enumerate(steps)}
        return cls(
            steps=steps,
            requests=_index(inputs.requests, where),
            labels=_index(inputs.pod_labels, where),
            engine=_index(inputs.engine_active, where),
            util=_index(inputs.gpu_util, where),
            non_gpu=_index(inputs.non_gpu_pods, where),
            engine_series=[_device_series(s.labels) for s in inputs.engine_active],
            util_series=[_device_series(s.labels) for s in inputs.gpu_util],
            request_series=[
                (_pod_of(s.labels), s.labels.get("resource", ""), s.labels.get("node", "")) for s in inputs.requests
            ],
            label_series=[(_pod_of(s.labels), _attribution(s.labels, ksm_label)) for s in inputs.pod_labels],
            non_gpu_series=[_pod_of(s.labels) for s in inputs.non_gpu_pods],
        )

    def devices(self, i: int) -> _StepDevices:
        """Per device: the profiling value, the GPU_UTIL value, the pods (and replicas) holding it. Virtual-GPU
        mode copies each field to every pod sharing the GPU; the copies carry the same value (GPU_UTIL per
        process is lower and loses), so the device's value is their maximum."""
        found = _StepDevices()
        exporters = {self.non_gpu_series[n] for n, _ in self.non_gpu[i]}
        for samples, info, values, of_pod, scale in (
            (self.engine[i], self.engine_series, found.prof, found.prof_of_pod, 100.0),
            (self.util[i], self.util_series, found.dev, found.dev_of_pod, 1.0),
        ):
            for number, raw in samples:
                series = info[number]
                key, value = series.key, raw * scale
                if value > values.get(key, -1.0):
                    values[key] = value
                found.meta.setdefault(key, series)
                # A pod kube-state-metrics lists that requests no GPU is not the GPU's user: it is the
                # exporter's own pod, its labels added by the scrape (honorLabels on a series without them).
                if series.pod and series.pod not in exporters:
                    of_pod[key, series.pod] = value
                    found.holders[key].add((series.pod, series.vgpu))
                    if series.attribution:
                        found.dcgm_attribution[series.pod] = series.attribution
        return found

    def pods(self, i: int) -> tuple[dict[Pod, list[str]], dict[Pod, str], dict[Pod, dict[str, str] | None]]:
        """Per pod in one step: the units it requested (one entry per unit), its node, its gpugate labels."""
        requested: dict[Pod, list[str]] = defaultdict(list)
        nodes: dict[Pod, str] = {}
        for number, value in self.requests[i]:
            pod, resource, node = self.request_series[number]
            requested[pod].extend([resource] * round(value))
            nodes[pod] = node
        attribution: dict[Pod, dict[str, str] | None] = {}
        for number, _ in self.labels[i]:
            pod, labels = self.label_series[number]
            # A labelled series wins over an unlabelled one (a kube-state-metrics replica without the
            # allowlist during a rollout), as in deploy/monitoring's namespace_pod:gpugate_attribution:info.
            if labels or pod not in attribution:
                attribution[pod] = labels
        return requested, nodes, attribution


class Integrator:
    """Integrates the window chunk by chunk (:meth:`add`), then :meth:`finish` makes the report."""

    def __init__(
        self,
        *,
        step: float,
        group_by: str = "team",
        threshold: float = DEFAULT_THRESHOLD,
        prices: Prices | None = None,
        top: int = 10,
        bucket: int | None = None,
        keep_timeline: bool = True,
    ) -> None:
        if group_by not in GROUPS:
            raise ValueError(f"group_by must be one of {', '.join(GROUPS)}, not {group_by!r}")
        self.step, self.group_by, self.threshold, self.prices = step, group_by, threshold, prices
        self.top, self.bucket, self.keep_timeline = top, bucket, keep_timeline
        self.step_hours = step / 3600.0
        self.times: list[float] = []
        self.groups: dict[str, Accumulator] = {}
        self.total = Accumulator("total")
        self.workloads: dict[str, Workload] = {}
        self.capacity = Capacity()
        self.fleet_buckets: dict[int, Bucket] = {}
        self.last_group: dict[Pod, tuple[str, str]] = {}  # pod -> (group, workload key)
        self.known_units: dict[Pod, list[Unit]] = {}
        self.time_sliced: set[str] = set()  # GPU UUIDs seen with dcgm-exporter's vgpu label, or requested as shared
        self.mig_nodes: dict[str, tuple[str, str]] = {}
        self.owners: dict[tuple[Pod, int, int], tuple[Accumulator, Workload]] = {}
        self.unit_cache: dict[tuple[str, str, int, str, int, str], Unit] = {}
        self.unknown_models: set[str] = set()

    # ---- one chunk ---------------------------------------------------------------------------

    def add(self, inputs: Inputs) -> None:
        chunk = _Chunk.of(inputs)
        # The owner cache is keyed by the ids of this chunk's label dicts; a freed dict's id can be reused.
        self.owners.clear()
        self.mig_nodes.update(inputs.mig_nodes)
        # A device is time-sliced for the whole window once any of its series says so, so that a step in
        # which one replica is idle or missing is not mistaken for a whole GPU handed from pod to pod.
        self.time_sliced.update(s.key[0] for s in (*chunk.engine_series, *chunk.util_series) if s.vgpu)
        for i, t in enumerate(chunk.steps):
            self.times.append(t)
            self._step(chunk, i, len(self.times) - 1, t)

    def _step(self, chunk: _Chunk, i: int, index: int, t: float) -> None:
        devices = chunk.devices(i)
        requested, nodes, ksm = chunk.pods(i)
        pod_devices: dict[Pod, list[DeviceKey]] = defaultdict(list)
        for key in sorted(devices.holders):
            for pod in sorted({pod for pod, _ in devices.holders[key]}):
                pod_devices[pod].append(key)
        for pod in sorted(requested.keys() | pod_devices.keys()):
            accumulator, workload = self._owner(pod, ksm.get(pod), devices.dcgm_attribution.get(pod))
            self.last_group[pod] = (accumulator.row.group, workload.key)
            units = sorted(requested.get(pod, ()))
            seen = self._bill_devices(pod, pod_devices.get(pod, ()), units, devices, accumulator, workload, index, t)
            if seen:
                self.known_units[pod] = seen
            self._bill_missing(pod, units, nodes.get(pod, ""), len(seen), accumulator, workload, index, t)
        self._bill_unallocated(devices, t)
        for accumulator in self.groups.values():
            self.total.merge_step(accumulator)
            accumulator.close_step()
        self.total.close_step()

    def _owner(self, pod: Pod, ksm: dict[str, str] | None, dcgm: dict[str, str] | None) -> tuple[Accumulator, Workload]:
        """The group and workload a pod's step is billed to (kube_pod_labels first, then dcgm-exporter's copies)."""
        cache_key = (pod, id(ksm), id(dcgm))
        found = self.owners.get(cache_key)
        if found is None:
            attribution = ksm or dcgm or {}
            team = attribution.get("team") or UNLABELLED
            cost_center = attribution.get("cost_center") or UNLABELLED
            kind = attribution.get("workload_kind") or "Pod"
            name = attribution.get("workload_name") or pod[1]
            key = f"{pod[0]}/{kind}/{name}"
            workload = self.workloads.get(key)
            if workload is None:
                workload = self.workloads[key] = Workload(pod[0], kind, name, team, cost_center)
            group = {"team": team, "cost-center": cost_center, "namespace": pod[0], "workload": key}[self.group_by]
            if group not in self.groups:
                self.groups[group] = Accumulator(group)
            found = self.owners[cache_key] = (self.groups[group], workload)
        return found

    def _unit(self, *, model: str, profile: str, sharers: int, kind: str, replicas: int = 1, node: str = "") -> Unit:
        """One device's unit as a pod holding ``replicas`` of its ``sharers`` shares is billed."""
        node = node if self.prices is not None and node in self.prices.per_node else ""
        cache_key = (model, profile, sharers, kind, replicas, node)
        unit = self.unit_cache.get(cache_key)
        if unit is None:
            fraction, known = mig_fraction(profile, model=model) if profile else (1.0, True)
            if not known:
                self.unknown_models.add(model or "(no modelName)")
            price = (
                self.prices.device(model=model, profile=profile, fraction=fraction, node=node) if self.prices else None
            )
            # A device is counted once: the replicas of a time-sliced GPU split its hours evenly.
            unit = self.unit_cache[cache_key] = Unit(
                kind=kind,
                share=fraction * replicas / sharers,
                price=price,
                price_share=replicas / sharers,
                model=model,
                fraction=fraction,
            )
        return unit

    def _bill_devices(
        self,
        pod: Pod,
        keys: Sequence[DeviceKey],
        units: list[str],
        devices: _StepDevices,
        accumulator: Accumulator,
        workload: Workload,
        index: int,
        t: float,
    ) -> list[Unit]:
        """Bill the devices telemetry shows the pod holding; each uses up the requested units it stands for."""
        seen: list[Unit] = []
        for key in keys:
            device = devices.meta[key]
            holders = devices.holders[key]
            replicas = sum(1 for holder, _ in holders if holder == pod)
            time_sliced = key[0] in self.time_sliced or any(v for _, v in holders)
            kind = device.profile or ("shared" if time_sliced else "whole")
            # mixed strategy names the profile; single strategy requests it as nvidia.com/gpu
            wanted = (MIG_PREFIX + sanitize(device.profile), WHOLE) if device.profile else (WHOLE, SHARED)
            if not device.profile and (time_sliced or len(holders) > 1):
                wanted = (SHARED, WHOLE)
            for _ in range(replicas):
                for resource in wanted:
                    if resource in units:
                        units.remove(resource)
                        if resource == SHARED:
                            kind = "shared"
                            self.time_sliced.add(key[0])
                        self.capacity.requested_as.setdefault((device.model, kind), resource)
                        break
            # Several pods on one device in one step of a GPU never seen time-sliced is a hand-over (one pod
            # ended, the next started): the hours are split, but the GPU is not a shared one.
            unit = self._unit(
                model=device.model,
                profile=device.profile,
                sharers=len(holders),
                kind=kind,
                replicas=replicas,
                node=device.host,
            )
            seen.extend([unit] * replicas)
            own = kind != "shared" and len(holders) > 1
            utilisation = devices.prof_of_pod.get((key, pod)) if own else devices.prof.get(key)
            source = SOURCE_PROF
            if utilisation is None:
                utilisation = devices.dev_of_pod.get((key, pod)) if own else devices.dev.get(key)
                source = SOURCE_DEV
            held: Hashable = (pod, key) if kind == "shared" else key
            for replica in range(1, replicas if kind == "shared" else 1):  # each replica a pod holds counts
                accumulator.counts[kind].add((pod, key, replica))
            self._account(
                unit, accumulator, workload, held=held, index=index, t=t, utilisation=utilisation, source=source
            )
            if utilisation is not None:
                workload.samples += 1
        return seen

    def _bill_missing(
        self,
        pod: Pod,
        units: list[str],
        node: str,
        seen: int,
        accumulator: Accumulator,
        workload: Workload,
        index: int,
        t: float,
    ) -> None:
        """Requested units no telemetry accounts for: allocated, but neither busy nor idle. What the pod's
        devices were when last seen says what they are; else the node's MIG instances (single strategy: a slice
        is requested as nvidia.com/gpu, never a whole GPU); else the resource name."""
        remembered = self.known_units.get(pod, [])[seen:]
        for n, resource in enumerate(units):
            if n < len(remembered):
                unit = remembered[n]
            elif resource.startswith(MIG_PREFIX):
                model = self.mig_nodes.get(node, ("", ""))[0]
                unit = self._unit(
                    model=model, profile=mig_profile_of(resource), sharers=1, kind=mig_profile_of(resource)
                )
            elif resource == WHOLE and node in self.mig_nodes:
                model, profile = self.mig_nodes[node]
                unit = self._unit(model=model, profile=profile, sharers=1, kind=profile, node=node)
            else:
                kind = "shared" if resource == SHARED else "whole"
                price = self.prices.unknown(fraction=1.0, node=node) if self.prices else None
                unit = Unit(kind=kind, share=1.0, price=price)
            self._account(
                unit, accumulator, workload, held=(pod, resource, n), index=index, t=t, utilisation=None, missing=True
            )

    def _bill_unallocated(self, devices: _StepDevices, t: float) -> None:
        """Devices telemetry shows that no pod holds: capacity nobody was allocated (the bill still has it). A
        whole-GPU series of a GPU whose MIG instances are reported is the parent, not more capacity."""
        partitioned: dict[str, float] = defaultdict(float)  # MIG parent UUID -> share its instances hold
        models: dict[str, tuple[str, str]] = {}
        for key, device in devices.meta.items():
            if key[1]:
                partitioned[key[0]] += mig_fraction(device.profile, model=device.model)[0]
                models[key[0]] = (device.model, device.host)
        for key, device in devices.meta.items():
            if devices.holders.get(key) or (not key[1] and key[0] in partitioned):
                continue
            unit = self._unit(
                model=device.model, profile=device.profile, sharers=1, kind=device.profile or "whole", node=device.host
            )
            resource = device.profile or ("shared" if key[0] in self.time_sliced else "whole")
            self._unallocated(model=device.model, resource=resource, share=unit.share, price=unit.price, t=t)
        # The bill has the whole GPU: what no MIG instance was created on is unallocated too.
        for uuid, share in partitioned.items():
            rest = max(0.0, 1.0 - share)
            if rest > 1e-9:
                model, host = models[uuid]
                price = self.prices.device(model=model, profile="", fraction=rest, node=host) if self.prices else None
                self._unallocated(model=model, resource="mig-unpartitioned", share=rest, price=price, t=t)

    def _unallocated(self, *, model: str, resource: str, share: float, price: float | None, t: float) -> None:
        hours = share * self.step_hours
        cost = None if price is None else price * self.step_hours
        self.capacity.add(
            model=model, resource=resource, hours=hours, cost=cost, allocated=False, units=self.step_hours
        )
        bucket = self._fleet_bucket(t)
        bucket.unallocated_hours += hours
        bucket.unallocated_cost += cost or 0.0

    def _fleet_bucket(self, t: float) -> Bucket:
        size = self.bucket or 0
        start = int((t - self.step) // size * size) if size else 0
        found = self.fleet_buckets.get(start)
        if found is None:
            found = self.fleet_buckets[start] = Bucket(float(start))
        return found

    def _account(
        self,
        unit: Unit,
        accumulator: Accumulator,
        workload: Workload,
        *,
        held: Hashable,
        index: int,
        t: float,
        utilisation: float | None,
        source: str = SOURCE_DEV,
        missing: bool = False,
    ) -> None:
        hours = unit.share * self.step_hours
        cost = None if unit.price is None else unit.price * self.step_hours * unit.price_share
        # What was held at once: a device counts once however many pods the step saw on it.
        accumulator.counts[unit.kind].add(held)
        idle = accumulator.add(
            index=index,
            hours=hours,
            utilisation=utilisation,
            source=source,
            threshold=self.threshold,
            cost=cost,
            bucket=self._bucket_start(t),
            timeline=self.keep_timeline,
        )
        workload.account(
            hours=hours, utilisation=utilisation, idle=idle, cost=cost, unit=unit, unit_hours=self.step_hours
        )
        self.capacity.add(
            model=unit.model, resource=unit.kind, hours=hours, cost=cost, allocated=True, units=self.step_hours
        )
        if missing:
            self.capacity.no_telemetry_cost += cost or 0.0
        bucket = self._fleet_bucket(t)
        bucket.allocated_hours += hours
        bucket.cost += cost or 0.0
        if utilisation is None:
            bucket.no_telemetry_hours += hours
        elif idle:
            bucket.idle_hours += hours
            bucket.idle_cost += cost or 0.0
        else:
            bucket.busy_hours += hours

    def _bucket_start(self, t: float) -> int | None:
        return int((t - self.step) // self.bucket * self.bucket) if self.bucket else None

    # ---- the report --------------------------------------------------------------------------

    def memory(self, peaks: Sequence[Series]) -> None:
        """Peak framebuffer memory per pod over the window, to the group and workload it was last seen in."""
        for peak in peaks:
            pod = _pod_of(peak.labels)
            if pod not in self.last_group or not peak.samples:
                continue
            value = max(peak.samples.values())
            group, workload = self.last_group[pod]
            for row in (self.groups[group].row, self.total.row):
                row.peak_memory_mib = max(row.peak_memory_mib or 0.0, value)
            found = self.workloads[workload]
            found.peak_memory_mib = max(found.peak_memory_mib or 0.0, value)

    def finish(self) -> Report:
        for accumulator in self.groups.values():
            self.total.merge(accumulator)
        priced = self.prices is not None
        rows = sorted(
            (acc.finish(priced=priced) for acc in self.groups.values()),
            key=lambda row: (-row.idle_hours, -row.allocated_hours, row.group),
        )
        total = self.total.finish(priced=priced)
        ranked = sorted(self.workloads.values(), key=lambda w: (-w.idle_hours, w.key))
        return Report(
            start=self.times[0] - self.step if self.times else 0.0,
            end=self.times[-1] if self.times else 0.0,
            step=self.step,
            group_by=self.group_by,
            threshold=self.threshold,
            rows=rows,
            total=total,
            workloads=[w for w in ranked if w.idle_hours > 0][: self.top],
            timeline=self._timeline(rows),
            currency=self.prices.currency if self.prices else None,
            notes=self._notes(total),
            capacity=self.capacity,
            bucket=self.bucket,
            buckets=self._buckets(),
            all_workloads=ranked,
        )

    def _timeline(self, rows: Sequence[Row]) -> Timeline:
        shown = [(row.group, self.groups[row.group]) for row in rows] + [("total", self.total)]
        return Timeline(
            times=self.times,
            allocated={name: acc.timeline_allocated(len(self.times)) for name, acc in shown},
            utilisation={name: acc.timeline_utilisation(len(self.times)) for name, acc in shown},
        )

    def _buckets(self) -> dict[str, list[Bucket]]:
        if not self.bucket:
            return {}
        out = {"fleet": [self.fleet_buckets[k] for k in sorted(self.fleet_buckets)]}
        for name, accumulator in sorted(self.groups.items()):
            out[name] = [accumulator.buckets[k] for k in sorted(accumulator.buckets)]
        return out

    def _notes(self, total: Row) -> list[str]:
        notes = []
        if total.allocated_hours and total.telemetry_share < 0.9:
            notes.append(
                f"only {100 * total.telemetry_share:.0f}% of allocated GPU-hours had telemetry; "
                "hours without it are neither busy nor idle"
            )
        if self.prices is not None and total.unpriced_hours:
            notes.append(
                f"{total.unpriced_hours:.1f} GPU-hours have no price (add their model, profile or "
                "'default' to the price table)"
            )
        if self.unknown_models:
            notes.append(
                f"MIG geometry of {', '.join(sorted(self.unknown_models))} is not known: a <g>g profile counts as "
                "g of 7 slices"
            )
        return notes


def compute_report(
    inputs: Inputs,
    *,
    group_by: str = "team",
    threshold: float = DEFAULT_THRESHOLD,
    prices: Prices | None = None,
    top: int = 10,
    bucket: int | None = None,
) -> Report:
    """The report of one chunk that holds the whole window (tests; the command streams chunks)."""
    integrator = Integrator(
        step=inputs.step, group_by=group_by, threshold=threshold, prices=prices, top=top, bucket=bucket
    )
    integrator.add(inputs)
    integrator.memory(inputs.memory_peak)
    return integrator.finish()
