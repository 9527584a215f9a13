"""The watch-fed cache of ResourceClaims and ResourceClaimTemplates (resource.k8s.io) of ``gpugate serve``:
every claim and claim template of the cluster, listed and watched through ``webhook.kube.informer`` and
reduced at once to what gpugate reads of it, so that the claims a pod names are known without a read of the
apiserver. A claim the cache does not hold (not synced yet, created a moment ago, RBAC without list/watch)
is read by the bounded GETs of ``webhook.serve.lookups`` as before; the cache never makes a claim unknown.

What is kept of one object: its requests (``webhook.inventory.model.ClaimSpec``, the DeviceClasses, counts
and admin access of each alternative) and, for a ResourceClaim, the devices allocated to it (with the share and
consumed capacity of a device several claims hold) and the pods it is reserved for. A claim's and a template's
spec are immutable once created (kubernetes/api resource/v1/types.go: ResourceClaim ``Spec`` "The spec is
immutable", ResourceClaimTemplate ``Spec`` "This field is immutable"), so a
held spec is never stale; only a claim's status moves, and the watch brings it.

The allocated devices, for others to read (a metric of what DRA devices are held, by whom)::

    for device in allocations(cache):   # cache: a ClaimsCache (FleetWatcher.claims in gpugate serve)
        device.namespace, device.claim  # the ResourceClaim
        device.request                  # the result's request: "gpu", or "gpu/h100" for a firstAvailable subrequest
        device.device_class             # that request's DeviceClass ("" when the spec does not say)
        device.driver, device.pool, device.device  # status.allocation.devices.results[*]
        device.admin_access             # an admin-access (monitoring) allocation: the device is not held
        device.pods                     # names of the pods in status.reservedFor (same namespace), sorted
        device.share_id, device.consumed  # KEP-5075: shareID, consumedCapacity ((name, quantity), ...)

One ``Allocation`` per allocated device of every allocated claim, claims in (namespace, name) order; a claim
allocated but reserved for no pod yet has ``pods == ()``. A snapshot taken under the cache's lock: iterating
never blocks the watch. Memory: per claim a few interned strings per request and per allocated device; no
pod specs, no selectors, no device attributes.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..inventory.model import ClaimSpec, claim_of
from .informer import Informer

log = logging.getLogger(__name__)

#: The DRA API versions tried in order (resource.k8s.io/v1 is GA since 1.34; older clusters serve a beta).
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
#: informer name -> (kind, plural).
KINDS = {"resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate"}


@dataclass(frozen=True)
class Allocation:
    """One device allocated to a ResourceClaim (``status.allocation.devices.results[*]``) and the pods the
    claim is reserved for (``status.reservedFor`` entries of resource ``pods``)."""

    namespace: str
    claim: str
    request: str
    device_class: str
    driver: str
    pool: str
    device: str
    admin_access: bool
    pods: tuple[str, ...]
    #: KEP-5075 consumable capacity (resource.k8s.io/v1 DeviceRequestAllocationResult): ``shareID``, the share of a
    #: device several claims hold at once, and ``consumedCapacity`` (name -> quantity text) of its capacity.
    share_id: str = ""
    consumed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Allocated:
    request: str
    device_class: str
    driver: str
    pool: str
    device: str
    admin_access: bool
    share_id: str = ""
    consumed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClaimRecord:
    """What the cache keeps of one object: its requests and, for a claim, what is allocated and for whom."""

    spec: ClaimSpec
    allocated: tuple[_Allocated, ...] = ()
    pods: tuple[str, ...] = ()


def _text(value: Any) -> str:
    return sys.intern(value) if isinstance(value, str) else ""


def _consumed(value: Any) -> tuple[tuple[str, str], ...]:
    """A result's ``consumedCapacity`` (name -> quantity), as (name, quantity text) in name order."""
    if not isinstance(value, Mapping):
        return ()
    return tuple(
        (_text(name), str(quantity))
        for name, quantity in sorted(value.items())[:32]
        if isinstance(name, str) and isinstance(quantity, (str, int)) and not isinstance(quantity, bool)
    )


def _class_of_result(spec: ClaimSpec, request: str) -> str:
    """The DeviceClass a result's ``request`` names: ``<request>`` or ``<request>/<subrequest>``."""
    head, _, sub = request.partition("/")
    for r in spec.requests:
        if r.name != head:
            continue
        for option in r.options:
            if option.name == sub:
                return option.device_class
        return r.device_classes[0] if r.device_classes and not sub else ""
    return ""


def record_of(kind: str, obj: Mapping[str, Any]) -> ClaimRecord:
    """Reduce one listed or watched object (list items carry no ``kind``: it is the informer's)."""
    spec = claim_of({**obj, "kind": kind})
    if kind != "ResourceClaim":
        return ClaimRecord(spec)
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    allocation = status.get("allocation")
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    allocated = tuple(
        _Allocated(
            _text(r.get("request")),
            _text(_class_of_result(spec, str(r.get("request") or ""))),
            _text(r.get("driver")),
            _text(r.get("pool")),
            _text(r.get("device")),
            r.get("adminAccess") is True,
            _text(r.get("shareID")),
            _consumed(r.get("consumedCapacity")),
        )
        for r in (results if isinstance(results, list) else [])
        if isinstance(r, Mapping)
    )
    reserved = status.get("reservedFor")
    pods = sorted(
        {
            _text(entry.get("name"))
            for entry in (reserved if isinstance(reserved, list) else [])
            if isinstance(entry, Mapping) and entry.get("resource") == "pods" and not entry.get("apiGroup")
        }
        - {""}
    )
    return ClaimRecord(spec, allocated, tuple(pods))


class ClaimsCache:
    """Every ResourceClaim and ResourceClaimTemplate of the cluster, current to the last watch event;
    thread-safe. ``get`` never reads the apiserver: None is a miss (the caller reads)."""

    def __init__(
        self,
        api_client: Any,
        *,
        request_timeout: float = 10.0,
        watch_timeout: float = 300.0,
        page_size: int = 500,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, ClaimRecord]] = {name: {} for name in KINDS}
        self._unread: set[str] = set()
        self._informers = {
            name: Informer(
                api_client,
                tuple(f"/apis/resource.k8s.io/{v}/{name}" for v in DRA_VERSIONS),
                name=f"claims: {name}",
                reduce=partial(record_of, kind),
                replace=partial(self._replace, name),
                apply=partial(self._apply, name),
                optional=True,  # DRA not served: nothing to hold
                forbidden_ok=True,  # RBAC with get only: every claim is read when named, as before
                namespaced=True,
                page_size=page_size,
                list_timeout=request_timeout,
                watch_timeout=watch_timeout,
                backoff_initial=backoff_initial,
                backoff_max=backoff_max,
            )
            for name, kind in KINDS.items()
        }
        self._started = False

    def get(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        """The claim or claim template, if the cache holds it."""
        plural = "resourceclaimtemplates" if kind == "ResourceClaimTemplate" else "resourceclaims"
        with self._lock:
            found = self._records[plural].get(f"{namespace}/{name}")
        return found.spec if found is not None else None

    def records(self) -> list[ClaimRecord]:
        """The ResourceClaims held, in (namespace, name) order (a snapshot)."""
        with self._lock:
            held = sorted(self._records["resourceclaims"].items())
        return [record for _, record in held]

    def synced(self) -> bool:
        return all(informer.synced() for informer in self._informers.values())

    def unread(self) -> frozenset[str]:
        """Kinds gpugate may not list (RBAC): every one of them is read when a pod names it."""
        with self._lock:
            return frozenset(self._unread)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {name: len(records) for name, records in self._records.items()}

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for name, informer in self._informers.items():
            informer.start(thread_name=f"gpugate-{name}")

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop(timeout=2.0)

    def _replace(self, kind: str, records: dict[str, ClaimRecord], how: str) -> None:
        with self._lock:
            self._records[kind] = records
            if how == "forbidden":
                self._unread.add(kind)
            else:
                self._unread.discard(kind)

    def _apply(self, kind: str, what: str, key: str, record: ClaimRecord | None) -> None:
        with self._lock:
            if record is None:
                self._records[kind].pop(key, None)
            else:
                self._records[kind][key] = record


def allocations(cache: ClaimsCache) -> Iterator[Allocation]:
    """Every device allocated to a ResourceClaim the cache holds, with the pods the claim is reserved for
    (the shape is in this module's docstring)."""
    for record in cache.records():
        spec = record.spec
        for device in record.allocated:
            yield Allocation(
                spec.namespace,
                spec.name,
                device.request,
                device.device_class,
                device.driver,
                device.pool,
                device.device,
                device.admin_access,
                record.pods,
                device.share_id,
                device.consumed,
            )
