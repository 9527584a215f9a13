"""gunicorn's gthread worker, with connections that have sent no request parked in the poller, and a bound on
how many may wait there.

kube-apiserver's webhook client (Go net/http, up to 25 idle connections per host: k8s.io/client-go
transport/cache.go) dials a new connection when none is idle, and when another connection frees up first it
sends the request there and parks the new one, fully handshaken, in its idle pool. gthread (gunicorn 26+,
gunicorn/workers/gthread.py ``ThreadWorker.handle``) performs the handshake in a pool thread and then
blocks that thread reading the first request, with no timeout. Parked connections thus pin threads, and
once a worker's threads are all pinned, requests on its other connections wait until the apiserver gives up
(measured through a real kube-apiserver: with 1 worker of 2 threads, gpugate's /validate timed out after 5 s
on every call; docs/development/performance.md). Here a thread takes a connection only when bytes are
waiting on it: a new connection whose first bytes (the TLS ClientHello) have not arrived yet, one whose
handshake waits for the client's next flight, and one that says nothing after its handshake go back to the
poller at once (gthread's own deferral for connections that are slow to send) and a thread takes them
again when bytes arrive. Waiting costs a thread nothing, so a flood of silent connections only queues behind
each other for the moment each one takes.

A request is read in the poller too (``Incoming``): its head and whole body are gathered without blocking as
their bytes arrive, and a pool thread gets the connection only once the request is complete, or is one to
refuse at once (a head over gunicorn's limits, a framing gunicorn refuses, a body over the app's MAX_BODY,
which the poller reads and drops up to DRAIN_LIMIT first, as the app's 413 would, so that the client reads
the answer instead of a reset). The thread then reads the request from memory and never waits on the client:
its socket reads do not block (``DeadlineSocket.from_buffer``). A client that sends its head or body a byte at
a time thus costs no thread, however many of them there are; each is closed once --request-timeout has
passed since its request's first byte, or --idle-timeout without a byte. gthread itself reads a request in
a pool thread, blocking: eight such clients held every thread of a worker until --request-timeout.

What the poller holds is bounded too: at most ``max_parked`` connections per worker wait there without a
request, those that have never sent one and those kept alive between requests alike. Parking one more
closes the one that has waited longest. Go's transport reuses its most recently used idle connection first,
so the apiserver's connections in use are always among the newest here, and a flood of silent connections
pushes out its own oldest, never locks the apiserver's fresh ones out (without a bound, gthread stops
accepting once ``worker_connections``, 1000, are open).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from functools import partial
from typing import Any, ClassVar

from gunicorn import http
from gunicorn import sock as gunicorn_sock
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers import gthread

from .tls import HANDSHAKE_TIMEOUT, Timeouts

# gthread's sentinel for "no data yet: watch this connection in the poller" (gunicorn >= 26, which
# pyproject.toml requires: the pending connections, their deadlines and the poller callbacks this worker
# builds on came with it).
_DEFER: Any = gthread._DEFER
# kube-apiserver keeps at most 25 idle connections to one webhook host (client-go transport/cache.go
# idleConnsPerHost, the http.Transport's MaxIdleConnsPerHost), and every connection can land on one
# worker; 100 is the idle pools of four apiservers.
DEFAULT_MAX_PARKED = 100
# A worker under a flood of silent connections says so at most this often (seconds), with a count.
DROP_REPORT_INTERVAL = 60.0
# A connection the server closes after its answer (`Connection: close`, a cut-off client) is half-closed
# and its unread bytes drained for this long at most, so that the close does not reset the answer (RFC 9112
# section 9.6); gunicorn's own util.close_graceful does the same, but blocking, in the worker's event loop.
LINGER = 2.0
LINGER_DRAIN = 65536
# How often the event loop looks for parked connections whose TLS handshake, or request, is past its deadline
# (seconds).
HANDSHAKE_SWEEP = 0.25
# Large requests (a body over the app's LARGE_BODY, 256 KiB) a worker holds at once, from their first large byte
# until a thread has answered them: the app decides one at a time per worker (webhook.serve.app), so two are the
# one being decided and the next. More clients sending large bodies wait, unread (their TCP window fills), and get
# their --request-timeout again when their turn comes. Memory is so bounded by 2 x MAX_BODY per worker, however
# many clients send large bodies; ordinary reviews (5-25 KiB) never wait for a slot.
LARGE_SLOTS = 2
# One read of a request's bytes in the poller; it reads until the socket has no more.
READ_CHUNK = 65536
# A chunk-size line (hex size, extensions) or a trailer line longer than this is not one gunicorn reads.
CHUNK_LINE_LIMIT = 4096
# A chunked body is kept past the app's MAX_BODY by this much, so that the app, reading it from memory 64 KiB at
# a time (webhook.serve.app._body), sees it is over the limit before it reaches the end of what was kept.
CHUNKED_SLACK = 2 * 65536

log = logging.getLogger("gpugate.server")

# What ``_gather`` says of a large request that waits for one of the worker's slots (``_take_large``).
PAUSED: object = object()


class Chunks:
    """The framing of a chunked body (RFC 9112 section 7.1), fed its bytes as they arrive: where it ends, and
    how many bytes of data it carries, without keeping any of it."""

    def __init__(self) -> None:
        self.skip = 0  # bytes of chunk data (and its CRLF) still to pass
        self.crlf = 0  # of those, the CRLF that ends the chunk
        self.line = bytearray()  # a chunk-size or trailer line not yet ended
        self.data = 0  # bytes of chunk data passed so far
        self.trailers = False
        self.done = False
        self.bad = False

    def feed(self, chunk: bytes | memoryview) -> int:
        """Reads ``chunk``; the number of its bytes that belong to the body (all of them until it ends)."""
        i, end = 0, len(chunk)
        while i < end and not (self.done or self.bad):
            if self.skip:
                step = min(self.skip, end - i)
                self.data += min(step, self.skip - self.crlf)
                self.skip -= step
                self.crlf = min(self.crlf, self.skip)
                i += step
                continue
            newline = bytes(chunk[i : min(end, i + CHUNK_LINE_LIMIT + 1)]).find(b"\n")
            if newline < 0:
                self.line += chunk[i:end]
                self.bad = len(self.line) > CHUNK_LINE_LIMIT
                return end
            line = bytes(self.line) + bytes(chunk[i : i + newline + 1])
            self.line.clear()
            i += newline + 1
            if len(line) > CHUNK_LINE_LIMIT:
                self.bad = True
            elif self.trailers:
                self.done = line in (b"\r\n", b"\n")
            else:
                size = line.rstrip(b"\r\n").split(b";", 1)[0].strip()
                if not size or any(c not in b"0123456789abcdefABCDEF" for c in size):
                    self.bad = True
                elif int(size, 16) == 0:
                    self.trailers = True
                else:
                    self.skip, self.crlf = int(size, 16) + 2, 2
        return i


class Incoming:
    """A request being gathered in the poller: its bytes so far (as they were read, not copied together),
    whether it is complete, its deadlines.

    ``ready`` is True once the request is whole, or once it is one to hand to gunicorn as it is, to be refused
    there: a head over ``head_limit`` or framed in a way this reader does not follow (gunicorn answers 400), a
    Content-Length over ``max_body`` (its body is read and dropped here up to ``drain_limit``, then the app
    answers 413), a chunked body past ``max_body`` (kept up to a little more, so that the app sees it is over,
    the rest read and dropped up to ``drain_limit``). ``large`` once it keeps more than ``large_body`` bytes:
    the worker gathers only a few of those at a time."""

    def __init__(
        self,
        already: bytes,
        *,
        head_limit: int,
        max_body: int,
        drain_limit: int,
        large_body: int,
        timeouts: Timeouts,
    ) -> None:
        now = time.monotonic()
        self.head = bytearray()  # until the head is whole
        self.parts: list[bytes] = []  # then the head and what followed, as read
        self.kept = 0
        self.head_limit, self.max_body, self.drain_limit, self.large_body = (
            head_limit,
            max_body,
            drain_limit,
            large_body,
        )
        self.timeouts = timeouts
        self.deadline = now + timeouts.request
        self.last = now
        self.length: int | None = None  # bytes of body still to come (Content-Length)
        self.chunks: Chunks | None = None
        self.dropped = 0  # body bytes read and dropped (a body over the limit)
        self.keeping = True
        self.continue_100 = False  # the client waits for "100 Continue" before it sends its body
        self.ready = False
        self.large = False
        self.paused = False  # not read while the worker gathers as many large requests as it may
        self.feed(already)

    def late(self, now: float) -> bool:
        return not self.paused and (now > self.deadline or now > self.last + self.timeouts.idle)

    def resume(self) -> None:
        """Reading goes on after a pause, which was the server's doing: the client gets its time again."""
        self.paused = False
        self.last = time.monotonic()
        self.deadline = self.last + self.timeouts.request

    def _keep(self, chunk: bytes) -> None:
        if chunk:
            self.parts.append(chunk)
            self.kept += len(chunk)
            self.large = self.large or self.kept > self.large_body

    def feed(self, chunk: bytes) -> None:
        self.last = time.monotonic()
        if not self.parts:
            scanned = max(0, len(self.head) - 3)
            self.head += chunk
            end = self.head.find(b"\r\n\r\n", scanned)
            if end < 0:
                self.ready = len(self.head) > self.head_limit
                if self.ready:
                    self._keep(bytes(self.head))
                return
            head_end = end + 4
            self._keep(bytes(self.head[:head_end]))
            chunk = bytes(self.head[head_end:])
            self.head = bytearray()
            if head_end > self.head_limit or not self._framing(bytes(self.parts[0][:end])):
                self._keep(chunk)
                self.ready = True
                return
        self._body(chunk)

    def _framing(self, head: bytes) -> bool:
        """Reads the head's framing headers; False for a head gunicorn refuses or this reader does not follow."""
        lengths: set[str] = set()
        codings: list[str] = []
        for line in head.split(b"\r\n")[1:]:
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon:
                return False
            name, value = name.strip().lower(), value.strip()
            if name == "content-length":
                lengths.add(value)
            elif name == "transfer-encoding":
                codings += [c.strip().lower() for c in value.split(",")]
            elif name == "expect" and value.lower() == "100-continue":
                self.continue_100 = True
        if codings:
            if lengths or codings[-1] != "chunked":
                return False
            self.chunks = Chunks()
            return True
        if len(lengths) > 1 or (lengths and not next(iter(lengths)).isdigit()):
            return False
        self.length = int(next(iter(lengths))) if lengths else 0
        if self.length > self.max_body:
            self.keeping = False
            if self.length > self.drain_limit or self.continue_100:  # refused before its body, as the app would
                self.length = 0
        else:
            self.large = self.length > self.large_body  # known from the head: asks for its slot before its body
        return True

    def _body(self, chunk: bytes) -> None:
        if self.chunks is not None:
            used = self.chunks.feed(chunk)
            if self.keeping:
                self._keep(chunk)
                self.keeping = self.chunks.data <= self.max_body + CHUNKED_SLACK
            else:
                self.dropped += used
            self.ready = self.chunks.done or self.chunks.bad or self.dropped > self.drain_limit
            return
        assert self.length is not None
        if self.keeping:
            self._keep(chunk)  # bytes past the body (a pipelined request) stay for the next one
        else:
            self.dropped += min(len(chunk), self.length)
        self.length = max(0, self.length - len(chunk))
        self.ready = self.length == 0

    @property
    def waits_for_100(self) -> bool:
        """Whether the client waits for "100 Continue" to send the body this request still lacks."""
        return self.continue_100 and len(self.parts) == 1 and not self.ready


class GatheredUnreader(SocketUnreader):  # type: ignore[misc]
    """gunicorn's socket unreader, reading first the pieces the poller gathered (``Incoming.parts``), one at a
    time as they were read from the socket: the body is not copied together once more."""

    def __init__(self, sock: Any) -> None:
        super().__init__(sock)
        self.parts: deque[bytes] = deque()

    def chunk(self, size_hint: int | None = None) -> bytes:
        if self.parts:
            return self.parts.popleft()
        return super().chunk(size_hint)  # type: ignore[no-any-return]

    def take_buffered(self) -> bytes:
        """What is held, buffered or gathered, taking it out."""
        held = super().take_buffered() + b"".join(self.parts)
        self.parts.clear()
        return held  # type: ignore[no-any-return]


class ThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    max_parked: ClassVar[int] = DEFAULT_MAX_PARKED
    _dropped = 0  # parked connections closed since the last report
    _reported = float("-inf")
    _swept = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering: deque[Any] = deque()  # half-closed connections being drained, oldest first
        self.receiving: deque[Any] = deque()  # connections whose request is being gathered, oldest first
        # gunicorn's own bounds on a request's head: the request line and every header field at their limits.
        self.head_limit = (
            (self.cfg.limit_request_line + 2)
            + self.cfg.limit_request_fields * (self.cfg.limit_request_field_size + 2)
            + 2
        )
        self.max_body = self.drain_limit = self.large_body = 0
        self.paused: deque[Any] = deque()  # large requests waiting for a slot, oldest first
        self._large_lock = threading.Lock()
        self._large_free = LARGE_SLOTS

    def init_process(self) -> None:
        from .app import DRAIN_LIMIT, LARGE_BODY, MAX_BODY  # in the worker, after fork: see webhook.serve.command

        self.max_body, self.drain_limit, self.large_body = MAX_BODY, DRAIN_LIMIT, LARGE_BODY
        super().init_process()

    def handle(self, conn: Any) -> Any:
        if not self.cfg.is_ssl:
            return super().handle(conn)
        if conn.initialized:
            if getattr(conn, "handed", False):  # gathered in the poller: the request is in memory
                conn.handed = False
                return super().handle(conn)
            return self._serve(conn)  # the bytes after the last request (pipelined), or a first request
        if not conn.data_ready and not conn.wait_for_data(0):
            return _DEFER
        try:
            if not self._handshake(conn):
                conn.data_ready = False  # set again by the poller when the client's next flight arrives
                return _DEFER
        except (OSError, ssl.SSLError) as err:  # a failed handshake: the client has gone or speaks no TLS
            self.log.debug("TLS handshake failed: %s", err)
            return False
        return self._serve(conn)

    def _serve(self, conn: Any) -> Any:
        """In a pool thread: serve ``conn``'s request if all of it has arrived, else give the connection back to
        the poller, which gathers the rest (``_receive``)."""
        outcome = self._gather(conn)
        if outcome is None:
            return False
        if outcome is True:
            return super().handle(conn)
        conn.data_ready = False  # set again by the poller when more of the request arrives
        return _DEFER

    def _gather(self, conn: Any) -> bool | object | None:
        """Read what has arrived of ``conn``'s request, without waiting: True once it is ready for a thread (its
        bytes are then the parser's to read), False while more is to come, None when the client has gone, PAUSED
        when it is a large request and the worker holds as many as it may (``_take_large``)."""
        incoming: Incoming | None = getattr(conn, "incoming", None)
        if incoming is None and (left := conn.parser.unreader.take_buffered()):  # read past the last request
            incoming = conn.incoming = self._incoming(conn, left)
        sock = conn.sock
        sock.setblocking(False)
        while incoming is None or not incoming.ready:
            if incoming is not None and incoming.large and not self._take_large(conn):
                return PAUSED
            try:
                chunk = sock.recv(READ_CHUNK)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                break
            except (OSError, ssl.SSLError) as err:
                self.log.debug("the connection from %s failed mid-request: %s", _peer(conn), err)
                return None
            if not chunk:
                return None
            if incoming is None:  # the request's first bytes: its deadlines start now
                incoming = conn.incoming = self._incoming(conn, b"")
            incoming.feed(chunk)
        if incoming is None:
            return False
        if incoming.large and not self._take_large(conn):
            return PAUSED
        if incoming.waits_for_100:
            with contextlib.suppress(OSError, ssl.SSLError):  # an empty send buffer takes it whole
                sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            incoming.continue_100 = False
        if not incoming.ready:
            return False
        conn.incoming = None
        conn.parser.unreader.parts.extend(incoming.parts)
        return True

    def _take_large(self, conn: Any) -> bool:
        """Whether ``conn`` may gather (or keep) a large request: at most LARGE_SLOTS are held at once, from their
        first large byte until a thread has answered them."""
        if getattr(conn, "large_slot", False):
            return True
        with self._large_lock:
            if self._large_free <= 0:
                conn.incoming.paused = True
                return False
            self._large_free -= 1
        conn.large_slot = True
        return True

    def _give_back_large(self, conn: Any) -> None:
        """In the event loop: ``conn`` is done with its large request; the connection paused longest goes on."""
        if not getattr(conn, "large_slot", False):
            return
        conn.large_slot = False
        with self._large_lock:
            self._large_free += 1
        while self.paused and self._large_free > 0:
            waiting = self.paused.popleft()
            waiting.incoming.resume()
            self._receive(waiting)

    def _incoming(self, conn: Any, already: bytes) -> Incoming:
        timeouts = getattr(conn.sock, "timeouts", Timeouts())
        return Incoming(
            already,
            timeouts=timeouts,
            head_limit=self.head_limit,
            max_body=self.max_body,
            drain_limit=self.drain_limit,
            large_body=self.large_body,
        )

    def _receive(self, conn: Any) -> None:
        """In the event loop: ``conn`` has bytes of a request. Hand it to a thread once the request is whole;
        until then it waits here, among ``receiving``."""
        outcome = self._gather(conn)
        if outcome is False or outcome is PAUSED:
            self._park_receiving(conn)
            return
        self._unpark_receiving(conn)
        if outcome is None:
            self._give_back_large(conn)
            self.nr_conns -= 1
            conn.close()
            return
        conn.handed = conn.data_ready = True
        self.enqueue_req(conn)

    def _park_receiving(self, conn: Any) -> None:
        """``conn`` waits for more of its request (read when it arrives), or, paused, for a large slot."""
        if conn.incoming.paused:
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            if conn not in self.paused:
                self.paused.append(conn)
        else:
            try:
                self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._on_receiving_readable, conn))
            except (KeyError, ValueError):
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_receiving_readable, conn))
        if getattr(conn, "gathering", False):
            return
        conn.gathering = True
        self.receiving.append(conn)
        while len(self.receiving) > self.max_parked:
            oldest = self.receiving[0]
            self.log.debug("closed the oldest connection still sending its request, from %s", _peer(oldest))
            self._unpark_receiving(oldest)
            self._drop(oldest)
            self._give_back_large(oldest)

    def _unpark_receiving(self, conn: Any) -> None:
        with contextlib.suppress(OSError, KeyError, ValueError):
            self.poller.unregister(conn.sock)
        if getattr(conn, "gathering", False):
            conn.gathering = False
            self.receiving.remove(conn)
        if conn in self.paused:
            self.paused.remove(conn)

    def _on_receiving_readable(self, conn: Any, _sock: Any) -> None:
        self._receive(conn)

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        if not self.cfg.is_ssl:
            return super().on_client_socket_readable(conn, client)  # type: ignore[no-any-return]
        self.keepalived_conns.remove(conn)
        self._receive(conn)
        return None

    def on_pending_socket_readable(self, conn: Any, client: Any) -> None:
        if not (self.cfg.is_ssl and conn.initialized):  # a connection yet to handshake: gthread's way
            return super().on_pending_socket_readable(conn, client)  # type: ignore[no-any-return]
        self.pending_conns.remove(conn)
        self._receive(conn)
        return None

    def _handshake(self, conn: Any) -> bool:
        """Go on with ``conn``'s TLS handshake as far as the bytes that have arrived allow, without waiting:
        True once it is done (the connection then reads requests like gthread's own), False while it waits for
        the client. A handshake gets its --handshake-timeout from its first bytes: past it, the next attempt
        raises, and a connection parked meanwhile is closed by ``murder_pending``."""
        if not isinstance(conn.sock, ssl.SSLSocket):
            conn.sock = gunicorn_sock.ssl_wrap_socket(conn.sock, self.cfg)
            timeouts = getattr(conn.sock, "timeouts", None)
            conn.handshake_deadline = time.monotonic() + (timeouts.handshake if timeouts else HANDSHAKE_TIMEOUT)
        elif time.monotonic() > conn.handshake_deadline:
            raise TimeoutError("the TLS handshake did not arrive in time")
        conn.sock.setblocking(False)
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLWantWriteError:  # our flight does not fit the send buffer: finish it blocking, timed
            conn.sock.setblocking(True)
            conn.sock.do_handshake()
        if gunicorn_sock.is_http2_negotiated(conn.sock):  # never offered (ALPN http/1.1, `http_protocols`)
            raise ssl.SSLError("HTTP/2 negotiated, but gpugate serves HTTP/1.1 only")
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = GatheredUnreader(conn.sock)
        conn.init()  # with a parser, only marks the connection initialized and blocking
        conn.sock.from_buffer = True  # type: ignore[union-attr]  # a thread reads its requests from memory (``_gather``), never waits
        return True

    def finish_request(self, conn: Any, fs: Any) -> None:
        if fs.cancelled() or fs.exception() is not None or fs.result() is not _DEFER:  # a request was answered
            self._give_back_large(conn)
            unreader = getattr(conn.parser, "unreader", None)
            if isinstance(unreader, GatheredUnreader) and unreader.parts:  # read past it: gthread looks in buf
                unreader.unread(unreader.take_buffered())
        if not fs.cancelled() and fs.exception() is None and not fs.result():  # done with: close gracefully
            self.nr_conns -= 1
            self._linger(conn)
            return
        super().finish_request(conn, fs)  # may park ``conn
        pending: deque[Any] = self.pending_conns
        kept: deque[Any] = self.keepalived_conns
        if pending and pending[-1] is conn and getattr(conn, "incoming", None) is not None:
            pending.pop()  # part of a request has arrived: it waits among those still sending theirs
            self._park_receiving(conn)
            return
        parked = (pending and pending[-1] is conn) or (kept and kept[-1] is conn)
        if parked and self.log.error_log.isEnabledFor(logging.DEBUG):
            midway = isinstance(conn.sock, ssl.SSLSocket) and not conn.initialized
            self.log.debug("parked the connection from %s%s", _peer(conn), " mid-handshake" if midway else "")
        while len(pending) + len(kept) > self.max_parked:
            # Both queues are in the order their connections were parked (a timeout of parking time +
            # keepalive), so the older of their heads has waited longest.
            oldest = pending if pending and (not kept or pending[0].timeout <= kept[0].timeout) else kept
            self._drop(oldest.popleft())

    def _close_parked(self, conn: Any) -> None:
        with contextlib.suppress(OSError, KeyError, ValueError):  # already unregistered
            self.poller.unregister(conn.sock)
        self.nr_conns -= 1
        conn.close()

    def _drop(self, conn: Any) -> None:
        self.log.debug("closed the oldest parked connection, from %s", _peer(conn))
        self._close_parked(conn)
        self._dropped += 1
        now = time.monotonic()
        if now - self._reported >= DROP_REPORT_INTERVAL:
            log.warning(
                "closed %d parked connection(s), the oldest first: more than --max-parked-connections %d waited "
                "without a request in this worker (only the apiserver should reach this port)",
                self._dropped,
                self.max_parked,
            )
            self._dropped, self._reported = 0, now
        from .metrics import PARKED_DROPPED  # in the worker, after fork: see webhook.serve.command

        PARKED_DROPPED.inc()

    def _linger(self, conn: Any) -> None:
        """Close ``conn`` as gunicorn's util.close_graceful does (FIN, then drain what the client still sends
        until it closes, LINGER_DRAIN bytes or LINGER seconds), with the draining in the poller: a client that
        keeps its end open holds neither a thread nor the event loop."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))
        except (OSError, ValueError, KeyError):
            conn.close()
            return
        conn.timeout = time.monotonic() + LINGER
        conn.drained = 0
        self.lingering.append(conn)

    def _drain(self, conn: Any, _sock: Any) -> None:
        try:
            data = conn.sock.recv(LINGER_DRAIN)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if not data or conn.drained >= LINGER_DRAIN:
            self.lingering.remove(conn)
            self._end_linger(conn)

    def _end_linger(self, conn: Any) -> None:
        with contextlib.suppress(OSError, KeyError, ValueError):
            self.poller.unregister(conn.sock)
        conn.close()

    def murder_pending(self) -> None:
        super().murder_pending()  # gthread calls this once per turn of its event loop
        now = time.monotonic()
        if now - self._swept >= HANDSHAKE_SWEEP:  # parked handshakes past their deadline (at most max_parked)
            self._swept = now
            late = [c for c in self.pending_conns if getattr(c, "handshake_deadline", now) < now and not c.initialized]
            for conn in late:
                self.pending_conns.remove(conn)
                self.log.debug("closed the connection from %s: its TLS handshake did not arrive in time", _peer(conn))
                self._close_parked(conn)
            for conn in [c for c in self.receiving if c.incoming.late(now)]:
                self._unpark_receiving(conn)
                self._give_back_large(conn)
                log.warning(
                    "closed the connection from %s: the request did not arrive in time "
                    "(--request-timeout from its first byte, --idle-timeout between bytes)",
                    _peer(conn),
                )
                self._close_parked(conn)
        while self.lingering and self.lingering[0].timeout <= now:
            self._end_linger(self.lingering.popleft())

    def murder_keepalived(self, force: bool = False) -> None:
        super().murder_keepalived(force)
        while force and self.lingering:  # the worker is stopping
            self._end_linger(self.lingering.popleft())
        while force and self.receiving:
            conn = self.receiving[0]
            self._unpark_receiving(conn)
            self._close_parked(conn)


def _peer(conn: Any) -> str:
    client = conn.client
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client)


def parking_worker(max_parked: int) -> type[ThreadWorker]:
    """The worker class that keeps at most ``max_parked`` connections waiting without a request."""
    if max_parked == ThreadWorker.max_parked:
        return ThreadWorker
    return type("ThreadWorker", (ThreadWorker,), {"max_parked": max_parked, "__module__": __name__})
