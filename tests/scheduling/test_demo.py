"""`make demo`'s entry point as a newcomer meets it: started, an example applied with the pinned kubectl and the
kubeconfig it printed, the pod bound by the scheduler to the pool its class names, then Ctrl-C (SIGINT), after
which every process it started is gone and so is its work directory."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import fleet
from tests.harness.controlplane import REPO
from tests.harness.demo import READY_LINE
from tests.harness.polling import eventually
from tests.harness.processes import LOOPBACK_ENV
from tests.harness.scheduling import find_scheduling_binaries

pytestmark = pytest.mark.e2e


class _Lines:
    """The demo's stdout, read by a thread into a queue (a select() on a buffered pipe misses buffered lines)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self.thread.start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def until(self, marker: str, timeout: float) -> list[str]:
        """Lines up to and including the first one containing `marker`."""
        deadline = time.monotonic() + timeout
        start = len(self.seen)
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if marker in line:
                return self.seen[start:]
        raise AssertionError(f"no {marker!r} within {timeout:.0f}s; demo printed:\n" + "\n".join(self.seen))

    def rest(self, timeout: float) -> str:
        with contextlib.suppress(AssertionError):  # read to the end of the output
            self.until("\0never", timeout)
        return "\n".join(self.seen)


def test_make_demo_serves_the_fleet_and_stops_everything_on_ctrl_c() -> None:
    try:
        bins, _ = find_scheduling_binaries()
    except Exception as e:
        if os.environ.get("CI"):
            pytest.fail(f"demo test cannot run in CI: {e}", pytrace=False)
        pytest.skip(f"!!! DEMO TEST SKIPPED: {e}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.demo", "--nodes-per-pool", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **LOOPBACK_ENV, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    out: _Lines | None = None
    try:
        out = _Lines(proc)
        printed = out.until(READY_LINE, timeout=240)
        text = "\n".join(printed)
        kubeconfig = Path(re.findall(r"export KUBECONFIG=(\S+)", text)[0])
        assert kubeconfig.exists(), text
        pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", out.until("processes", 10)[-1])}
        assert {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok", "gpugate"} <= set(
            pids
        ), pids
        assert "policies/examples/pod-mig-mixed.yaml" in text and "gpugate audit" in text, text

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(bins / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, **LOOPBACK_ENV},
            )

        applied = kubectl("apply", "-f", str(REPO / "policies" / "examples" / "pod-mig-mixed.yaml"))
        assert applied.returncode == 0, applied.stderr

        def placed() -> tuple[str, str] | None:
            got = kubectl("get", "pod", "mig-slice", "-o", "jsonpath={.spec.nodeName} {.status.phase}")
            node, _, phase = got.stdout.partition(" ")
            return (node, phase) if node and phase == "Running" else None

        where = eventually(placed, timeout=60)
        assert where, kubectl("describe", "pod", "mig-slice").stdout
        assert fleet.pool_of(where[0]) == "a100", where
        refused = kubectl("apply", "-f", str(REPO / "policies" / "examples" / "pod-fractional.yaml"))
        assert refused.returncode != 0 and 'admission webhook "mutate.gpugate.io" denied' in refused.stderr, refused

        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
        rest = out.rest(timeout=5)
        assert proc.returncode == 0, rest
        assert "stopped everything it started" in rest, rest
        alive = [f"{name}={pid}" for name, pid in pids.items() if Path(f"/proc/{pid}").exists()]
        assert not alive, f"still running after Ctrl-C: {alive}"
        assert not kubeconfig.parent.parent.exists(), "the work directory was left behind"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if out is not None:
            out.thread.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
