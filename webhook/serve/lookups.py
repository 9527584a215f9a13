"""One request's reads of the claims and claim templates a pod names: deduplicated, at most a few, and none once
the request's budget (well below the webhook timeout, and never past the apiserver's own ``?timeout=``) is spent.

A pod may name many claims, each a read of the apiserver when the inventory does not hold it; in the request's
thread one after another, 3,000 of them took 14 s, far past the 5 s webhook timeout, and /validate read them all
again. The type guard refuses a pod naming more than ``admission.shapes.MAX_RESOURCE_CLAIMS``; this bounds the
rest. Claims the watch-fed cache holds (``webhook.kube.claims``) cost no read and count toward no bound; only
misses are read. What is not read in budget is unknown, which ``gpuHolders.resourceClaims`` decides (never a refusal).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..inventory.model import ClaimSpec

#: Distinct claims or templates read for one request: a real GPU pod names one or two.
MAX_CLAIM_READS = 4
#: Seconds all of one request's reads may take (the shipped webhooks' timeoutSeconds is 5).
CLAIM_BUDGET = 1.5
#: Kept back from the apiserver's ``?timeout=`` for deciding and answering.
MARGIN = 0.5
#: Seconds one pod read of a claim's CREATE may take (less when the budget ends first).
POD_TIMEOUT = 1.0
#: Pods one claim's CREATE lists (``admission.claims.PENDING_LIMIT``).
POD_LIMIT = 32

Lookup = Callable[[str, str, str], ClaimSpec | None]
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration as the apiserver writes ``?timeout=`` (``5s``, ``10s``, ``1m30s``); None if not one."""
    text = text.strip()
    if not text or len(text) > 32:
        return None
    parts = _DURATION.findall(text)
    if "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


class RequestLookups:
    """The claim lookup of one request: first ``cached`` (the watch-fed cache, no I/O, not counted), then
    ``lookup`` deduplicated, at most ``max_reads`` distinct keys, none after ``deadline`` (a
    ``time.monotonic()`` value)."""

    def __init__(
        self,
        lookup: Lookup,
        *,
        deadline: float,
        max_reads: int = MAX_CLAIM_READS,
        cached: Lookup | None = None,
    ) -> None:
        self._lookup, self._deadline, self._max = lookup, deadline, max_reads
        self._cached = cached
        self._seen: dict[tuple[str, str, str], ClaimSpec | None] = {}
        self.skipped = 0

    def __call__(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        key = (kind, namespace, name)
        if key in self._seen:
            return self._seen[key]
        held = self._cached(kind, namespace, name) if self._cached is not None else None
        if held is not None:
            return held
        if len(self._seen) >= self._max or time.monotonic() >= self._deadline:
            self.skipped += 1
            return None
        found = self._seen[key] = self._lookup(kind, namespace, name)
        return found


def request_deadline(started: float, apiserver_timeout: str | None) -> float:
    """When a request's lookups stop: ``CLAIM_BUDGET`` after ``started`` (monotonic), or earlier when the
    apiserver's ``?timeout=`` (less ``MARGIN``) ends first."""
    budget = CLAIM_BUDGET
    given = go_duration(apiserver_timeout) if apiserver_timeout else None
    if given is not None:
        budget = min(budget, max(given - MARGIN, 0.0))
    return started + budget


class RequestPods:
    """The pod reads of one ResourceClaim's CREATE (``admission.claims.claim_pods``): at most one list of the pods
    labelled for it and one read of its owner pod, each under what is left of the request's budget (``deadline``,
    a ``time.monotonic()`` value), none after it. ``list_pods(namespace, claim, timeout=, limit=)`` and
    ``get_pod(namespace, name, timeout=)`` are ``FleetWatcher.pending_pods`` and ``FleetWatcher.pod``."""

    def __init__(self, list_pods: Callable[..., Any], get_pod: Callable[..., Any], *, deadline: float) -> None:
        self._list, self._get, self._deadline = list_pods, get_pod, deadline
        self.reads = 0

    def _timeout(self) -> float | None:
        left = self._deadline - time.monotonic()
        if left <= 0 or self.reads >= 2:
            return None
        self.reads += 1
        return min(POD_TIMEOUT, left)

    def pending(self, namespace: str, claim: str) -> list[Mapping[str, Any]] | None:
        timeout = self._timeout()
        found = self._list(namespace, claim, timeout=timeout, limit=POD_LIMIT) if timeout is not None else None
        return found if isinstance(found, list) else None

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        timeout = self._timeout()
        found = self._get(namespace, name, timeout=timeout) if timeout is not None else None
        return found if isinstance(found, Mapping) else None
