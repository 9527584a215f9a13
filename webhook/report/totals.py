"""The sums that outlive a chunk (per group, workload, bucket and the fleet's capacity), and the report made of them."""

from __future__ import annotations

from collections.abc import Sequence

from .accounting import Accumulator, Bucket, Prices, Row, Workload
from .chunk import pod_of
from .model import DEFAULT_THRESHOLD, GROUPS, Capacity, Pod, Report, Timeline
from .series import Series


class Totals:
    """What the integration adds up, step by step; :meth:`finish` makes the report of it."""

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
        weight_by_use: bool = False,
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
        self.unknown_models: set[str] = set()
        self.unknown_memory: set[str] = set()  # models whose framebuffer a KAI gpu-memory share needed
        self.overcommitted: set[str] = set()  # GPU UUIDs whose shares added up to more than the GPU
        # --weight-by-use: a time-sliced or MPS GPU's held part split by its pods' use, not by their replicas.
        # Device-steps of such GPUs held by several pods, by how they were split.
        self.weight_by_use = weight_by_use
        self.shared_steps = {"use": 0, "replicas": 0}

    def memory(self, peaks: Sequence[Series]) -> None:
        """Peak framebuffer memory per pod over the window, to the group and workload it was last seen in."""
        for peak in peaks:
            pod = pod_of(peak.labels)
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
            shared_gpus_split_by="use" if self.weight_by_use else "replicas",
            shared_gpu_steps=dict(self.shared_steps),
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
        if self.unknown_memory:
            notes.append(
                f"framebuffer of {', '.join(sorted(self.unknown_memory))} is not known: a KAI gpu-memory request there "
                "is billed the whole GPU"
            )
        if self.overcommitted:
            notes.append(
                f"{len(self.overcommitted)} GPU(s) were held by shares adding up to more than the GPU "
                f"({', '.join(sorted(self.overcommitted)[:3])}): their pods were billed in proportion to their shares"
            )
        evenly = self.shared_steps["replicas"]
        if self.weight_by_use and evenly:
            notes.append(
                f"--weight-by-use: {evenly:,} of {evenly + self.shared_steps['use']:,} steps of time-sliced or MPS "
                "GPUs held by several pods had no per-pod DCGM_FI_DEV_GPU_UTIL beside the device's (dcgm-exporter "
                "before 4.5.3-4.8.2 copies the device's value to every pod; run it with --kubernetes-virtual-gpus) "
                "or only zeros: those were split by replicas held"
            )
        if self.unknown_models:
            notes.append(
                f"MIG geometry of {', '.join(sorted(self.unknown_models))} is not known: a <g>g profile counts as "
                "g of 7 slices"
            )
        return notes
