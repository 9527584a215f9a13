"""Connections that complete the TLS handshake and send nothing (what kube-apiserver's connection pool
leaves behind) do not hold gunicorn's threads: a real `gpugate serve` with one worker of one thread still
answers on other connections, and answers the idle ones when they do send."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.serve.test_tls import GPUGATE, REPO, SERVICE_NAME, START_TIMEOUT, make_certs
from tests.support import stop

pytestmark = pytest.mark.tls

# A safety bound for each answer: with a pinned thread there would be none at all.
ANSWER_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def one_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    root = tmp_path_factory.mktemp("idle")
    certs = make_certs(root / "certs")
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
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
                "--workers",
                "1",
                "--threads",
                "1",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:

        def up() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                with handshaken(port, certs) as sock:
                    return ask(sock).startswith(b"HTTP/1.1 200")
            except OSError:
                return False

        assert eventually(up, timeout=START_TIMEOUT, interval=0.2), log.read_text(errors="replace")
        yield port, certs
    finally:
        stop(process)


def handshaken(port: int, certs: Path) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)
    try:
        return context.wrap_socket(raw, server_hostname=SERVICE_NAME)
    except BaseException:
        raw.close()
        raise


def ask(sock: ssl.SSLSocket) -> bytes:
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {SERVICE_NAME}\r\n\r\n".encode())
    answer = b""
    while b"ok\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer


def test_idle_handshaken_connections_do_not_starve_the_thread(one_thread: tuple[int, Path]) -> None:
    port, certs = one_thread
    idle = [handshaken(port, certs) for _ in range(3)]
    try:
        time.sleep(0.5)  # let the worker take the idle connections in, one after the other
        with handshaken(port, certs) as busy:
            assert ask(busy).startswith(b"HTTP/1.1 200")
            assert ask(busy).startswith(b"HTTP/1.1 200")  # kept alive
        for sock in reversed(idle):  # the parked connections are served when they speak
            assert ask(sock).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()
