"""gunicorn's gthread worker, with a TLS connection that has sent no request handed back to the poller.

kube-apiserver's webhook client (Go net/http, up to 25 idle connections per host: k8s.io/client-go
transport/cache.go) dials a new connection when none is idle, and when another connection frees up first it
sends the request there and parks the new one, fully handshaken, in its idle pool. gthread (gunicorn 25+,
gunicorn/workers/gthread.py ``ThreadWorker.handle``) performs the handshake in a pool thread and then
blocks that thread reading the first request, with no timeout. Parked connections thus pin threads, and
once a worker's threads are all pinned, requests on its other connections wait until the apiserver gives up
(measured through a real kube-apiserver: with 1 worker of 2 threads, gpugate's /validate timed out after 5 s
on every call; docs/development/performance.md). Here the handshake stays in the thread, but if no request bytes follow
it at once the connection goes back to the poller (gthread's own deferral for connections that are slow to
send), and a thread is only taken again when bytes arrive.
"""

from __future__ import annotations

import select
import ssl
from typing import Any

from gunicorn.workers import gthread

# gthread's sentinel for "no data yet: watch this connection in the poller" (gunicorn >= 25); without it
# this worker is gthread unchanged.
_DEFER: Any = getattr(gthread, "_DEFER", None)
# How long a fresh connection may take, after its handshake, to start its first request before it is
# handed back to the poller. Go writes the request right after the handshake, so a short wait suffices.
FIRST_REQUEST_WAIT = 0.05


class ThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    def handle(self, conn: Any) -> Any:
        if _DEFER is None or conn.initialized or not self.cfg.is_ssl:
            return super().handle(conn)
        if not conn.data_ready and not conn.wait_for_data(gthread.DEFAULT_WORKER_DATA_TIMEOUT):
            return _DEFER
        conn.sock.setblocking(True)
        try:
            conn.init()  # the TLS handshake
        except (OSError, ssl.SSLError) as err:  # a failed handshake: the client has gone or speaks no TLS
            self.log.debug("TLS handshake failed: %s", err)
            return False
        if conn.is_http2 or conn.sock.pending():
            return super().handle(conn)
        poll = select.poll()  # not select.select: descriptors past 1024 are common in a busy worker
        poll.register(conn.sock.fileno(), select.POLLIN)
        if poll.poll(FIRST_REQUEST_WAIT * 1000):
            return super().handle(conn)
        conn.data_ready = False  # set again by the poller when the request arrives
        return _DEFER
