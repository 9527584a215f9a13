"""The live GPU inventory of ``gpugate serve``: Nodes, RuntimeClasses, DeviceClasses, ResourceSlices and
Karpenter NodePools kept by list+watch, each object reduced at once to the fields ``webhook.inventory.model``
keeps; ResourceClaims and ResourceClaimTemplates read when a pod names them. No pod informer (KAI-Scheduler
#1780: a cluster-wide pod cache outgrew 256 MiB on large clusters).

One ``FleetWatcher`` per worker process, shared by its threads: a daemon thread per kind, the reduced records
under one lock, and an ``Inventory`` built from them only when something changed. ``inventory()`` is None until
every kind has listed once (a kind the apiserver does not serve, such as DRA before 1.34, counts as listed and
empty), so feasibility never judges on a partial picture. A kind gpugate may not read (NodePools without the
RBAC rule for them, HTTP 403) counts as listed and *unread*: what it would add is unknown, so feasibility
warns where it would have refused.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes.client

from ..inventory.model import (
    ClaimSpec,
    Inventory,
    claim_of,
    device_class_of,
    node_of,
    nodepool_of,
    slice_of,
)
from .client import close as _close
from .namespaces import _events  # one way to read a watch stream

log = logging.getLogger(__name__)

#: The DRA API versions tried in order (resource.k8s.io/v1 is GA since 1.34; older clusters serve a beta).
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")


@dataclass(frozen=True)
class _Kind:
    name: str
    paths: tuple[str, ...]  # list paths, first served wins
    reduce: Callable[[Mapping[str, Any]], Any]
    #: A 403 leaves it unread (unknown), not failing: an optional API gpugate's RBAC may not grant.
    optional: bool = False


def _runtime_class(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


KINDS = (
    _Kind("nodes", ("/api/v1/nodes",), node_of),
    _Kind("runtimeclasses", ("/apis/node.k8s.io/v1/runtimeclasses",), _runtime_class),
    _Kind("deviceclasses", tuple(f"/apis/resource.k8s.io/{v}/deviceclasses" for v in DRA_VERSIONS), device_class_of),
    _Kind("resourceslices", tuple(f"/apis/resource.k8s.io/{v}/resourceslices" for v in DRA_VERSIONS), slice_of),
    # Karpenter's NodePools (karpenter.sh/v1 since Karpenter 1.0): what the cluster can add.
    _Kind("nodepools", ("/apis/karpenter.sh/v1/nodepools",), nodepool_of, optional=True),
)


class _Expired(Exception):
    """HTTP 410: the resourceVersion is older than the watch window."""


class _NotServed(Exception):
    """No version of this kind is served (404 on every path)."""


class _Forbidden(Exception):
    """An optional kind gpugate's RBAC does not let it list (403)."""


class FleetWatcher:
    """The cluster's GPU inventory, current to the last watch event; thread-safe."""

    def __init__(
        self,
        api_client: Any,
        *,
        request_timeout: float = 10.0,
        watch_timeout: float = 300.0,
        page_size: int = 500,
        claim_timeout: float = 1.0,
        claim_ttl: float = 30.0,
        claim_limit: int = 1024,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self._client: Any = api_client
        self._request_timeout = request_timeout
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._claim_timeout = claim_timeout
        self._claim_ttl = claim_ttl
        self._claim_limit = claim_limit
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {k.name: {} for k in KINDS}
        self._listed: set[str] = set()
        self._unread: set[str] = set()
        self._paths: dict[str, str] = {}
        self._snapshot: Inventory | None = None
        self._dirty = True
        self._claims: dict[tuple[str, str, str], tuple[float, ClaimSpec | None]] = {}
        self._counts = dict.fromkeys(("relists", "watch_errors", "events", "claim_reads", "claim_failures"), 0)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}

    # -- what admission reads -----------------------------------------------------------------------

    def inventory(self) -> Inventory | None:
        """The inventory once every kind has listed, else None (no feasibility verdict on partial data)."""
        with self._lock:
            if len(self._listed) < len(KINDS):
                return None
            if self._dirty or self._snapshot is None:
                self._snapshot = Inventory(
                    nodes=tuple(self._records["nodes"].values()),
                    runtime_classes=frozenset(self._records["runtimeclasses"].values()),
                    device_classes={c.name: c for c in self._records["deviceclasses"].values()},
                    slices=tuple(self._records["resourceslices"].values()),
                    pools=tuple(self._records["nodepools"].values()),
                    unread=frozenset(self._unread),
                )
                self._dirty = False
            return self._snapshot

    def claim(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        """A ResourceClaim or ResourceClaimTemplate a pod names, read once per ``claim_ttl`` (templates are
        immutable; a claim's requests are too), or None when it cannot be read in ``claim_timeout``."""
        key = (kind, namespace, name)
        now = time.monotonic()
        with self._lock:
            cached = self._claims.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        plural = "resourceclaimtemplates" if kind == "ResourceClaimTemplate" else "resourceclaims"
        version = self._paths.get("deviceclasses", "/apis/resource.k8s.io/v1/").split("/")[3]
        path = f"/apis/resource.k8s.io/{version}/namespaces/{namespace}/{plural}/{name}"
        found: ClaimSpec | None = None
        try:
            body = self._get(path, timeout=self._claim_timeout)
            found = claim_of({**body, "kind": kind}) if body is not None else None
        except Exception as exc:  # unreachable, forbidden, too slow: unknown, never a refusal
            log.warning("inventory: reading %s %s/%s failed: %s", kind, namespace, name, exc)
            with self._lock:
                self._counts["claim_failures"] += 1
            return None
        with self._lock:
            self._counts["claim_reads"] += 1
            if len(self._claims) >= self._claim_limit:
                self._claims.clear()  # bounded: start again rather than grow with tenants' names
            self._claims[key] = (now + self._claim_ttl, found)
        return found

    def synced(self) -> bool:
        with self._lock:
            return len(self._listed) == len(KINDS)

    def unsynced(self) -> list[str]:
        with self._lock:
            return [k.name for k in KINDS if k.name not in self._listed]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self._counts, **{k: len(v) for k, v in self._records.items()}}

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        for kind in KINDS:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"gpugate-inv-{kind.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for response in list(self._responses.values()):
            _close(response)
        for thread in self._threads:
            thread.join(timeout=2.0)

    # -- list+watch -----------------------------------------------------------------------------------

    def _request(self, path: str, query: dict[str, Any], *, timeout: Any) -> Any:
        """A raw GET (the urllib3 response, body unread): records are reduced from plain JSON, never decoded
        into the client's models. An ApiException for an HTTP error, as the generated API calls raise."""
        method, url, headers, _, _ = self._client.param_serialize(
            "GET",
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(method, url, header_params=headers, _request_timeout=timeout)
        raw = getattr(response, "response", response)
        if response.status >= 400:
            try:
                body = raw.data
            finally:
                raw.release_conn()
            raise kubernetes.client.ApiException(status=response.status, reason=response.reason, body=body)
        return raw

    def _get(self, path: str, *, timeout: float) -> Any:
        try:
            response = self._request(path, {}, timeout=timeout)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    def _run(self, kind: _Kind) -> None:
        version: str | None = None
        backoff = self._backoff_initial
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist(kind)
                version = self._watch(kind, version)
                backoff = self._backoff_initial
            except _NotServed:
                with self._lock:
                    self._listed.add(kind.name)  # nothing of this kind can exist: listed, and empty
                    self._unread.discard(kind.name)
                    self._records[kind.name] = {}
                    self._dirty = True
                log.info("inventory: the apiserver serves no %s; looking again in %.0fs", kind.name, self._backoff_max)
                self._stop.wait(self._backoff_max)
                version = None
            except _Forbidden:
                with self._lock:
                    self._listed.add(kind.name)  # listed as unknown: feasibility warns instead of refusing
                    self._unread.add(kind.name)
                    self._records[kind.name] = {}
                    self._dirty = True
                log.warning(
                    "inventory: forbidden to list %s (RBAC); pods they could host are warned about, never refused;"
                    " looking again in %.0fs",
                    kind.name,
                    self._backoff_max,
                )
                self._stop.wait(self._backoff_max)
                version = None
            except _Expired:
                version = None
            except Exception as exc:
                if self._stop.is_set():
                    break
                with self._lock:
                    self._counts["watch_errors"] += 1
                log.warning("inventory: %s watch: %s; retrying in %.1fs", kind.name, exc, backoff)
                self._stop.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, self._backoff_max)

    def _relist(self, kind: _Kind) -> str:
        records: dict[str, Any] = {}
        token: str | None = None
        path = self._paths.get(kind.name)
        candidates = (path,) if path else kind.paths
        for candidate in candidates:
            try:
                while True:
                    query: dict[str, Any] = {"limit": self._page_size}
                    if token:
                        query["continue"] = token
                    response = self._request(candidate, query, timeout=(5.0, self._request_timeout))
                    try:
                        body = json.loads(response.data)
                    finally:
                        response.release_conn()
                    for item in body.get("items") or []:
                        name = str((item.get("metadata") or {}).get("name", ""))
                        records[name] = kind.reduce(item)
                    token = (body.get("metadata") or {}).get("continue")
                    if not token:
                        break
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    continue
                if exc.status == 410:
                    raise _Expired() from exc
                if exc.status == 403 and kind.optional:
                    raise _Forbidden() from exc
                raise
            with self._lock:
                self._unread.discard(kind.name)
                self._paths[kind.name] = candidate
                self._records[kind.name] = records
                self._listed.add(kind.name)
                self._dirty = True
                self._counts["relists"] += 1
            return str((body.get("metadata") or {}).get("resourceVersion", ""))
        raise _NotServed()

    def _watch(self, kind: _Kind, version: str) -> str:
        server_timeout = int(self._watch_timeout * random.uniform(1.0, 2.0)) or 1
        query = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": server_timeout,
        }
        try:
            response = self._request(self._paths[kind.name], query, timeout=(5.0, server_timeout + 30))
        except kubernetes.client.ApiException as exc:
            if exc.status == 410:
                raise _Expired() from exc
            raise
        self._responses[kind.name] = response
        saw = False
        try:
            for event in _events(response):
                if self._stop.is_set():
                    break
                saw = True
                version = self._apply(kind, event, version)
        finally:
            self._responses.pop(kind.name, None)
            _close(response)
        if not saw:
            self._stop.wait(self._backoff_initial)
        return version

    def _apply(self, kind: _Kind, event: Mapping[str, Any], version: str) -> str:
        what = event.get("type")
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if what == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            raise RuntimeError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        if what in ("ADDED", "MODIFIED", "DELETED"):
            name = str(meta.get("name", ""))
            record = kind.reduce(obj) if what != "DELETED" else None
            with self._lock:
                self._counts["events"] += 1
                records = self._records[kind.name]
                if record is None:
                    self._dirty = records.pop(name, None) is not None or self._dirty
                elif records.get(name) != record:  # a node's heartbeat changes nothing we keep
                    records[name] = record
                    self._dirty = True
        return str(meta.get("resourceVersion") or version)


def fleet_watcher(api_client: Any, **options: Any) -> FleetWatcher:
    return FleetWatcher(api_client, **options)


def read_fleet(api_client: Any) -> list[dict[str, Any]]:
    """Every object the inventory is built from, trimmed (``gpugate fleet snapshot``); kinds not served skipped."""
    from ..inventory.snapshot import trimmed

    watcher = FleetWatcher(api_client)
    out: list[dict[str, Any]] = []
    kinds = {
        "nodes": ("v1", "Node"),
        "runtimeclasses": ("node.k8s.io/v1", "RuntimeClass"),
        "deviceclasses": ("resource.k8s.io/v1", "DeviceClass"),
        "resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
        "nodepools": ("karpenter.sh/v1", "NodePool"),
    }
    for kind in KINDS:
        for path in kind.paths:
            try:
                items = _list_all(watcher, path)
            except kubernetes.client.ApiException as exc:
                if exc.status == 403 and kind.optional:
                    log.warning("fleet snapshot: forbidden to list %s; the snapshot has none", kind.name)
                    break
                raise
            if items is None:
                continue
            api_version, name = kinds[kind.name]
            version = path.split("/")[3] if path.startswith("/apis/resource.k8s.io/") else None
            for item in items:
                out.append(
                    trimmed(
                        {**item, "apiVersion": f"resource.k8s.io/{version}" if version else api_version, "kind": name}
                    )
                )
            break
    return out


def _list_all(watcher: FleetWatcher, path: str) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query: dict[str, Any] = {"limit": 500}
        if token:
            query["continue"] = token
        try:
            response = watcher._request(path, query, timeout=(5.0, 30.0))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        items += body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items
