"""The PromQL behind ``gpugate report``, the checks that name a missing exporter setting, and the range split.

Only raw exporter series are read (kube-state-metrics and dcgm-exporter), never gpugate's recording
rules: those exist only from the day they were installed, and a report of last quarter must not
depend on that day.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from .chunk import host_of
from .compute import ATTRIBUTION_KEYS, Inputs, Prices, dcgm_label, ksm_label
from .prometheus import MAX_POINTS_PER_SERIES, Prometheus, PrometheusError, TooManySamples
from .series import Series

REQUESTS = "kube_pod_container_resource_requests"
PHASE = "kube_pod_status_phase"
POD_LABELS = "kube_pod_labels"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_RESOURCES = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
# Shared GPUs (docs/report.md "Shared GPUs"). HAMi's scheduler metrics (Project-HAMi/HAMi cmd/scheduler/metrics.go):
# per container and device what it was given, per device what there is to give.
HAMI_MEMORY = "hami_vgpu_memory_allocated_bytes"
HAMI_MEMORY_LIMIT = "hami_gpu_memory_limit_bytes"
HAMI_CORES = "hami_vgpu_core_allocated_ratio"
HAMI_CORES_LIMIT = "hami_gpu_core_limit_ratio"
# KAI-Scheduler (NVIDIA/KAI-Scheduler pkg/common/constants/constants.go, pkg/binder/binding/resourcereservation):
# a fractional pod's annotations gpu-fraction / gpu-memory and label runai-gpu-group; the group's reservation pod
# holds the GPU and names it in run.ai/reserve_for_gpu_index. kube-state-metrics exports them once allowlisted.
POD_ANNOTATIONS = "kube_pod_annotations"
KAI_GROUP = "label_runai_gpu_group"
KAI_FRACTION = "annotation_gpu_fraction"
KAI_MEMORY = "annotation_gpu_memory"
KAI_RESERVED = "annotation_run_ai_reserve_for_gpu_index"
# A multi-GPU fractional pod (annotation gpu-fraction-num-devices > 1) has no runai-gpu-group label but one
# runai-gpu-group/<group> label per GPU (pkg/common/resources/gpu_sharing.go GetMultiFractionGpuGroupLabel,
# pkg/binder/binding/resourcereservation updatePodGPUGroup): kube-state-metrics names them label_runai_gpu_group_*.
KAI_MULTI_GROUP_PREFIX = KAI_GROUP + "_"
# kube-state-metrics' pod -> ResourceClaim link (internal/store/pod.go, alpha); dcgm-exporter's DRA labels
# (--kubernetes-enable-dra, internal/pkg/transformation/const.go) name the claim of the device they map.
POD_CLAIMS = "kube_pod_resourceclaim_info"
NODE_LABELS = "kube_node_labels"
# What each node advertises (kube-state-metrics internal/store/node.go: kube_node_status_capacity{node, resource}).
NODE_CAPACITY = "kube_node_status_capacity"
REPLICAS_LABEL = "label_nvidia_com_gpu_replicas"
# gpugate serve's own DRA series (webhook/serve/dra.py, docs/report.md "DRA without telemetry"): per device a
# ResourceClaim was allocated and pod it is reserved for, and per GPU device a ResourceSlice publishes.
DRA_ALLOCATED = "gpugate_dra_gpu_allocated"
DRA_DEVICE = "gpugate_dra_gpu_device"
DRA_DEVICE_LABELS = "uuid, parent_uuid, profile, model, node, driver, pool, device"
ALLOWLIST = (
    "--metric-labels-allowlist=pods=[gpugate.io/team,gpugate.io/cost-center,"
    "gpugate.io/workload-kind,gpugate.io/workload-name]"
)
# Leave head room below the server's hard limit.
CHUNK_POINTS = MAX_POINTS_PER_SERIES - 1_000
# Points (series x steps, over the five range queries) one chunk of steps should hold: about 200 MB of
# Python objects while the chunk is integrated.
POINT_BUDGET = 1_000_000

Progress = Callable[[int, int, str], None]


class ReportError(Exception):
    """The report cannot be made; the message says what is missing and how to fix it."""


def _device_labels() -> str:
    pod_labels = ", ".join(dcgm_label(key) for key in ATTRIBUTION_KEYS)
    return (
        f"UUID, uuid, GPU_I_ID, GPU_I_PROFILE, modelName, Hostname, hostname, namespace, pod, vgpu, dra_claim_name, "
        f"{pod_labels}"
    )


def requests_query(step: int) -> str:
    """GPU units per pod and resource, for pods bound to a node and Pending (pulling images, already holding
    the GPU) or Running, as kubernetes-mixin counts requests; max by container first so that two
    kube-state-metrics replicas scraped side by side do not count twice. Only app containers:
    kube-state-metrics exports no init-container requests in this metric (internal/store/pod.go)."""
    return f"""
sum by (namespace, pod, resource, node) (
  max by (namespace, pod, container, resource, node) (
    max_over_time({REQUESTS}{{resource=~"{GPU_RESOURCES}", node!=""}}[{step}s])
  )
)
* on (namespace, pod) group_left ()
(max by (namespace, pod) (max_over_time({PHASE}{{phase=~"Pending|Running"}}[{step}s])) == 1)
""".strip()


def labels_query(step: int, *, kai: bool = False) -> str:
    """gpugate's labels of every pod that requested a GPU in the step, or held one without a GPU request: a
    KAI fractional pod (its GPU group label; with ``kai``, its fraction annotation too, as a multi-GPU fractional
    pod has no runai-gpu-group label) or a pod with a DRA ResourceClaim (kube-state-metrics' link, or gpugate's
    own series of the claim's allocation)."""
    keys = ", ".join(ksm_label(key) for key in ATTRIBUTION_KEYS)
    fractional = (
        f"""
  or max by (namespace, pod) (max_over_time({POD_ANNOTATIONS}{{{KAI_FRACTION}!=""}}[{step}s]))
  or max by (namespace, pod) (max_over_time({POD_ANNOTATIONS}{{{KAI_MEMORY}!=""}}[{step}s]))"""
        if kai
        else ""
    )
    return f"""
max by (namespace, pod, {keys}) (max_over_time({POD_LABELS}[{step}s]))
and on (namespace, pod)
(
  max by (namespace, pod) (max_over_time({REQUESTS}{{resource=~"{GPU_RESOURCES}"}}[{step}s]))
  or max by (namespace, pod) (max_over_time({POD_LABELS}{{{KAI_GROUP}!=""}}[{step}s])){fractional}
  or max by (namespace, pod) (max_over_time({POD_CLAIMS}[{step}s]))
  or label_replace(
    label_replace(
      max by (claim_namespace, claim_pod) (max_over_time({DRA_ALLOCATED}{{claim_pod!=""}}[{step}s])),
      "namespace", "$1", "claim_namespace", "(.*)"
    ),
    "pod", "$1", "claim_pod", "(.*)"
  )
)
""".strip()


def non_gpu_pods_query(step: int) -> str:
    """Pods named on dcgm-exporter series that kube-state-metrics lists but that request no GPU. With
    honorLabels a GPU nobody holds has no pod label of its own, so the scrape adds the exporter pod's: those
    series are the exporter's, and their GPUs are unallocated, not held (docs/report.md)."""
    return f"""
group by (namespace, pod) (
  max_over_time({GPU_UTIL}{{pod!=""}}[{step}s]) or max_over_time({ENGINE_ACTIVE}{{pod!=""}}[{step}s])
)
and on (namespace, pod) group by (namespace, pod) (max_over_time({PHASE}[{step}s]))
unless on (namespace, pod)
group by (namespace, pod) (max_over_time({REQUESTS}{{resource=~"{GPU_RESOURCES}"}}[{step}s]))
""".strip()


def _holding(step: int) -> str:
    """Pods bound and Pending or Running in the step, as the requests query keeps them."""
    return f'(max by (namespace, pod) (max_over_time({PHASE}{{phase=~"Pending|Running"}}[{step}s])) == 1)'


def hami_query(step: int) -> str:
    """Per pod and device, HAMi's allocation over the device's limit, for memory and for cores (the pod pays
    the larger: a device is full when either is). Summed over the pod's containers on the device."""
    parts = []
    for dimension, allocated, limit in (
        ("memory", HAMI_MEMORY, HAMI_MEMORY_LIMIT),
        ("cores", HAMI_CORES, HAMI_CORES_LIMIT),
    ):
        parts.append(
            f"""label_replace(
  sum by (namespace, pod, device_uuid, node) (
    max by (namespace, pod, container_index, device_uuid, node) (max_over_time({allocated}[{step}s]))
  )
  / on (device_uuid) group_left ()
  (max by (device_uuid) (max_over_time({limit}[{step}s])) > 0),
  "dimension", "{dimension}", "", ""
)"""
        )
    return f"(\n{parts[0]}\nor\n{parts[1]}\n)\n* on (namespace, pod) group_left ()\n{_holding(step)}"


def kai_pods_query(step: int) -> str:
    """KAI's fractional pods: their gpu-fraction or gpu-memory annotation and their GPU group."""
    return f"""
max by (namespace, pod, {KAI_FRACTION}, {KAI_MEMORY}) (
  max_over_time({POD_ANNOTATIONS}{{{KAI_FRACTION}!=""}}[{step}s])
  or max_over_time({POD_ANNOTATIONS}{{{KAI_MEMORY}!=""}}[{step}s])
)
* on (namespace, pod) group_left ({KAI_GROUP})
max by (namespace, pod, {KAI_GROUP}) (max_over_time({POD_LABELS}{{{KAI_GROUP}!=""}}[{step}s]))
* on (namespace, pod) group_left ()
{_holding(step)}
""".strip()


def kai_multi_query(step: int) -> str:
    """KAI's fractional pods without a runai-gpu-group label, with their fraction or memory annotation: the
    multi-GPU ones carry a runai-gpu-group/<group> label per GPU, whose names PromQL cannot aggregate by, so the
    pods' whole kube_pod_labels series come back (one per kube-state-metrics replica; the report dedups)."""
    return f"""
max_over_time({POD_LABELS}{{{KAI_GROUP}=""}}[{step}s])
* on (namespace, pod) group_left ({KAI_FRACTION}, {KAI_MEMORY})
(
  max by (namespace, pod, {KAI_FRACTION}, {KAI_MEMORY}) (
    max_over_time({POD_ANNOTATIONS}{{{KAI_FRACTION}!=""}}[{step}s])
    or max_over_time({POD_ANNOTATIONS}{{{KAI_MEMORY}!=""}}[{step}s])
  )
  * on (namespace, pod) group_left ()
  {_holding(step)}
)
""".strip()


def kai_reservations_query(step: int) -> str:
    """KAI's reservation pods: the GPU group each holds a GPU for, and that GPU's UUID."""
    return f"""
max by (namespace, pod, {KAI_RESERVED}) (max_over_time({POD_ANNOTATIONS}{{{KAI_RESERVED}!=""}}[{step}s]))
* on (namespace, pod) group_left ({KAI_GROUP})
max by (namespace, pod, {KAI_GROUP}) (max_over_time({POD_LABELS}{{{KAI_GROUP}!=""}}[{step}s]))
""".strip()


def node_capacity_query(step: int) -> str:
    """The GPU units each node advertised in the step (whole GPUs, replicas, MIG instances)."""
    return f'max by (node, resource) (max_over_time({NODE_CAPACITY}{{resource=~"{GPU_RESOURCES}"}}[{step}s]))'


def dra_claims_query(step: int) -> str:
    """The ResourceClaims of Pending/Running pods (kube-state-metrics' kube_pod_resourceclaim_info)."""
    return f"""
max by (namespace, pod, resourceclaim_name) (max_over_time({POD_CLAIMS}{{resourceclaim_name!=""}}[{step}s]))
* on (namespace, pod) group_left ()
{_holding(step)}
""".strip()


def dra_allocated_query(step: int) -> str:
    """The devices of allocated ResourceClaims, per pod the claim is reserved for, while that pod is Pending or
    Running (gpugate_dra_gpu_allocated; its value is the claim's share of the device, and share_id tells the
    shares of one device apart). Its claim_namespace and claim_pod become namespace and pod here, so that
    the scrape's own target labels (gpugate's pod) never stand in for them; max by drops those and merges the
    series of gpugate's replicas, which all export the same."""
    return f"""
label_replace(
  label_replace(
    max by (claim_namespace, claim_name, claim_pod, share_id, {DRA_DEVICE_LABELS}) (
      max_over_time({DRA_ALLOCATED}{{claim_pod!=""}}[{step}s])
    ),
    "namespace", "$1", "claim_namespace", "(.*)"
  ),
  "pod", "$1", "claim_pod", "(.*)"
)
* on (namespace, pod) group_left ()
{_holding(step)}
""".strip()


def dra_capacity_query(step: int) -> str:
    """The GPU devices ResourceSlices published in the step (gpugate_dra_gpu_device), one series per device."""
    return f"max by ({DRA_DEVICE_LABELS}) (max_over_time({DRA_DEVICE}[{step}s]))"


def device_query(metric: str, step: int) -> str:
    """One series per device (GPU UUID, MIG instance) and pod; the step's mean smooths scrape jitter."""
    return f"max by ({_device_labels()}) (avg_over_time({metric}[{step}s]))"


def memory_query(window: int) -> str:
    return f'max by (namespace, pod, UUID, uuid, GPU_I_ID) (max_over_time({FB_USED}{{pod!=""}}[{window}s]))'


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chunks(first: int, last: int, step: int, *, points: int) -> list[tuple[int, int]]:
    """[first, last] split into ranges of at most ``points`` evaluation times each."""
    out = []
    start = first
    while start <= last:
        end = min(last, start + (points - 1) * step)
        out.append((start, end))
        start = end + step
    return out


def preflight(prometheus: Prometheus, *, start: int, end: int) -> list[str]:
    """Fail early, naming the exporter or flag, when a series the report needs is missing; else notes."""
    match = f'{{__name__=~"{REQUESTS}|{PHASE}|{POD_LABELS}|{ENGINE_ACTIVE}|{GPU_UTIL}|{FB_USED}"}}'
    names = set(prometheus.label_values("__name__", match=match, start=start, end=end))
    if not names:
        ever = prometheus.label_values("__name__", match=match)
        if ever:
            raise ReportError(
                f"empty window: Prometheus at {prometheus.url} has no kube-state-metrics or "
                f"dcgm-exporter samples between {iso(start)} and {iso(end)} (check --end and --window)"
            )
        raise ReportError(
            f"Prometheus at {prometheus.url} has no kube-state-metrics or dcgm-exporter series at "
            "all: scrape both (see docs/report.md)"
        )
    for metric in (REQUESTS, PHASE, POD_LABELS):
        if metric not in names:
            raise ReportError(
                f"{metric} is missing between {iso(start)} and {iso(end)}: scrape kube-state-metrics "
                "with its pods collector on (it is on by default)"
            )
    if ENGINE_ACTIVE not in names and GPU_UTIL not in names:
        raise ReportError(
            f"neither {ENGINE_ACTIVE} nor {GPU_UTIL} is in Prometheus between {iso(start)} and "
            f"{iso(end)}: scrape dcgm-exporter and keep at least one of them in its counters CSV (-f)"
        )
    notes = []
    if ENGINE_ACTIVE not in names:
        notes.append(
            f"{ENGINE_ACTIVE} is missing: using {GPU_UTIL}, which has no value per MIG instance; add "
            f"{ENGINE_ACTIVE} to dcgm-exporter's counters CSV (-f)"
        )
    if FB_USED not in names:
        notes.append(f"{FB_USED} is missing: no peak GPU memory; add it to dcgm-exporter's counters CSV (-f)")
    resources = prometheus.label_values("resource", match=REQUESTS, start=start, end=end)
    if not any(r == "nvidia_com_gpu" or r.startswith("nvidia_com_") for r in resources):
        raise ReportError(f"empty window: no pod requested an nvidia.com GPU between {iso(start)} and {iso(end)}")
    dcgm = f'{{__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}"}}'
    if not prometheus.label_values("pod", match=dcgm, start=start, end=end):
        if prometheus.label_values("exported_pod", match=dcgm, start=start, end=end):
            raise ReportError(
                "dcgm-exporter's pod label arrives as exported_pod: scrape dcgm-exporter with "
                "honorLabels: true (ServiceMonitor) / honor_labels: true, so that pod names the GPU's "
                "user"
            )
        raise ReportError(
            "dcgm-exporter series carry no pod label: run dcgm-exporter with --kubernetes "
            "(DCGM_EXPORTER_KUBERNETES=true) so that each GPU names the pod holding it"
        )
    return notes + _attribution_notes(prometheus, start=start, end=end)


def _attribution_notes(prometheus: Prometheus, *, start: int, end: int) -> list[str]:
    """Where gpugate's labels come from: kube_pod_labels (the allowlist), else dcgm-exporter's copies."""
    notes = []
    dcgm = f'{{__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}"}}'
    if not prometheus.label_values(ksm_label("team"), match=POD_LABELS, start=start, end=end):
        if prometheus.label_values(dcgm_label("team"), match=dcgm, start=start, end=end):
            notes.append(
                f"kube_pod_labels has no gpugate.io labels; using dcgm-exporter's copies (set {ALLOWLIST} "
                "on kube-state-metrics to attribute GPUs without telemetry too)"
            )
        else:
            notes.append(
                f"no pod carries gpugate.io labels in kube_pod_labels: every GPU counts as unlabelled; "
                f"start kube-state-metrics with {ALLOWLIST}"
            )
    return notes


def node_prices(prometheus: Prometheus, prices: Prices, *, start: int, end: int, notes: list[str]) -> Prices:
    """The price per GPU-hour of each node: its mean over the window of the per-node price series (e.g.
    OpenCost's node_gpu_hourly_cost{node}), else the price of its node label's value (kube_node_labels,
    kube-state-metrics with --metric-labels-allowlist=nodes=[<label>])."""
    per_node: dict[str, float] = {}
    if prices.node_label:
        name = "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", prices.node_label)
        found = prometheus.series(f'kube_node_labels{{{name}!=""}}', start=start, end=end)
        for labels in found:
            price = prices.per_label_value.get(labels.get(name, ""))
            if labels.get("node") and price is not None:
                per_node[labels["node"]] = price
        if not found:
            notes.append(
                f"no kube_node_labels series carries {prices.node_label}: byNodeLabel prices nothing; start "
                f"kube-state-metrics with --metric-labels-allowlist=nodes=[{prices.node_label}]"
            )
    if prices.node_series:
        series = prometheus.query(f"avg by (node) (avg_over_time({prices.node_series}[{end - start}s]))", at=end)
        for one in series:
            if one.labels.get("node") and one.samples:
                per_node[one.labels["node"]] = next(iter(one.samples.values()))
        if not series:
            notes.append(f"{prices.node_series} has no series with a node label in the window: it prices nothing")
    return dataclasses.replace(prices, per_node=per_node)


def mig_nodes(prometheus: Prometheus, *, start: int, end: int) -> dict[str, tuple[str, str]]:
    """node -> (modelName, GPU_I_PROFILE) of the MIG instances dcgm-exporter reported there in the window,
    from the series index (cheap over any range). Under the single strategy every instance of a node has
    one profile; a node showing several is taken by its first and needs no fallback often (the mixed
    strategy names the profile in the request)."""
    found: dict[str, tuple[str, str]] = {}
    for labels in prometheus.series(
        f'{{__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}|{FB_USED}", GPU_I_PROFILE!=""}}', start=start, end=end
    ):
        host = host_of(labels)
        if host and host not in found:
            found[host] = (labels.get("modelName", ""), labels.get("GPU_I_PROFILE", ""))
    return found


def dra_devices(
    prometheus: Prometheus, *, start: int, end: int
) -> dict[tuple[str, str], tuple[tuple[str, str, str, str, str], ...]]:
    """(claim namespace, claim) -> the devices dcgm-exporter named with that claim in the window, from the series
    index: a claim's device stays known in the steps its telemetry is missing."""
    found: dict[tuple[str, str], set[tuple[str, str, str, str, str]]] = {}
    for labels in prometheus.series(
        f'{{__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}|{FB_USED}", dra_claim_name!=""}}', start=start, end=end
    ):
        claim = (labels.get("dra_claim_namespace") or labels.get("namespace", ""), labels["dra_claim_name"])
        device = (
            labels.get("UUID") or labels.get("uuid") or "",
            labels.get("GPU_I_ID", ""),
            labels.get("GPU_I_PROFILE", ""),
            labels.get("modelName", ""),
            host_of(labels),
        )
        if device[0]:
            found.setdefault(claim, set()).add(device)
    return {claim: tuple(sorted(devices)) for claim, devices in found.items()}


def node_replicas(prometheus: Prometheus, *, start: int, end: int) -> dict[str, int]:
    """node -> replicas per GPU of its time-sliced or MPS GPUs: GPU Feature Discovery's nvidia.com/gpu.replicas
    node label (NVIDIA/k8s-device-plugin internal/lm/resource.go), in kube_node_labels once allowlisted."""
    out: dict[str, int] = {}
    for labels in prometheus.series(f'{NODE_LABELS}{{{REPLICAS_LABEL}!=""}}', start=start, end=end):
        try:
            replicas = int(labels.get(REPLICAS_LABEL, ""))
        except ValueError:
            continue
        if labels.get("node") and replicas > 1:
            out[labels["node"]] = replicas
    return out


def _sharing_plan(prometheus: Prometheus, *, start: int, end: int, step: int, claims: bool) -> list[tuple[str, str]]:
    """The shared-GPU queries, only where their series exist in the window (the label index says, cheaply)."""
    plan = []
    match = f'{{__name__=~"{HAMI_MEMORY}|{POD_ANNOTATIONS}|{POD_CLAIMS}|{NODE_CAPACITY}|{DRA_ALLOCATED}|{DRA_DEVICE}"}}'
    present = set(prometheus.label_values("__name__", match=match, start=start, end=end))
    if HAMI_MEMORY in present:
        plan.append(("hami", hami_query(step)))
    kai = POD_ANNOTATIONS in present and prometheus.label_values(
        KAI_RESERVED, match=POD_ANNOTATIONS, start=start, end=end
    )
    if kai:
        plan += [
            ("kai", kai_pods_query(step)),
            ("kai multi", kai_multi_query(step)),
            ("kai reservations", kai_reservations_query(step)),
        ]
    if POD_CLAIMS in present and claims:
        plan.append(("dra", dra_claims_query(step)))
    if NODE_CAPACITY in present:
        plan.append(("node capacity", node_capacity_query(step)))
    if DRA_ALLOCATED in present:
        plan.append(("dra allocations", dra_allocated_query(step)))
    if DRA_DEVICE in present:
        plan.append(("dra capacity", dra_capacity_query(step)))
    return plan


def _plan(step: int, sharing: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The five range queries every report runs, then those of shared GPUs (the labels of KAI's pods with them)."""
    return [
        ("requests", requests_query(step)),
        ("labels", labels_query(step, kai=any(name == "kai" for name, _ in sharing))),
        ("exporter pods", non_gpu_pods_query(step)),
        ("engine", device_query(ENGINE_ACTIVE, step)),
        ("util", device_query(GPU_UTIL, step)),
        *sharing,
    ]


def stream_inputs(
    prometheus: Prometheus,
    *,
    start: int,
    end: int,
    step: int,
    progress: Progress | None = None,
    budget: int = POINT_BUDGET,
) -> Iterator[Inputs]:
    """Every series the report needs, for evaluation times start+step, ..., end, one chunk of steps at a time:
    each chunk is sized so that its answers hold about ``budget`` points, from the points per step the last
    chunk returned. Memory is one chunk's, however long the window and however many GPUs."""
    first = start + step
    steps = list(range(first, end + 1, step))
    if not steps:
        raise ReportError(f"--window is shorter than --step ({step} s): nothing to report")
    nodes = mig_nodes(prometheus, start=start, end=end)
    replicas = node_replicas(prometheus, start=start, end=end)
    claims = dra_devices(prometheus, start=start, end=end)
    plan = _plan(step, _sharing_plan(prometheus, start=start, end=end, step=step, claims=bool(claims)))
    size, done = min(len(steps), max(1, 3600 // step), CHUNK_POINTS), 0
    while done < len(steps):
        chunk = steps[done : done + size]
        results: dict[str, list[Series]] = {}
        for name, promql in plan:
            if progress:
                progress(done, len(steps), f"{name} {iso(chunk[0])}..{iso(chunk[-1])}")
            results[name] = _range(prometheus, promql, start=chunk[0], end=chunk[-1], step=step)
        points = sum(len(s.samples) for found in results.values() for s in found)
        yield Inputs(
            steps=chunk,
            step=step,
            requests=results["requests"],
            pod_labels=results["labels"],
            engine_active=results["engine"],
            gpu_util=results["util"],
            non_gpu_pods=results["exporter pods"],
            mig_nodes=nodes,
            hami_shares=results.get("hami", ()),
            kai_pods=results.get("kai", ()),
            kai_multi=results.get("kai multi", ()),
            kai_reservations=results.get("kai reservations", ()),
            dra_claims=results.get("dra", ()),
            dra_devices=claims,
            replicas=replicas,
            node_capacity=results.get("node capacity", ()),
            dra_allocated=results.get("dra allocations", ()),
            dra_capacity=results.get("dra capacity", ()),
        )
        done += len(chunk)
        per_step = max(1.0, points / len(chunk))
        size = max(1, min(CHUNK_POINTS, int(budget / per_step)))
    if progress:
        progress(len(steps), len(steps), "done")


def memory_peaks(prometheus: Prometheus, *, start: int, end: int, notes: list[str]) -> list[Series]:
    """max DCGM_FI_DEV_FB_USED per device and pod over the window (one instant query)."""
    try:
        return prometheus.query(memory_query(end - start), at=end)
    except TooManySamples:
        notes.append(
            f"no peak GPU memory: {FB_USED} over the whole window exceeds the server's "
            "--query.max-samples; use a shorter --window"
        )
        return []


def _range(prometheus: Prometheus, promql: str, *, start: int, end: int, step: int) -> list[Series]:
    """A range query; a range that would load more than --query.max-samples is halved and retried."""
    try:
        return prometheus.query_range(promql, start=start, end=end, step=step)
    except TooManySamples as err:
        if end - start < 2 * step:
            raise PrometheusError(
                f"{err} even for a single step; raise --step or the server's --query.max-samples"
            ) from None
        middle = start + ((end - start) // step // 2) * step
        return _range(prometheus, promql, start=start, end=middle, step=step) + _range(
            prometheus, promql, start=middle + step, end=end, step=step
        )
