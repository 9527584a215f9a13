"""One informer per watched kind: list it in pages, watch from the list's resourceVersion, list again on 410 Gone
(an expired watch, or an expired ``continue`` token), back off with jitter on errors, say when it has synced,
count what it did. Every cache of ``gpugate serve`` (namespace labels, the GPU inventory) stands on it and keeps
only what it stores: each object is reduced at once to what the cache keeps (``reduce``), a complete list
arrives as ``replace(records)``, each watch event as ``apply(type, name, record)``.

Objects stay plain JSON (raw GETs through the client's ApiClient, never its models). The loop is client-go's
reflector (k8s.io/client-go tools/cache/reflector.go ``ListAndWatch``: list, then watch from the list's
resourceVersion with a jittered server-side timeout; a 410 ends the watch and starts a new list) and kopf's
``continuous_watch`` (nolar/kopf kopf/_cogs/clients/watching.py).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kubernetes.client

from .client import close, get, read_json

log = logging.getLogger(__name__)

#: What a cache keeps of one object (only that is held, never the whole list).
Reduce = Callable[[Mapping[str, Any]], Any]
#: Called with every object of a complete list (name -> record) and how it was listed: ``listed``; ``not served``
#: (no path of the kind is served: nothing of it can exist, the records are empty); ``forbidden`` (gpugate may
#: not list it: what it holds is unknown, the records are empty).
Replace = Callable[[dict[str, Any], str], None]
#: Called with each watch event's type (ADDED, MODIFIED, DELETED), the object's name (``namespace/name`` for
#: a namespaced informer) and its record (None for DELETED).
Apply = Callable[[str, str, Any], None]


class Expired(Exception):
    """HTTP 410 Gone: the resourceVersion held is older than the apiserver's watch window."""


class ContinueExpired(Exception):
    """HTTP 410 on a list's ``continue`` token (``error``: the apiserver's answer)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Forbidden(Exception):
    """HTTP 403 on the list of a kind gpugate's RBAC may not grant (``forbidden_ok``)."""


class NotServed(Exception):
    """No path of the kind is served (404 on every one): a kind the cluster does not have, such as DRA before 1.34."""


class Informer:
    """List+watch of one kind in a daemon thread; ``replace`` and ``apply`` run in that thread.

    ``paths``: the kind's list paths, the first served one wins (API versions, newest first). ``optional``: a
    kind no path serves counts as synced and empty (``replace({}, "not served")``), and is looked for again
    every ``backoff_max`` seconds; otherwise a 404 is an error like any other. ``forbidden_ok``: a 403 on the
    list counts as synced and unknown (``replace({}, "forbidden")``), looked at again the same way.
    ``namespaced``: records are keyed ``namespace/name`` (a kind listed across namespaces), else by name.
    """

    def __init__(
        self,
        api_client: Any,
        paths: tuple[str, ...],
        *,
        name: str,
        reduce: Reduce,
        replace: Replace,
        apply: Apply,
        optional: bool = False,
        forbidden_ok: bool = False,
        namespaced: bool = False,
        page_size: int = 500,
        connect_timeout: float = 5.0,
        list_timeout: float = 30.0,
        watch_timeout: float = 300.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self.name = name
        self._client: Any = api_client
        self._paths = paths
        self._path: str | None = None  # the path that answered the last list
        self._reduce, self._replace, self._apply = reduce, replace, apply
        self._optional = optional
        self._forbidden_ok = forbidden_ok
        self._namespaced = namespaced
        self._page_size = page_size
        self._connect_timeout = connect_timeout
        self._list_timeout = list_timeout
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._lock = threading.Lock()
        self._synced = False
        self._counts = dict.fromkeys(("relists", "watches", "watch_errors", "events"), 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None  # the watch stream being read, so that stop() can cut it

    # -- lifecycle and introspection ------------------------------------------------------------------

    def start(self, *, thread_name: str) -> None:
        """Start the list+watch thread (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
            self._thread.start()

    def stop(self, *, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout``); what the cache holds stays."""
        self._stop.set()
        response = self._response
        if response is not None:
            close(response)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)

    def synced(self) -> bool:
        """True once a complete list has been handed over (or the kind is not served); stays True through
        watch reconnects and relists."""
        with self._lock:
            return self._synced

    @property
    def path(self) -> str | None:
        """The list path that answered last (which API version the cluster serves), None before."""
        return self._path

    def stats(self) -> dict[str, int]:
        """relists (complete lists handed over), watches (watch requests made), watch_errors, events."""
        with self._lock:
            return dict(self._counts)

    # -- list + watch ---------------------------------------------------------------------------------

    def _run(self) -> None:
        version: str | None = None
        backoff = self._backoff_initial
        expired_in_a_row = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version, saw_events = self._watch(version)
                backoff = self._backoff_initial
                expired_in_a_row = 0
                if not saw_events:
                    # A watch that ends at once with nothing in it (a proxy closing idle streams, say) must
                    # not turn into a busy loop.
                    self._stop.wait(self._backoff_initial)
            except NotServed:
                self._replace({}, "not served")
                with self._lock:
                    self._synced = True
                log.info("%s: the apiserver serves none; looking again in %.0fs", self.name, self._backoff_max)
                self._stop.wait(self._backoff_max)
                version = None
            except Forbidden:
                self._replace({}, "forbidden")
                with self._lock:
                    self._synced = True
                log.warning(
                    "%s: forbidden to list (RBAC); what it holds is unknown; looking again in %.0fs",
                    self.name,
                    self._backoff_max,
                )
                self._stop.wait(self._backoff_max)
                version = None
            except Expired:
                log.info("%s watch: resourceVersion %s expired (410), relisting", self.name, version)
                version = None
                expired_in_a_row += 1
                if expired_in_a_row > 1:
                    # One 410 is routine (etcd compaction); a fresh list's version expiring at once is not,
                    # and relisting in a tight loop would hammer the apiserver.
                    self._stop.wait(backoff * random.uniform(0.8, 1.2))
                    backoff = min(backoff * 2, self._backoff_max)
            except Exception as exc:
                if self._stop.is_set():
                    break
                with self._lock:
                    self._counts["watch_errors"] += 1
                log.warning("%s watch: %s; retrying in %.1fs", self.name, exc, backoff)
                self._stop.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, self._backoff_max)

    def _relist(self) -> str:
        candidates = (self._path,) if self._path else self._paths
        for path in candidates:
            for attempt in (1, 2):
                try:
                    items, version = self._list(path)
                except ContinueExpired as expired:
                    if attempt == 1:
                        # The continue token outlived etcd's compaction window: start the list again (once;
                        # after that the run loop's backoff applies).
                        continue
                    raise expired.error from None
                except kubernetes.client.ApiException as exc:
                    if exc.status == 404 and self._optional:
                        break  # the next API version
                    if exc.status == 403 and self._forbidden_ok:
                        raise Forbidden() from exc
                    raise
                self._replace(items, "listed")
                with self._lock:
                    self._path = path
                    self._synced = True
                    self._counts["relists"] += 1
                return version
        self._path = None
        raise NotServed()

    def _list(self, path: str) -> tuple[dict[str, Any], str]:
        """Every object of ``path``, reduced, a page at a time; and the list's resourceVersion."""
        items: dict[str, Any] = {}
        token: str | None = None
        while True:
            query: dict[str, Any] = {"limit": self._page_size, **({"continue": token} if token else {})}
            try:
                body = read_json(get(self._client, path, query, timeout=(self._connect_timeout, self._list_timeout)))
            except kubernetes.client.ApiException as exc:
                if exc.status == 410 and token:
                    raise ContinueExpired(exc) from exc
                raise
            for item in body.get("items") or []:
                items[self._key(item)] = self._reduce(item)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion", ""))

    def _key(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        return f"{meta.get('namespace', '')}/{name}" if self._namespaced else name

    def _watch(self, version: str) -> tuple[str, bool]:
        # Server-side timeout with jitter, as client-go's reflector does, so that replicas don't reconnect in
        # lockstep; the client read timeout sits above it to catch dead connections.
        server_timeout = int(self._watch_timeout * random.uniform(1.0, 2.0)) or 1
        query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true"}
        try:
            response = get(
                self._client,
                self._path or self._paths[0],
                {**query, "timeoutSeconds": server_timeout},
                timeout=(self._connect_timeout, server_timeout + 30),
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 410:  # some apiservers refuse a too-old resourceVersion with HTTP 410
                raise Expired() from exc
            raise
        self._response = response
        if self._stop.is_set():  # stop() ran while we were connecting and found nothing to cut
            close(response)
        with self._lock:
            self._counts["watches"] += 1
        saw_events = False
        try:
            for event in events(response):
                if self._stop.is_set():
                    break
                saw_events = True
                version = self._event(event, version)
        finally:
            self._response = None
            close(response)
        return version, saw_events

    def _event(self, event: Mapping[str, Any], version: str) -> str:
        what = str(event.get("type"))
        obj = event.get("object") or {}
        if what == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        if what in ("ADDED", "MODIFIED", "DELETED"):
            with self._lock:
                self._counts["events"] += 1
            self._apply(what, self._key(obj), self._reduce(obj) if what != "DELETED" else None)
        return str((obj.get("metadata") or {}).get("resourceVersion") or version)


def events(response: Any) -> Iterator[Mapping[str, Any]]:
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
