"""The namespace-label cache the webhook reads: kept by an informer (``webhook.kube.informer``: list, then
watch), with bounded live GETs for namespaces not yet seen. Raw JSON, plain dicts, never client models."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client

from .client import configuration, labels_of, read_json
from .informer import Informer

log = logging.getLogger(__name__)


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

        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._synced = False
        self._inflight: dict[str, _Lookup] = {}
        self._failed_until: dict[str, float] = {}
        self._counts = dict.fromkeys(("live_lookups", "lookup_failures", "lookups_not_found"), 0)
        self._informer = Informer(
            api_client,
            ("/api/v1/namespaces",),
            name="namespace",
            reduce=lambda obj: labels_of(obj)[1],
            replace=self._replace,
            apply=self._apply,
            page_size=page_size,
            connect_timeout=lookup_timeout,
            list_timeout=list_timeout,
            watch_timeout=watch_timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )

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
        self._informer.start(thread_name="gpugate-ns-watch")

    def stop(self) -> None:
        """Stop the watch thread and wait for it (briefly); the cache keeps its last contents."""
        self._informer.stop(timeout=self._lookup_timeout + 5.0)

    def synced(self) -> bool:
        """True once a full list has been loaded; stays True through watch reconnects."""
        with self._lock:
            return self._synced

    def stats(self) -> dict[str, int]:
        """Counters for the metrics layer: relists, watches, watch_errors, live_lookups, lookup_failures,
        lookups_not_found, plus the gauge `namespaces` (names currently cached)."""
        watched = self._informer.stats()
        with self._lock:
            return {
                "relists": watched["relists"],
                "watches": watched["watches"],
                "watch_errors": watched["watch_errors"],
                **self._counts,
                "namespaces": len(self._entries),
            }

    # -- list + watch (webhook.kube.informer) --------------------------------------------------------

    def _replace(self, labels: dict[str, Mapping[str, str]], how: str) -> None:
        entries = {name: _Entry(found) for name, found in labels.items()}
        with self._lock:
            self._entries = entries
            self._failed_until.clear()
            self._synced = True

    def _apply(self, kind: str, name: str, labels: Mapping[str, str] | None) -> None:
        with self._lock:
            if labels is not None:  # ADDED, MODIFIED
                self._entries[name] = _Entry(labels)
                self._failed_until.pop(name, None)
            else:
                self._entries.pop(name, None)


def namespace_cache(kubeconfig: str | None, **options: Any) -> NamespaceLabelCache | None:
    """A cache talking to the cluster in `kubeconfig`, else to the one we run in, else None (offline)."""
    configured = configuration(kubeconfig, default_kubeconfig=False)
    if configured is None:
        return None
    return NamespaceLabelCache(kubernetes.client.ApiClient(configured), **options)
