"""The report's pure parts, without Prometheus: MIG shares, prices, the range split, flags, progress, joins."""

from __future__ import annotations

import io

import pytest

from webhook.report.command import _Steps, parse_duration, parse_time
from webhook.report.compute import Inputs, Prices, compute_report, mig_fraction, mig_profile_of
from webhook.report.prometheus import MAX_POINTS_PER_SERIES
from webhook.report.queries import CHUNK_POINTS, ReportError, chunks
from webhook.report.series import Series
from webhook.terminal import Progress


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [
        ("1g.10gb", "NVIDIA A100-SXM4-80GB", 1 / 7),
        ("3g.40gb", "NVIDIA H100 80GB HBM3", 3 / 7),
        ("7g.80gb", "NVIDIA A100-SXM4-80GB", 1.0),
        ("1g.10gb+me", "NVIDIA H100 80GB HBM3", 1 / 7),
        ("2g.12gb", "NVIDIA A30", 2 / 4),
        ("4g.24gb", "NVIDIA A30", 1.0),
    ],
)
def test_mig_share(profile: str, model: str, share: float) -> None:
    assert mig_fraction(profile, model=model) == (pytest.approx(share), True)


def test_mig_profile_from_the_resource_name() -> None:
    assert mig_profile_of("nvidia_com_mig_1g_10gb") == "1g.10gb"
    assert mig_profile_of("nvidia_com_mig_1g_10gb_me") == "1g.10gb+me"


def test_price_lookup() -> None:
    prices = Prices({"A100": 3.5, "1g.10gb": 0.6, "A100/2g.20gb": 1.1, "default": 2.0})
    assert prices.device(model="A100", profile="", fraction=1) == 3.5
    assert prices.device(model="A100", profile="2g.20gb", fraction=2 / 7) == 1.1
    assert prices.device(model="A100", profile="1g.10gb", fraction=1 / 7) == 0.6
    assert prices.device(model="A100", profile="3g.40gb", fraction=3 / 7) == pytest.approx(1.5)
    assert prices.device(model="T4", profile="", fraction=1) == 2.0
    assert Prices({}).device(model="T4", profile="", fraction=1) is None


@pytest.mark.parametrize(
    ("first", "last", "step", "points"),
    [
        (0, 300 * 2015, 300, CHUNK_POINTS),
        (0, 60 * 43199, 60, CHUNK_POINTS),
        (60, 60 * 1000, 60, 7),
        (5, 5, 5, 3),
    ],
)
def test_chunks_cover_every_step_once_within_the_point_limit(first: int, last: int, step: int, points: int) -> None:
    parts = chunks(first, last, step, points=points)
    covered = [t for start, end in parts for t in range(start, end + 1, step)]
    assert covered == list(range(first, last + 1, step))
    assert all((end - start) // step + 1 <= min(points, MAX_POINTS_PER_SERIES) for start, end in parts)


@pytest.mark.parametrize(
    ("text", "seconds"), [("5m", 300), ("1h30m", 5400), ("7d", 604800), ("2w", 1209600), ("90s", 90)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text, flag="--window") == seconds


@pytest.mark.parametrize("text", ["", "5", "m5", "5 m", "1.5h", "0s", "500ms"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ReportError, match="--step"):
        parse_duration(text, flag="--step")


def test_times() -> None:
    assert parse_time("2026-11-09T00:00:00Z", now=0) == 1794182400
    assert parse_time("2026-11-09T01:00:00+01:00", now=0) == 1794182400
    assert parse_time(None, now=1234.9) == 1234


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        line = Progress(stream)
        _Steps(line)(2, 9, "engine 2026-11-02T00:05:00Z..2026-11-09T00:00:00Z")
        line.clear()
    assert "\r\033[Kgpugate report: 22% of 9 steps, engine 2026-11-02T00:05:00Z" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r\033[K")
    assert pipe.getvalue() == ""


def device(pod: str, value: float, *, uuid: str = "GPU-1", **extra: str) -> dict[str, str]:
    return (
        {"UUID": uuid, "modelName": "A100", "namespace": "ns", "pod": pod, **extra}
        if pod
        else {"UUID": uuid, "modelName": "A100", **extra}
    )


def test_a_renamed_pod_is_billed_to_the_labels_of_each_step() -> None:
    # One pod name, two lives: team a for steps 1-2, team b for steps 3-4 (a StatefulSet pod re-created).
    steps = [300, 600, 900, 1200]
    labels = [
        Series({"namespace": "ns", "pod": "p-0", "label_gpugate_io_team": "a"}, {300: 1, 600: 1}),
        Series({"namespace": "ns", "pod": "p-0", "label_gpugate_io_team": "b"}, {900: 1, 1200: 1}),
    ]
    requests = [Series({"namespace": "ns", "pod": "p-0", "resource": "nvidia_com_gpu"}, dict.fromkeys(steps, 1.0))]
    engine = [Series(device("p-0", 0), {300: 0.0, 600: 0.0, 900: 0.5, 1200: 0.5})]
    report = compute_report(
        Inputs(steps=steps, step=300, requests=requests, pod_labels=labels, engine_active=engine, gpu_util=[])
    )
    rows = {row.group: row for row in report.rows}
    assert rows["a"].idle_hours == pytest.approx(600 / 3600) and rows["a"].busy_hours == 0
    assert rows["b"].busy_hours == pytest.approx(600 / 3600) and rows["b"].idle_hours == 0


def test_telemetry_for_a_pod_kube_state_metrics_does_not_know_is_unlabelled_unless_dcgm_copied_labels() -> None:
    engine = [
        Series(device("new-0", 0.5), {300: 0.5}),
        Series(device("new-1", 0.5, uuid="GPU-2", gpugate_io_team="c"), {300: 0.5}),
    ]
    report = compute_report(
        Inputs(steps=[300], step=300, requests=[], pod_labels=[], engine_active=engine, gpu_util=[])
    )
    assert sorted(row.group for row in report.rows) == ["c", "unlabelled"]


def test_a_gpu_nobody_holds_is_left_out() -> None:
    engine = [Series(device("", 0.0), {300: 0.0})]
    report = compute_report(
        Inputs(steps=[300], step=300, requests=[], pod_labels=[], engine_active=engine, gpu_util=[])
    )
    assert report.rows == [] and report.total.allocated_hours == 0


def test_a_hand_over_within_one_step_splits_the_hour_and_holds_one_gpu() -> None:
    # job-1 ends and job-2 starts on the same GPU inside step 600: the step sees both, neither is sharing.
    requests = [
        Series({"namespace": "ns", "pod": "job-1", "resource": "nvidia_com_gpu"}, {300: 1.0, 600: 1.0}),
        Series({"namespace": "ns", "pod": "job-2", "resource": "nvidia_com_gpu"}, {600: 1.0, 900: 1.0}),
    ]
    engine = [Series(device("job-1", 0.5), {300: 0.5, 600: 0.5}), Series(device("job-2", 0.5), {600: 0.5, 900: 0.5})]
    report = compute_report(
        Inputs(steps=[300, 600, 900], step=300, requests=requests, pod_labels=[], engine_active=engine, gpu_util=[])
    )
    assert (report.total.whole_gpus, report.total.shared) == (1, 0)
    assert report.total.allocated_hours == pytest.approx(900 / 3600)


def test_a_time_sliced_gpu_in_virtual_gpu_mode_is_shared() -> None:
    requests = [Series({"namespace": "ns", "pod": pod, "resource": "nvidia_com_gpu"}, {300: 1.0}) for pod in "ab"]
    engine = [Series(device(pod, 0.5, vgpu=str(n)), {300: 0.5}) for n, pod in enumerate("ab")]
    report = compute_report(
        Inputs(steps=[300], step=300, requests=requests, pod_labels=[], engine_active=engine, gpu_util=[])
    )
    assert (report.total.whole_gpus, report.total.shared) == (0, 2)
    assert report.total.allocated_hours == pytest.approx(300 / 3600)


def test_in_a_hand_over_each_pod_keeps_its_own_utilisation() -> None:
    # Outside virtual-GPU mode a series is one pod's: the idle job that ended is idle for its part of the step.
    requests = [
        Series({"namespace": "ns", "pod": "old", "resource": "nvidia_com_gpu"}, {300: 1.0}),
        Series({"namespace": "ns", "pod": "new", "resource": "nvidia_com_gpu"}, {300: 1.0}),
    ]
    engine = [Series(device("old", 0), {300: 0.01}), Series(device("new", 0), {300: 0.6})]
    report = compute_report(
        Inputs(steps=[300], step=300, requests=requests, pod_labels=[], engine_active=engine, gpu_util=[]),
        group_by="workload",
    )
    rows = {row.group: row for row in report.rows}
    assert rows["ns/Pod/old"].idle_hours == pytest.approx(150 / 3600)
    assert rows["ns/Pod/new"].busy_hours == pytest.approx(150 / 3600)


def test_no_function_in_webhook_report_is_over_60_lines_without_a_reason() -> None:
    """The report is cut into stages; a longer function says why on its first body line (``# long: ...``)."""
    import ast
    from pathlib import Path

    long = []
    for path in sorted((Path(__file__).resolve().parents[2] / "webhook/report").glob("*.py")):
        source = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(source))):
            if not isinstance(node, ast.FunctionDef) or (node.end_lineno or 0) - node.lineno + 1 <= 60:
                continue
            if "# long:" not in "\n".join(source[node.lineno - 1 : node.lineno + 3]):
                long.append(f"{path.name}:{node.lineno} {node.name}")
    assert not long, long
