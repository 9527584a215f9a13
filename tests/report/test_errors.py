"""``gpugate report``'s failures, through the CLI: one line on stderr naming the fix, exit 2; never a traceback.

A second real Prometheus holds a broken day per case (kube-state-metrics only, dcgm-exporter scraped
without honorLabels, without --kubernetes, without the label allowlist, ...), in 2-hour blocks so that
the label index answers per day.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pytest

from webhook.cli import main

from .conftest import RunningPrometheus, free_port, serving
from .schema import checked
from .synthetic import A100, H100, HOUR, START, Fleet, dcgm_labels
from .test_report import END_ISO, gpugate

DAY = 24 * HOUR
EXPORTER_POD = "nvidia-dcgm-exporter-7xk2p"


class Window(TypedDict):
    begin: int
    end: int
    interval: int


LABELS = {"team": "vision", "cost_center": "cc-100", "workload_kind": "Deployment", "workload_name": "trainer"}


def broken_days() -> Fleet:
    fleet = Fleet(length=9 * DAY)
    interval = 300

    def day(n: int) -> Window:
        return {"begin": n * DAY, "end": (n + 1) * DAY, "interval": interval}

    def gpu(n: int, labels: dict[str, str]) -> None:
        fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.5, **day(n))
        fleet.add("DCGM_FI_DEV_GPU_UTIL", labels, 50.0, **day(n))

    # day 0: kube-state-metrics only
    fleet.pod("ml", "p0", node="n", resources={"nvidia.com/gpu": 1}, attribution=LABELS, **day(0))
    # day 1: dcgm-exporter scraped without honorLabels: its pod label became exported_pod
    fleet.pod("ml", "p1", node="n", resources={"nvidia.com/gpu": 1}, attribution=LABELS, **day(1))
    gpu(
        1,
        dcgm_labels(gpu=0, uuid="GPU-1", model=A100, host="n")
        | {"exported_namespace": "ml", "exported_pod": "p1", "namespace": "monitoring"},
    )
    # day 2: dcgm-exporter without --kubernetes: no pod label at all
    fleet.pod("ml", "p2", node="n", resources={"nvidia.com/gpu": 1}, attribution=LABELS, **day(2))
    gpu(2, dcgm_labels(gpu=0, uuid="GPU-2", model=A100, host="n"))
    # day 3: kube-state-metrics without the label allowlist: kube_pod_labels carries no gpugate.io labels
    fleet.pod("ml", "p3", node="n", resources={"nvidia.com/gpu": 1}, attribution=None, **day(3))
    gpu(3, dcgm_labels(gpu=0, uuid="GPU-3", model=A100, host="n", pod=("ml", "p3")))
    # day 4: dcgm-exporter only
    gpu(4, dcgm_labels(gpu=0, uuid="GPU-4", model=A100, host="n", pod=("ml", "p4")))
    # day 5: pods, but none requests a GPU
    fleet.pod("ml", "web-0", node="n", resources={"cpu": 2}, attribution=LABELS, **day(5))
    gpu(5, dcgm_labels(gpu=0, uuid="GPU-5", model=A100, host="n"))
    # day 6: scraped with honorLabels: the series of a GPU nobody holds carry the exporter pod's own labels
    # (the scrape target's pod/namespace/container); kube-state-metrics lists that pod, which requests no GPU.
    fleet.pod("ml", "p6", node="n", resources={"nvidia.com/gpu": 1}, attribution=LABELS, **day(6))
    fleet.pod("gpu-operator", EXPORTER_POD, node="n", resources={"cpu": 1}, attribution=None, **day(6))
    gpu(6, dcgm_labels(gpu=0, uuid="GPU-6a", model=A100, host="n", pod=("ml", "p6")))
    unused = dcgm_labels(gpu=1, uuid="GPU-6b", model=A100, host="n", pod=("gpu-operator", EXPORTER_POD))
    gpu(6, unused | {"container": "nvidia-dcgm-exporter"})
    # day 7: an H100 cut into 1g.10gb instances, MIG single strategy (slices requested as nvidia.com/gpu).
    # The node's exporter is down from 11:00; m2 starts at 12:00, in the gap, and is never seen.
    start, gap = 7 * DAY, 7 * DAY + 11 * HOUR
    fleet.pod("ml", "m1", node="node-m", resources={"nvidia.com/gpu": 1}, attribution=LABELS, **day(7))
    fleet.pod(
        "ml",
        "m2",
        node="node-m",
        resources={"nvidia.com/gpu": 1},
        attribution=LABELS,
        begin=7 * DAY + 12 * HOUR,
        end=8 * DAY,
        interval=interval,
    )
    slice_labels = dcgm_labels(gpu=0, uuid="GPU-7", model=H100, host="node-m", pod=("ml", "m1"), mig=("1g.10gb", 1))
    fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", slice_labels, 0.5, begin=start, end=gap, interval=interval)
    # day 8: a T4 time-sliced without renaming (pods request plain nvidia.com/gpu; GFD: Tesla-T4-SHARED),
    # dcgm-exporter --kubernetes-virtual-gpus: one copy per replica with its number in vgpu (the device id's
    # ::N); ts-a holds two replicas, ts-b one; DCGM_FI_DEV_GPU_UTIL per process beside the device's series.
    for pod, count in (("ts-a", 2), ("ts-b", 1)):
        fleet.pod("ml", pod, node="node-t", resources={"nvidia.com/gpu": count}, attribution=LABELS, **day(8))
    t4 = {"begin": 8 * DAY, "end": 9 * DAY, "interval": interval}
    device = dcgm_labels(gpu=0, uuid="GPU-t4", model="Tesla T4", host="node-t")
    fleet.add("DCGM_FI_DEV_GPU_UTIL", device, 40.0, **t4)
    for pod, vgpu, own in (("ts-a", "0", 36.0), ("ts-a", "1", 36.0), ("ts-b", "2", 4.0)):
        copy = dcgm_labels(gpu=0, uuid="GPU-t4", model="Tesla T4", host="node-t", pod=("ml", pod)) | {"vgpu": vgpu}
        fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", copy, 0.4, **t4)
        fleet.add("DCGM_FI_DEV_GPU_UTIL", copy, own, **t4)
    return fleet


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    with serving(broken_days(), tmp_path_factory.mktemp("report-broken"), block="2h") as running:
        yield running


def day_end(n: int) -> str:
    """The end of a window inside day n, one hour clear of its neighbours' blocks."""
    return str(START + n * DAY + 23 * HOUR)


def fails(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpugate report: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def report(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return gpugate("report", "--prometheus", url, *args, timeout=120)


def in_process(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Flag checks fail before any I/O; run them in this process (a subprocess costs a second of imports)."""
    code = main(["report", "--prometheus", url, *args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["gpugate"], code, captured.out, captured.err)


@pytest.mark.parametrize(
    ("day", "fragments"),
    [
        (0, ("neither DCGM_FI_PROF_GR_ENGINE_ACTIVE nor DCGM_FI_DEV_GPU_UTIL", "counters CSV (-f)")),
        (1, ("exported_pod", "honorLabels: true")),
        (2, ("no pod label", "--kubernetes", "DCGM_EXPORTER_KUBERNETES=true")),
        (4, ("kube_pod_container_resource_requests is missing", "kube-state-metrics")),
        (5, ("empty window: no pod requested an nvidia.com GPU",)),
    ],
)
def test_missing_metrics_name_the_exporter_setting(
    broken: RunningPrometheus, day: int, fragments: tuple[str, ...]
) -> None:
    fails(report(broken.url, "--end", day_end(day), "--window", "22h"), *fragments)


def test_without_the_allowlist_every_gpu_is_unlabelled_and_the_note_says_why(broken: RunningPrometheus) -> None:
    result = report(broken.url, "--end", day_end(3), "--window", "22h", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert "--metric-labels-allowlist=pods=[gpugate.io/team," in result.stderr
    checked(result.stdout)
    assert '"group": "unlabelled"' in result.stdout


def test_an_empty_window(prometheus: RunningPrometheus) -> None:
    fails(
        report(prometheus.url, "--end", "2026-10-01T00:00:00Z"),
        "empty window",
        "2026-09-24T00:00:00Z",
        "check --end and --window",
    )


def test_an_unreachable_prometheus() -> None:
    fails(
        report(f"http://127.0.0.1:{free_port()}", "--end", END_ISO),
        "cannot reach Prometheus at http://127.0.0.1:",
        "Connection refused",
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--window", "a week"), "--window 'a week': expected a duration such as 30s, 5m, 1h30m or 7d"),
        (("--step", "0s"), "--step '0s': must be at least 1s"),
        (("--end", "yesterday"), "--end 'yesterday': expected an RFC 3339 time"),
        (("--end", "2026-11-09T00:00:00"), "give a time zone"),
        (("--fail-above", "lots"), "--fail-above 'lots'"),
        (("--threshold", "120"), "--threshold 120: expected a percentage from 0 to 100"),
        (("--step", "2d", "--window", "1d"), "--step 2d is longer than --window 1d"),
        (("--policies-out", "."), "--policies-out needs --recommend"),
        (("--recommend", "--policies-out", "no-such-dir"), "--policies-out no-such-dir: not a directory"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragment: str) -> None:
    fails(in_process(capsys, "http://127.0.0.1:9", *args), fragment)


def test_a_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    fails(in_process(capsys, "prometheus:9090"), "--prometheus 'prometheus:9090': expected an http:// or https:// URL")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("perHour: {Tesla T4: cheap}\n", "perHour['Tesla T4'] = 'cheap': expected a price per hour >= 0"),
        ("prices: {}\n", "expected a mapping with 'perHour:"),
        ("perHour: {a: 1}\nvendor: x\n", "unknown field(s) vendor"),
        ("perHour: [\n", "not YAML: line 2, column 1: expected the node content"),
    ],
)
def test_bad_price_tables(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    fails(in_process(capsys, "http://127.0.0.1:9", "--prices", str(prices)), str(prices), fragment)


def test_a_missing_price_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fails(
        in_process(capsys, "http://127.0.0.1:9", "--prices", str(tmp_path / "nope.yaml")), "No such file or directory"
    )


def test_with_honor_labels_the_exporter_pods_gpus_are_unallocated_not_unlabelled(broken: RunningPrometheus) -> None:
    result = report(broken.url, "--end", day_end(6), "--window", "22h", "-o", "json", "--group", "workload")
    assert result.returncode == 0, result.stderr
    document = checked(result.stdout)
    assert [row["group"] for row in document["groups"]] == ["ml/Deployment/trainer"]
    assert document["capacity"]["unallocated_gpu_hours"] == pytest.approx(22, abs=0.1)
    assert document["capacity"]["allocated_gpu_hours"] == pytest.approx(22, abs=0.1)


def test_a_single_strategy_slice_started_in_a_telemetry_gap_is_billed_as_a_slice(broken: RunningPrometheus) -> None:
    result = report(broken.url, "--end", day_end(7), "--window", "22h", "-o", "json")
    assert result.returncode == 0, result.stderr
    total = checked(result.stdout)["total"]
    # m1: 10 h seen and 12 h in the gap, m2: 11 h in the gap; each 1/7 of the H100, never a whole GPU.
    assert total["whole_gpus_peak"] == 0
    assert total["mig_slices_peak"] == {"1g.10gb": 2}
    assert total["allocated_gpu_hours"] == pytest.approx((22 + 11) / 7, abs=2 * 300 / 3600)


def test_a_time_sliced_gpu_requested_as_nvidia_com_gpu_is_one_gpu_split_by_replica(broken: RunningPrometheus) -> None:
    result = report(broken.url, "--end", day_end(8), "--window", "22h", "-o", "json", "--group", "namespace")
    assert result.returncode == 0, result.stderr
    total = checked(result.stdout)["total"]
    # One T4 for 22 hours, three replicas: never a whole GPU handed over, never a replica without telemetry.
    assert total["allocated_gpu_hours"] == pytest.approx(22, abs=0.1)
    assert (total["whole_gpus_peak"], total["shared_peak"]) == (0, 3)
    assert total["no_telemetry_gpu_hours"] == 0
    # every replica judged by the device (40%), not by its own per-process copy (ts-b's 4%)
    assert total["idle_gpu_hours"] == 0
