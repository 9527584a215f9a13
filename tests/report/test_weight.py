"""``gpugate report --weight-by-use``: a time-sliced GPU's held part split between its pods by their use.

dcgm-exporter in virtual-GPU mode (``--kubernetes-virtual-gpus``) writes, since NVIDIA/dcgm-exporter#594 (commit
fb5e3dc823f2, first in 4.5.3-4.8.2), ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` per pod from NVML's
per-process figures, one series per replica a pod holds (its labels ``pod``, ``namespace``, ``container``,
``pod_uid``, ``vgpu``), each with the pod's sum over its processes, ``0`` for a pod without any, and keeps the
device's own series beside them (internal/pkg/transformation/kubernetes.go ``Process``, ``createPerProcessMetrics``,
``buildPodValueMap``, ``buildIdlePodValues``; process_metrics.go ``isPerProcessMetric``). Other fields, such as
``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, stay copies of the device's value per replica, as every field was before.

Hand-computed: a T4 whose node's GFD says 4 replicas; pods ``a`` and ``b`` hold one replica each, so they hold half
of the GPU and the other half is unallocated. Where the per-pod figures say 60 and 20, the half is split 3:1,
0.375 and 0.125 of the GPU; where there are none (an exporter before #594: copies, no device series) or all are 0,
it is split by replicas, 0.25 each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from webhook.report.accounting import split_by_use
from webhook.report.compute import Inputs, Prices, compute_report
from webhook.report.series import Series

from .conftest import RunningPrometheus, serving
from .schema import checked
from .synthetic import A100, HOUR, T4, Fleet, dcgm_labels
from .test_report import gpugate

# ---- the splitting function --------------------------------------------------------------------------------


def test_split_by_use_is_in_proportion_to_each_pods_use_of_the_held_part() -> None:
    assert split_by_use({"a": 60.0, "b": 20.0}, 0.5) == pytest.approx({"a": 0.375, "b": 0.125})
    assert split_by_use({"a": 30.0, "b": 30.0, "c": 0.0}, 1.0) == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0})
    parts = split_by_use({"a": 7.0, "b": 3.0, "c": 1.0}, 0.75)
    assert parts is not None and sum(parts.values()) == pytest.approx(0.75)


def test_split_by_use_gives_up_without_a_figure_for_every_pod_or_with_only_zeros() -> None:
    assert split_by_use({"a": 60.0, "b": None}, 0.5) is None  # b's use is not known: not a share of 0
    assert split_by_use({"a": 0.0, "b": 0.0}, 0.5) is None  # nobody measurably used it
    assert split_by_use({}, 0.5) is None
    assert split_by_use({"a": -5.0, "b": 10.0}, 1.0) == pytest.approx({"a": 0.0, "b": 1.0})


# ---- the integration, on exporter-shaped series without Prometheus ---------------------------------------------

STEP = 300
H = STEP / 3600
ONE = range(STEP, 5 * STEP, STEP)  # four steps with per-pod figures
TWO = range(5 * STEP, 9 * STEP, STEP)  # four without: an exporter before #594 (copies, no device series)
THREE = range(9 * STEP, 13 * STEP, STEP)  # four with per-pod figures, all 0
ALL = range(STEP, 13 * STEP, STEP)


def labels(pod: str | None = None, vgpu: str | None = None) -> dict[str, str]:
    out = dcgm_labels(gpu=0, uuid="GPU-t-0", model=T4, host="node-t", pod=("ml", pod) if pod else None)
    if pod:
        out |= {"pod_uid": f"uid-{pod}", "vgpu": vgpu or ""}
    return out


def const(found: dict[str, str], value: float, steps: range) -> Series:
    return Series(found, {float(t): value for t in steps})


def inputs() -> Inputs:
    engine = [const(labels("a", "0"), 0.8, ALL), const(labels("b", "1"), 0.8, ALL)]
    util = [
        const(labels(), 80.0, ONE),
        const(labels("a", "0"), 60.0, ONE),
        const(labels("b", "1"), 20.0, ONE),
        const(labels("a", "0"), 80.0, TWO),  # copies of the device's value
        const(labels("b", "1"), 80.0, TWO),
        const(labels(), 80.0, THREE),
        const(labels("a", "0"), 0.0, THREE),
        const(labels("b", "1"), 0.0, THREE),
    ]
    requests = [
        Series({"namespace": "ml", "pod": pod, "resource": "nvidia_com_gpu", "node": "node-t"}, dict.fromkeys(ALL, 1.0))
        for pod in ("a", "b")
    ]
    pod_labels = [
        Series({"namespace": "ml", "pod": pod, "label_gpugate_io_team": team}, dict.fromkeys(ALL, 1.0))
        for pod, team in (("a", "alpha"), ("b", "beta"))
    ]
    return Inputs(
        steps=[float(t) for t in ALL],
        step=STEP,
        requests=requests,
        pod_labels=pod_labels,
        engine_active=engine,
        gpu_util=util,
        replicas={"node-t": 4},
    )


def test_the_held_half_is_split_by_use_where_the_step_has_per_pod_figures() -> None:
    report = compute_report(inputs(), prices=Prices({T4: 0.40}), bucket=STEP, weight_by_use=True)
    rows = {row.group: row for row in report.rows}
    # 4 steps 0.375 / 0.125, then 8 steps 0.25 each (no per-pod figures, then only zeros)
    assert rows["alpha"].allocated_hours == pytest.approx(H * (4 * 0.375 + 8 * 0.25))
    assert rows["beta"].allocated_hours == pytest.approx(H * (4 * 0.125 + 8 * 0.25))
    assert rows["alpha"].cost == pytest.approx(0.40 * H * (4 * 0.375 + 8 * 0.25))
    # judged by the device, as by replicas: both busy at 80%
    assert rows["beta"].busy_hours == pytest.approx(rows["beta"].allocated_hours)
    assert report.shared_gpus_split_by == "use"
    assert report.shared_gpu_steps == {"use": 4, "replicas": 8}
    assert any("8 of 12 steps" in note and "split by replicas held" in note for note in report.notes), report.notes
    # every step: the two shares plus the two unheld replicas are the GPU
    resources = report.capacity.by_resource["shared"]
    assert resources["unallocated_hours"] == pytest.approx(12 * H * 0.5)
    for bucket in report.buckets["fleet"]:
        assert bucket.allocated_hours == pytest.approx(0.5 * H)
        assert bucket.allocated_hours + bucket.unallocated_hours == pytest.approx(H)


def test_without_the_flag_nothing_changes() -> None:
    report = compute_report(inputs(), bucket=STEP)
    rows = {row.group: row for row in report.rows}
    assert rows["alpha"].allocated_hours == pytest.approx(12 * H * 0.25)
    assert rows["beta"].allocated_hours == pytest.approx(12 * H * 0.25)
    assert report.shared_gpus_split_by == "replicas"
    assert report.shared_gpu_steps == {"use": 0, "replicas": 12}
    assert not [note for note in report.notes if "weight-by-use" in note]


def test_a_pod_holding_two_replicas_is_weighted_once_by_its_use_not_per_replica() -> None:
    # dcgm-exporter writes a pod's per-pod value on each replica series it holds (keyed by pod UID): the pod's use
    # counts once. a holds two of four replicas at 30, b one at 30: the held 3/4 split evenly between the pods.
    steps = range(STEP, 3 * STEP, STEP)
    util = [
        const(labels(), 60.0, steps),
        const(labels("a", "0"), 30.0, steps),
        const(labels("a", "1"), 30.0, steps),
        const(labels("b", "2"), 30.0, steps),
    ]
    requests = [
        Series({"namespace": "ml", "pod": p, "resource": "nvidia_com_gpu", "node": "node-t"}, dict.fromkeys(steps, n))
        for p, n in (("a", 2.0), ("b", 1.0))
    ]
    pod_labels = [
        Series({"namespace": "ml", "pod": p, "label_gpugate_io_team": p}, dict.fromkeys(steps, 1.0)) for p in "ab"
    ]
    case = Inputs(
        steps=[float(t) for t in steps],
        step=STEP,
        requests=requests,
        pod_labels=pod_labels,
        engine_active=[],
        gpu_util=util,
        replicas={"node-t": 4},
    )
    weighted = {row.group: row.allocated_hours for row in compute_report(case, weight_by_use=True).rows}
    assert weighted == pytest.approx({"a": 2 * H * 0.375, "b": 2 * H * 0.375})
    by_replicas = {row.group: row.allocated_hours for row in compute_report(case).rows}
    assert by_replicas == pytest.approx({"a": 2 * H * 0.5, "b": 2 * H * 0.25})


# ---- a real Prometheus ------------------------------------------------------------------------------------------

LENGTH = 4 * HOUR
END_ISO = "2026-11-02T04:00:00Z"
INTERVAL = 300
# dcgm-exporter's samples halfway between the report's 5-minute steps: each step's window holds exactly one
OFFSET = INTERVAL // 2
EXPORTER = ("gpu-operator", "nvidia-dcgm-exporter-7xk2q")


def team(name: str, workload: str) -> dict[str, str]:
    return {"team": name, "cost_center": "cc", "workload_kind": "Deployment", "workload_name": workload}


def weight_fleet() -> Fleet:
    """Four hours on node-t (a T4 time-sliced 4 ways, GFD's nvidia.com/gpu.replicas) and node-w (a whole A100).
    0-2 h: dcgm-exporter 4.5.3-4.8.2 (per-pod GPU_UTIL 60 and 20, the device's 80 beside them); 2-3 h: an exporter
    before #594 (copies of the device's 50, no device series); 3-4 h: per-pod figures again, both 0 (no process
    ran), the device 5%. The device series carries the exporter pod's own labels, as a scrape with honorLabels
    adds them to a series without any."""
    fleet = Fleet(length=LENGTH)
    every = {"interval": INTERVAL, "end": LENGTH}

    def dcgm(name: str, found: dict[str, str], value: float, begin: int, end: int) -> None:
        fleet.add(name, found, value, begin=begin + OFFSET, end=end, interval=INTERVAL)

    fleet.add("kube_node_labels", {"node": "node-t", "label_nvidia_com_gpu_replicas": "4"}, 1.0, **every)
    fleet.pod(*EXPORTER, node="node-t", resources={"cpu": 1}, attribution=None, interval=INTERVAL, end=LENGTH)
    device = dcgm_labels(gpu=0, uuid="GPU-t-0", model=T4, host="node-t", pod=EXPORTER)
    device["container"] = "nvidia-dcgm-exporter"
    phases = (
        (0, 2 * HOUR, 0.8, (60.0, 20.0), True),
        (2 * HOUR, 3 * HOUR, 0.5, (50.0, 50.0), False),
        (3 * HOUR, LENGTH, 0.05, (0.0, 0.0), True),
    )
    for pod, who in (("a", "alpha"), ("b", "beta")):
        held = {"nvidia.com/gpu": 1}
        fleet.pod("ml", pod, node="node-t", resources=held, attribution=team(who, pod), interval=INTERVAL, end=LENGTH)
    for begin, end, engine, (use_a, use_b), per_pod in phases:
        if per_pod:
            dcgm("DCGM_FI_DEV_GPU_UTIL", device, engine * 100, begin, end)
        for pod, vgpu, use in (("a", "0", use_a), ("b", "1", use_b)):
            found = dcgm_labels(gpu=0, uuid="GPU-t-0", model=T4, host="node-t", pod=("ml", pod)) | {"vgpu": vgpu}
            dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", found, engine, begin, end)
            dcgm("DCGM_FI_DEV_GPU_UTIL", found | ({"pod_uid": f"uid-{pod}"} if per_pod else {}), use, begin, end)
    whole_gpu = {"nvidia.com/gpu": 1}
    fleet.pod(
        "ml", "c", node="node-w", resources=whole_gpu, attribution=team("gamma", "c"), interval=INTERVAL, end=LENGTH
    )
    whole = dcgm_labels(gpu=0, uuid="GPU-w-0", model=A100, host="node-w", pod=("ml", "c"))
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", whole, 0.3, 0, LENGTH)
    dcgm("DCGM_FI_DEV_GPU_UTIL", whole, 30.0, 0, LENGTH)
    return fleet


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    with serving(weight_fleet(), tmp_path_factory.mktemp("weight-prometheus"), block="4h") as running:
        yield running


def report(prometheus: RunningPrometheus, *extra: str) -> dict[str, Any]:
    window = ("--end", END_ISO, "--window", "4h", "--bucket", "1h")
    result = gpugate("report", "--prometheus", prometheus.url, *window, "-o", "json", *extra)
    assert result.returncode == 0, result.stderr
    return checked(result.stdout)


def assert_figures(document: dict[str, Any], want: dict[str, tuple[float, float, float, float]]) -> None:
    got = figures(document)
    assert set(got) == set(want), got
    for group, expected in want.items():
        assert got[group] == pytest.approx(expected, abs=1e-6), (group, got[group])


def figures(document: dict[str, Any]) -> dict[str, tuple[float, float, float, float]]:
    return {
        row["group"]: (
            row["allocated_gpu_hours"],
            row["busy_gpu_hours"],
            row["idle_gpu_hours"],
            row["no_telemetry_gpu_hours"],
        )
        for row in document["groups"]
    }


# (allocated, busy, idle, no telemetry) GPU-hours over the four hours, each pod judged by the device's utilisation
BY_USE = {
    "alpha": (2 * 0.375 + 2 * 0.25, 2 * 0.375 + 0.25, 0.25, 0.0),  # 0.375 for 2 h, then 0.25 (busy 1 h, idle 1 h)
    "beta": (2 * 0.125 + 2 * 0.25, 2 * 0.125 + 0.25, 0.25, 0.0),
    "gamma": (4.0, 4.0, 0.0, 0.0),  # a whole A100: not shared, not weighted
}
BY_REPLICAS = {
    "alpha": (4 * 0.25, 3 * 0.25, 0.25, 0.0),
    "beta": (4 * 0.25, 3 * 0.25, 0.25, 0.0),
    "gamma": (4.0, 4.0, 0.0, 0.0),
}


def test_weight_by_use_splits_the_held_half_by_the_pods_use(weights: RunningPrometheus) -> None:
    document = report(weights, "--weight-by-use")
    assert_figures(document, BY_USE)
    assert document["shared_gpus_split_by"] == "use"
    # 24 steps with per-pod figures; 12 without (the older exporter), 12 with only zeros: by replicas
    assert document["shared_gpu_steps"] == {"use": 24, "replicas": 24}
    assert [note for note in document["notes"] if note.startswith("--weight-by-use: 24 of 48 steps")], document["notes"]
    shared = {entry["resource"]: entry for entry in document["capacity"]["by_resource"]}["shared"]
    assert (shared["allocated_gpu_hours"], shared["unallocated_gpu_hours"]) == pytest.approx((2.0, 2.0), abs=1e-6)
    for bucket in document["buckets"]["fleet"]:  # the T4 and the A100, every hour
        assert bucket["allocated_gpu_hours"] + bucket["unallocated_gpu_hours"] == pytest.approx(2.0, abs=1e-6)


def test_without_weight_by_use_the_held_half_is_split_by_replicas(weights: RunningPrometheus) -> None:
    document = report(weights)
    assert_figures(document, BY_REPLICAS)
    assert document["shared_gpus_split_by"] == "replicas"
    assert document["shared_gpu_steps"] == {"use": 0, "replicas": 48}
    assert not [note for note in document["notes"] if "weight-by-use" in note]


def test_the_table_says_the_shared_gpus_were_split_by_use(weights: RunningPrometheus) -> None:
    window = ("report", "--prometheus", weights.url, "--end", END_ISO, "--window", "4h")
    table = gpugate(*window, "--weight-by-use")
    assert table.returncode == 0, table.stderr
    first = table.stdout.splitlines()[0]
    assert first.endswith("; time-sliced and MPS GPUs split by use (--weight-by-use)"), first
    assert "note: --weight-by-use: 24 of 48 steps" in table.stdout
    plain = gpugate(*window)
    assert plain.returncode == 0, plain.stderr
    assert "weight-by-use" not in plain.stdout
