"""``gpugate report`` against a real Prometheus over the synthetic week: figures match the hand-computed ones."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from webhook.report import queries
from webhook.report.compute import Integrator
from webhook.report.prometheus import Prometheus

from .conftest import RunningPrometheus
from .schema import checked
from .synthetic import END, START, expected, gap_hours

ROOT = Path(__file__).resolve().parents[2]
STEP_HOURS = 300 / 3600
END_ISO = "2026-11-09T00:00:00Z"
assert END == START + 7 * 86400


def gpugate(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def report_json(prometheus: RunningPrometheus, *extra: str) -> dict[str, Any]:
    result = gpugate("report", "--prometheus", prometheus.url, "--end", END_ISO, "-o", "json", *extra)
    assert result.returncode == 0, result.stderr
    return checked(result.stdout)


@pytest.fixture(scope="module")
def by_team(prometheus: RunningPrometheus) -> dict[str, Any]:
    return report_json(prometheus, "--prices", str(Path(__file__).with_name("prices.yaml")))


def test_every_team_matches_the_hand_computed_figures(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    assert set(rows) == set(expected())
    for team, want in expected().items():
        row = rows[team]
        # One step of error per device at each end of a pod's life (a step's window sees the first sample).
        tolerance = 2 * STEP_HOURS * max(1, want["whole"])
        for figure in ("allocated", "busy", "idle", "no_telemetry"):
            got = row[f"{figure}_gpu_hours" if figure != "no_telemetry" else "no_telemetry_gpu_hours"]
            assert got == pytest.approx(want[figure], abs=tolerance), (team, figure, got, want[figure])
        assert row["whole_gpus_peak"] == want["whole"], team


def test_the_scrape_gap_is_no_telemetry_never_idle(by_team: dict[str, Any]) -> None:
    vision = next(row for row in by_team["groups"] if row["group"] == "vision")
    gap = gap_hours()
    assert 5.8 < gap <= 6
    assert vision["no_telemetry_gpu_hours"] == pytest.approx(4 * gap, abs=1e-3)  # rounded to 3 decimals
    assert vision["idle_gpu_hours"] == pytest.approx(vision["busy_gpu_hours"], abs=1e-3)  # two idle, two busy GPUs
    assert vision["telemetry_share"] == pytest.approx(1 - 4 * gap / 672, abs=1e-3)


def test_mig_slices_count_as_their_share_and_are_listed(by_team: dict[str, Any]) -> None:
    research = next(row for row in by_team["groups"] if row["group"] == "research")
    # single strategy: batch-0 requested nvidia.com/gpu: 2, which are two 1g.10gb slices (2/7 of an H100)
    assert research["mig_slices_peak"] == {"3g.40gb": 1, "1g.10gb": 2}
    assert research["shared_peak"] == 1
    assert research["whole_gpus_peak"] == 0
    assert research["idle_gpu_hours"] == pytest.approx(3 / 7 * 168, abs=STEP_HOURS)


def test_a_time_sliced_gpu_is_counted_once(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    # The T4 shared by nb-alice (platform) and nb-bob (research): 168 GPU-hours in all, half each.
    assert rows["platform"]["allocated_gpu_hours"] == pytest.approx(84, abs=STEP_HOURS)
    assert rows["platform"]["avg_utilisation"] == pytest.approx(0.30)
    total = by_team["total"]["allocated_gpu_hours"]
    assert total == pytest.approx(sum(want["allocated"] for want in expected().values()), abs=4 * STEP_HOURS)


def test_utilisation_source_per_row(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    assert rows["unlabelled"]["utilisation_source"] == "GPU_UTIL"  # node-d's exporter has no profiling fields
    assert rows["vision"]["utilisation_source"] == "GR_ENGINE_ACTIVE"
    assert by_team["total"]["utilisation_source"].startswith("mixed (")
    assert rows["vision"]["avg_utilisation"] == pytest.approx(0.45)
    assert rows["vision"]["p95_utilisation"] == pytest.approx(0.90)
    assert rows["unlabelled"]["p95_utilisation"] == pytest.approx(0.05)
    assert rows["nlp"]["peak_memory_mib"] == 70000  # the job that ended mid-window


def test_costs_from_the_price_table(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    assert by_team["currency"] == "EUR"
    # A100 at 3.00 an hour, hours without telemetry priced by the GPU last seen: 672 h.
    assert rows["vision"]["cost"] == pytest.approx(672 * 3.0, abs=0.01)
    assert rows["vision"]["idle_cost"] == pytest.approx(rows["vision"]["idle_gpu_hours"] * 3.0, abs=0.01)
    # research: 3g.40gb at 1.20 a slice-hour, 1g.10gb from the H100 price (7.00 x 1/7), half a T4 at 0.35.
    assert rows["research"]["cost"] == pytest.approx(168 * 1.2 + 2 * 168 * 1.0 + 84 * 0.35, abs=0.05)
    assert rows["research"]["idle_cost"] == pytest.approx(168 * 1.2, abs=0.01)
    # The V100 is not in the table: the default price.
    assert rows["unlabelled"]["cost"] == pytest.approx(168 * 2.0, abs=0.01)


def test_top_idle_workloads(by_team: dict[str, Any]) -> None:
    top = [(w["namespace"], w["kind"], w["name"], round(w["idle_gpu_hours"])) for w in by_team["top_idle_workloads"]]
    assert top == [
        ("ml-vision", "Deployment", "trainer", 324),
        ("legacy", "Pod", "old-render-0", 168),
        ("ml-nlp", "Deployment", "serve", 78),
        ("research", "StatefulSet", "notebook", 72),
    ]


@pytest.mark.parametrize(
    ("group", "names"),
    [
        ("cost-center", {"cc-100", "cc-200", "cc-300", "cc-400", "unlabelled"}),
        ("namespace", {"ml-vision", "ml-nlp", "research", "ml-dev", "legacy"}),
        (
            "workload",
            {
                "ml-vision/Deployment/trainer",
                "ml-nlp/Deployment/serve",
                "ml-nlp/Job/finetune",
                "research/StatefulSet/notebook",
                "research/Job/batch",
                "ml-dev/Deployment/nb-alice",
                "ml-dev/Deployment/nb-bob",
                "legacy/Pod/old-render-0",
            },
        ),
    ],
)
def test_other_groupings_add_up_to_the_same_total(
    prometheus: RunningPrometheus, by_team: dict[str, Any], group: str, names: set[str]
) -> None:
    document = report_json(prometheus, "--group", group)
    assert {row["group"] for row in document["groups"]} == names
    assert sum(row["allocated_gpu_hours"] for row in document["groups"]) == pytest.approx(
        by_team["total"]["allocated_gpu_hours"]
    )


def test_fail_above_exits_1_and_names_the_group(prometheus: RunningPrometheus) -> None:
    common = ("report", "--prometheus", prometheus.url, "--end", END_ISO, "-o", "csv")
    over = gpugate(*common, "--fail-above", "200")
    assert over.returncode == 1, over.stderr
    assert "over --fail-above: vision: 324.2 idle GPU-hours (limit 200)" in over.stderr
    assert "unlabelled" not in over.stderr  # 168 <= 200
    share = gpugate(*common, "--fail-above", "99%")
    assert share.returncode == 1 and "unlabelled: 100% idle" in share.stderr
    assert gpugate(*common, "--fail-above", "100%").returncode == 0
    rows = [r for r in csv.DictReader(io.StringIO(over.stdout)) if r["record"] in ("group", "total")]
    assert rows[-1]["team"] == "TOTAL" and rows[0]["team"] == "vision"


def test_table_output(prometheus: RunningPrometheus) -> None:
    result = gpugate("report", "--prometheus", prometheus.url, "--end", END_ISO, "--window", "1w")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("GPU-hours from 2026-11-02 00:00 to 2026-11-09 00:00 UTC, step 300 s")
    total = next(line for line in lines if line.startswith("TOTAL"))
    assert "7 GPU, 2x1g.10gb, 1x3g.40gb, 2 shared" in total
    assert "Top idle workloads" in lines
    assert result.stderr == ""  # no progress line when stderr is not a terminal


def _integrate(client: Prometheus, *, budget: int, progress: Any = None) -> Any:
    integrator = Integrator(step=300)
    for chunk in queries.stream_inputs(client, start=START, end=END, step=300, budget=budget, progress=progress):
        integrator.add(chunk)
    return integrator.finish()


def test_a_window_streamed_in_many_chunks_gives_the_same_figures(prometheus: RunningPrometheus) -> None:
    client = Prometheus(prometheus.url)
    whole = _integrate(client, budget=10**9)
    calls: list[str] = []
    split = _integrate(client, budget=2_000, progress=lambda done, total, what: calls.append(what))
    assert len(calls) > 5 * 20  # small chunks: many queries of each of the five kinds
    assert [(r.group, round(r.allocated_hours, 6), round(r.idle_hours, 6)) for r in split.rows] == [
        (r.group, round(r.allocated_hours, 6), round(r.idle_hours, 6)) for r in whole.rows
    ]
    assert split.capacity.unallocated_hours == pytest.approx(whole.capacity.unallocated_hours)


def test_a_coarser_step_stays_within_its_own_error(prometheus: RunningPrometheus, by_team: dict[str, Any]) -> None:
    document = report_json(prometheus, "--step", "1h")
    rows = {row["group"]: row for row in document["groups"]}
    for team, want in expected(step=3600).items():
        assert rows[team]["allocated_gpu_hours"] == pytest.approx(want["allocated"], abs=2 * max(1, want["whole"]))


@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("--bucket", "1d", "--prices", str(Path(__file__).with_name("prices.yaml"))),
        ("--bucket", "1h", "--group", "workload"),
        ("--group", "namespace", "--top", "0"),
    ],
)
def test_every_json_document_follows_the_published_schema(
    prometheus: RunningPrometheus, extra: tuple[str, ...]
) -> None:
    document = report_json(prometheus, *extra)
    assert document["schema_version"] == "gpugate.io/report/v1.4"


def test_capacity_is_allocated_plus_unallocated_and_reconciles(by_team: dict[str, Any]) -> None:
    capacity = by_team["capacity"]
    assert capacity["allocated_gpu_hours"] == pytest.approx(by_team["total"]["allocated_gpu_hours"], abs=1e-3)
    assert capacity["capacity_gpu_hours"] == pytest.approx(
        capacity["allocated_gpu_hours"] + capacity["unallocated_gpu_hours"], abs=1e-3
    )
    assert capacity["allocated_cost"] == pytest.approx(by_team["total"]["cost"], abs=0.01)
    for table in ("by_model", "by_resource"):
        assert sum(p["capacity_gpu_hours"] for p in capacity[table]) == pytest.approx(
            capacity["capacity_gpu_hours"], abs=0.01
        )
        assert sum(p["capacity_cost"] for p in capacity[table]) == pytest.approx(capacity["capacity_cost"], abs=0.05)
    models = {p["model"]: p for p in capacity["by_model"]}
    # node-a: GPU 7 unheld all week and GPU 5 after finetune ended (60 h in), less the 6-hour gap for both;
    # node-b's A100 has 4/7 no MIG instance covers; node-e's H100 5/7.
    a100 = 168 - gap_hours() + 108 - gap_hours() + 4 / 7 * 168
    assert models["NVIDIA A100-SXM4-80GB"]["unallocated_gpu_hours"] == pytest.approx(a100, abs=0.5)
    assert models["NVIDIA H100 80GB HBM3"]["unallocated_gpu_hours"] == pytest.approx(5 / 7 * 168, abs=0.1)
    assert by_team["total"]["no_telemetry_cost"] == pytest.approx(4 * gap_hours() * 3.0 + gap_hours() * 3.0, abs=0.5)


def test_buckets_add_up_to_the_window(prometheus: RunningPrometheus, by_team: dict[str, Any]) -> None:
    document = report_json(prometheus, "--bucket", "1d", "--prices", str(Path(__file__).with_name("prices.yaml")))
    fleet = document["buckets"]["fleet"]
    assert [b["start"] for b in fleet] == [f"2026-11-{d:02d}T00:00:00Z" for d in range(2, 9)]
    assert sum(b["allocated_gpu_hours"] for b in fleet) == pytest.approx(
        by_team["total"]["allocated_gpu_hours"], abs=0.01
    )
    assert sum(b["idle_cost"] for b in fleet) == pytest.approx(by_team["total"]["idle_cost"], abs=0.05)
    vision = document["buckets"]["groups"]["vision"]
    assert [round(b["allocated_gpu_hours"]) for b in vision] == [96] * 7
    csv_text = gpugate("report", "--prometheus", prometheus.url, "--end", END_ISO, "-o", "csv", "--bucket", "1d").stdout
    records = [r for r in csv.DictReader(io.StringIO(csv_text)) if r["record"] == "bucket" and r["team"] == "FLEET"]
    assert [float(r["allocated_gpu_hours"]) for r in records] == [b["allocated_gpu_hours"] for b in fleet]


def test_prices_by_node_label_and_per_node_series(prometheus: RunningPrometheus, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "currency: EUR\n"
        "perHour: {default: 2.00, Tesla T4: 0.35, NVIDIA H100 80GB HBM3: 7.00}\n"
        "byNodeLabel: {label: node.kubernetes.io/instance-type, perHour: {p4d.24xlarge: 4.10}}\n"
        "nodePriceSeries: node_gpu_hourly_cost\n"
    )
    rows = {row["group"]: row for row in report_json(prometheus, "--prices", str(prices))["groups"]}
    # node-a is a p4d.24xlarge (kube_node_labels): 4.10 per GPU-hour; node-d's OpenCost series says 1.50.
    assert rows["vision"]["cost"] == pytest.approx(672 * 4.10, abs=0.05)
    assert rows["unlabelled"]["cost"] == pytest.approx(168 * 1.50, abs=0.05)
    # node-b's A100 (3g.40gb) has neither: the default's share, 2.00 x 3/7.
    assert rows["research"]["cost"] == pytest.approx(168 * 2.0 * 3 / 7 + 2 * 168 * 1.0 + 84 * 0.35, abs=0.1)


def test_the_example_price_table_loads() -> None:
    from webhook.report.command import load_prices

    prices = load_prices(str(ROOT / "docs/examples/report-prices.yaml"))
    assert prices.node_label == "node.kubernetes.io/instance-type" and prices.node_series == "node_gpu_hourly_cost"
    assert prices.per_label_value["p5.48xlarge"] == 6.88
