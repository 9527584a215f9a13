"""Hostile clients against a real `gpugate serve` (gunicorn, 2 workers, TLS): oversized and deep bodies,
bodies that lie about their length, slow and half-open connections, many connections at once, bytes
that are not TLS. Each gets a 4xx or is closed by the server within a bound, and afterwards the server
is healthy: /readyz 200 and a normal /mutate still answered correctly."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.serve.test_tls import (
    GPUGATE,
    REPO,
    START_TIMEOUT,
    Connection,
    client_context,
    make_certs,
)
from tests.serve.test_worker import answered, mutate
from tests.support import gpu_pod, review, stop
from webhook.serve.app import MAX_BODY
from webhook.serve.tls import HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, REQUEST_READ_TIMEOUT, Timeouts

pytestmark = pytest.mark.tls

SAFETY = 30.0  # seconds: a bound for "the server closed it", never a performance claim
# The server under test cuts slow clients off sooner than the defaults, so that waiting for it takes little.
TIMEOUTS = Timeouts(handshake=2.0, request=3.0, idle=1.0)


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    ca: Path
    policies: Path
    log: Path

    def connect(self, timeout: float = 20) -> Connection:
        connection = Connection(self.port, context=client_context(self.ca), server_hostname="127.0.0.1")
        connection.timeout = timeout
        connection.connect()
        return connection

    def tls(self, raw: socket.socket) -> ssl.SSLSocket:
        try:
            return client_context(self.ca).wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        with self.connect() as connection:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            return response.status, response.read()

    def get(self, path: str) -> tuple[int, bytes]:
        with self.connect() as connection:
            return connection.get(path)

    def metric(self, name: str) -> float:
        text = self.get("/metrics")[1].decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("hostile")
    certs = make_certs(root / "certs")
    policies = root / "policies"
    shutil.copytree(REPO / "policies", policies, ignore=shutil.ignore_patterns("examples", "*.md"))
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBERNETES_SERVICE_HOST")}
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                str(GPUGATE),
                "serve",
                "--policies",
                str(policies),
                "--cert",
                str(certs / "tls.crt"),
                "--key",
                str(certs / "tls.key"),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--threads",
                "2",
                f"--handshake-timeout={TIMEOUTS.handshake}",
                f"--request-timeout={TIMEOUTS.request}",
                f"--idle-timeout={TIMEOUTS.idle}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    running = Server(process, port, certs / "ca.crt", policies, log)

    def up() -> bool:
        assert process.poll() is None, f"gpugate serve exited:\n{log.read_text()}"
        try:
            return running.get("/readyz")[0] == 200
        except OSError:
            return False

    try:
        assert eventually(up, timeout=START_TIMEOUT, interval=0.2), f"gpugate serve did not come up:\n{log.read_text()}"
        yield running
    finally:
        stop(process)


def assert_healthy(server: Server) -> None:
    """/readyz 200, and a GPU pod still gets the default policy's runtime class."""
    assert server.get("/readyz")[0] == 200
    status, body = server.post("/mutate", json.dumps(review(gpu_pod(1), uid="after")).encode())
    out = json.loads(body)["response"]
    assert status == 200 and out["uid"] == "after" and out["allowed"] is True
    patch = json.loads(base64.b64decode(out["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in patch
    assert server.process.poll() is None


def closed_by_server(sock: socket.socket | ssl.SSLSocket) -> bool:
    """True once the server has closed the connection (EOF or reset); waits at most SAFETY seconds."""
    sock.settimeout(SAFETY)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def test_an_oversized_body_gets_413_with_a_status_not_a_reset(server: Server) -> None:
    status, body = server.post("/mutate", b'{"x":"' + b"x" * (8 * 1024 * 1024) + b'"}')
    assert status == 413
    answer = json.loads(body)
    assert answer["kind"] == "Status" and answer["code"] == 413 and answer["reason"] == "RequestEntityTooLarge"
    assert str(MAX_BODY) in answer["message"]
    assert_healthy(server)


def test_a_body_at_the_limit_is_read_and_judged(server: Server) -> None:
    body = review(gpu_pod(1), uid="big")
    body["request"]["object"]["metadata"]["annotations"] = {"filler": "y" * (MAX_BODY - 2048)}
    data = json.dumps(body).encode()
    assert len(data) <= MAX_BODY
    status, answer = server.post("/mutate", data)
    assert status == 200 and json.loads(answer)["response"]["uid"] == "big"


def test_a_chunked_body_over_the_limit_gets_413(server: Server) -> None:
    with server.connect() as connection:
        chunks = (b"x" * (1024 * 1024) for _ in range(9))
        connection.request(
            "POST",
            "/mutate",
            body=chunks,
            encode_chunked=True,
            headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        )
        response = connection.getresponse()
        answer = response.read()
        assert response.status == 413 and json.loads(answer)["code"] == 413, answer
    assert_healthy(server)


def test_a_deeply_nested_body_gets_400(server: Server) -> None:
    body = (
        b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":'
        + b"[" * 100_000  # within the values a large body may hold (webhook.serve.app.MAX_VALUES)
        + b"]" * 100_000
        + b"}"
    )
    status, answer = server.post("/validate", body)
    assert status == 400 and b"nested too deeply" in answer
    assert_healthy(server)


@pytest.mark.parametrize("body", [b"", b"null", b"{", b'{"kind":"AdmissionReview"}', b"\x00" * 1000])
def test_bodies_that_are_not_reviews_get_400(server: Server, body: bytes) -> None:
    status, answer = server.post("/mutate", body)
    assert status == 400 and json.loads(answer)["kind"] == "Status"


def test_a_wrong_type_over_tls_gets_a_400_review(server: Server) -> None:
    body = review(gpu_pod(1), uid="typed")
    body["request"]["object"]["spec"]["containers"] = {"main": {"image": "x"}}
    status, answer = server.post("/mutate", json.dumps(body).encode())
    out = json.loads(answer)["response"]
    assert status == 200 and out["uid"] == "typed" and out["status"]["code"] == 400
    assert "request.object.spec.containers: expected a list, got an object" in out["status"]["message"]


def test_a_body_shorter_than_its_content_length_is_closed_and_harmless(server: Server) -> None:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY)
    with server.tls(raw) as sock:
        sock.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n{"kind":'
        )
        started = time.monotonic()
        assert closed_by_server(sock)
        assert time.monotonic() - started < TIMEOUTS.request + SAFETY
    assert_healthy(server)


@pytest.mark.parametrize("stage", ["tcp only", "partial TLS hello", "partial headers", "partial body"])
def test_slow_clients_are_cut_off_and_do_not_starve_the_server(server: Server, stage: str) -> None:
    """Slowloris: more stalled connections than the server has threads (2 workers x 2 threads). Each is
    closed by the server, and once they are, normal requests are answered again."""
    stalled: list[socket.socket | ssl.SSLSocket] = []
    try:
        for _ in range(6):
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY)
            if stage == "tcp only":
                stalled.append(raw)
            elif stage == "partial TLS hello":
                raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello that never ends
                stalled.append(raw)
            else:
                tls = server.tls(raw)
                stalled.append(tls)
                head = b"POST /mutate HTTP/1.1\r\nHost: x\r\n"
                if stage == "partial body":
                    head += b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"
                tls.sendall(head)
        if stage != "tcp only":  # an idle TCP connection costs the server no thread: it waits in the poller
            for sock in stalled:
                assert closed_by_server(sock), f"the server kept a stalled connection ({stage}) open"
    finally:
        for sock in stalled:
            sock.close()
    assert_healthy(server)


def test_connections_that_say_nothing_after_the_handshake_wait_in_the_poller(server: Server) -> None:
    """More handshaken, silent connections than the server has threads (2 x 2): the way kube-apiserver parks
    connections in its idle pool (webhook/serve/worker.py). They hold no thread, so requests are answered meanwhile,
    and each stays usable: a review sent on it later is answered."""
    idle: list[ssl.SSLSocket] = []
    try:
        for _ in range(6):
            idle.append(server.tls(socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY)))
        time.sleep(TIMEOUTS.idle + 0.5)  # longer than a silent client may hold a thread
        assert_healthy(server)
        for sock in idle:
            answer = mutate(sock, "parked")
            assert answered(answer, "parked"), answer[:200]
    finally:
        for sock in idle:
            sock.close()
    assert_healthy(server)


def test_many_tcp_connections_at_once_do_not_block_a_request(server: Server) -> None:
    """Connections that send nothing cost a thread only for FIRST_BYTES_TIMEOUT, then wait in the poller."""
    idle: list[socket.socket] = []
    try:
        for _ in range(40):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY))
        assert_healthy(server)
    finally:
        for sock in idle:
            sock.close()


def test_plain_http_and_garbage_on_the_tls_port_are_refused(server: Server) -> None:
    for garbage in (b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(4096)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY) as raw:
            raw.sendall(garbage)
            assert closed_by_server(raw)
    assert_healthy(server)


def test_clients_that_vanish_mid_request_are_harmless(server: Server) -> None:
    data = json.dumps(review(gpu_pod(1))).encode()
    for cut in (1, len(data) // 2, len(data) - 1):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY)
        with server.tls(raw) as sock:
            sock.sendall(
                b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data[:cut]
            )
    assert_healthy(server)


def test_a_broken_policy_edit_counts_once_across_workers_and_keeps_the_server_ready(server: Server) -> None:
    target = server.policies / "00-default.yaml"
    good = target.read_text()
    errors = server.metric("gpugate_policy_reload_errors_total")
    try:
        target.write_text(good + "\n---\nkind: GPUPolicy\nspec: [broken\n")
        # Every worker re-reads the directory once a second on its own, traffic or not.
        assert eventually(lambda: server.metric("gpugate_policy_last_reload_ok") == 0, timeout=SAFETY, interval=0.2)
        time.sleep(3)  # long enough for both workers to have seen the edit (each checks once a second)
        for _ in range(6):  # scrapes land on either worker
            assert server.metric("gpugate_policy_reload_errors_total") == errors + 1
        status, text = server.get("/readyz")
        assert status == 200 and b"policy edit ignored" in text
        assert_healthy(server)  # the last good policies are in force
    finally:
        target.write_text(good)
    assert eventually(lambda: server.metric("gpugate_policy_last_reload_ok") == 1, timeout=SAFETY, interval=0.2)
    assert server.metric("gpugate_policy_reload_errors_total") == errors + 1


def test_the_default_timeouts_nest() -> None:
    assert Timeouts() == Timeouts(HANDSHAKE_TIMEOUT, REQUEST_READ_TIMEOUT, IDLE_TIMEOUT)
    assert 0 < IDLE_TIMEOUT <= HANDSHAKE_TIMEOUT <= REQUEST_READ_TIMEOUT < SAFETY
    assert 0 < TIMEOUTS.idle <= TIMEOUTS.handshake <= TIMEOUTS.request < SAFETY


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(tmp_path: Path, value: str) -> None:
    certs = make_certs(tmp_path / "certs")
    done = subprocess.run(
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
            f"127.0.0.1:{free_port()}",
            f"--idle-timeout={value}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.strip().splitlines()[-1]
        == f"gpugate serve: --idle-timeout must be a positive number of seconds, got {float(value)}"
    )


def workers(server: Server) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{server.process.pid}/task").iterdir():
        out.update(int(p) for p in (task / "children").read_text().split())
    return out


def test_a_worker_that_dies_while_a_broken_edit_is_ignored_is_replaced(server: Server) -> None:
    """gunicorn stops the whole server when a new worker fails to boot; one starting over broken policy
    files must start from the last good copy instead."""
    target = server.policies / "00-default.yaml"
    good = target.read_text()
    before = workers(server)
    try:
        target.write_text(good + "\n---\nkind: GPUPolicy\nspec: [broken\n")
        assert eventually(lambda: server.metric("gpugate_policy_last_reload_ok") == 0, timeout=SAFETY, interval=0.2)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        assert eventually(lambda: len(workers(server) - before) == 1, timeout=SAFETY, interval=0.2), (
            "no replacement worker"
        )
        time.sleep(2)  # a worker that fails to boot takes gunicorn's master down within a second or so
        assert server.process.poll() is None, f"gpugate serve exited:\n{server.log.read_text()[-3000:]}"
        for _ in range(6):  # either worker: both answer with the last good policies
            assert_healthy(server)
            status, text = server.get("/readyz")
            assert status == 200 and b"policy edit ignored" in text
    finally:
        target.write_text(good)
    assert eventually(lambda: server.metric("gpugate_policy_last_reload_ok") == 1, timeout=SAFETY, interval=0.2)
