"""A normal GPU pod's dry-run through a real kube-apiserver while 16 hostile clients work against gpugate.

One control plane (etcd + kube-apiserver from tests/harness/controlplane.py) with deploy/'s webhooks pointed at
`gpugate serve` (policies/, 2 workers of 4 threads: the chart's defaults). Two phases of --seconds each:

  quiet     only the normal pod: `POST .../pods?dryRun=All` of a one-GPU pod, one every --interval seconds;
  hostile   the same, while 16 hostile clients run at once (--claimers + --slow-senders):
            claimers      dry-runs through the apiserver, back to back, of GPU pods naming 32 resource claim
                          templates that do not exist (the most a pod may name: webhook/admission/shapes.py);
            slow senders  TLS connections straight to gpugate's port (what any pod could do without the
                          NetworkPolicy) sending a review's head, then its body a byte every 0.1 s; cut off by
                          the server at --request-timeout, each opens the next at once. 12 by default: more than
                          the 8 threads of the two workers, however the connections fall on them.

For each phase it prints how many normal dry-runs were answered, how many of them correctly (allowed, with the
`nvidia` runtime class the default policy injects), and their latency (median, p95, max, in ms); for the hostile
clients, how many dry-runs they got answered and how many slow connections the server cut. The Done-when figure of
issue #26 is the hostile max under 1 s. The figures are wall time on whatever machine runs this (say so when you
quote them: a shared machine's other tenants count too); nothing here is a pass/fail threshold
(tests/e2e/test_hostile.py asserts the behaviour: the normal pod is answered, correctly).

Run: .venv/bin/python bench/hostile.py [--seconds 20] [--claimers 4] [--slow-senders 12] [--code /tmp/before]
Needs the e2e binaries (tests/e2e/build.sh, `make tools`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.apiserver import API, pod  # noqa: E402
from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries  # noqa: E402
from tests.harness.gpugate import GPUGate, point_at, register, render_deploy  # noqa: E402

CLAIMS = 32  # webhook/admission/shapes.py: more is refused at once, before any read
TRICKLE = 0.1  # seconds between the slow senders' bytes


@dataclass
class Phase:
    """What one phase measured."""

    latencies: list[float] = field(default_factory=list)  # seconds, answered normal dry-runs
    correct: int = 0
    failures: list[str] = field(default_factory=list)
    claim_runs: int = 0
    claim_statuses: dict[int, int] = field(default_factory=dict)
    slow_opened: int = 0
    slow_cut: int = 0

    def summary(self) -> dict[str, Any]:
        ms = sorted(x * 1000 for x in self.latencies)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))] if ms else float("nan")
        return {
            "normal answered": len(ms),
            "normal correct": self.correct,
            "normal failures": len(self.failures),
            "median ms": round(statistics.median(ms), 1) if ms else None,
            "p95 ms": round(p95, 1) if ms else None,
            "max ms": round(ms[-1], 1) if ms else None,
            "claim dry-runs answered": self.claim_runs,
            "claim statuses": dict(sorted(self.claim_statuses.items())),
            "slow connections opened": self.slow_opened,
            "slow connections cut by the server": self.slow_cut,
            "first failure": self.failures[0][:200] if self.failures else None,
        }


def claims_pod(name: str) -> dict[str, Any]:
    hostile = pod(name, gpus=1)
    hostile["spec"]["resourceClaims"] = [
        {"name": f"c{i}", "resourceClaimTemplateName": f"missing-{name}-{i}"} for i in range(CLAIMS)
    ]
    return hostile


def answered_correctly(status: int, obj: dict[str, Any]) -> str | None:
    """None when the normal pod's dry-run came back allowed and mutated as the default policy says; else why not."""
    if status != 201:
        return f"HTTP {status}: {obj.get('message', obj)}"
    if obj.get("spec", {}).get("runtimeClassName") != "nvidia":
        return f"allowed without the nvidia runtime class: {obj.get('spec', {}).get('runtimeClassName')!r}"
    return None


class Hostiles:
    """The hostile clients of one phase, each in its own thread until ``stop``."""

    def __init__(self, api: API, gate: GPUGate, phase: Phase, *, claimers: int, slow_senders: int) -> None:
        self.api, self.gate, self.phase = api, gate, phase
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.claimer, args=(n,), daemon=True) for n in range(claimers)]
        self.threads += [threading.Thread(target=self.slow_sender, daemon=True) for _ in range(slow_senders)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)

    def claimer(self, number: int) -> None:
        request = self.api.create_request(claims_pod(f"claims-{number}"))
        conn = None
        while not self.stopping.is_set():
            try:
                conn = conn or self.api.connect()
                status, _ = conn.roundtrip(request)
            except OSError:
                if conn is not None:
                    conn.close()
                conn = None
                continue
            with self.lock:
                self.phase.claim_runs += 1
                self.phase.claim_statuses[status] = self.phase.claim_statuses.get(status, 0) + 1
        if conn is not None:
            conn.close()

    def slow_sender(self) -> None:
        context = ssl.create_default_context(cafile=str(self.gate.ca))
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode() * 200
        head = (
            b"POST /validate?timeout=10s HTTP/1.1\r\nHost: gpugate\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        while not self.stopping.is_set():
            try:
                raw = socket.create_connection(("127.0.0.1", self.gate.port), timeout=30)
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
            except OSError:
                time.sleep(TRICKLE)
                continue
            with self.lock:
                self.phase.slow_opened += 1
            try:
                sock.sendall(head)
                for byte in body:
                    if self.stopping.wait(TRICKLE):
                        break
                    sock.sendall(bytes([byte]))
            except OSError:  # the server cut it off
                with self.lock:
                    self.phase.slow_cut += 1
            finally:
                sock.close()


def normal_dry_runs(api: API, phase: Phase, *, seconds: float, interval: float) -> None:
    request = api.create_request(pod("normal", gpus=1))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = api.connect()  # a fresh connection each time, as a kubectl would open
        try:
            started = time.perf_counter()
            status, body = conn.roundtrip(request)
            elapsed = time.perf_counter() - started
        except OSError as err:
            phase.failures.append(f"{type(err).__name__}: {err}")
            continue
        finally:
            conn.close()
        phase.latencies.append(elapsed)
        wrong = answered_correctly(status, json.loads(body))
        if wrong:
            phase.failures.append(wrong)
        else:
            phase.correct += 1
        time.sleep(interval)


@contextlib.contextmanager
def stack(work: Path, *, server_args: list[str], code: Path | None = None) -> Iterator[tuple[API, GPUGate]]:
    try:
        bin_dir = find_binaries()
    except BinariesMissing as err:
        raise SystemExit(f"bench: {err}; build them with tests/e2e/build.sh (or `make tools`)") from None
    cp = ControlPlane(bin_dir, work / "cluster")
    gate = None
    try:
        cp.start()
        cp.ensure_runtime_class("nvidia")
        cp.ensure_default_service_account("kube-system")
        # With cluster access, as deployed: namespace labels, the inventory, and the claims the hostile pods name.
        gate = GPUGate(work / "gpugate", REPO / "policies", kubeconfig=cp.kubeconfig)
        gate.process.argv += server_args
        if code is not None:  # gpugate serve from another checkout: its webhook package comes first
            gate.process.env["PYTHONPATH"] = str(code)
        gate.start()
        register(cp, point_at(render_deploy(cp), gate))
        namespace = cp.create_namespace("hostile", labels={"team": "ml"})
        context = ssl.create_default_context(cafile=str(cp.ca.cert_path))
        context.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
        yield API(cp.apiserver_port, context, namespace), gate
    finally:
        if gate is not None:
            gate.stop()
        cp.stop()


def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    server_args = ["--workers", "2", "--threads", "4", f"--request-timeout={args.request_timeout}"]
    with (
        tempfile.TemporaryDirectory(prefix="gpugate-hostile-") as tmp,
        stack(Path(tmp), server_args=server_args, code=args.code) as (
            api,
            gate,
        ),
    ):
        quiet, hostile = Phase(), Phase()
        normal_dry_runs(api, quiet, seconds=args.seconds, interval=args.interval)
        clients = Hostiles(api, gate, hostile, claimers=args.claimers, slow_senders=args.slow_senders)
        clients.start()
        try:
            time.sleep(2 * TRICKLE)  # every hostile client under way
            normal_dry_runs(api, hostile, seconds=args.seconds, interval=args.interval)
        finally:
            clients.stop()
        return {"quiet": quiet.summary(), "hostile": hostile.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--interval", type=float, default=0.2, help="pause between the normal pod's dry-runs")
    parser.add_argument("--claimers", type=int, default=4)
    parser.add_argument("--slow-senders", type=int, default=12)
    parser.add_argument("--request-timeout", type=float, default=10.0, help="gpugate serve --request-timeout")
    parser.add_argument(
        "--code",
        type=Path,
        default=None,
        help="serve gpugate from this checkout instead (e.g. `git worktree add /tmp/before <commit>`), to compare",
    )
    args = parser.parse_args(argv)
    results = run(args)
    print(
        f"hostile clients: {args.claimers} claim dry-runs + {args.slow_senders} slow senders, {args.seconds:g} s/phase"
    )
    for name, summary in results.items():
        print(f"{name:8} " + ", ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
