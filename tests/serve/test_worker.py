"""Connections that complete the TLS handshake and send nothing (what kube-apiserver's connection pool
leaves behind) do not hold gunicorn's threads: a real `gpugate serve` with one worker of one thread still
answers on other connections, and answers the idle ones when they do send. And they are bounded: past
--max-parked-connections, the connections that have waited longest are closed, the newest still answer, and
a fresh connection is answered meanwhile. Clients that send their request a few bytes at a time hold no
thread either: the request is gathered in the poller, a review sent meanwhile is answered before theirs, and
one that never completes is closed at its --request-timeout."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.serve.test_tls import GPUGATE, REPO, SERVICE_NAME, START_TIMEOUT, make_certs
from tests.support import gpu_pod, review, stop

pytestmark = pytest.mark.tls

# A safety bound for each answer: with a pinned thread there would be none at all.
ANSWER_TIMEOUT = 10.0


# The bound of the server that test_the_connections_parked_longest_are_closed_past_the_bound runs against.
MAX_PARKED = 4


@dataclass
class Served:
    port: int
    certs: Path
    log: Path

    def parked(self, sock: socket.socket) -> bool:
        """Whether the server's log says it parked the connection ``sock`` (its debug line, by client port)."""
        wanted = f"parked the connection from 127.0.0.1:{sock.getsockname()[1]}"
        return any(_message(line) == wanted for line in self.log.read_text(errors="replace").splitlines())


def _message(line: str) -> object:
    try:
        return json.loads(line).get("message")
    except (ValueError, AttributeError):
        return None


@contextlib.contextmanager
def serving(root: Path, *options: str) -> Iterator[Served]:
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
                *options,
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
        yield Served(port, certs, log)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def one_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    with serving(tmp_path_factory.mktemp("idle"), "--threads", "1") as served:
        yield served.port, served.certs


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("bounded")
    with serving(root, "--threads", "2", f"--max-parked-connections={MAX_PARKED}", "--log-level=debug") as served:
        yield served


# The server that the slow senders run against: fewer threads than slow senders, and a short request timeout
# for the bodies that never complete.
SLOW_THREADS = 2
SLOW_REQUEST_TIMEOUT = 4.0


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    options = ("--threads", str(SLOW_THREADS), f"--request-timeout={SLOW_REQUEST_TIMEOUT}", "--idle-timeout=2")
    with serving(tmp_path_factory.mktemp("slow"), *options) as served:
        yield served


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("defaults"), "--threads", "2") as served:
        yield served


def handshaken(port: int, certs: Path) -> ssl.SSLSocket:
    return wrapped(socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT), certs)


def wrapped(raw: socket.socket, certs: Path) -> ssl.SSLSocket:
    """``raw`` after a TLS handshake with the test server."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
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


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (EOF or reset); False if it is still open after ANSWER_TIMEOUT."""
    sock.settimeout(ANSWER_TIMEOUT)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


def mutate(sock: socket.socket, uid: str) -> bytes:
    """POST a review of a GPU pod on ``sock`` (closing after the answer); the whole answer."""
    body = json.dumps(review(gpu_pod(1), uid=uid)).encode()
    sock.sendall(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def answered(answer: bytes, uid: str) -> bool:
    return answer.startswith(b"HTTP/1.1 200") and f'"uid":"{uid}"'.encode() in answer.replace(b" ", b"")


@pytest.mark.parametrize("stage", ["tcp only", "after the handshake"])
def test_the_connections_parked_longest_are_closed_past_the_bound(bounded: Served, stage: str) -> None:
    """More silent connections than --max-parked-connections (4) on one worker: the server closes the oldest
    ones itself, a fresh connection gets its review answered meanwhile, and the newest still answer theirs."""
    silent: list[socket.socket] = []
    try:
        for _ in range(3 * MAX_PARKED):
            raw = socket.create_connection(("127.0.0.1", bounded.port), timeout=ANSWER_TIMEOUT)
            silent.append(raw if stage == "tcp only" else wrapped(raw, bounded.certs))
            # one after the other, so that "oldest" is the order they were opened in
            assert eventually(lambda: bounded.parked(silent[-1]), timeout=ANSWER_TIMEOUT, interval=0.05)
        oldest = silent[:-MAX_PARKED]
        for number, sock in enumerate(oldest):
            assert closed_by_server(sock), f"connection {number} of {len(silent)} is still open"
        with handshaken(bounded.port, bounded.certs) as fresh:
            assert answered(mutate(fresh, "fresh"), "fresh")
        # The fresh connection may have waited a moment for its request too, pushing one more of the old out.
        for number in range(len(oldest) + 1, len(silent)):
            if stage == "tcp only":
                silent[number] = wrapped(silent[number], bounded.certs)
            uid = f"parked-{number}"
            assert answered(mutate(silent[number], uid), uid), f"connection {number} of {len(silent)}"
            silent[number].close()
    finally:
        for sock in silent:
            sock.close()


def test_clients_that_keep_their_end_open_after_a_closing_answer_do_not_stall_the_worker(
    one_thread: tuple[int, Path],
) -> None:
    """After an answer with `Connection: close` the server half-closes the connection and drains what the client
    still sends until the client closes, for 2 s at most (gunicorn's util.close_graceful, RFC 9112 section 9.6).
    gthread does that in its event loop, blocking: ten clients that keep their end open would stall the worker
    for 10 x 2 s. Here the draining waits in the poller, so the ten answers and a fresh one all come within
    ANSWER_TIMEOUT (10 s)."""
    port, certs = one_thread
    held: list[ssl.SSLSocket] = []
    started = time.monotonic()
    try:
        for _ in range(10):
            held.append(handshaken(port, certs))
            held[-1].sendall(f"GET /healthz HTTP/1.1\r\nHost: {SERVICE_NAME}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := held[-1].recv(4096):  # to the server's FIN; this end stays open
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        with handshaken(port, certs) as fresh:
            assert ask(fresh).startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started < ANSWER_TIMEOUT
    finally:
        for sock in held:
            sock.close()


# gunicorn's gthread worker stops accepting at worker_connections (1000) open connections.
WORKER_CONNECTIONS = 1000


def test_a_flood_of_silent_connections_past_gunicorns_limit_does_not_lock_fresh_ones_out(defaults: Served) -> None:
    """1,200 TCP connections that never send a byte, on one worker with the default bound (100): gthread alone
    stops accepting at 1,000 open connections, so a fresh connection would wait in the listen queue until the
    silent ones time out (the 120 s keep-alive). Here the oldest are closed as new ones arrive: a fresh
    connection gets its review answered while the flood is open, the first 1,000 are closed by the server, and
    the newest still answers."""
    flood: list[socket.socket] = []
    try:
        for _ in range(WORKER_CONNECTIONS + 200):
            flood.append(socket.create_connection(("127.0.0.1", defaults.port), timeout=ANSWER_TIMEOUT))
        with handshaken(defaults.port, defaults.certs) as fresh:
            assert answered(mutate(fresh, "fresh"), "fresh")
        for number, sock in enumerate(flood[:WORKER_CONNECTIONS]):
            assert closed_by_server(sock), f"connection {number} of {len(flood)} is still open"
        flood[-1] = wrapped(flood[-1], defaults.certs)
        assert answered(mutate(flood[-1], "newest"), "newest")
    finally:
        for sock in flood:
            sock.close()


def test_slow_tls_handshakes_hold_no_thread_and_are_cut_off(one_thread: tuple[int, Path]) -> None:
    """Five clients that send half a ClientHello and stall, against one worker of one thread: blocking in the
    handshake, each would hold the thread for the --idle-timeout (3 s), 15 s in all. The handshake goes as far
    as the bytes that have arrived and waits in the poller, so a fresh connection is answered at once, and the
    stalled ones are closed once their --handshake-timeout (5 s) has passed."""
    port, certs = one_thread
    stalled: list[socket.socket] = []
    try:
        for _ in range(5):
            stalled.append(socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT))
            stalled[-1].sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello that never ends
        started = time.monotonic()
        with handshaken(port, certs) as fresh:
            assert ask(fresh).startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started < ANSWER_TIMEOUT / 2  # a thread held by any of them: 3 s each
        for number, sock in enumerate(stalled):
            assert closed_by_server(sock), f"stalled handshake {number} is still open"
    finally:
        for sock in stalled:
            sock.close()


def review_request(uid: str) -> bytes:
    """A POST /mutate of a GPU pod's review that closes after its answer, as bytes on the wire."""
    body = json.dumps(review(gpu_pod(1), uid=uid)).encode()
    return (
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )


def read_answer(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


@dataclass
class SlowSender:
    """A client that sends a review in ``pieces`` pieces, ``pause`` seconds apart, in a thread of its own; it
    records when it started sending its last piece (before that, no server can have the whole request) and what
    came back."""

    sock: ssl.SSLSocket
    uid: str
    part: str  # "head" or "body": the part that trickles (the other goes at once)
    pieces: int = 12
    pause: float = 0.2
    started: threading.Event = dataclasses.field(default_factory=threading.Event)
    finished_at: float | None = None
    answer: bytes = b""
    error: BaseException | None = None

    def run(self) -> None:
        data = review_request(self.uid)
        head_end = data.index(b"\r\n\r\n") + 4
        at_once, trickle = (
            (data[head_end:], data[:head_end]) if self.part == "head" else (data[:head_end], data[head_end:])
        )
        size = -(-len(trickle) // self.pieces)
        try:
            for number in range(self.pieces):
                if number == self.pieces - 1:  # from here on the server may have the whole request
                    self.finished_at = time.monotonic()
                self.sock.sendall(trickle[number * size : (number + 1) * size])
                self.started.set()
                time.sleep(self.pause)
            if self.part == "head":
                self.sock.sendall(at_once)
            self.answer = read_answer(self.sock)
        except BaseException as err:  # reported by the test
            self.error = err
            self.started.set()

    def start(self) -> threading.Thread:
        if self.part == "body":
            head_end = review_request(self.uid).index(b"\r\n\r\n") + 4
            self.sock.sendall(review_request(self.uid)[:head_end])
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        return thread


@pytest.mark.parametrize("part", ["head", "body"])
def test_slow_senders_hold_no_thread_and_a_review_sent_meanwhile_is_answered_first(slow: Served, part: str) -> None:
    """Three times as many clients as the worker has threads (2) send their review's head or body a piece at
    a time (12 pieces, 0.2 s apart, within the 4 s --request-timeout). gunicorn's gthread reads a request in a pool thread, blocking: the slow
    senders took both threads and a review sent meanwhile waited until two of them had finished. Here their
    requests are gathered in the poller, so the review sent meanwhile is answered while every slow sender is
    still sending, and each slow sender's review is answered once it is complete."""
    senders = [SlowSender(handshaken(slow.port, slow.certs), f"slow-{n}", part) for n in range(3 * SLOW_THREADS)]
    threads = [sender.start() for sender in senders]
    try:
        for sender in senders:
            assert sender.started.wait(ANSWER_TIMEOUT) and sender.error is None, sender.error
        with handshaken(slow.port, slow.certs) as fresh:
            fresh.sendall(review_request("meanwhile"))
            answer = read_answer(fresh)
            answered_at = time.monotonic()
        assert answered(answer, "meanwhile"), answer[:300]
        for thread in threads:
            thread.join(ANSWER_TIMEOUT + 12 * 0.2)
        for sender in senders:
            assert sender.error is None, sender.error
            assert answered(sender.answer, sender.uid), sender.answer[:300]
            assert sender.finished_at is not None and answered_at < sender.finished_at, (
                f"the review sent meanwhile was answered only after {sender.uid} had sent its whole {part}"
            )
    finally:
        for sender in senders:
            sender.sock.close()


def test_bodies_that_never_complete_hold_no_thread_and_are_closed_at_the_request_timeout(slow: Served) -> None:
    """Three times as many clients as threads send a head that announces 5,000 bytes of body, then a byte every
    0.3 s, never the whole body (a byte often enough that --idle-timeout, 2 s, never cuts them). A review sent
    meanwhile is answered while all of them are still open (with gthread, each held a thread until it was
    cut), and each is closed by the server once --request-timeout (4 s) has passed since its first byte."""
    head = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"
    stop_sending = threading.Event()
    closed: dict[int, float] = {}

    def trickle(number: int, sock: ssl.SSLSocket) -> None:
        try:
            while not stop_sending.wait(0.3):
                sock.sendall(b" ")
        except OSError:  # the server closed it
            closed[number] = time.monotonic()

    senders = [handshaken(slow.port, slow.certs) for _ in range(3 * SLOW_THREADS)]
    try:
        for sock in senders:
            sock.sendall(head)
        threads = [threading.Thread(target=trickle, args=(n, sock), daemon=True) for n, sock in enumerate(senders)]
        for thread in threads:
            thread.start()
        with handshaken(slow.port, slow.certs) as fresh:
            fresh.sendall(review_request("meanwhile"))
            answer = read_answer(fresh)
        assert answered(answer, "meanwhile"), answer[:300]
        assert not closed, "a never-ending body was closed before the review sent meanwhile was answered"
        for number, sock in enumerate(senders):
            assert closed_by_server(sock), f"the server kept never-ending body {number} open"
        stop_sending.set()
        for thread in threads:
            thread.join(ANSWER_TIMEOUT)
        cut = [line for line in slow.log.read_text(errors="replace").splitlines() if "did not arrive in time" in line]
        assert len(cut) >= len(senders), cut
    finally:
        stop_sending.set()
        for sock in senders:
            sock.close()


def test_requests_sent_together_on_one_connection_are_each_answered(slow: Served) -> None:
    """Two reviews in one write, and a third split across the end of the second: the bytes read past a request
    wait for the next one, each gets its answer in order."""
    first, second = (review_request(uid).replace(b"Connection: close\r\n", b"") for uid in "ab")
    third = review_request("c")  # closes after its answer
    with handshaken(slow.port, slow.certs) as sock:
        sock.sendall(first + second + third[:50])
        time.sleep(0.2)
        sock.sendall(third[50:])
        answer = read_answer(sock)
    assert [uid for uid in "abc" if f'"uid":"{uid}"'.encode() in answer.replace(b" ", b"")] == list("abc")
    assert answer.count(b"HTTP/1.1 200") == 3


def test_a_client_that_expects_100_continue_gets_it_and_its_answer(slow: Served) -> None:
    """curl sends `Expect: 100-continue` with a large body and waits for the server's 100 before sending it
    (a second 100 from gunicorn is allowed, RFC 9110 section 15.2); an oversized one gets its 413 at once."""
    data = review_request("expecting")
    head_end = data.index(b"\r\n\r\n") + 2
    with handshaken(slow.port, slow.certs) as sock:
        sock.sendall(data[:head_end] + b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(data[head_end + 2 :])
        answer = read_answer(sock)
    assert answered(answer[answer.index(b"HTTP/1.1 200") :], "expecting"), answer[:300]
    with handshaken(slow.port, slow.certs) as sock:
        sock.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
            b"Content-Length: 99999999\r\n\r\n"
        )
        answer = read_answer(sock)
    final = answer.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
    assert final.startswith(b"HTTP/1.1 413") and b'"code":413' in final.replace(b" ", b""), answer[:300]


def test_large_bodies_past_the_worker_s_slots_wait_unread_and_are_each_answered(slow: Served) -> None:
    """Four clients on one worker send most of a 400 KiB review (over the app's LARGE_BODY) and hold the rest back.
    The worker gathers two large requests at a time (LARGE_SLOTS: memory stays bounded however many send them), the
    others wait unread; a review sent meanwhile is answered at once, and
    once the four complete, each is answered, the waiting ones when a slot frees. (With gthread the four held both
    threads until --idle-timeout cut them off, each with a 400.)"""
    big = [review(gpu_pod(1), uid=f"large-{n}") for n in range(4)]
    for body in big:
        body["request"]["object"]["metadata"]["annotations"] = {"filler": "y" * (400 * 1024)}
    wire = [
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % len(data) + data
        for data in (json.dumps(body).encode() for body in big)
    ]
    senders = [handshaken(slow.port, slow.certs) for _ in big]
    try:
        for sock, data in zip(senders, wire, strict=True):
            sock.sendall(data[:-100])
        with handshaken(slow.port, slow.certs) as fresh:
            fresh.sendall(review_request("meanwhile"))
            assert answered(read_answer(fresh), "meanwhile")
        for sock, data in zip(senders, wire, strict=True):
            sock.sendall(data[-100:])
        for number, sock in enumerate(senders):
            answer = read_answer(sock)
            assert answered(answer, f"large-{number}"), answer[:300]
    finally:
        for sock in senders:
            sock.close()
