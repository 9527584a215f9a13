"""The report's vocabulary: what it is computed from (:class:`Inputs`) and what it holds (:class:`Report`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .accounting import Bucket, Row, Workload
from .series import Series

DEFAULT_THRESHOLD = 10.0  # percent; a GPU busy less than this during a step is idle for that step
UNLABELLED = "unlabelled"
GROUPS = ("team", "cost-center", "workload", "namespace", "pod")
BUCKETS = {"1h": 3600, "1d": 86400}

# The per-pod label keys on kube_pod_labels (kube-state-metrics: "label_" + sanitised key) and on DCGM
# series (dcgm-exporter --kubernetes-enable-pod-labels: sanitised key, no prefix).
ATTRIBUTION_KEYS = ("team", "cost_center", "workload_kind", "workload_name")


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
    # Shares of one device that pods hold by what they asked for (docs/report.md, "Shared GPUs"):
    # HAMi's scheduler, {namespace, pod, device_uuid, node, dimension}: allocated / limit of the device (0..1)
    hami_shares: Sequence[Series] = ()
    # KAI's fractional pods {namespace, pod, annotation_gpu_fraction, annotation_gpu_memory, label_runai_gpu_group}
    kai_pods: Sequence[Series] = ()
    # KAI's multi-GPU fractional pods (gpu-fraction-num-devices > 1): their whole kube_pod_labels series, one
    # label_runai_gpu_group_<group> per GPU group (label runai-gpu-group/<group>), and their annotations
    kai_multi: Sequence[Series] = ()
    # KAI's reservation pods {namespace, pod, label_runai_gpu_group, annotation_run_ai_reserve_for_gpu_index}
    kai_reservations: Sequence[Series] = ()
    # kube_pod_resourceclaim_info of Pending/Running pods {namespace, pod, resourceclaim_name}
    dra_claims: Sequence[Series] = ()
    # (claim namespace, claim) -> the devices dcgm-exporter named with that claim in the window (series index):
    # ((UUID, GPU_I_ID, GPU_I_PROFILE, modelName, Hostname), ...)
    dra_devices: Mapping[tuple[str, str], tuple[tuple[str, str, str, str, str], ...]] = field(default_factory=dict)
    # node -> replicas per GPU of a time-sliced or MPS node (GPU Feature Discovery's nvidia.com/gpu.replicas)
    replicas: Mapping[str, int] = field(default_factory=dict)
    # kube_node_status_capacity {node, resource}: the GPU units each node advertised in the step
    node_capacity: Sequence[Series] = ()
    # gpugate serve's DRA series (webhook/serve/dra.py), from its ResourceClaim and ResourceSlice watches:
    # gpugate_dra_gpu_allocated of Pending/Running pods {namespace, pod (the claim's reservedFor), claim_name,
    # uuid, parent_uuid, profile, model, node, driver, pool, device}: a claim's device, with or without telemetry
    dra_allocated: Sequence[Series] = ()
    # gpugate_dra_gpu_device {node, driver, pool, device, uuid, parent_uuid, profile, model}: the GPU devices
    # ResourceSlices publish, each node's DRA capacity
    dra_capacity: Sequence[Series] = ()


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
    # The series besides dcgm-exporter's that devices were counted from (kube_node_status_capacity, gpugate's
    # gpugate_dra_gpu_device): a GPU none of them shows is in no figure
    sources: set[str] = field(default_factory=lambda: {"dcgm-exporter"})

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
    # How a time-sliced or MPS GPU's held part is split between its pods: "replicas" held, or "use"
    # (--weight-by-use); and the device-steps with several pods split each way
    shared_gpus_split_by: str = "replicas"
    shared_gpu_steps: dict[str, int] = field(default_factory=lambda: {"use": 0, "replicas": 0})


Pod = tuple[str, str]
DeviceKey = tuple[str, str]
