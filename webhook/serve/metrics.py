"""Prometheus metrics for gpugate, correct across gunicorn worker processes (multiprocess mode)."""

from __future__ import annotations

import os
import platform
import threading

from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.registry import Collector

from ..version import gpugate_version

REQUESTS = Counter(
    "gpugate_admission_requests_total",
    "Admission reviews answered, by endpoint, operation, object kind and decision.",
    ["endpoint", "operation", "kind", "decision"],
)
LATENCY = Histogram(
    "gpugate_admission_duration_seconds",
    "Time to answer one admission review, body parsing to response encoding.",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
VIOLATIONS = Counter(
    "gpugate_violations_total",
    "Policy violations found, by rule, policy and what the mode did with them.",
    ["rule", "policy", "action"],
)
POLICY_GENERATION = Gauge(
    "gpugate_policy_generation",
    "Generation of the policy set in force (1 at start, +1 per successful reload that changed it).",
    multiprocess_mode="livemax",
)
POLICY_RELOAD_ERRORS = Counter(
    "gpugate_policy_reload_errors_total",
    "Broken policy edits refused (the last good set stays in force): one per edit, whichever worker saw it.",
)
POLICY_VALID = Gauge(
    "gpugate_policy_last_reload_ok",
    "1 when the policy files on disk are the ones in force, 0 while an invalid edit is being ignored.",
    multiprocess_mode="livemin",
)

# Every worker keeps its own namespace cache and refreshes these once a second (webhook.serve.status), so a
# scrape shows all workers whichever of them answers it.
NAMESPACE_CACHE_SYNCED = Gauge(
    "gpugate_namespace_cache_synced",
    "1 when every worker's namespace-label cache has listed all namespaces (0 before; absent offline).",
    multiprocess_mode="livemin",
)
NAMESPACE_CACHE_SIZE = Gauge(
    "gpugate_namespace_cache_namespaces",
    "Namespaces in the namespace-label cache of the worker that knows the fewest.",
    multiprocess_mode="livemin",
)
NAMESPACE_CACHE = Gauge(
    "gpugate_namespace_cache_events",
    "Namespace cache activity of the live workers, summed, by kind: relists, watches, watch_errors, "
    "live_lookups, lookup_failures, lookups_not_found.",
    ["event"],
    multiprocess_mode="livesum",
)

# The live GPU inventory (webhook.kube.inventory), per worker, refreshed with the gauges above.
INVENTORY_SYNCED = Gauge(
    "gpugate_inventory_synced",
    "1 when every worker's GPU inventory has listed Nodes, RuntimeClasses, DeviceClasses and ResourceSlices "
    "(0 before: no feasibility verdicts; absent offline).",
    multiprocess_mode="livemin",
)
INVENTORY_OBJECTS = Gauge(
    "gpugate_inventory_objects",
    "Objects in the GPU inventory of the worker that knows the fewest, by kind.",
    ["kind"],
    multiprocess_mode="livemin",
)
INVENTORY_DRIFT = Gauge(
    "gpugate_inventory_drift",
    "Disagreements between the policies and the fleet (classes no node carries, GPU nodes no class covers); "
    "`gpugate fleet --policies` lists them.",
    multiprocess_mode="livemax",
)

PARKED_DROPPED = Counter(
    "gpugate_parked_connections_dropped_total",
    "Connections closed because more than --max-parked-connections waited without a request in a worker "
    "(the oldest first); anything but 0 means clients other than the apiserver reach the port, or the bound "
    "is below the apiservers' idle pools.",
)

_claimed: set[str] = set()
_claim_lock = threading.Lock()


def claim(key: str) -> bool:
    """True for exactly one caller per ``key`` among all worker processes (and this process's threads).

    What every worker observes on its own (a broken policy edit) is counted by the one that claims it
    first: an O_EXCL file in the metrics directory, which `gpugate serve` empties at start.
    """
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        with _claim_lock:
            if key in _claimed:
                return False
            _claimed.add(key)
            return True
    try:
        os.close(os.open(os.path.join(directory, f"claim-{key}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


# The usual *_build_info pattern (a constant 1 whose labels carry the version), so a dashboard can
# tell which release answers; every worker sets the same value.
BUILD_INFO = Gauge(
    "gpugate_build_info",
    "Always 1; the version label is the running gpugate release, python the interpreter's version.",
    ["version", "python"],
    multiprocess_mode="livemax",
)
BUILD_INFO.labels(version=gpugate_version(), python=platform.python_version()).set(1)


def render(*state: Collector) -> tuple[bytes, str]:
    """The exposition text; aggregated over all workers when PROMETHEUS_MULTIPROC_DIR is set. ``state``: collectors
    of the cluster's state as the answering worker's watches hold it (webhook.serve.dra), rendered after, as they
    are: every worker watches the same objects, so they are not summed over workers."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(DEFAULT_REGISTRY)
    if state:
        own = CollectorRegistry(auto_describe=False)
        for collector in state:
            own.register(collector)
        body += generate_latest(own)
    return body, "text/plain; version=0.0.4; charset=utf-8"
