"""A real Prometheus on 127.0.0.1 over a TSDB backfilled (promtool) with the synthetic week of tests/report/synthetic.py."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.ports import free_port

from .synthetic import Fleet, small_fleet

TOOLS_CACHE = Path(os.environ.get("GPUGATE_TOOLS_CACHE", Path.home() / ".cache/gpugate-tools"))


def missing_tool(message: str) -> None:
    """In CI a missing tool fails the test; locally it skips, loudly."""
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def find_tool(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(str(TOOLS_CACHE / f"{name}-*/{name}")), reverse=True)), None
    )
    if not found:
        missing_tool(
            f"{name.upper()} NOT FOUND: tests/report needs Prometheus' {name}. Run scripts/install-tools "
            f"(it extracts it from Debian's 'prometheus' package into {TOOLS_CACHE}) or put it on PATH."
        )
    return str(found)


@dataclass
class RunningPrometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def backfill(fleet: Fleet, directory: Path, *, block: str = "168h", since: int = 0, until: int | None = None) -> Path:
    """OpenMetrics text -> TSDB blocks. Week-long blocks by default: 2.42's backfill re-reads the whole input
    once per block, so 2-hour blocks cost 84 passes over a week. ``since``/``until`` (seconds since the
    fleet's start) keep part of it, as one replica of an HA pair that was down for the rest."""
    openmetrics = directory / "fleet.om"
    with openmetrics.open("w") as stream:
        fleet.write(stream, since=since, until=until)
    tsdb = directory / "tsdb"
    result = subprocess.run(
        [
            find_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={block}",
            str(openmetrics),
            str(tsdb),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    openmetrics.unlink()
    return tsdb


def start_prometheus(
    tsdb: Path, directory: Path, *, external_labels: dict[str, str] | None = None, flags: tuple[str, ...] = ()
) -> RunningPrometheus:
    server = find_tool("prometheus")
    config = directory / "prometheus.yml"
    # Nothing to scrape: every sample comes from the backfilled blocks. External labels name an HA replica.
    labels = "".join(f"\n    {k}: {v}" for k, v in (external_labels or {}).items())
    config.write_text(f"global:\n  external_labels:{labels}\n" if labels else "global: {}\n")
    port = free_port()
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                server,
                f"--config.file={config}",
                f"--storage.tsdb.path={tsdb}",
                # Retention counts back from the newest block, but a week-old test week must never be cut.
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
                *flags,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return RunningPrometheus(url, process, log)
        except OSError:
            time.sleep(0.2)
    process.terminate()
    raise AssertionError(f"prometheus not ready within 60 s: {log.read_text()[-2000:]}")


@contextmanager
def serving(fleet: Fleet, directory: Path, *, block: str = "168h") -> Iterator[RunningPrometheus]:
    """A Prometheus over ``fleet`` backfilled into ``directory``, stopped when the block ends: every
    module's fixture of its own week or day."""
    find_tool("prometheus")
    running = start_prometheus(backfill(fleet, directory, block=block), directory)
    try:
        yield running
    finally:
        running.process.terminate()
        try:
            running.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    with serving(small_fleet(), tmp_path_factory.mktemp("report-prometheus")) as running:
        yield running
