"""Memory budget: every thread of every worker busy with the largest body gpugate accepts, against a real
`gpugate serve` (gunicorn, TLS) with the chart's workers and threads, stays under the chart's memory limit
with room to spare. The peak is each process's own high-water mark (VmHWM in /proc), summed over the
master and its workers (pages they share are counted once per process: an over-estimate)."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.gpugate import GPUGate
from tests.support import REPO, gpu_pod, review
from webhook.serve.app import LARGE_BODY, MAX_BODY, MAX_VALUES

CHART = yaml.safe_load((REPO / "charts" / "gpugate" / "values.yaml").read_text())
LIMIT = CHART["resources"]["limits"]["memory"]
LIMIT_BYTES = int(LIMIT.removesuffix("Mi")) * 1024**2
ROOM = 0.75  # the peak must leave a quarter of the limit free


def _padded(body: dict[str, Any]) -> bytes:
    """``body`` with an annotation that brings it to just under MAX_BODY."""
    raw = json.dumps(body).encode()
    body["request"]["object"]["metadata"].setdefault("annotations", {})["pad"] = "x" * (MAX_BODY - len(raw) - 200)
    out = json.dumps(body).encode()
    assert LARGE_BODY < len(out) <= MAX_BODY
    return out


def _values(raw: bytes) -> int:
    return raw.count(b",") + raw.count(b"{") + raw.count(b"[")


def largest_bodies() -> list[bytes]:
    """The two shapes that cost the most memory per byte, each with as many values as gpugate accepts."""
    maps = review(gpu_pod(1))
    maps["request"]["object"]["spec"]["x"] = [{} for _ in range(MAX_VALUES // 2 - 100)]
    env = review(gpu_pod(1))
    env["request"]["object"]["spec"]["containers"][0]["env"] = [
        {"name": f"E{i}", "value": "v"} for i in range(MAX_VALUES // 3 - 100)
    ]
    bodies = [_padded(maps), _padded(env)]
    assert all(MAX_VALUES * 0.9 < _values(b) <= MAX_VALUES for b in bodies)
    return bodies


def _tree(pid: int) -> list[int]:
    return [pid] + [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _field(path: str, name: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {name} in {path}")


class Memory:
    """What the pod's cgroup would be charged at the peak: the processes' proportional share at rest (Pss,
    shared pages split between master and workers, as the cgroup counts them once) plus everything each
    process grew beyond its resident size at rest, up to its high-water mark (new pages are its own)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pids = _tree(pid)
        self.at_rest = sum(_field(f"/proc/{p}/smaps_rollup", "Pss") for p in self.pids)
        self.resident = {p: _field(f"/proc/{p}/status", "VmRSS") for p in self.pids}

    def peak(self) -> int:
        assert _tree(self.pid) == self.pids, "a worker was replaced (killed?) while the bodies were in flight"
        grown = sum(max(0, _field(f"/proc/{p}/status", "VmHWM") - self.resident[p]) for p in self.pids)
        return self.at_rest + grown


@pytest.fixture
def server(tmp_path: Path):
    gate = GPUGate(tmp_path / "gpugate", REPO / "policies")
    gate.process.argv += ["--workers", str(CHART["workers"]), "--threads", str(CHART["threads"])]
    gate.start()
    yield gate
    gate.stop()


def test_every_thread_busy_with_the_largest_body_fits_the_chart_memory_limit(server: GPUGate) -> None:
    context = ssl.create_default_context(cafile=str(server.ca))
    bodies = largest_bodies()
    assert server.process.proc is not None
    memory = Memory(server.process.proc.pid)
    busy = CHART["workers"] * CHART["threads"]
    answers: list[int] = []

    def post(body: bytes) -> None:
        req = urllib.request.Request(
            f"{server.url}/validate", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, context=context, timeout=300) as resp:
                answers.append(resp.status)
        except urllib.error.HTTPError as err:
            answers.append(err.code)

    for _ in range(2):  # twice: the second wave meets workers that already hold the first one's garbage
        threads = [threading.Thread(target=post, args=(bodies[i % 2],)) for i in range(busy)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(answers) == 2 * busy and all(code < 500 for code in answers), answers
    peak = memory.peak()
    print(f"at rest {memory.at_rest / 1024**2:.0f} MiB, peak {peak / 1024**2:.0f} MiB of the chart's {LIMIT} limit")
    assert peak < ROOM * LIMIT_BYTES, f"{peak / 1024**2:.0f} MiB at peak; the chart allows {LIMIT}"
