"""The Grafana dashboard (deploy/monitoring/gpugate-report-dashboard.json): every panel's query, run against the
backfilled Prometheus over the synthetic week, gives the report's figures for the same window."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

from webhook.report.prometheus import Prometheus

from .conftest import RunningPrometheus
from .synthetic import END
from .test_report import ROOT, report_json

DASHBOARD = ROOT / "deploy/monitoring/gpugate-report-dashboard.json"
WEEK = "604800s"
PRICE = 1.5
# One 5-minute step per device at each end of a pod's life or gap, for the four GPUs of the biggest workload.
TOLERANCE = 2 * 4 * 300 / 3600


def test_the_dashboard_is_what_its_generator_writes() -> None:
    generator = runpy.run_path(str(ROOT / "scripts/gen-report-dashboard"))
    assert DASHBOARD.read_text() == generator["render"](), "run scripts/gen-report-dashboard and make chart-sync"


@pytest.fixture(scope="module")
def panels(prometheus: RunningPrometheus) -> dict[str, dict[str, list[tuple[dict[str, str], float]]]]:
    """Every panel's every query, as Grafana would send it for the last week with the default variables."""
    client = Prometheus(prometheus.url, timeout=300)
    out: dict[str, dict[str, list[tuple[dict[str, str], float]]]] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__range", WEEK).replace("$threshold", "10").replace("$price", str(PRICE))
            assert "$" not in re.sub(r'"\$1"', "", expr), expr  # no variable left but label_replace's $1
            result = client.query(expr, at=END)
            out.setdefault(panel["title"], {})[target["refId"]] = [
                (s.labels, next(iter(s.samples.values()))) for s in result
            ]
    return out


@pytest.fixture(scope="module")
def report(prometheus: RunningPrometheus) -> dict[str, Any]:
    return report_json(prometheus, "--group", "team")


def by(rows: list[tuple[dict[str, str], float]], label: str) -> dict[str, float]:
    return {labels[label]: value for labels, value in rows}


def test_busy_and_idle_gpu_hours_by_team(panels: dict[str, Any], report: dict[str, Any]) -> None:
    panel = panels["Busy and idle GPU-hours by team"]
    busy, idle = by(panel["busy"], "team"), by(panel["idle"], "team")
    for row in report["groups"]:
        assert busy[row["group"]] == pytest.approx(row["busy_gpu_hours"], abs=TOLERANCE), row["group"]
        assert idle[row["group"]] == pytest.approx(row["idle_gpu_hours"], abs=TOLERANCE), row["group"]
    assert set(busy) == {row["group"] for row in report["groups"]}


def test_idle_cost_by_team(panels: dict[str, Any], report: dict[str, Any]) -> None:
    cost = by(panels["Idle GPU cost by team"]["idle_cost"], "team")
    for row in report["groups"]:
        assert cost[row["group"]] == pytest.approx(PRICE * row["idle_gpu_hours"], abs=PRICE * TOLERANCE)


def test_top_idle_workloads(panels: dict[str, Any], report: dict[str, Any]) -> None:
    rows = panels["Top idle workloads"]["idle"]
    shown = {f"{m['namespace']}/{m['workload_kind']}/{m['workload_name']}": v for m, v in rows if v > 0}
    want = {w["workload"]: w["idle_gpu_hours"] for w in report["top_idle_workloads"]}
    assert shown.keys() == want.keys()
    for key, value in want.items():
        assert shown[key] == pytest.approx(value, abs=TOLERANCE), key


def test_utilisation_source_and_telemetry_total(panels: dict[str, Any], report: dict[str, Any]) -> None:
    [(_, share)] = panels["Utilisation from DCGM_FI_PROF_GR_ENGINE_ACTIVE"]["prof_share"]
    match = re.fullmatch(r"mixed \((\d+)% GR_ENGINE_ACTIVE\)", report["total"]["utilisation_source"])
    assert match and 100 * share == pytest.approx(int(match.group(1)), abs=1)
    [(_, hours)] = panels["GPU-hours with telemetry, fleet"]["all"]
    total = report["total"]
    assert hours == pytest.approx(total["busy_gpu_hours"] + total["idle_gpu_hours"], abs=4 * TOLERANCE)


def test_every_panel_was_checked(panels: dict[str, Any]) -> None:
    assert set(panels) == {
        "Busy and idle GPU-hours by team",
        "Idle GPU cost by team",
        "Top idle workloads",
        "Utilisation from DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "GPU-hours with telemetry, fleet",
        "GPU-hours held as HAMi shares by team",  # checked against HAMi's series in test_shares.py
        "GPU-hours held through DRA claims by team",  # checked against gpugate's DRA series in test_shares.py
    }
    assert Path(DASHBOARD).read_text() == (ROOT / "charts/gpugate/files/gpugate-report-dashboard.json").read_text()
