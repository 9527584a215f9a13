"""Throughput and latency of POST /mutate through `gpugate serve` (gunicorn, TLS), against a no-op endpoint
on the same stack (bench/noop.py). Clients keep connections alive, as kube-apiserver does.

Run: .venv/bin/python bench/serving.py [--requests N] [--clients C]
The client runs on the same 2 cores as the server, so absolute numbers are lower bounds; the ratio between
the two endpoints is the point.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness.ports import free_port  # noqa: E402

GPUGATE = Path(sys.executable).with_name("gpugate")
NAME = "gpugate.gpugate.svc"


def start(certs: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            str(GPUGATE),
            "serve",
            "--policies",
            str(REPO / "policies"),
            "--cert",
            str(certs / "tls.crt"),
            "--key",
            str(certs / "tls.key"),
            "--bind",
            f"127.0.0.1:{port}",
            *extra,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
            conn.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname=NAME)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


def load(port: int, certs: Path, body: bytes, *, requests: int, clients: int) -> tuple[float, list[float]]:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    latencies: list[float] = []
    lock = threading.Lock()

    def client(count: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http client does
        conn.sock = context.wrap_socket(raw, server_hostname=NAME)
        mine = []
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", "/mutate?timeout=10s", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(requests // clients,)) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / (time.perf_counter() - started), latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    body = (REPO / "policies" / "examples" / "review-gpu-pod.json").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        subprocess.run(
            [str(GPUGATE), "certs", "--service", "gpugate", "--namespace", "gpugate", "--out", tmp, "--force"],
            check=True,
            capture_output=True,
        )
        for label, extra in (("no-op", ("--app-factory", "bench.noop:build_app")), ("gpugate /mutate", ())):
            proc, port = start(certs, *extra)
            try:
                load(port, certs, body, requests=200, clients=args.clients)  # warm up
                rate, latencies = load(port, certs, body, requests=args.requests, clients=args.clients)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            q = statistics.quantiles(latencies, n=100)
            print(
                f"{label:16s} {rate:7.0f} req/s   p50 {q[49] * 1e3:5.2f} ms   p99 {q[98] * 1e3:5.2f} ms   "
                f"({len(latencies)} requests, {args.clients} keep-alive clients)"
            )


if __name__ == "__main__":
    main()
