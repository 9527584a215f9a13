"""``gpugate report`` unchanged against a Thanos querier in front of an HA pair of Prometheus servers.

Two Prometheus replicas (external labels ``replica: a`` / ``b``, as prometheus-operator's HA pairs have
``prometheus_replica``) each hold part of the synthetic week, as if each had been down for the rest: a
for the first four and a half days, b from day three. Each has a Thanos sidecar (StoreAPI over the
Prometheus remote-read API); a Thanos querier (``--query.replica-label=replica``) deduplicates them. The
report through the querier must equal the report from one Prometheus that holds the whole week.

Thanos v0.42.4 is built by scripts/install-tools from its module (tests/report/thanos/go.mod).
"""

from __future__ import annotations

import glob
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.harness.processes import Process

from .conftest import TOOLS_CACHE, RunningPrometheus, backfill, find_tool, missing_tool, start_prometheus
from .schema import checked
from .synthetic import HOUR, small_fleet
from .test_report import END_ISO, gpugate

PRICES = str(Path(__file__).with_name("prices.yaml"))
REPLICAS: dict[str, list[str]] = {}  # querier URL -> its replicas' URLs


def thanos_binary() -> str:
    found = sorted(glob.glob(str(TOOLS_CACHE / "thanos-*/thanos")), reverse=True)
    if not found:
        missing_tool(
            f"THANOS NOT FOUND: the Thanos test needs {TOOLS_CACHE}/thanos-<version>/thanos; run "
            "scripts/install-tools (it builds Thanos from tests/report/thanos/go.mod, about two minutes cold)."
        )
    return found[0]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _stores(url: str) -> int:
    """How many StoreAPI endpoints the querier has connected (its /api/v1/stores)."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/stores", timeout=2) as response:
            data = json.load(response).get("data") or {}
    except (OSError, ValueError):
        return 0
    return sum(1 for stores in data.values() for store in stores or [] if not store.get("lastError"))


@pytest.fixture(scope="module")
def querier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    thanos = thanos_binary()
    find_tool("prometheus")
    fleet = small_fleet()
    servers: list[RunningPrometheus] = []
    processes: list[Process] = []
    try:
        endpoints = []
        for replica, since, until in (("a", 0, 108 * HOUR), ("b", 72 * HOUR, None)):
            directory = tmp_path_factory.mktemp(f"thanos-{replica}")
            tsdb = backfill(fleet, directory, since=since, until=until)
            server = start_prometheus(tsdb, directory, external_labels={"cluster": "test", "replica": replica})
            servers.append(server)
            grpc, http = free_port(), free_port()
            sidecar = Process(
                f"sidecar-{replica}",
                [
                    thanos,
                    "sidecar",
                    f"--prometheus.url={server.url}",
                    f"--tsdb.path={tsdb}",
                    f"--grpc-address=127.0.0.1:{grpc}",
                    f"--http-address=127.0.0.1:{http}",
                    "--log.level=warn",
                ],
                directory,
            )
            sidecar.start()
            processes.append(sidecar)
            endpoints.append(f"--endpoint=127.0.0.1:{grpc}")
            assert eventually(lambda h=http: _ready(f"http://127.0.0.1:{h}/-/ready"), timeout=60), sidecar.log_tail()
        directory = tmp_path_factory.mktemp("thanos-query")
        http = free_port()
        query = Process(
            "query",
            [
                thanos,
                "query",
                f"--http-address=127.0.0.1:{http}",
                f"--grpc-address=127.0.0.1:{free_port()}",
                *endpoints,
                "--query.replica-label=replica",
                "--log.level=warn",
            ],
            directory,
        )
        query.start()
        processes.append(query)
        url = f"http://127.0.0.1:{http}"
        assert eventually(lambda: _ready(f"{url}/-/ready") and _stores(url) == 2, timeout=60), query.log_tail()
        REPLICAS[url] = [server.url for server in servers]
        yield url
    finally:
        for process in reversed(processes):
            process.stop()
        for server in servers:
            server.process.terminate()
            server.process.wait(timeout=30)


def report(url: str, *extra: str) -> dict[str, Any]:
    result = gpugate("report", "--prometheus", url, "--end", END_ISO, "-o", "json", "--prices", PRICES, *extra)
    assert result.returncode == 0, result.stderr
    return checked(result.stdout)


def test_the_report_through_a_thanos_querier_equals_one_prometheus(querier: str, prometheus: RunningPrometheus) -> None:
    through, direct = report(querier, "--bucket", "1d"), report(prometheus.url, "--bucket", "1d")
    for part in ("groups", "total", "capacity", "top_idle_workloads", "buckets"):
        same(through[part], direct[part], part)


def same(a: Any, b: Any, where: str) -> None:
    """Equal, numbers within 1e-3: deduplication may take the sample at a replica switch from the other
    replica, which moves a mean in its fourth decimal."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{n}]")
    elif isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        assert a == pytest.approx(b, abs=1e-3), where
    else:
        assert a == b, where


def test_each_replica_alone_holds_only_part_of_the_week(querier: str, prometheus: RunningPrometheus) -> None:
    # So the figures above needed both replicas, deduplicated over their overlap (days three to four and a half).
    week = report(prometheus.url)["total"]["allocated_gpu_hours"]
    for url in REPLICAS[querier]:
        alone = report(url)["total"]["allocated_gpu_hours"]
        assert 0.4 * week < alone < 0.7 * week
