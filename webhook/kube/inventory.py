"""The live GPU inventory of ``gpugate serve``: Nodes, RuntimeClasses, DeviceClasses, ResourceSlices and
Karpenter NodePools kept by list+watch, each object reduced at once to the fields ``webhook.inventory.model``
keeps; ResourceClaims and ResourceClaimTemplates in their own watch-fed cache (``claims``, which does not hold up
``inventory()``), read when a pod names one the cache lacks. No pod informer (KAI-Scheduler
#1780: a cluster-wide pod cache outgrew 256 MiB on large clusters).

One ``FleetWatcher`` per worker process, shared by its threads: an informer per kind (``webhook.kube.informer``,
a daemon thread each), the reduced records under one lock, and an ``Inventory`` built from them only when
something changed. ``inventory()`` is None until every kind has listed once (a kind the apiserver does not
serve, such as DRA before 1.34, counts as listed and empty), so feasibility never judges on a partial picture.
A kind gpugate may not read (NodePools without the RBAC rule for them, HTTP 403) counts as listed and *unread*:
what it would add is unknown, so feasibility warns where it would have refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
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
from ..policy.keys import CLAIMS_PENDING_LABEL, CLAIMS_PENDING_SEVERAL
from ..policy.labels import is_label_value
from .claims import DRA_VERSIONS, ClaimsCache
from .client import get, read_json
from .informer import Informer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Kind:
    name: str
    paths: tuple[str, ...]  # list paths, first served wins
    reduce: Callable[[Mapping[str, Any]], Any]
    #: A 403 leaves it unread (unknown), not failing: an optional API gpugate's RBAC may not grant.
    optional: bool = False


def _runtime_class(obj: Mapping[str, Any]) -> str:
    """A RuntimeClass is kept as its handler, by its name (the informer's key)."""
    return str(obj.get("handler") or "")


KINDS = (
    _Kind("nodes", ("/api/v1/nodes",), node_of),
    _Kind("runtimeclasses", ("/apis/node.k8s.io/v1/runtimeclasses",), _runtime_class),
    _Kind("deviceclasses", tuple(f"/apis/resource.k8s.io/{v}/deviceclasses" for v in DRA_VERSIONS), device_class_of),
    _Kind("resourceslices", tuple(f"/apis/resource.k8s.io/{v}/resourceslices" for v in DRA_VERSIONS), slice_of),
    # Karpenter's NodePools (karpenter.sh/v1 since Karpenter 1.0): what the cluster can add.
    _Kind("nodepools", ("/apis/karpenter.sh/v1/nodepools",), nodepool_of, optional=True),
)


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
        self._claim_timeout = claim_timeout
        self._claim_ttl = claim_ttl
        self._claim_limit = claim_limit
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {k.name: {} for k in KINDS}
        self._unread: set[str] = set()
        self._snapshot: Inventory | None = None
        self._dirty = True
        self._claims: dict[tuple[str, str, str], tuple[float, ClaimSpec | None]] = {}
        self._counts = dict.fromkeys(("claim_reads", "claim_failures", "pod_reads", "pod_failures"), 0)
        self._informers = {
            kind.name: Informer(
                api_client,
                kind.paths,
                name=f"inventory: {kind.name}",
                reduce=kind.reduce,
                replace=partial(self._replace, kind.name),
                apply=partial(self._apply, kind.name),
                optional=True,  # a kind the apiserver does not serve counts as listed and empty
                forbidden_ok=kind.optional,
                page_size=page_size,
                list_timeout=request_timeout,
                watch_timeout=watch_timeout,
                backoff_initial=backoff_initial,
                backoff_max=backoff_max,
            )
            for kind in KINDS
        }
        #: Every claim and claim template (``webhook.kube.claims``); ``allocations(fleet.claims)`` lists what
        #: is allocated.
        self.claims = ClaimsCache(
            api_client,
            request_timeout=request_timeout,
            watch_timeout=watch_timeout,
            page_size=page_size,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self._started = False

    # -- what admission reads -----------------------------------------------------------------------

    def inventory(self) -> Inventory | None:
        """The inventory once every kind has listed, else None (no feasibility verdict on partial data)."""
        if not self.synced():
            return None
        with self._lock:
            if self._dirty or self._snapshot is None:
                self._snapshot = Inventory(
                    nodes=tuple(self._records["nodes"].values()),
                    runtime_classes=frozenset(self._records["runtimeclasses"]),
                    runtime_handlers=dict(self._records["runtimeclasses"]),
                    device_classes={c.name: c for c in self._records["deviceclasses"].values()},
                    slices=tuple(self._records["resourceslices"].values()),
                    pools=tuple(self._records["nodepools"].values()),
                    unread=frozenset(self._unread),
                )
                self._dirty = False
            return self._snapshot

    def cached_claim(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        """A ResourceClaim or ResourceClaimTemplate the watch-fed cache holds; None is a miss. No I/O."""
        return self.claims.get(kind, namespace, name)

    def claim(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        """A ResourceClaim or ResourceClaimTemplate a pod names: from the watch-fed cache, else read once per
        ``claim_ttl`` (templates are immutable; a claim's requests are too), or None when it cannot be read in
        ``claim_timeout``."""
        held = self.claims.get(kind, namespace, name)
        if held is not None:
            return held
        key = (kind, namespace, name)
        now = time.monotonic()
        with self._lock:
            cached = self._claims.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        plural = "resourceclaimtemplates" if kind == "ResourceClaimTemplate" else "resourceclaims"
        version = (self._informers["deviceclasses"].path or "/apis/resource.k8s.io/v1/").split("/")[3]
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

    def pending_pods(self, namespace: str, claim: str, *, timeout: float, limit: int) -> list[dict[str, Any]] | None:
        """The pods of ``namespace`` labelled ``gpugate.io/claims-pending`` with ``claim``'s name or ``Several``: one
        list of at most ``limit`` pods (a label selector, no paging), or None when it fails (unreachable,
        forbidden, too slow). No cache: a pod informer costs too much memory (module docstring)."""
        values = sorted({CLAIMS_PENDING_SEVERAL, *([claim] if is_label_value(claim) else [])})
        query = {"labelSelector": f"{CLAIMS_PENDING_LABEL} in ({','.join(values)})", "limit": limit}
        body = self._read_pods(f"/api/v1/namespaces/{namespace}/pods", query, timeout=timeout)
        items = body.get("items") if isinstance(body, Mapping) else None
        return [i for i in items if isinstance(i, dict)][:limit] if isinstance(items, list) else None

    def pod(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        """One pod by name (the owner of a claim made from a template), or None: absent, or the read failed."""
        body = self._read_pods(f"/api/v1/namespaces/{namespace}/pods/{name}", {}, timeout=timeout)
        return body if isinstance(body, dict) else None

    def _read_pods(self, path: str, query: Mapping[str, Any], *, timeout: float) -> Any:
        try:
            body = read_json(get(self._client, path, query, timeout=timeout))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            log.warning("inventory: reading %s failed: %s", path, exc.status)
            body = None
        except Exception as exc:  # unreachable or too slow: unknown, never a refusal
            log.warning("inventory: reading %s failed: %s", path, exc)
            body = None
        with self._lock:
            self._counts["pod_reads" if body is not None else "pod_failures"] += 1
        return body

    def synced(self) -> bool:
        return all(informer.synced() for informer in self._informers.values())

    def unsynced(self) -> list[str]:
        return [name for name, informer in self._informers.items() if not informer.synced()]

    def stats(self) -> dict[str, int]:
        watched = [informer.stats() for informer in self._informers.values()]
        with self._lock:
            return {
                **{key: sum(counts[key] for counts in watched) for key in ("relists", "watch_errors", "events")},
                **self._counts,
                **{k: len(v) for k, v in self._records.items()},
                **self.claims.stats(),
            }

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for name, informer in self._informers.items():
            informer.start(thread_name=f"gpugate-inv-{name}")
        self.claims.start()

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop(timeout=2.0)
        self.claims.stop()

    # -- what the informers hand over -----------------------------------------------------------------

    def _replace(self, kind: str, records: dict[str, Any], how: str) -> None:
        with self._lock:
            self._records[kind] = records  # empty unless listed
            if how == "forbidden":
                self._unread.add(kind)  # listed as unknown: feasibility warns instead of refusing
            else:
                self._unread.discard(kind)
            self._dirty = True

    def _apply(self, kind: str, what: str, name: str, record: Any) -> None:
        with self._lock:
            records = self._records[kind]
            if record is None:
                self._dirty = records.pop(name, None) is not None or self._dirty
            elif records.get(name) != record:  # a node's heartbeat changes nothing we keep
                records[name] = record
                self._dirty = True

    def _get(self, path: str, *, timeout: float) -> Any:
        try:
            return read_json(get(self._client, path, {}, timeout=timeout))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise


def fleet_watcher(api_client: Any, **options: Any) -> FleetWatcher:
    return FleetWatcher(api_client, **options)


def read_fleet(api_client: Any) -> list[dict[str, Any]]:
    """Every object the inventory is built from, trimmed (``gpugate fleet snapshot``); kinds not served skipped."""
    from ..inventory.snapshot import trimmed

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
                items = _list_all(api_client, path)
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


def _list_all(api_client: Any, path: str) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query: dict[str, Any] = {"limit": 500}
        if token:
            query["continue"] = token
        try:
            body = read_json(get(api_client, path, query, timeout=(5.0, 30.0)))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        items += body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items
