"""This worker's state as people and Prometheus see it: the gauges of its policies, GPU inventory and namespace
cache, the fleet drift (worked out again only when the fleet or the policies changed), and what /readyz says.

One ``Status`` per worker, shared by /metrics, /readyz and the refresh loop of ``wiring``: each calls
``refresh()``, which brings the gauges up to date and returns the policies in force. The HTTP layer (``app``)
only asks it; it keeps no counters of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..inventory.pools import drift
from ..policy.model import PolicySet
from . import metrics
from .dra import DraSeries
from .policies import PolicyStore

#: Inventory kinds whose object counts are exported (the fleet watcher's stats hold others too).
INVENTORY_KINDS = ("nodes", "runtimeclasses", "deviceclasses", "resourceslices")


class Status:
    """The gauges and readiness of one worker over its policy store, namespace cache and fleet watcher."""

    def __init__(
        self,
        policies: PolicyStore,
        *,
        namespace_cache: Any = None,
        fleet: Any = None,
        tls_ready: Callable[[], bool] | None = None,
        native: Any = None,
        claims: Callable[[], Any] | None = None,
    ) -> None:
        self.policies = policies
        self.native = native  # serve/native.NativeSync with --native-sync, else None
        self.namespace_cache = namespace_cache
        self.fleet = fleet
        self.tls_ready = tls_ready
        # The DRA series (webhook.serve.dra): the fleet's GPU devices and, with a claims cache, their allocations.
        self.dra = DraSeries(fleet, policies=policies.current, claims=claims) if fleet is not None else None
        self._counted: set[str] = set()  # broken edits this worker has offered to count
        self._drifted: list[str] = []
        self._drift_of: tuple[Any, str] = (None, "")  # the inventory and policy digest _drifted is for
        self._lock = threading.Lock()  # /metrics, /readyz and the refresh loop run in different threads

    def refresh(self) -> PolicySet:
        """The policies in force; this worker's gauges brought up to date on the way."""
        policies = self.policies
        current = policies.current()
        metrics.POLICY_GENERATION.set(policies.generation)
        error_id = policies.last_error_id
        with self._lock:
            first = error_id is not None and error_id not in self._counted
            if first and error_id is not None:
                self._counted.add(error_id)
        if first and metrics.claim(f"policy-{error_id}"):  # every worker sees the edit; one counts it
            metrics.POLICY_RELOAD_ERRORS.inc()
        metrics.POLICY_VALID.set(0 if policies.last_error else 1)
        if self.fleet is not None:
            inventory = self.fleet.inventory()
            metrics.INVENTORY_SYNCED.set(1 if inventory is not None else 0)
            for kind, value in self.fleet.stats().items():
                if kind in INVENTORY_KINDS:
                    metrics.INVENTORY_OBJECTS.labels(kind).set(value)
            metrics.INVENTORY_DRIFT.set(len(self._drift(inventory, current)))
        if self.namespace_cache is not None:
            metrics.NAMESPACE_CACHE_SYNCED.set(1 if self.namespace_cache.synced() else 0)
            stats = dict(self.namespace_cache.stats())
            metrics.NAMESPACE_CACHE_SIZE.set(stats.pop("namespaces", 0))
            for event, value in stats.items():
                metrics.NAMESPACE_CACHE.labels(event).set(value)
        return current

    def state(self) -> tuple[DraSeries, ...]:
        """The collectors of the cluster's state this worker's watches hold, for /metrics."""
        return (self.dra,) if self.dra is not None else ()

    def drifted(self) -> list[str]:
        """Where the policies and the fleet disagreed at the last refresh (empty without a fleet)."""
        return list(self._drifted)

    def _drift(self, inventory: Any, current: PolicySet) -> list[str]:
        # Only when the fleet or the policies changed: drift walks every node.
        with self._lock:
            if self._drift_of[0] is not inventory or self._drift_of[1] != current.digest:
                self._drift_of = (inventory, current.digest)
                self._drifted = drift(inventory, current) if inventory is not None else []
            return self._drifted

    def readiness(self) -> tuple[list[str], list[str]]:
        """(problems, notes) after a refresh: problems make this replica unable to serve (the certificate
        first); notes are what a person should know while the replica stays ready."""
        problems = []
        if self.tls_ready is not None and not self.tls_ready():
            problems.append("the serving certificate is outside its validity period or not loaded")
        current = self.refresh()
        notes = []
        policies = self.policies
        if policies.last_error:
            # The last good policies are in force, so this alone does not take the replica out of the Service.
            error = " ".join(line.strip() for line in policies.last_error.splitlines())
            notes.append(f"policy edit ignored, the last good policies stay in force: {error[:500]}")
        if self.fleet is not None and not self.fleet.synced():
            # Never refuse on missing data: until then there are no feasibility verdicts, and the replica serves.
            notes.append(f"GPU inventory not synced yet ({', '.join(self.fleet.unsynced())}): no feasibility verdicts")
        drifted = self.drifted()
        if drifted:
            more = f" and {len(drifted) - 3} more" if len(drifted) > 3 else ""
            notes.append("policies and fleet disagree: " + "; ".join(drifted[:3]) + more)
        if self.native is not None:
            notes.append(f"admission tier: {self.native.mode}")
        deprecated = len(current.notes)
        if deprecated:
            notes.append(
                f"{deprecated} policy document{'s' if deprecated != 1 else ''} in a deprecated form; "
                "gpugate policy validate says what to change"
            )
        return problems, notes
