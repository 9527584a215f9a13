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
each other for the moment each one takes. (A request itself is still read blocking, within --request-timeout.)

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
import select
import selectors
import socket
import ssl
import time
from collections import deque
from functools import partial
from typing import Any, ClassVar

from gunicorn import http
from gunicorn import sock as gunicorn_sock
from gunicorn.workers import gthread

from .tls import HANDSHAKE_TIMEOUT

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
# How often the event loop looks for parked connections whose TLS handshake is past its deadline (seconds).
HANDSHAKE_SWEEP = 0.25

log = logging.getLogger("gpugate.server")


class ThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    max_parked: ClassVar[int] = DEFAULT_MAX_PARKED
    _dropped = 0  # parked connections closed since the last report
    _reported = float("-inf")
    _swept = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering: deque[Any] = deque()  # half-closed connections being drained, oldest first

    def handle(self, conn: Any) -> Any:
        if conn.initialized or not self.cfg.is_ssl:
            return super().handle(conn)
        if not conn.data_ready and not conn.wait_for_data(0):
            return _DEFER
        try:
            if not self._handshake(conn):
                conn.data_ready = False  # set again by the poller when the client's next flight arrives
                return _DEFER
        except (OSError, ssl.SSLError) as err:  # a failed handshake: the client has gone or speaks no TLS
            self.log.debug("TLS handshake failed: %s", err)
            return False
        if conn.sock.pending():
            return super().handle(conn)
        poll = select.poll()  # not select.select: descriptors past 1024 are common in a busy worker
        poll.register(conn.sock.fileno(), select.POLLIN)
        if poll.poll(0):
            return super().handle(conn)
        conn.data_ready = False  # set again by the poller when the request arrives
        return _DEFER

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
        conn.init()  # with a parser, only marks the connection initialized and blocking
        return True

    def finish_request(self, conn: Any, fs: Any) -> None:
        if not fs.cancelled() and fs.exception() is None and not fs.result():  # done with: close gracefully
            self.nr_conns -= 1
            self._linger(conn)
            return
        super().finish_request(conn, fs)  # may park ``conn``
        pending: deque[Any] = self.pending_conns
        kept: deque[Any] = self.keepalived_conns
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
        while self.lingering and self.lingering[0].timeout <= now:
            self._end_linger(self.lingering.popleft())

    def murder_keepalived(self, force: bool = False) -> None:
        super().murder_keepalived(force)
        while force and self.lingering:  # the worker is stopping
            self._end_linger(self.lingering.popleft())


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
