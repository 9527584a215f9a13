"""GPU pods at fleet scale through the real controllers and scheduler, with gpugate registered and without it.

Each run starts its own control plane with kube-scheduler, kube-controller-manager and kwok
(tests/harness/scheduling.py) and N kwok nodes of the reference fleet (tests/harness/fleet.py: L4, time-sliced
T4, H100, MIG-single H100 and MI300X pools), then creates GPU workloads through Deployments and Jobs (100 pods
each) until P pods are placed:

  gpugate   deploy/ registered, pointed at `gpugate serve` with the shipped policies/; the pod templates say
            only what a user writes (the GPU request and, for other classes than the default, gpugate.io/model);
  none      no webhook and no backstop; the pod templates carry by hand what gpugate would have injected
            (runtime class, toleration, node selector), so that the same pods land on the same pools;
  native    as gpugate, with the native tier beside it (`gpugate policy compile` of the same policies, applied
            and in force before the webhooks are registered) and the webhooks narrowed by the same compile's
            `--webhook-patch`, as deploy/components/native-tier installs them: the templates as in gpugate;
  CEL       the issue's yardstick in-process, bench/cel-equivalent.yaml (one MutatingAdmissionPolicy, one
            ValidatingAdmissionPolicy: what bench/apiserver.py's "CEL" row measures) and no webhook, over the
            templates of `none` (its one default model cannot place the other classes): what in-process CEL of
            that size costs at this scale. It matches the pods that request nvidia.com/gpu (all but MI300X's),
            adds the runtime class and the toleration they carry and the team label, and checks whole GPUs;
  floor     bench/in-process-floor.yaml over the templates of `none`: one MutatingAdmissionPolicy that adds a label
            to every GPU pod and one ValidatingAdmissionPolicy that refuses none of the fleet's, each as cheap as
            the apiserver allows: the least any in-process tier that forms GPU pods costs at this scale.

Figures per run: pods placed per second (from the first workload created to the last pod bound and Running or, for
Jobs, Succeeded), pod-create latency p50/p99 inside the apiserver (apiserver_request_duration_seconds for POST pods,
i.e. what the controllers wait for; and exactly, from each create's timestamps in the apiserver's audit log, which
logs the pods' creates and nothing else: the histogram's buckets are 5, 25, 50, 100, 200 ms apart) and, with gpugate,
the webhooks' share (apiserver_admission_webhook_admission_duration_seconds) and gpugate's own handling time
(gpugate_admission_duration_seconds); CPU seconds per pod of kube-apiserver, of etcd and of gpugate (gunicorn's master
and workers, /proc/<pid>/stat), and of every process of the run by its pid (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok, gpugate, this bench itself) over the same window; how busy the
machine's cores were while the pods were placed (/proc/stat: every process of the run shares them) and the apiserver's
wait for etcd to store a pod (etcd_request_duration_seconds for create pods), which is what a create waits for once
they are saturated; kube-apiserver's CPU before the first create (--idle-seconds: the kwok nodes' heartbeats, and
gpugate's watches in its modes), measured once the fleet has settled (kwok below 0.01 core for 5 s in a row after the
install: until then it is still updating the nodes the harness saw Ready, and every mode waits for the same);
gpugate's peak RSS; wrong placements (a pod on a pool its class does not name: must be 0); and `gpugate audit` over
the result (its wall time and what it found).

    .venv/bin/python bench/fleet_scale.py --nodes 1000 --pods 10000 --write  # the full run, into the docs
    .venv/bin/python bench/fleet_scale.py --nodes 20 --pods 200 --json       # what the make-check test runs

--client-qps sets kube-controller-manager's and kube-scheduler's client rate limit (500 by default, so that the
controllers create pods as fast as the apiserver takes them; 50 makes the controllers set the pace, and every mode
places the pods at the same rate).

Needs the e2e binaries (tests/e2e/build.sh, `make tools`). Not part of `make check` (a small run is).
"""

from __future__ import annotations

import argparse
import functools
import heapq
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from bench.apiserver import _children, _proc_cpu, machine_busy
from tests.harness import fleet
from tests.harness.gpugate import WEBHOOK_KINDS, GPUGate, point_at, register, render_deploy
from tests.harness.kubeapi import ApiError
from tests.harness.scheduling import FleetCluster, find_scheduling_binaries

REPO = Path(__file__).resolve().parents[1]
PODS_PER_WORKLOAD = 100
STALL_SECONDS = 30.0  # no pod placed for this long: the rest will not be

# class -> (share of the pods, pools it may land on, the GPU resource, what gpugate injects for it)
CLASSES: dict[str, dict[str, Any]] = {
    "l4": {"share": 0.10, "pools": {"l4"}, "resource": "nvidia.com/gpu", "vendor": "nvidia"},
    "t4": {"share": 0.35, "pools": {"t4"}, "resource": "nvidia.com/gpu", "vendor": "nvidia"},
    "h100": {"share": 0.18, "pools": {"h100"}, "resource": "nvidia.com/gpu", "vendor": "nvidia"},
    "h100-mig": {"share": 0.30, "pools": {"h100-mig"}, "resource": "nvidia.com/gpu", "vendor": "nvidia"},
    "mi300x": {"share": 0.07, "pools": {"mi300x"}, "resource": "amd.com/gpu", "vendor": "amd"},
}
# Nodes per pool, as shares of --nodes: capacity of every class above its share of the pods.
POOL_SHARES = {"l4": 0.30, "t4": 0.25, "h100": 0.25, "h100-mig": 0.10, "mi300x": 0.10}
INJECTED = {  # what the shipped policies/00-default.yaml makes of each class (for the run without gpugate)
    "nvidia": {
        "runtimeClassName": "nvidia",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "amd": {"tolerations": [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
}
PRODUCT = {
    "l4": ("nvidia.com/gpu.product", "NVIDIA-L4"),
    "t4": ("nvidia.com/gpu.product", "Tesla-T4-SHARED"),
    "h100": ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
    "h100-mig": ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"),
    "mi300x": ("amd.com/gpu.product-name", "AMD_Instinct_MI300X_OAM"),
}


def pool_counts(nodes: int) -> dict[str, int]:
    counts = {pool: max(1, math.floor(nodes * share)) for pool, share in POOL_SHARES.items()}
    counts["t4"] += nodes - sum(counts.values())
    return counts


GPUS_PER_NODE = {"l4": 4, "t4": 16, "h100": 8, "h100-mig": 56, "mi300x": 8}


def class_pods(pods: int, counts: dict[str, int]) -> dict[str, int]:
    """The pods of each class: at the shares of CLASSES, capped at 90 % of what the class's pool holds."""
    out = {}
    for cls, spec in CLASSES.items():
        room = int(0.9 * counts.get(cls, 0) * GPUS_PER_NODE[cls])
        out[cls] = min(room, round(pods * spec["share"]))
    short = pods - sum(out.values())
    for cls in sorted(CLASSES, key=lambda c: -(counts.get(c, 0) * GPUS_PER_NODE[c])):  # roomiest pools first
        room = int(0.9 * counts.get(cls, 0) * GPUS_PER_NODE[cls]) - out[cls]
        take = max(0, min(room, short))
        out[cls] += take
        short -= take
    if short > 0:
        raise SystemExit(f"fleet_scale: {pods} pods do not fit on these nodes; add --nodes")
    return out


def workloads(pods: int, counts: dict[str, int], namespace: str, *, preformed: bool) -> Iterator[dict[str, Any]]:
    """Deployments and Jobs, alternating, of at most 100 pods each, over the classes (class_pods)."""
    i = 0
    for cls, total in class_pods(pods, counts).items():
        n = math.ceil(total / PODS_PER_WORKLOAD)
        for k in range(n):
            size = total // n + (1 if k < total % n else 0)
            yield _workload(i, cls, size, namespace, preformed=preformed)
            i += 1


def _workload(i: int, cls: str, size: int, namespace: str, *, preformed: bool) -> dict[str, Any]:
    spec = CLASSES[cls]
    labels = {"app": f"w{i}", "gpugate.io/model": cls} if cls != "l4" else {"app": f"w{i}"}
    pod_spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {spec["resource"]: "1"}}}
        ]
    }
    if preformed:
        pod_spec.update(json.loads(json.dumps(INJECTED[spec["vendor"]])))
        key, value = PRODUCT[cls]
        pod_spec["nodeSelector"] = {key: value}
    template = {"metadata": {"labels": labels}, "spec": pod_spec}
    meta = {"name": f"w{i}-{cls}", "namespace": namespace, "labels": {"bench/class": cls}}
    if i % 2 == 0:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": size, "selector": {"matchLabels": {"app": f"w{i}"}}, "template": template},
        }
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "template": template},
    }


# ---- metrics ------------------------------------------------------------------------------------------------


def histogram(text: str, name: str, match: dict[str, str]) -> dict[float, float]:
    """Cumulative bucket counts (le -> count) of `name`, summed over the series whose labels include `match`."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(name + "_bucket{"):
            continue
        labels_text, value = line[len(name) + 8 :].rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in _split_labels(labels_text))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        le = math.inf if labels["le"] == "+Inf" else float(labels["le"])
        out[le] = out.get(le, 0.0) + float(value)
    return out


def counter(text: str, name: str, match: dict[str, str] | None = None) -> float:
    """The sum of every sample of `name` whose labels include `match`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        labels_text = head[len(name) + 1 : -1] if head.endswith("}") else ""
        labels = {k: v.strip('"') for k, v in (part.split("=", 1) for part in _split_labels(labels_text))}
        if all(labels.get(k) == v for k, v in (match or {}).items()):
            total += float(value)
    return total


def _split_labels(text: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The q-quantile of what was observed between two scrapes, interpolated within its bucket (as Prometheus'
    histogram_quantile does)."""
    buckets = sorted((le, after.get(le, 0.0) - before.get(le, 0.0)) for le in after)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, prev_le, prev_count = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-9)
        prev_le, prev_count = le, count
    return prev_le


def audited_creates(log: Path, namespace: str, settle: float = 5.0) -> list[float]:
    """Each pod create's latency in seconds in ``namespace``, from the apiserver's audit log (its
    ``requestReceivedTimestamp`` to the ``ResponseComplete`` stage's ``stageTimestamp``, microseconds both): the
    apiserver's request-duration histogram puts a create in buckets of 5, 25, 50, 100 and 200 ms, too coarse for a
    ratio of 1.5. The log is written in batches a second apart: read until it stops growing."""
    return [latency for _, latency in audited_create_times(log, namespace, settle)]


def audited_create_times(log: Path, namespace: str, settle: float = 5.0) -> list[tuple[float, float]]:
    """:func:`audited_creates` with each create's arrival, in seconds after the first create's, in arrival order."""
    last, deadline = -1, time.monotonic() + settle
    while time.monotonic() < deadline:
        size = log.stat().st_size if log.exists() else 0
        if size == last and size > 0:
            break
        last = size
        time.sleep(1.5)
    out: list[tuple[datetime, float]] = []
    for line in log.read_text().splitlines() if log.exists() else []:
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") == "create"
            and ref.get("resource") == "pods"
            and not ref.get("subresource")
            and ref.get("namespace") == namespace
        ):
            received = datetime.fromisoformat(event["requestReceivedTimestamp"])
            out.append((received, (datetime.fromisoformat(event["stageTimestamp"]) - received).total_seconds()))
    out.sort()
    return [((received - out[0][0]).total_seconds(), latency) for received, latency in out]


#: The creates of a run's first seconds, when every workload has just been created: each controller spends its
#: client's burst (twice its qps) at once and the ReplicaSets' slow start doubles, so the apiserver takes the
#: creates as a queue. What the run's p99 is without that opening burst, a cluster's steady state.
OPENING_SECONDS = 5.0


def stalls(timed: list[tuple[float, float]], threshold: float, gap: float = 1.0) -> int:
    """How many episodes the creates of ``timed`` (arrival, latency) at or above ``threshold`` fall in: slow creates
    that arrived within ``gap`` seconds of the one before are one episode (the apiserver stalled for all of them)."""
    arrivals = [received for received, latency in timed if latency >= threshold]
    return sum(1 for i, t in enumerate(arrivals) if i == 0 or t - arrivals[i - 1] > gap)


def busiest_requests(before: str, after: str, top: int = 6) -> str:
    """The requests the apiserver served between two scrapes, the most frequent ``top`` by verb and resource
    (``apiserver_request_total``): which clients' work the run's apiserver CPU went to."""
    counts: dict[str, float] = {}
    for text, sign in ((after, 1.0), (before, -1.0)):
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            head, value = line.rsplit(" ", 1)
            labels = {k: v.strip('"') for k, v in (x.split("=", 1) for x in _split_labels(head[25:-1]))}
            sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
            key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}{sub}"
            counts[key] = counts.get(key, 0.0) + sign * float(value)
    ranked = sorted(((n, k) for k, n in counts.items() if n > 0), reverse=True)[:top]
    return ", ".join(f"{k} {int(n)}" for n, k in ranked)


def in_flight(timed: list[tuple[float, float]]) -> list[int]:
    """For each create of ``timed`` (arrival, latency; in arrival order), how many earlier creates the apiserver was
    still serving when it arrived: 0 or 1 while it keeps up, a queue when the machine is saturated."""
    serving: list[float] = []  # completion times, a heap
    out = []
    for received, latency in timed:
        while serving and serving[0] <= received:
            heapq.heappop(serving)
        out.append(len(serving))
        heapq.heappush(serving, received + latency)
    return out


def exact_quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``values`` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def group_cpu(pid: int) -> float:
    return _proc_cpu(pid) + sum(_proc_cpu(c) for c in _children(pid))


def group_rss(pid: int) -> int:
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except FileNotFoundError:
            continue
    return total


# ---- one run ------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    mode: str
    nodes: int
    pods_wanted: int
    pods_placed: int = 0
    seconds: float = 0.0
    pods_per_second: float = 0.0
    wrong_placements: int = 0
    wrong_examples: list[str] = field(default_factory=list)
    unplaced: int = 0
    pod_create_p50_ms: float | None = None
    pod_create_p99_ms: float | None = None
    pod_creates_audited: int = 0  # the bench namespace's pod creates in the apiserver's audit log
    pod_create_exact_p50_ms: float | None = None  # from each audited create's own timestamps
    pod_create_exact_p99_ms: float | None = None
    pod_creates_opening: int | None = None  # audited creates within OPENING_SECONDS of the first
    pod_create_exact_p99_after_opening_ms: float | None = None  # the p99 of the creates after those
    pod_create_stalls_after_opening: int | None = None  # the episodes those at or above that p99 arrived in
    creates_in_flight_p90: int | None = None  # the creates still being served when a create arrived, p90 of all
    creates_in_flight_max: int | None = None
    busiest_requests: str | None = None  # the apiserver's most frequent requests during the run, by verb and resource
    webhook_p50_ms: float | None = None
    webhook_p99_ms: float | None = None
    gpugate_p50_ms: float | None = None
    gpugate_p99_ms: float | None = None
    apiserver_cpu_ms_per_pod: float = 0.0
    etcd_cpu_ms_per_pod: float = 0.0
    # kube-apiserver's Go runtime (runtime/metrics, on its /metrics): what a pod's create and its aftermath allocate,
    # and the garbage collection that pays for it; mark assists are the part taken from the requests' own goroutines
    apiserver_heap_kb_per_pod: float | None = None
    apiserver_gc_cycles: int | None = None
    apiserver_gc_cpu_ms_per_pod: float | None = None
    apiserver_gc_assist_ms_per_pod: float | None = None
    machine_busy_percent: float = 0.0
    etcd_pod_write_p50_ms: float | None = None
    etcd_pod_write_p99_ms: float | None = None
    client_qps: int = 0
    apiserver_idle_cores: float | None = None
    base_policies: bool | None = None  # gpugate's modes: deploy/base's admission policies installed (False: --without)
    settle_seconds: float | None = None  # how long kwok took to go quiet after the install (None: it never did)
    gpugate_cpu_ms_per_pod: float | None = None
    gpugate_peak_rss_mib: float | None = None
    workload_create_retries: int = (
        0  # Deployment/Job creates that failed (5xx, e.g. a webhook timeout) and were retried
    )
    webhook_calls: int | None = None  # the apiserver's calls to gpugate's webhooks
    webhook_calls_by_operation: str | None = None  # the same, by the request's operation: "CREATE 0, UPDATE 455"
    webhook_fail_open: int | None = None  # mutating calls that failed (e.g. timed out) and were ignored
    webhook_rejections: int | None = None  # calls that refused the pod or failed closed
    audit_seconds: float | None = None
    audit_summary: str | None = None
    start_seconds: float = 0.0
    cel_labelled: int | None = None  # CEL: placed pods carrying the team label bench/cel-equivalent.yaml adds
    floor_labelled: int | None = None  # floor: placed pods carrying the label bench/in-process-floor.yaml adds
    # CPU ms per pod of each process of the run, by its pid, from the first create to the last placement seen
    process_cpu_ms_per_pod: dict[str, float] = field(default_factory=dict)
    repeat: int = 0  # with --repeat, which pass over the modes this run belongs to (1, 2, ...)


#: What a run can register (the module's docstring says what each is).
MODES = ("gpugate", "native", "CEL", "floor", "none")

#: deploy/base/admission-policy.yaml's objects, which --without-base-policies leaves out of the gpugate modes.
BASE_POLICIES = ("gpugate-backstop", "gpugate-runtime-handlers")


def is_base_policy(obj: dict[str, Any]) -> bool:
    kind, name = obj.get("kind", ""), obj.get("metadata", {}).get("name")
    return kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") and name in BASE_POLICIES


#: settle(): kwok is quiet when it used less than this many cores in each of SETTLE_WINDOW consecutive seconds.
SETTLE_QUIET = 0.01
SETTLE_WINDOW = 5


def settle(
    cpu_seconds: Callable[[], float],
    *,
    quiet: float = SETTLE_QUIET,
    window: int = SETTLE_WINDOW,
    timeout: float = 180.0,
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Wait, a second at a time, until a process's CPU (``cpu_seconds``, cumulative) stays below ``quiet`` cores
    for ``window`` seconds in a row. Returns the seconds waited, or None when ``timeout`` passed first (the run
    goes on, and the table says so)."""
    waited, calm, last = 0, 0, cpu_seconds()
    while waited < timeout:
        sleep(1.0)
        waited += 1
        now = cpu_seconds()
        calm = calm + 1 if now - last < quiet else 0
        last = now
        if calm >= window:
            return float(waited)
    return None


def run(
    mode: str,
    nodes: int,
    pods: int,
    workdir: Path,
    timeout: float,
    profile: tuple[Path, int] | None = None,
    client_qps: int = 500,
    idle_seconds: float = 0.0,
    ready_timeout: float = 300.0,
    keep_audit: Path | None = None,
    repeat: int = 0,
    base_policies: bool = True,
) -> RunResult:
    result = RunResult(mode, nodes, pods, client_qps=client_qps, repeat=repeat)
    if mode in ("gpugate", "native"):
        result.base_policies = base_policies
    bins, kwok = find_scheduling_binaries()
    began = time.monotonic()
    cluster = FleetCluster(
        bins,
        kwok,
        workdir / "cluster",
        pool_counts(nodes),
        client_qps=client_qps,
        profiling=profile is not None,
        audit_pod_creates=True,
    )
    gate: GPUGate | None = None
    sampler_stop = threading.Event()
    peak_rss = [0]
    try:
        cluster.start(ready_timeout=ready_timeout)
        api = cluster.api
        if mode in ("gpugate", "native"):
            policies = workdir / "policies"
            policies.mkdir()
            for shipped in sorted((REPO / "policies").glob("*.yaml")):
                shutil.copy(shipped, policies / shipped.name)
            gate = GPUGate(workdir / "gpugate", policies, kubeconfig=cluster.cp.kubeconfig)
            gate.start()
            deploy = render_deploy(cluster.cp)
            if not base_policies:
                deploy = [o for o in deploy if not is_base_policy(o)]
            if mode == "native":
                install_native_tier(cluster, gate.exe, policies)
                objects = narrowed(point_at(deploy, gate), gate.exe, policies)
                register_beside_native(cluster, objects)
            else:
                register(cluster.cp, point_at(deploy, gate))
            gate_pid = gate.process.proc.pid if gate.process.proc else 0

            def sample() -> None:
                while not sampler_stop.wait(1.0):
                    peak_rss[0] = max(peak_rss[0], group_rss(gate_pid))

            threading.Thread(target=sample, daemon=True).start()
        elif mode == "CEL":
            install_in_process(cluster, CEL_EQUIVALENT, formed=TEAM_LABEL, refused_by="bench-whole-gpus")
        elif mode == "floor":
            install_in_process(cluster, FLOOR, formed=FLOOR_LABEL, refused_by="bench-floor-check")
        elif mode != "none":
            raise SystemExit(f"fleet_scale: no mode {mode!r} ({', '.join(MODES)})")
        ns = cluster.create_namespace("bench", {"team": "bench", "cost-center": "cc-1"})
        apiserver_pid = cluster.cp.apiserver.proc.pid if cluster.cp.apiserver.proc else 0
        kwok_pid = next((p.proc.pid for p in cluster.processes if p.name == "kwok" and p.proc), 0)
        # The fleet is still settling when its nodes are Ready and untainted: kwok keeps updating them for a few
        # tens of seconds, and the apiserver serves that at about 0.1 core more. Every mode waits for it, so the
        # first creates do not queue behind the fleet's own start.
        result.settle_seconds = settle(lambda: _proc_cpu(kwok_pid))
        result.start_seconds = time.monotonic() - began
        # What the apiserver spends with nothing created (the kwok nodes' heartbeats and leases; gpugate's watches in
        # its modes): a rate per second that the run's CPU per pod carries too, more of it the longer the run.
        if idle_seconds > 0:
            idle_from = (_proc_cpu(apiserver_pid), time.monotonic())
            time.sleep(idle_seconds)
            idle = (_proc_cpu(apiserver_pid) - idle_from[0]) / (time.monotonic() - idle_from[1])
            result.apiserver_idle_cores = idle
        metrics_before = api.raw("/metrics")
        gate_metrics_before = gate.metrics() if gate else ""
        etcd_pid = next((p.proc.pid for p in cluster.processes if p.name == "etcd" and p.proc), 0)
        cpu_before = (_proc_cpu(apiserver_pid), group_cpu(gate_pid) if gate else 0.0)
        pids = process_pids(cluster, gate.process.proc.pid if gate and gate.process.proc else 0)
        processes_before = {name: cpu() for name, cpu in pids.items()}
        etcd_before, machine_before = _proc_cpu(etcd_pid), (machine_busy(), time.monotonic())

        t0 = time.monotonic()
        profiler = None
        if profile is not None:
            profiler = threading.Thread(target=take_profile, args=(cluster, mode, *profile), daemon=True)
            profiler.start()
        created = list(workloads(pods, pool_counts(nodes), ns, preformed=mode in ("none", "CEL", "floor")))
        for obj in created:
            for attempt in range(10):  # as a user or a GitOps controller would: a webhook timeout is retried
                try:
                    api.create(obj)
                    break
                except ApiError as e:
                    if e.status < 500 or attempt == 9:
                        raise
                    result.workload_create_retries += 1
                    time.sleep(2.0)
        wanted = sum(o["spec"].get("replicas", o["spec"].get("completions", 0)) for o in created)
        result.pods_wanted = wanted
        deadline = t0 + timeout
        placed: list[dict[str, Any]] = []
        last_progress, last_count = t0, 0
        while True:
            try:
                items = api.list("Pod", ns)
            except ApiError as e:
                # A paged list's next page can ask for a resourceVersion the watch cache has not reached yet
                # ("504 Timeout: Too large resource version") on a saturated apiserver: ask again next poll.
                if e.status < 500:
                    raise
                print(f"fleet_scale: {mode}: pod list failed ({e}); asking again", file=sys.stderr, flush=True)
                time.sleep(5.0)
                continue
            placed = [
                p for p in items if p["spec"].get("nodeName") and p["status"].get("phase") in ("Running", "Succeeded")
            ]
            now = time.monotonic()
            if len(placed) > last_count:
                last_progress, last_count = now, len(placed)
            if len(placed) >= wanted or now > deadline or now - last_progress > STALL_SECONDS:
                break
            print(f"fleet_scale: {mode}: {len(items)} pods, {len(placed)} placed", file=sys.stderr, flush=True)
            time.sleep(5.0)
        result.seconds = last_progress - t0  # to the last placement seen (within one poll interval)
        result.pods_placed = len(placed)
        result.unplaced = wanted - len(placed)
        result.pods_per_second = len(placed) / result.seconds if result.seconds else 0.0
        cls_of = {o["metadata"]["name"]: o["metadata"]["labels"]["bench/class"] for o in created}
        for pod in placed:
            owner = _workload_of(pod)
            cls = cls_of.get(owner or "")
            pool = fleet.pool_of(pod["spec"]["nodeName"])
            if cls is None or pool not in CLASSES[cls]["pools"]:
                result.wrong_placements += 1
                if len(result.wrong_examples) < 5:
                    result.wrong_examples.append(f"{pod['metadata']['name']} ({cls}) on {pod['spec']['nodeName']}")

        if mode == "CEL":
            result.cel_labelled = sum((p["metadata"].get("labels") or {}).get(TEAM_LABEL[0]) == "bench" for p in placed)
        if mode == "floor":
            result.floor_labelled = sum(
                (p["metadata"].get("labels") or {}).get(FLOOR_LABEL[0]) == FLOOR_LABEL[1] for p in placed
            )
        cpu_after = (_proc_cpu(apiserver_pid), group_cpu(gate_pid) if gate else 0.0)
        processes_after = {name: cpu() for name, cpu in pids.items()}
        etcd_after, machine_after = _proc_cpu(etcd_pid), (machine_busy(), time.monotonic())
        metrics_after = api.raw("/metrics")
        if profiler is not None:
            profiler.join()
        ms = 1000.0
        create = {"verb": "POST", "resource": "pods", "subresource": ""}
        b, a = (histogram(m, "apiserver_request_duration_seconds", create) for m in (metrics_before, metrics_after))
        result.pod_create_p50_ms = _ms(quantile(b, a, 0.5))
        result.pod_create_p99_ms = _ms(quantile(b, a, 0.99))
        timed = audited_create_times(cluster.cp.audit_log, ns)
        latencies = [latency for _, latency in timed]
        after = [latency for received, latency in timed if received >= OPENING_SECONDS]
        result.pod_creates_opening = len(timed) - len(after)
        queue = in_flight(timed)
        if queue:
            result.creates_in_flight_p90 = int(exact_quantile([float(n) for n in queue], 0.9) or 0)
            result.creates_in_flight_max = max(queue)
        p99_after = exact_quantile(after, 0.99)
        result.pod_create_exact_p99_after_opening_ms = _ms(p99_after)
        if p99_after is not None:
            result.pod_create_stalls_after_opening = stalls(
                [(t, x) for t, x in timed if t >= OPENING_SECONDS], p99_after
            )
        if keep_audit is not None:
            keep_audit.mkdir(parents=True, exist_ok=True)
            kept = f"{mode}-{repeat}-pod-creates.jsonl" if repeat else f"{mode}-pod-creates.jsonl"
            shutil.copy(cluster.cp.audit_log, keep_audit / kept)
        result.pod_creates_audited = len(latencies)
        result.pod_create_exact_p50_ms = _ms(exact_quantile(latencies, 0.5))
        result.pod_create_exact_p99_ms = _ms(exact_quantile(latencies, 0.99))
        result.apiserver_cpu_ms_per_pod = (cpu_after[0] - cpu_before[0]) * ms / max(len(placed), 1)
        result.etcd_cpu_ms_per_pod = (etcd_after - etcd_before) * ms / max(len(placed), 1)
        result.process_cpu_ms_per_pod = {
            name: (processes_after[name] - processes_before[name]) * ms / max(len(placed), 1) for name in pids
        }
        result.busiest_requests = busiest_requests(metrics_before, metrics_after)
        go = {
            name: counter(metrics_after, name) - counter(metrics_before, name)
            for name in (
                "go_gc_heap_allocs_bytes_total",
                "go_gc_cycles_total_gc_cycles_total",
                "go_cpu_classes_gc_total_cpu_seconds_total",
                "go_cpu_classes_gc_mark_assist_cpu_seconds_total",
            )
        }
        per_pod = max(len(placed), 1)
        result.apiserver_heap_kb_per_pod = go["go_gc_heap_allocs_bytes_total"] / 1000 / per_pod
        result.apiserver_gc_cycles = int(go["go_gc_cycles_total_gc_cycles_total"])
        result.apiserver_gc_cpu_ms_per_pod = go["go_cpu_classes_gc_total_cpu_seconds_total"] * ms / per_pod
        result.apiserver_gc_assist_ms_per_pod = go["go_cpu_classes_gc_mark_assist_cpu_seconds_total"] * ms / per_pod
        # Every process of the run (and the bench itself) shares the machine's cores: how close to saturation it ran.
        busy, wall = (after - before for after, before in zip(machine_after, machine_before, strict=True))
        result.machine_busy_percent = 100.0 * busy / max(wall * (os.cpu_count() or 1), 1e-9)
        # The apiserver's wait for etcd to store a pod (the create's largest part once the machine is saturated).
        write = {"operation": "create", "resource": "pods"}
        b, a = (histogram(m, "etcd_request_duration_seconds", write) for m in (metrics_before, metrics_after))
        result.etcd_pod_write_p50_ms = _ms(quantile(b, a, 0.5))
        result.etcd_pod_write_p99_ms = _ms(quantile(b, a, 0.99))
        if gate:
            hook = {"operation": "CREATE", "type": "admit"}
            name = "apiserver_admission_webhook_admission_duration_seconds"
            b, a = (histogram(m, name, hook) for m in (metrics_before, metrics_after))
            result.webhook_p50_ms = _ms(quantile(b, a, 0.5))
            result.webhook_p99_ms = _ms(quantile(b, a, 0.99))
            deltas = {
                metric: int(counter(metrics_after, metric) - counter(metrics_before, metric))
                for metric in (
                    "apiserver_admission_webhook_request_total",
                    "apiserver_admission_webhook_fail_open_count",
                    "apiserver_admission_webhook_rejection_count",
                )
            }
            result.webhook_calls = deltas["apiserver_admission_webhook_request_total"]
            calls = "apiserver_admission_webhook_request_total"
            by_operation = {
                op: int(
                    counter(metrics_after, calls, {"operation": op}) - counter(metrics_before, calls, {"operation": op})
                )
                for op in ("CREATE", "UPDATE", "DELETE")
            }
            result.webhook_calls_by_operation = ", ".join(f"{op} {n}" for op, n in by_operation.items())
            result.webhook_fail_open = deltas["apiserver_admission_webhook_fail_open_count"]
            result.webhook_rejections = deltas["apiserver_admission_webhook_rejection_count"]
            gm = gate.metrics()
            b, a = (
                histogram(m, "gpugate_admission_duration_seconds", {"endpoint": "mutate"})
                for m in (gate_metrics_before, gm)
            )
            result.gpugate_p50_ms = _ms(quantile(b, a, 0.5))
            result.gpugate_p99_ms = _ms(quantile(b, a, 0.99))
            result.gpugate_cpu_ms_per_pod = (cpu_after[1] - cpu_before[1]) * ms / max(len(placed), 1)
            result.gpugate_peak_rss_mib = max(peak_rss[0], group_rss(gate_pid)) / 2**20
            t = time.monotonic()
            audit = subprocess.run(
                [
                    str(gate.exe),
                    "audit",
                    "--kubeconfig",
                    str(cluster.cp.kubeconfig),
                    "--policies",
                    str(workdir / "policies"),
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            result.audit_seconds = time.monotonic() - t
            result.audit_summary = (audit.stdout.strip().splitlines() or [audit.stderr.strip()])[-1]
    finally:
        sampler_stop.set()
        if gate is not None:
            gate.stop()
        cluster.stop()
    return result


def take_profile(cluster: FleetCluster, mode: str, out: Path, seconds: int) -> None:
    """A CPU profile of kube-apiserver for the first `seconds` of the pod creation (the controllers and the
    scheduler at work), written to out/<mode>.pprof with `go tool pprof -top`, flat and cumulative, beside it."""
    import ssl
    import urllib.request

    cp = cluster.cp
    context = ssl.create_default_context(cafile=str(cp.ca.cert_path))
    context.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    url = f"https://127.0.0.1:{cp.apiserver_port}/debug/pprof/profile?seconds={seconds}"
    with opener.open(url, timeout=seconds + 120) as resp:
        data = resp.read()
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{mode}.pprof"
    raw.write_bytes(data)
    for suffix, flags in (("top", []), ("cum", ["-cum"])):
        done = subprocess.run(
            ["go", "tool", "pprof", "-top", "-nodecount=80", *flags, str(raw)], capture_output=True, text=True
        )
        (out / f"{mode}.{suffix}.txt").write_text(done.stdout + done.stderr)
    print(f"fleet_scale: {mode}: apiserver profile of {seconds} s in {raw}", file=sys.stderr, flush=True)


def install_native_tier(cluster: FleetCluster, exe: Path, policies: Path, timeout: float = 120.0) -> None:
    """Apply `gpugate policy compile policies` and wait until the apiserver forms a GPU pod with it alone (the
    webhooks are not registered yet, so only the MutatingAdmissionPolicy writes gpugate.io/policy)."""
    compiled = subprocess.run(
        [str(exe), "policy", "compile", str(policies)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=compiled)
    ns = cluster.create_namespace("native-probe", {"team": "probe"})
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False)
        if done.ok and "gpugate.io/policy" in (json.loads(done.stdout)["metadata"].get("annotations") or {}):
            return
        time.sleep(0.5)
    raise SystemExit(f"fleet_scale: the native tier was not in force after {timeout:.0f} s")


CEL_EQUIVALENT = REPO / "bench" / "cel-equivalent.yaml"
FLOOR = REPO / "bench" / "in-process-floor.yaml"
#: The label each in-process yardstick gives a GPU pod it formed: (key, value); the CEL equivalent's value is the
#: namespace's team label ("probe" for the probe's namespace).
TEAM_LABEL = ("gpugate.io/team", "probe")
FLOOR_LABEL = ("gpugate.io/formed-by", "floor")


def install_in_process(
    cluster: FleetCluster, path: Path, *, formed: tuple[str, str], refused_by: str, timeout: float = 120.0
) -> None:
    """Apply an in-process yardstick (bench/cel-equivalent.yaml, bench/in-process-floor.yaml) and wait until the
    apiserver forms a GPU pod with it (the label ``formed``) and its validating policy ``refused_by`` refuses a pod
    asking for 9 GPUs and labelled bench/floor-refuse (each yardstick refuses one of the two)."""
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=path.read_text())
    ns = cluster.create_namespace(f"{refused_by}-probe", {"team": "probe"})

    def probe(gpus: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": ns, "labels": labels},
            "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
            },
        }

    key, value = formed
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe("1", {}), check=False)
        is_formed = done.ok and (json.loads(done.stdout)["metadata"].get("labels") or {}).get(key) == value
        bad = probe("9", {"bench/floor-refuse": "true"})
        refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=bad, check=False)
        if is_formed and not refused.ok and refused_by in refused.stderr:
            return
        time.sleep(0.5)
    raise SystemExit(f"fleet_scale: {path.relative_to(REPO)} was not in force after {timeout:.0f} s")


def process_pids(cluster: FleetCluster, gate_pid: int) -> dict[str, Callable[[], float]]:
    """Each process of the run by name, as a function that reads its CPU seconds so far (/proc/<pid>/stat): the
    harness's processes by their own pids, gpugate's gunicorn master with its workers, and this bench."""
    out: dict[str, Callable[[], float]] = {}
    for process in cluster.processes:
        if process.proc:
            out[process.name] = functools.partial(_proc_cpu, process.proc.pid)
    if gate_pid:
        out["gpugate"] = lambda: group_cpu(gate_pid)
    out["this bench"] = lambda: _proc_cpu(os.getpid())
    return out


def narrowed(objects: list[dict[str, Any]], exe: Path, policies: Path) -> list[dict[str, Any]]:
    """deploy/'s objects with `gpugate policy compile --webhook-patch policies` applied to both webhook
    configurations, as deploy/components/native-tier patches them: the webhooks skip the pods the native tier
    decided."""
    patch = yaml.safe_load(
        subprocess.run(
            [str(exe), "policy", "compile", "--webhook-patch", str(policies)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    return [jsonpatch.apply_patch(o, patch) if o.get("kind") in WEBHOOK_KINDS else o for o in objects]


def register_beside_native(cluster: FleetCluster, objects: list[dict[str, Any]], timeout: float = 120.0) -> None:
    """deploy/ applied with the native tier in force (its validating policies answer the harness's probes
    first), the webhooks last, and in force once a pod the native tier leaves alone (one choosing its GPU by an
    instance type both H100 pools share, which the webhook narrows to one class's product) is formed by the
    webhook."""
    webhooks = [o for o in objects if o.get("kind") in WEBHOOK_KINDS]
    for obj in [o for o in objects if o.get("kind") not in WEBHOOK_KINDS] + webhooks:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=obj)
    ns = cluster.create_namespace("webhook-probe", {"team": "probe"})
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {
            "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False)
        if done.ok and (json.loads(done.stdout)["spec"].get("nodeSelector") or {}).get(PRODUCT["h100"][0]):
            return
        time.sleep(0.5)
    raise SystemExit(f"fleet_scale: the webhooks were not in force beside the native tier after {timeout:.0f} s")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 2)


def _workload_of(pod: dict[str, Any]) -> str | None:
    """The Deployment or Job a pod belongs to (a ReplicaSet's name is its Deployment's plus a hash)."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return str(ref["name"])
        if ref.get("kind") == "ReplicaSet":
            return str(ref["name"]).rsplit("-", 1)[0]
    return None


def render(results: list[RunResult], command: str) -> str:
    def cell(v: Any, fmt: str = "{:.2f}") -> str:
        if isinstance(v, bool):
            return "yes" if v else "**no**"
        if isinstance(v, dict):  # a figure per process: "etcd 1.2, kube-apiserver 67.9, ..."
            return ", ".join(f"{name} {x:.1f}" for name, x in v.items()) or "—"
        return "—" if v is None else (fmt.format(v) if isinstance(v, float) else str(v))

    rows = [
        f"`{command}` on {platform.node() and 'the 2-core development machine'} (Python {platform.python_version()}):",
        "",
        "| | " + " | ".join(f"{r.mode} ({r.repeat})" if r.repeat else r.mode for r in results) + " |",
        "| --- | " + " | ".join("---" for _ in results) + " |",
    ]
    fields = [
        ("kwok nodes", "nodes", "{}"),
        ("GPU pods placed / wanted", None, ""),
        ("wrong placements", "wrong_placements", "{}"),
        ("seconds to place them", "seconds", "{:.1f}"),
        ("pods placed per second", "pods_per_second", "{:.1f}"),
        ("pod create in the apiserver, p50 ms (its histogram)", "pod_create_p50_ms", "{:.1f}"),
        ("pod create in the apiserver, p99 ms (its histogram)", "pod_create_p99_ms", "{:.1f}"),
        ("pod creates in the audit log", "pod_creates_audited", "{}"),
        ("pod create, p50 ms (each create's own latency, audit log)", "pod_create_exact_p50_ms", "{:.1f}"),
        ("pod create, p99 ms (each create's own latency, audit log)", "pod_create_exact_p99_ms", "{:.1f}"),
        ("creates still served when a create arrived, p90 (a queue: saturated)", "creates_in_flight_p90", "{}"),
        ("the same, the most", "creates_in_flight_max", "{}"),
        (f"pod creates in the first {OPENING_SECONDS:g} s (the opening burst)", "pod_creates_opening", "{}"),
        ("pod create, p99 ms, the creates after those", "pod_create_exact_p99_after_opening_ms", "{:.1f}"),
        ("the episodes those at or above it arrived in (each within 1 s)", "pod_create_stalls_after_opening", "{}"),
        ("gpugate's webhooks in the apiserver (mutating), p50 ms", "webhook_p50_ms", "{:.1f}"),
        ("gpugate's webhooks in the apiserver (mutating), p99 ms", "webhook_p99_ms", "{:.1f}"),
        ("Deployment/Job creates retried after a 5xx (webhook timeout)", "workload_create_retries", "{}"),
        ("webhook calls by the apiserver", "webhook_calls", "{}"),
        ("the same, by the request's operation", "webhook_calls_by_operation", "{}"),
        ("mutating calls failed open (ignored: timeout or error)", "webhook_fail_open", "{}"),
        ("webhook rejections (refused or failed closed)", "webhook_rejections", "{}"),
        ("gpugate's own /mutate handling, p50 ms", "gpugate_p50_ms", "{:.2f}"),
        ("gpugate's own /mutate handling, p99 ms", "gpugate_p99_ms", "{:.2f}"),
        ("kube-apiserver CPU ms per pod", "apiserver_cpu_ms_per_pod", "{:.2f}"),
        ("etcd CPU ms per pod", "etcd_cpu_ms_per_pod", "{:.2f}"),
        ("kube-apiserver heap allocated per pod, KB", "apiserver_heap_kb_per_pod", "{:.0f}"),
        ("kube-apiserver garbage collections during the run", "apiserver_gc_cycles", "{}"),
        ("kube-apiserver CPU ms per pod in garbage collection", "apiserver_gc_cpu_ms_per_pod", "{:.2f}"),
        ("the same, in mark assists (taken from requests' goroutines)", "apiserver_gc_assist_ms_per_pod", "{:.2f}"),
        ("kube-apiserver CPU before the first create, cores", "apiserver_idle_cores", "{:.2f}"),
        ("deploy/base's admission policies installed (backstop, runtime handlers)", "base_policies", "{}"),
        ("seconds for the fleet to settle after the install (—: not in 180 s)", "settle_seconds", "{:.0f}"),
        ("the apiserver's most frequent requests during the run", "busiest_requests", "{}"),
        ("the machine's CPU busy while the pods were placed, %", "machine_busy_percent", "{:.1f}"),
        ("the apiserver's etcd write of a pod, p50 ms", "etcd_pod_write_p50_ms", "{:.1f}"),
        ("the apiserver's etcd write of a pod, p99 ms", "etcd_pod_write_p99_ms", "{:.1f}"),
        ("gpugate CPU ms per pod", "gpugate_cpu_ms_per_pod", "{:.2f}"),
        ("gpugate peak RSS, MiB (master + workers)", "gpugate_peak_rss_mib", "{:.0f}"),
        ("`gpugate audit` over the result, seconds", "audit_seconds", "{:.1f}"),
        ("pods the CEL equivalent labelled (it matches nvidia.com/gpu only)", "cel_labelled", "{}"),
        ("pods the in-process floor labelled (every GPU pod)", "floor_labelled", "{}"),
        ("CPU ms per pod of each process (by pid, the same window)", "process_cpu_ms_per_pod", "{}"),
    ]
    for label, attr, fmt in fields:
        if attr is None:
            values = [f"{r.pods_placed} / {r.pods_wanted}" for r in results]
        else:
            values = [cell(getattr(r, attr), fmt) for r in results]
        rows.append(f"| {label} | " + " | ".join(values) + " |")
    audit = [r.audit_summary for r in results if r.audit_summary]
    if audit:
        rows += ["", f"`gpugate audit` said: {audit[0]}"]
    ratios = p99_ratios(results)
    if ratios:
        rows += ["", "| pod create p99 ÷ none's in the same pass | all creates | after the opening burst |"]
        rows += ["| --- | --- | --- |"]
        for mode, (whole, after) in ratios.items():
            rows.append(f"| {mode} | {_ratios(whole)} | {_ratios(after)} |")
    return "\n".join(rows)


def p99_ratios(results: list[RunResult]) -> dict[str, tuple[list[float], list[float]]]:
    """Each mode's exact pod-create p99 over none's of the same pass, for every pass that ran both (the whole run's
    and the one after the opening burst): one pass's ratio is a sample, this machine's p99s vary between passes."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    none = {r.repeat: r for r in results if r.mode == "none"}
    for r in results:
        base = none.get(r.repeat)
        if r.mode == "none" or base is None:
            continue
        whole, after = out.setdefault(r.mode, ([], []))
        if r.pod_create_exact_p99_ms and base.pod_create_exact_p99_ms:
            whole.append(r.pod_create_exact_p99_ms / base.pod_create_exact_p99_ms)
        if r.pod_create_exact_p99_after_opening_ms and base.pod_create_exact_p99_after_opening_ms:
            after.append(r.pod_create_exact_p99_after_opening_ms / base.pod_create_exact_p99_after_opening_ms)
    return out


def _ratios(values: list[float]) -> str:
    if not values:
        return "—"
    each = ", ".join(f"{v:.2f}×" for v in values)
    return each if len(values) == 1 else f"median {statistics.median(values):.2f}× ({each})"


SECTION_BEGIN = "<!-- fleet-scale: begin (bench/fleet_scale.py --write) -->"
SECTION_END = "<!-- fleet-scale: end -->"
# docs/development/performance.md is generated from bench/performance-template.md by bench/apiserver.py: the
# section lives in both, so that neither command drops the other's figures.
DOCS = (REPO / "docs" / "development" / "performance.md", REPO / "bench" / "performance-template.md")


def write_section(rendered: str) -> None:
    for doc in DOCS:
        text = doc.read_text()
        start, end = text.index(SECTION_BEGIN) + len(SECTION_BEGIN), text.index(SECTION_END)
        body = rendered.replace("$", "$$") if doc.name == "performance-template.md" else rendered  # string.Template
        doc.write_text(text[:start] + "\n" + body + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/fleet_scale.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--modes", default="gpugate,none", help=f"comma-separated: {', '.join(MODES)}")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the pods of one run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--write", action="store_true", help="put the table into docs/development/performance.md")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="take a CPU profile of kube-apiserver while the pods are created (DIR/<mode>.pprof and its top)",
    )
    parser.add_argument(
        "--client-qps",
        type=int,
        default=500,
        help="kube-scheduler's and kube-controller-manager's client rate limit (default 500, burst twice that: the "
        "controllers create pods as fast as the apiserver takes them; kube-controller-manager's own default is 20)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=10.0,
        help="seconds to measure kube-apiserver's CPU before the first create (default 10; 0: not measured)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=300.0,
        help="seconds for the nodes to be Ready and untainted before a run (default 300; at --client-qps 20 the "
        "controller-manager lifts 1,000 nodes' not-ready taints in more)",
    )
    parser.add_argument("--profile-seconds", type=int, default=40, help="length of each profile (default 40)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the modes this many times over, in turn (default 1): each pass's p99 ratios to none's of the same "
        "pass and their median",
    )
    parser.add_argument(
        "--keep-audit",
        metavar="DIR",
        help="copy each run's audit log of the pods' creates to DIR/<mode>-pod-creates.jsonl (their timestamps; "
        "DIR/<mode>-<pass>-pod-creates.jsonl with --repeat)",
    )
    parser.add_argument(
        "--without-base-policies",
        action="store_true",
        help="leave deploy/base/admission-policy.yaml's policies (gpugate-backstop, gpugate-runtime-handlers) out of "
        "the gpugate and native modes: what they cost at this scale (a what-if, not an installation to run)",
    )
    args = parser.parse_args(argv)
    profile = (Path(args.profile), args.profile_seconds) if args.profile else None
    results = []
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    passes = [(n + 1 if args.repeat > 1 else 0, mode) for n in range(args.repeat) for mode in args.modes.split(",")]
    for repeat, mode in passes:
        with tempfile.TemporaryDirectory(prefix=f"gpugate-fleet-{mode}-") as tmp:
            print(f"fleet_scale: {mode}: {args.nodes} nodes, {args.pods} pods ...", file=sys.stderr, flush=True)
            results.append(
                run(
                    mode,
                    args.nodes,
                    args.pods,
                    Path(tmp),
                    args.timeout,
                    profile,
                    args.client_qps,
                    args.idle_seconds,
                    args.ready_timeout,
                    Path(args.keep_audit) if args.keep_audit else None,
                    repeat,
                    not args.without_base_policies,
                )
            )
            print(f"fleet_scale: {mode}: {asdict(results[-1])}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        command = "bench/fleet_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
        rendered = render(results, command.strip())
        print(rendered)
        if args.write:
            write_section(rendered)
    wrong = sum(r.wrong_placements + r.unplaced for r in results)
    return 1 if wrong else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
