"""The three accounting errors real exporter setups exposed, each on series shaped as the exporters emit them.

- A time-sliced GPU requested as plain ``nvidia.com/gpu`` (device plugin ``renameByDefault: false``; GFD
  then labels the node's product ``<model>-SHARED``) in dcgm-exporter's ``--kubernetes-virtual-gpus`` mode:
  one copy of each field per replica, with the replica number in ``vgpu`` (the device id's ``::N`` suffix,
  internal/pkg/transformation/kubernetes.go ``getSharedGPU``); a pod may hold several replicas of one GPU.
- ``honorLabels: true``: a GPU no pod holds has no pod label of its own, so the scrape adds the exporter
  pod's target labels (pod, namespace, container); kube-state-metrics lists that pod, which requests no GPU.
- The MIG single strategy: slices are requested as ``nvidia.com/gpu``; a pod that starts during a
  telemetry gap must be billed as its node's slice, never as a whole GPU; and a profile's share of the GPU
  depends on the model (RTX PRO 6000 Blackwell has 4 compute slices, A100/H100 7; NVIDIA's MIG user guide,
  "Supported GPUs").
"""

from __future__ import annotations

import pytest

from webhook.report.compute import Inputs, Prices, compute_report, mig_fraction
from webhook.report.series import Series

STEP = 300
H = STEP / 3600
T4 = "Tesla T4"
H100 = "NVIDIA H100 80GB HBM3"
RTX6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def dcgm(
    uuid: str,
    *,
    model: str,
    host: str = "node-1",
    pod: str | None = None,
    namespace: str = "ml",
    vgpu: str | None = None,
    mig: tuple[str, int] | None = None,
) -> dict[str, str]:
    """A dcgm-exporter series' labels (render_metrics.go), with the pod mapping and scrape target labels."""
    labels = {"gpu": "0", "UUID": uuid, "pci_bus_id": "00000000:10:00.0", "device": "nvidia0", "modelName": model}
    if mig:
        labels |= {"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])}
    labels |= {"Hostname": host, "job": "gpu-metrics", "instance": "10.0.0.7:9400", "service": "nvidia-dcgm-exporter"}
    if pod:
        labels |= {"container": "main", "namespace": namespace, "pod": pod}
    if vgpu is not None:
        labels["vgpu"] = vgpu
    return labels


def request(pod: str, count: int, *, resource: str = "nvidia_com_gpu", node: str = "node-1", steps: range) -> Series:
    labels = {"namespace": "ml", "pod": pod, "resource": resource, "node": node}
    return Series(labels, {float(t): float(count) for t in steps})


def team(pod: str, name: str, *, steps: range) -> Series:
    return Series({"namespace": "ml", "pod": pod, "label_gpugate_io_team": name}, {float(t): 1.0 for t in steps})


def const(labels: dict[str, str], value: float, steps: range) -> Series:
    return Series(labels, {float(t): value for t in steps})


STEPS = range(STEP, 13 * STEP, STEP)  # one hour


def test_a_time_sliced_gpu_requested_as_nvidia_com_gpu_is_split_by_replica() -> None:
    # One T4, three replicas: pod a holds two (nvidia.com/gpu: 2), pod b one. Virtual-GPU mode: a copy per
    # replica; DCGM_FI_DEV_GPU_UTIL is per process (4.8.2: the device-level series kept beside the copies).
    engine = [
        const(dcgm("GPU-t4", model=T4, pod="a", vgpu="0"), 0.4, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="a", vgpu="1"), 0.4, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="b", vgpu="2"), 0.4, STEPS),
    ]
    util = [
        const(dcgm("GPU-t4", model=T4), 40.0, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="a", vgpu="0"), 36.0, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="a", vgpu="1"), 36.0, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="b", vgpu="2"), 4.0, STEPS),
    ]
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("a", 2, steps=STEPS), request("b", 1, steps=STEPS)],
            pod_labels=[team("a", "alpha", steps=STEPS), team("b", "beta", steps=STEPS)],
            engine_active=engine,
            gpu_util=util,
        ),
        prices=Prices({T4: 0.30}),
    )
    rows = {row.group: row for row in report.rows}
    # The GPU's hour once, split by replica; never a whole GPU handed over, never a replica without telemetry.
    assert report.total.allocated_hours == pytest.approx(1.0)
    assert rows["alpha"].allocated_hours == pytest.approx(2 / 3)
    assert rows["beta"].allocated_hours == pytest.approx(1 / 3)
    assert report.total.no_telemetry_hours == 0
    assert (report.total.whole_gpus, report.total.shared) == (0, 3)
    # Each replica is judged by the device (docs/report.md), not by its own per-process copy: b is busy.
    assert rows["beta"].busy_hours == pytest.approx(1 / 3) and rows["beta"].avg_utilisation == pytest.approx(40)
    assert report.total.cost == pytest.approx(0.30)
    assert report.capacity.hours == pytest.approx(1.0) and report.capacity.unallocated_hours == 0


def test_a_time_sliced_gpu_stays_shared_in_a_step_with_one_replica_left() -> None:
    # b's replica ends after half an hour; a alone on the GPU is still on a time-sliced GPU, not a whole one.
    half = range(STEP, 7 * STEP, STEP)
    engine = [
        const(dcgm("GPU-t4", model=T4, pod="a", vgpu="0"), 0.5, STEPS),
        const(dcgm("GPU-t4", model=T4, pod="b", vgpu="1"), 0.5, half),
    ]
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("a", 1, steps=STEPS), request("b", 1, steps=half)],
            pod_labels=[],
            engine_active=engine,
            gpu_util=[],
        )
    )
    assert report.total.whole_gpus == 0 and report.total.shared == 2
    assert report.total.allocated_hours == pytest.approx(1.0)


def test_with_honor_labels_an_unallocated_gpu_is_not_the_exporter_pods() -> None:
    # GPU-1 is held by trainer-0; GPU-2 by nobody: the scrape gave its series the exporter pod's labels.
    exporter = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}
    unused = dcgm("GPU-2", model=H100) | exporter | {"container": "nvidia-dcgm-exporter"}
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("trainer-0", 1, steps=STEPS)],
            pod_labels=[team("trainer-0", "vision", steps=STEPS)],
            engine_active=[const(dcgm("GPU-1", model=H100, pod="trainer-0"), 0.9, STEPS), const(unused, 0.0, STEPS)],
            gpu_util=[],
            # kube-state-metrics lists the exporter pod, which requests no GPU (queries.non_gpu_pods_query)
            non_gpu_pods=[const(exporter, 1.0, STEPS)],
        ),
        prices=Prices({H100: 7.0}),
    )
    assert [row.group for row in report.rows] == ["vision"]
    assert [w.key for w in report.all_workloads] == ["ml/Pod/trainer-0"]
    assert report.capacity.unallocated_hours == pytest.approx(1.0)
    assert report.capacity.unallocated_cost == pytest.approx(7.0)
    assert report.capacity.hours == pytest.approx(2.0)


def test_a_single_strategy_slice_that_starts_in_a_telemetry_gap_is_billed_as_its_slice() -> None:
    # node-e's H100 is cut into 1g.10gb instances (single strategy). batch-1 requests nvidia.com/gpu: 1 and
    # starts while the node's exporter is down: the whole hour without telemetry, billed as 1/7 of an H100.
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("batch-1", 1, node="node-e", steps=STEPS)],
            pod_labels=[team("batch-1", "research", steps=STEPS)],
            engine_active=[],
            gpu_util=[],
            mig_nodes={"node-e": (H100, "1g.10gb")},
        ),
        prices=Prices({H100: 7.0}),
    )
    row = report.rows[0]
    assert row.allocated_hours == pytest.approx(1 / 7)
    assert row.no_telemetry_hours == pytest.approx(1 / 7)
    assert row.mig_slices == {"1g.10gb": 1} and row.whole_gpus == 0
    assert row.cost == pytest.approx(1.0)  # 7.00 x 1/7


@pytest.mark.parametrize(
    ("profile", "model", "share", "known"),
    [
        ("1g.24gb", RTX6000, 1 / 4, True),
        ("2g.48gb", RTX6000, 2 / 4, True),
        ("4g.96gb", RTX6000, 1.0, True),
        ("1g.24gb", "NVIDIA RTX PRO 5000 Blackwell", 1 / 2, True),
        ("1g.10gb", H100, 1 / 7, True),
        ("1g.6gb", "NVIDIA A30", 1 / 4, True),
        ("2g.20gb", "NVIDIA Future GPU", 2 / 7, False),  # the profile's own numbers
    ],
)
def test_mig_shares_follow_the_model(profile: str, model: str, share: float, known: bool) -> None:
    assert mig_fraction(profile, model=model) == (pytest.approx(share), known)


def test_an_rtx_pro_6000_slice_is_a_quarter_of_the_gpu() -> None:
    engine = [const(dcgm("GPU-r", model=RTX6000, pod="nb-0", mig=("1g.24gb", 3)), 0.5, STEPS)]
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("nb-0", 1, resource="nvidia_com_mig_1g_24gb", steps=STEPS)],
            pod_labels=[],
            engine_active=engine,
            gpu_util=[],
        )
    )
    assert report.total.allocated_hours == pytest.approx(1 / 4)
    assert report.capacity.unallocated_hours == pytest.approx(3 / 4)  # the rest of the GPU, unpartitioned
    assert not [n for n in report.notes if "MIG geometry" in n]


def test_an_unknown_model_s_mig_geometry_is_a_note() -> None:
    engine = [const(dcgm("GPU-f", model="NVIDIA Future GPU", pod="nb-0", mig=("2g.20gb", 1)), 0.5, STEPS)]
    report = compute_report(
        Inputs(
            steps=list(STEPS),
            step=STEP,
            requests=[request("nb-0", 1, resource="nvidia_com_mig_2g_20gb", steps=STEPS)],
            pod_labels=[],
            engine_active=engine,
            gpu_util=[],
        )
    )
    assert report.total.allocated_hours == pytest.approx(2 / 7)
    assert any("NVIDIA Future GPU" in n and "7 slices" in n for n in report.notes)
