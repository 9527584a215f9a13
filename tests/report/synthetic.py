"""A synthetic week of dcgm-exporter and kube-state-metrics series, written as OpenMetrics for promtool's backfill.

Series look as the exporters write them: dcgm-exporter's labels come from its exposition template
(NVIDIA/dcgm-exporter internal/pkg/rendermetrics/render_metrics.go: gpu, UUID, pci_bus_id, device,
modelName, GPU_I_PROFILE and GPU_I_ID on MIG instances, Hostname) plus the pod mapping
(internal/pkg/transformation/kubernetes.go: pod, namespace, container; in virtual-GPU mode one copy per
sharing pod and the device-level series kept). kube-state-metrics' come from internal/store/pod.go
(kube_pod_container_resource_requests{container, node, resource, unit}, kube_pod_status_phase{phase},
kube_pod_labels{label_*}).

Samples are written family by family, series by series, in time order: promtool 2.42's backfill drops
out-of-order samples within a 2-hour block without a word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

HOUR = 3600
WEEK = 7 * 24 * HOUR
START = int(datetime(2026, 11, 2, tzinfo=UTC).timestamp())  # a Monday, 00:00 UTC
END = START + WEEK
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

Value = Callable[[int], float | None]  # seconds since START -> value, or None for "no sample"


@dataclass
class SeriesSpec:
    name: str
    labels: dict[str, str]
    value: Value
    begin: int = 0  # seconds since START, inclusive
    end: int = WEEK  # exclusive
    interval: int = 60


@dataclass
class Fleet:
    series: list[SeriesSpec] = field(default_factory=list)
    length: int = WEEK  # seconds since START that write() covers by default

    def add(
        self,
        name: str,
        labels: dict[str, str],
        value: Value | float,
        *,
        begin: int = 0,
        end: int = WEEK,
        interval: int = 60,
    ) -> None:
        fn: Value = value if callable(value) else (lambda _t, v=float(value): v)  # type: ignore[misc]
        self.series.append(SeriesSpec(name, labels, fn, begin, end, interval))

    def pod(
        self,
        namespace: str,
        pod: str,
        *,
        node: str,
        resources: dict[str, int],
        attribution: dict[str, str] | None,
        phase: str = "Running",
        begin: int = 0,
        end: int = WEEK,
        interval: int = 60,
        phases: tuple[str, ...] = PHASES,
        pod_labels: dict[str, str] | None = None,
    ) -> None:
        """kube-state-metrics' series for one pod with one container; ``pod_labels`` are further allowlisted
        labels on its kube_pod_labels (already in kube-state-metrics' ``label_`` spelling)."""
        for resource, count in resources.items():
            self.add(
                "kube_pod_container_resource_requests",
                {
                    "namespace": namespace,
                    "pod": pod,
                    "uid": f"uid-{pod}",
                    "container": "main",
                    "node": node,
                    "resource": re.sub(r"[^a-zA-Z0-9_]", "_", resource),
                    "unit": "core" if resource == "cpu" else "integer",
                },
                count,
                begin=begin,
                end=end,
                interval=interval,
            )
        for one in phases:
            self.add(
                "kube_pod_status_phase",
                {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}", "phase": one},
                1.0 if one == phase else 0.0,
                begin=begin,
                end=end,
                interval=interval,
            )
        labels = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
        for key, value in (attribution or {}).items():
            labels[f"label_gpugate_io_{key}"] = value
        labels |= pod_labels or {}
        self.add("kube_pod_labels", labels, 1.0, begin=begin, end=end, interval=interval)

    def write(self, stream: TextIO, *, since: int = 0, until: int | None = None) -> int:
        """OpenMetrics text of the samples in [since, until) (seconds since START); returns their number."""
        until = self.length if until is None else until
        count = 0
        by_family: dict[str, list[SeriesSpec]] = {}
        for spec in self.series:
            by_family.setdefault(spec.name, []).append(spec)
        for name, specs in by_family.items():
            stream.write(f"# TYPE {name} gauge\n")
            for spec in specs:
                if spec.end <= since or spec.begin >= until:
                    continue
                label_text = ",".join(f'{k}="{v}"' for k, v in spec.labels.items())
                prefix = f"{name}{{{label_text}}} "
                lines = []
                first = (
                    spec.begin
                    if spec.begin >= since
                    else spec.begin + -(-(since - spec.begin) // spec.interval) * spec.interval
                )
                for t in range(first, min(spec.end, until), spec.interval):
                    value = spec.value(t)
                    if value is not None:
                        lines.append(f"{prefix}{value:g} {START + t}\n")
                stream.write("".join(lines))
                count += len(lines)
        stream.write("# EOF\n")
        return count


def dcgm_labels(
    *,
    gpu: int,
    uuid: str,
    model: str,
    host: str,
    pod: tuple[str, str] | None = None,
    mig: tuple[str, int] | None = None,
) -> dict[str, str]:
    labels = {
        "gpu": str(gpu),
        "UUID": uuid,
        "pci_bus_id": f"00000000:{gpu + 16:02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": model,
    }
    if mig:
        labels |= {"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])}
    labels["Hostname"] = host
    if pod:
        labels |= {"container": "main", "namespace": pod[0], "pod": pod[1]}
    return labels


def halves(first: float, second: float, *, at: int = WEEK // 2) -> Value:
    return lambda t: first if t < at else second


def with_gap(value: Value, *, gap: tuple[int, int]) -> Value:
    """No samples in [gap[0], gap[1]): the exporter was down."""
    return lambda t: None if gap[0] <= t < gap[1] else value(t)


A100, H100, T4, V100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla T4", "Tesla V100-SXM2-16GB"
GAP = (120 * HOUR, 126 * HOUR)  # node-a's dcgm-exporter is down for six hours on day 6


def small_fleet() -> Fleet:
    """The fleet whose answers tests/report/test_report.py checks (docs/report.md has the table)."""
    fleet = Fleet()

    def dcgm(metric: str, labels: dict[str, str], value: Value | float, **kw: int) -> None:
        fleet.add(metric, labels, value, **kw)

    def whole_gpu(
        gpu: int,
        *,
        host: str,
        model: str,
        pod: tuple[str, str] | None,
        util: Value,
        memory: float,
        prof: bool = True,
        gap: bool = False,
        begin: int = 0,
        end: int = WEEK,
    ) -> None:
        labels = dcgm_labels(gpu=gpu, uuid=f"GPU-{host}-{gpu}", model=model, host=host, pod=pod)
        fn = with_gap(util, gap=GAP) if gap else util
        if prof:
            dcgm(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                labels,
                lambda t: None if (value := fn(t)) is None else value / 100,
                begin=begin,
                end=end,
            )
        dcgm("DCGM_FI_DEV_GPU_UTIL", labels, fn, begin=begin, end=end)
        dcgm(
            "DCGM_FI_DEV_FB_USED", labels, with_gap(lambda _t: memory, gap=GAP) if gap else memory, begin=begin, end=end
        )

    vision = {"team": "vision", "cost_center": "cc-100", "workload_kind": "Deployment", "workload_name": "trainer"}
    nlp_serve = {"team": "nlp", "cost_center": "cc-200", "workload_kind": "Deployment", "workload_name": "serve"}
    nlp_job = {"team": "nlp", "cost_center": "cc-200", "workload_kind": "Job", "workload_name": "finetune"}
    research_nb = {
        "team": "research",
        "cost_center": "cc-300",
        "workload_kind": "StatefulSet",
        "workload_name": "notebook",
    }
    research_batch = {"team": "research", "cost_center": "cc-300", "workload_kind": "Job", "workload_name": "batch"}
    research_bob = {
        "team": "research",
        "cost_center": "cc-300",
        "workload_kind": "Deployment",
        "workload_name": "nb-bob",
    }
    platform = {"team": "platform", "cost_center": "cc-400", "workload_kind": "Deployment", "workload_name": "nb-alice"}

    # node-a: 8 x A100; its exporter has a six-hour gap.
    # A multi-GPU pod: two of its four GPUs work hard all week, two do nothing.
    fleet.pod("ml-vision", "trainer-0", node="node-a", resources={"nvidia.com/gpu": 4, "cpu": 8}, attribution=vision)
    for gpu, util in ((0, 90.0), (1, 90.0), (2, 0.0), (3, 0.0)):
        whole_gpu(
            gpu,
            host="node-a",
            model=A100,
            pod=("ml-vision", "trainer-0"),
            util=lambda _t, u=util: u,  # type: ignore[misc]
            memory=60000.0,
            gap=True,
        )
    # A team idle half the week: busy at 60% for 84 h, then 3%.
    fleet.pod("ml-nlp", "serve-0", node="node-a", resources={"nvidia.com/gpu": 1}, attribution=nlp_serve)
    whole_gpu(4, host="node-a", model=A100, pod=("ml-nlp", "serve-0"), util=halves(60.0, 3.0), memory=30000.0, gap=True)
    # A pod that ended mid-window (24 h to 60 h); afterwards its GPU is reported with no pod.
    fleet.pod(
        "ml-nlp",
        "finetune-x7k2p",
        node="node-a",
        resources={"nvidia.com/gpu": 1},
        attribution=nlp_job,
        begin=24 * HOUR,
        end=60 * HOUR,
    )
    whole_gpu(
        5,
        host="node-a",
        model=A100,
        pod=("ml-nlp", "finetune-x7k2p"),
        util=lambda _t: 70.0,
        memory=70000.0,
        begin=24 * HOUR,
        end=60 * HOUR,
    )
    whole_gpu(5, host="node-a", model=A100, pod=None, util=lambda _t: 0.0, memory=0.0, begin=60 * HOUR, gap=True)
    # A finished pod kube-state-metrics still lists (Succeeded): it holds no GPU.
    fleet.pod(
        "ml-nlp", "eval-1", node="node-a", resources={"nvidia.com/gpu": 1}, attribution=nlp_job, phase="Succeeded"
    )
    # A GPU nobody holds: nobody's, left out.
    whole_gpu(7, host="node-a", model=A100, pod=None, util=lambda _t: 0.0, memory=0.0, gap=True)

    # node-b: an A100 split with MIG, mixed strategy (nvidia.com/mig-3g.40gb). A 3g.40gb notebook idles.
    fleet.pod("research", "notebook-0", node="node-b", resources={"nvidia.com/mig-3g.40gb": 1}, attribution=research_nb)
    labels = dcgm_labels(
        gpu=0, uuid="GPU-node-b-0", model=A100, host="node-b", pod=("research", "notebook-0"), mig=("3g.40gb", 1)
    )
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.05)
    dcgm("DCGM_FI_DEV_FB_USED", labels, 8000.0)

    # node-e: an H100 with MIG, single strategy: slices are requested as nvidia.com/gpu. Two 1g.10gb at 50%.
    fleet.pod("research", "batch-0", node="node-e", resources={"nvidia.com/gpu": 2}, attribution=research_batch)
    for instance in (3, 4):
        labels = dcgm_labels(
            gpu=0,
            uuid="GPU-node-e-0",
            model=H100,
            host="node-e",
            pod=("research", "batch-0"),
            mig=("1g.10gb", instance),
        )
        dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.5)
        dcgm("DCGM_FI_DEV_FB_USED", labels, 9000.0)

    # node-c: a T4 time-sliced between two pods (nvidia.com/gpu.shared), exporter in virtual-GPU mode: each
    # field copied to both pods, the device-level series kept; GPU_UTIL per process (15% each, 30% device).
    fleet.pod("ml-dev", "nb-alice", node="node-c", resources={"nvidia.com/gpu.shared": 1}, attribution=platform)
    fleet.pod("ml-dev", "nb-bob", node="node-c", resources={"nvidia.com/gpu.shared": 1}, attribution=research_bob)
    device = dcgm_labels(gpu=0, uuid="GPU-node-c-0", model=T4, host="node-c")
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", device, 0.3)
    dcgm("DCGM_FI_DEV_GPU_UTIL", device, 30.0)
    for pod, vgpu in (("nb-alice", "0"), ("nb-bob", "1")):
        labels = dcgm_labels(gpu=0, uuid="GPU-node-c-0", model=T4, host="node-c", pod=("ml-dev", pod)) | {"vgpu": vgpu}
        dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.3)
        dcgm("DCGM_FI_DEV_GPU_UTIL", labels, 15.0)
        dcgm("DCGM_FI_DEV_FB_USED", labels, 4000.0)

    # Node prices: kube-state-metrics' kube_node_labels with the instance type allowlisted, and OpenCost's
    # node_gpu_hourly_cost per node. Priced only by a price table that asks for them (test_prices).
    fleet.add("kube_node_labels", {"node": "node-a", "label_node_kubernetes_io_instance_type": "p4d.24xlarge"}, 1.0)
    fleet.add("node_gpu_hourly_cost", {"node": "node-d", "instance_type": "p3.2xlarge"}, 1.5)

    # node-d: a pod admitted before gpugate (no gpugate labels); its exporter has no profiling fields, so
    # the report falls back to DCGM_FI_DEV_GPU_UTIL. 5% all week: idle.
    fleet.pod("legacy", "old-render-0", node="node-d", resources={"nvidia.com/gpu": 1}, attribution=None)
    whole_gpu(
        0, host="node-d", model=V100, pod=("legacy", "old-render-0"), util=lambda _t: 5.0, memory=12000.0, prof=False
    )
    return fleet


def gap_hours(*, step: int = 300) -> float:
    """Hours of steps that see no sample of a series with a gap (the step's window holds none)."""
    missing = [
        t
        for t in range(step, WEEK + 1, step)
        if not any(not (GAP[0] <= s < GAP[1]) for s in range(t - step, t + 1, 60) if 0 <= s < WEEK)
    ]
    return len(missing) * step / HOUR


# Hand-computed figures for small_fleet() over [START, END]; GPU-hours. g = hours lost to node-a's gap.
def expected(*, step: int = 300) -> dict[str, dict[str, float]]:
    g = gap_hours(step=step)
    return {
        "vision": {"allocated": 672, "busy": 2 * (168 - g), "idle": 2 * (168 - g), "no_telemetry": 4 * g, "whole": 4},
        "nlp": {"allocated": 168 + 36, "busy": 84 + 36, "idle": 84 - g, "no_telemetry": g, "whole": 2},
        "research": {
            "allocated": 3 / 7 * 168 + 2 / 7 * 168 + 84,
            "busy": 2 / 7 * 168 + 84,
            "idle": 3 / 7 * 168,
            "no_telemetry": 0,
            "whole": 0,
        },
        "platform": {"allocated": 84, "busy": 84, "idle": 0, "no_telemetry": 0, "whole": 0},
        "unlabelled": {"allocated": 168, "busy": 0, "idle": 168, "no_telemetry": 0, "whole": 1},
    }
