"""The production app's wiring: the policy store (with its last good copy), the namespace-label cache, the
fleet watcher, the worker's ``status`` and its refresh loop around the routes of ``app``. ``gpugate serve``
runs ``build_app`` in every worker."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask

from ..policy.loader import PolicyError
from . import lastgood
from .app import NamespaceLabels, create_app
from .policies import PolicyStore
from .status import Status

log = logging.getLogger("gpugate")

# Each worker re-reads its policy store and namespace cache this often even without traffic, so that its
# gauges (aggregated over workers by prometheus_client's multiprocess mode) are current in every scrape.
REFRESH_INTERVAL = 1.0
#: Seconds an edit of the policy files must have rested before a worker reads it (webhook/serve/policies.py).
POLICY_SETTLE = 0.5


def build_app(
    policies_dir: str, *, kubeconfig: str | None = None, tls_ready: Callable[[], bool] | None = None
) -> Flask:
    """The production app: policies hot-reloaded from ``policies_dir``, namespace labels from the cluster."""
    from ..kube import namespaces as kube

    copy = run_directory()
    store = _policy_store(policies_dir, last_good=copy)
    cache = kube.namespace_cache(kubeconfig)
    labels_of: NamespaceLabels | None = None
    if cache is not None:
        cache.start()
        labels_of = cache.labels
    else:
        log.warning(
            "no cluster configuration (no --kubeconfig, not in a pod): namespace labels are treated as "
            "empty, so namespaceSelector policies do not match and attribution uses defaults"
        )
    fleet = _fleet_watcher(kubeconfig)
    native = _native_sync(kubeconfig, store, fleet)
    status = Status(
        store,
        namespace_cache=cache,
        fleet=fleet,
        tls_ready=tls_ready,
        claims=_allocations(fleet) if fleet is not None else None,
        native=native,
    )
    app = create_app(policies=store, namespace_labels=labels_of, tls_ready=tls_ready, fleet=fleet, status=status)
    saved = [""]

    def refresh_and_keep_a_copy() -> None:
        if tls_ready is not None:
            # Follow the certificate files in every worker, not only in those taking handshakes: a worker
            # that sat out a rotation would otherwise still hold the old certificate when a broken edit
            # follows, and serve it while its neighbours serve the rotated one.
            tls_ready()
        current = status.refresh()
        if (
            copy is not None
            and store.last_error is None
            and current.digest != saved[0]
            and lastgood.save(policies_dir, current, into=copy)
        ):
            saved[0] = current.digest

    refresh_and_keep_a_copy()
    _every(REFRESH_INTERVAL, refresh_and_keep_a_copy, name="gpugate-refresh")
    return app


def _fleet_watcher(kubeconfig: str | None) -> Any:
    """The live GPU inventory, on whenever gpugate has cluster access (``--kubeconfig``, or in a pod); None
    offline. A worker's threads share it; no feasibility verdict until it has synced."""
    from ..kube import cluster
    from ..kube.inventory import FleetWatcher

    if not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    try:
        watcher = FleetWatcher(cluster.api_client(kubeconfig))
    except cluster.ClusterError as err:
        log.warning("GPU inventory off: %s", err)
        return None
    watcher.start()
    return watcher


def _native_sync(kubeconfig: str | None, store: PolicyStore, fleet: Any) -> Any:
    """The native sync of ``gpugate serve --native-sync`` (webhook/serve/native.py), stepping in a thread of
    this worker; None when the option is off or there is no cluster to write to."""
    from .command import NATIVE_SYNC_VARIABLE

    configuration = os.environ.get(NATIVE_SYNC_VARIABLE)
    if not configuration:
        return None
    from ..kube import cluster
    from . import native

    try:
        client = cluster.api_client(kubeconfig)
    except cluster.ClusterError as err:
        log.error("native sync off: %s", err)
        return None
    sync = native.NativeSync(
        client,
        store.current,
        namespace=native.in_cluster_namespace(),
        webhook_configuration=configuration,
        inventory=fleet.inventory if fleet is not None else None,
    )
    threading.Thread(target=sync.step, name="gpugate-native-sync-first", daemon=True).start()
    _every(native.INTERVAL, sync.step, name="gpugate-native-sync")
    return sync


def _allocations(fleet: Any) -> Callable[[], Any]:
    """The devices allocated to ResourceClaims now, from the fleet watcher's claims cache (``webhook.kube.claims``
    ``allocations``), for /metrics' DRA series; None until the cache has listed, so that a scrape never shows a
    partial picture as every claim there is. A cache forbidden to list (RBAC) counts as listed and empty."""
    from ..kube.claims import allocations

    def current() -> Any:
        if "resourceclaims" in fleet.claims.unread():
            return None  # not listable: what is allocated is unknown, not nothing
        return list(allocations(fleet.claims)) if fleet.claims.synced() else None

    return current


def run_directory() -> Path | None:
    """The directory of this server run, which `gpugate serve` creates before forking and hands its workers in
    the variable prometheus_client reads: the metrics files and the last good policy copy live there."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(directory) if directory else None


def _policy_store(policies_dir: str, *, last_good: Path | None) -> PolicyStore:
    """The store over ``policies_dir``; while its files are broken, one that starts from the last good copy
    kept in ``last_good`` (None: no copy is kept)."""
    try:
        # A reload never holds up a request, and waits for an edit to settle (a file caught between its
        # truncation and its new content would read as no policies).
        return PolicyStore(policies_dir, background=True, settle=POLICY_SETTLE)
    except PolicyError:
        if last_good is None:
            raise
        fallback = lastgood.load(from_=last_good)  # PolicyError/OSError: no good copy either, the worker stops
        log.error(
            "the policies in %s are invalid; this worker starts with the last good copy (%s)",
            policies_dir,
            fallback.digest,
        )
        return PolicyStore(policies_dir, background=True, fallback=fallback, settle=POLICY_SETTLE)


def _every(interval: float, action: Callable[[], object], *, name: str) -> threading.Thread:
    """Run ``action`` every ``interval`` seconds in a daemon thread of this worker, for its whole life."""

    def loop() -> None:
        while True:
            time.sleep(interval)
            try:
                action()
            except Exception:  # keep refreshing; a failure here must not silence the metrics for good
                log.exception("%s failed", name)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
