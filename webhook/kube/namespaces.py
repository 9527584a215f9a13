"""The namespace-label cache the webhook reads (list, then watch, with bounded live GETs for namespaces not yet
seen). Raw JSON through the generated clients with _preload_content=False: plain dicts, never client models."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client

from .client import close, configuration, labels_of, pages, read_json

log = logging.getLogger(__name__)


class _ContinueExpired(Exception):
    """HTTP 410 on a list's `continue` token (``error``: the apiserver's answer)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Expired(Exception):
    """The resourceVersion we hold is older than the apiserver's watch window (HTTP 410 Gone)."""


@dataclass
class _Lookup:
    """One live GET in flight; concurrent callers for the same name wait on it instead of adding GETs."""

    done: threading.Event = field(default_factory=threading.Event)
    labels: Mapping[str, str] | None = None


@dataclass(frozen=True)
class _Entry:
    labels: Mapping[str, str]
    # Entries that came from a live GET before the first list are trusted only for a while: without a
    # watch nobody tells us when they change. Entries from list/watch never expire (expires_at None).
    expires_at: float | None = None


class NamespaceLabelCache:
    """Namespace name -> labels, kept current by list+watch in a daemon thread; thread-safe.

    `labels(name)` answers from memory once the first list has completed (`synced()`). Before that, and
    for names the cache does not know yet (a namespace created a moment ago), it makes one bounded live
    GET and caches the answer. It returns None when the labels cannot be known: the API is unreachable,
    too slow, or the namespace does not exist.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        lookup_timeout: float = 2.0,
        failure_backoff: float = 5.0,
        live_ttl: float = 30.0,
        max_lookups_in_flight: int = 8,
        watch_timeout: float = 300.0,
        list_timeout: float = 30.0,
        page_size: int = 500,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        # Any, not the generated types: with _preload_content=False these calls return the raw urllib3
        # response, which we decode ourselves (labels only; no client models on the admission path).
        self._api: Any = kubernetes.client.CoreV1Api(api_client)
        self._lookup_timeout = lookup_timeout
        self._failure_backoff = failure_backoff
        self._live_ttl = live_ttl
        self._lookup_slots = threading.BoundedSemaphore(max_lookups_in_flight)
        self._watch_timeout = watch_timeout
        self._list_timeout = list_timeout
        self._page_size = page_size
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max

        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._synced = False
        self._inflight: dict[str, _Lookup] = {}
        self._failed_until: dict[str, float] = {}
        self._counts = dict.fromkeys(
            ("relists", "watches", "watch_errors", "live_lookups", "lookup_failures", "lookups_not_found"), 0
        )

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None  # the watch stream being read, so that stop() can cut it

    # -- the admission path ------------------------------------------------------------------------

    def labels(self, name: str) -> Mapping[str, str] | None:
        """The labels of namespace `name`, or None when they cannot be known right now."""
        if not name:  # GET /api/v1/namespaces/ would be the list; nothing has an empty namespace name
            return None
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and (entry.expires_at is None or entry.expires_at > now):
                return entry.labels
            if self._failed_until.get(name, 0.0) > now:
                # A GET for this name failed a moment ago: don't make every admission request wait
                # another lookup_timeout while the API is down.
                return entry.labels if entry is not None else None
            lookup = self._inflight.get(name)
            if lookup is None:
                if not self._lookup_slots.acquire(blocking=False):
                    self._counts["lookup_failures"] += 1
                    return None
                lookup = self._inflight[name] = _Lookup()
                threading.Thread(
                    target=self._live_lookup, args=(name, lookup), name=f"gpugate-ns-get-{name}", daemon=True
                ).start()
        # The GET carries its own total timeout; this wait is the hard bound should the client library
        # still block (a server trickling bytes defeats per-read socket timeouts).
        if not lookup.done.wait(self._lookup_timeout + 0.25):
            return None
        return lookup.labels

    def _live_lookup(self, name: str, lookup: _Lookup) -> None:
        result: Mapping[str, str] | None = None
        failed = False
        try:
            response = self._api.read_namespace(name, _preload_content=False, _request_timeout=self._lookup_timeout)
            _, result = labels_of(read_json(response))
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                failed = True
                log.warning("namespace %s: GET failed: HTTP %s %s", name, exc.status, exc.reason)
        except Exception as exc:
            failed = True
            log.warning("namespace %s: GET failed: %s", name, exc)
        with self._lock:
            self._counts["live_lookups"] += 1
            if failed:
                self._counts["lookup_failures"] += 1
                self._failed_until[name] = time.monotonic() + self._failure_backoff
                stale = self._entries.get(name)
                if stale is not None:
                    # An earlier live answer that has outlived live_ttl beats no answer at all.
                    result = stale.labels
            elif result is None:
                self._counts["lookups_not_found"] += 1
                gone = self._entries.get(name)
                if gone is not None and gone.expires_at is not None:  # a live answer, never a watched one
                    del self._entries[name]
            else:
                self._failed_until.pop(name, None)
                if not self._synced:
                    self._entries[name] = _Entry(result, time.monotonic() + self._live_ttl)
                elif name not in self._entries:
                    # After sync the watch is authoritative: an event that arrived while we waited for
                    # the GET is at least as new as the GET's answer, so only fill a gap.
                    self._entries[name] = _Entry(result)
            del self._inflight[name]
            lookup.labels = result
        self._lookup_slots.release()
        lookup.done.set()

    # -- lifecycle and introspection -----------------------------------------------------------------

    def start(self) -> None:
        """Start the list+watch thread (idempotent). Call it in each process that serves requests."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpugate-ns-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the watch thread and wait for it (briefly); the cache keeps its last contents."""
        self._stop.set()
        response = self._response
        if response is not None:
            close(response)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._lookup_timeout + 5.0)

    def synced(self) -> bool:
        """True once a full list has been loaded; stays True through watch reconnects."""
        with self._lock:
            return self._synced

    def stats(self) -> dict[str, int]:
        """Counters for the metrics layer: relists, watches, watch_errors, live_lookups, lookup_failures,
        lookups_not_found, plus the gauge `namespaces` (names currently cached)."""
        with self._lock:
            return {**self._counts, "namespaces": len(self._entries)}

    # -- list + watch --------------------------------------------------------------------------------

    def _run(self) -> None:
        resource_version: str | None = None
        backoff = self._backoff_initial
        expired_in_a_row = 0
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                resource_version, saw_events = self._watch(resource_version)
                backoff = self._backoff_initial
                expired_in_a_row = 0
                if not saw_events:
                    # A watch that ends at once with nothing in it (a proxy closing idle streams, say)
                    # must not turn into a busy loop.
                    self._stop.wait(self._backoff_initial)
            except _Expired:
                log.info("namespace watch: resourceVersion %s expired (410), relisting", resource_version)
                resource_version = None
                expired_in_a_row += 1
                if expired_in_a_row > 1:
                    # One 410 is routine (etcd compaction); a fresh list's version expiring at once is
                    # not, and relisting in a tight loop would hammer the apiserver.
                    self._stop.wait(backoff * random.uniform(0.8, 1.2))
                    backoff = min(backoff * 2, self._backoff_max)
            except Exception as exc:
                if self._stop.is_set():
                    break
                with self._lock:
                    self._counts["watch_errors"] += 1
                log.warning("namespace watch: %s; retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, self._backoff_max)

    def _relist(self) -> str:
        for attempt in (1, 2):
            entries: dict[str, _Entry] = {}
            metadata: Mapping[str, Any] = {}
            try:
                for body in pages(self._list_page, limit=self._page_size):
                    for item in body.get("items") or []:
                        name, labels = labels_of(item)
                        entries[name] = _Entry(labels)
                    metadata = body.get("metadata") or {}
            except _ContinueExpired as expired:
                if attempt == 1:
                    # The continue token outlived etcd's compaction window: start the list again (once;
                    # after that the run loop's backoff applies).
                    continue
                raise expired.error from None
            with self._lock:
                self._entries = entries
                self._failed_until.clear()
                self._synced = True
                self._counts["relists"] += 1
            return str(metadata.get("resourceVersion", ""))
        raise AssertionError("unreachable")  # the second attempt returns or raises

    def _list_page(self, paging: dict[str, Any]) -> Any:
        try:
            response = self._api.list_namespace(
                _preload_content=False, _request_timeout=(self._lookup_timeout, self._list_timeout), **paging
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 410 and "_continue" in paging:
                raise _ContinueExpired(exc) from exc
            raise
        return read_json(response)

    def _watch(self, resource_version: str) -> tuple[str, bool]:
        # Server-side timeout with jitter, as client-go's reflector does, so that replicas don't
        # reconnect in lockstep; the client read timeout sits above it to catch dead connections.
        server_timeout = int(self._watch_timeout * random.uniform(1.0, 2.0)) or 1
        try:
            response = self._api.list_namespace(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=server_timeout,
                _preload_content=False,
                _request_timeout=(self._lookup_timeout, server_timeout + 30),
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 410:  # some apiservers refuse a too-old resourceVersion with HTTP 410
                raise _Expired() from exc
            raise
        self._response = response
        if self._stop.is_set():  # stop() ran while we were connecting and found nothing to cut
            close(response)
        with self._lock:
            self._counts["watches"] += 1
        saw_events = False
        try:
            for event in _events(response):
                if self._stop.is_set():
                    break
                saw_events = True
                resource_version = self._apply(event, resource_version)
        finally:
            self._response = None
            close(response)
        return resource_version, saw_events

    def _apply(self, event: Mapping[str, Any], resource_version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            raise RuntimeError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        name, labels = labels_of(obj)
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._entries[name] = _Entry(labels)
                self._failed_until.pop(name, None)
            elif kind == "DELETED":
                self._entries.pop(name, None)
        return str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)


def _events(response: Any) -> Iterator[Mapping[str, Any]]:
    """Watch events, one JSON object per line, as the apiserver streams them."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if pending.strip():
        yield json.loads(pending)


def namespace_cache(kubeconfig: str | None, **options: Any) -> NamespaceLabelCache | None:
    """A cache talking to the cluster in `kubeconfig`, else to the one we run in, else None (offline)."""
    configured = configuration(kubeconfig, default_kubeconfig=False)
    if configured is None:
        return None
    return NamespaceLabelCache(kubernetes.client.ApiClient(configured), **options)
