"""Everything that talks to the Kubernetes API: the namespace-label cache admission reads (list+watch), and the
paged reads (and PolicyReport writes) of `gpugate audit`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3

log = logging.getLogger(__name__)


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


def _labels_of(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return str(metadata.get("name", "")), MappingProxyType({str(k): str(v) for k, v in labels.items()})


def _close(response: Any) -> None:
    """Drop a (watch) response and its connection; safe to call from another thread mid-read."""
    # shutdown() (urllib3 >= 2.3) unblocks a read in progress in another thread; close() then closes the
    # socket itself. Never release_conn() here: that would hand a half-read stream back to the pool.
    for method in ("shutdown", "close"):
        with contextlib.suppress(Exception):  # already closed or half-closed: nothing left to release
            getattr(response, method, lambda: None)()


def _read_json(response: Any) -> Any:
    """The whole body of a plain (non-watch) response as JSON; the connection goes back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


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
            _, result = _labels_of(_read_json(response))
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
            _close(response)
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
        entries: dict[str, _Entry] = {}
        token: str | None = None
        restarted = False
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            try:
                response = self._api.list_namespace(
                    _preload_content=False,
                    _request_timeout=(self._lookup_timeout, self._list_timeout),
                    **kwargs,
                )
            except kubernetes.client.ApiException as exc:
                if exc.status == 410 and token and not restarted:
                    # The continue token outlived etcd's compaction window: start the list again (once;
                    # after that the run loop's backoff applies).
                    entries, token, restarted = {}, None, True
                    continue
                raise
            body = _read_json(response)
            for item in body.get("items") or []:
                name, labels = _labels_of(item)
                entries[name] = _Entry(labels)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                with self._lock:
                    self._entries = entries
                    self._failed_until.clear()
                    self._synced = True
                    self._counts["relists"] += 1
                return str(metadata.get("resourceVersion", ""))

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
            _close(response)
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
            _close(response)
        return resource_version, saw_events

    def _apply(self, event: Mapping[str, Any], resource_version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            raise RuntimeError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        name, labels = _labels_of(obj)
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
    configuration = kubernetes.client.Configuration()
    config: Any = kubernetes.config  # its loaders carry no type hints
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        return None
    # urllib3 retries a failed request 3 times by default, which would multiply the lookup bound;
    # the watch loop does its own retrying with backoff.
    configuration.retries = urllib3.Retry(total=0, redirect=0, raise_on_redirect=True)
    return NamespaceLabelCache(kubernetes.client.ApiClient(configuration), **options)


# ------------------------------------------------------------------------------------------------
# Cluster reads for `gpugate audit` (and its optional PolicyReport writes). Raw JSON through the
# generated clients with _preload_content=False, as above: plain dicts, never client models.


class ClusterError(Exception):
    """The cluster cannot be reached or refused a request; the message says which request and why."""


class _ContinueExpired(ClusterError):
    """HTTP 410 on a `continue` token: the snapshot the list started from has been compacted away."""

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


_TIMEOUT = (5.0, 120.0)  # (connect, read) seconds for one request; a page of 500 pods is a few MB


def api_client(kubeconfig: str | None, *, context: str | None = None) -> Any:
    """An ApiClient for `kubeconfig` (else $KUBECONFIG or ~/.kube/config, as kubectl), or the in-cluster
    service account when running in a pod and no kubeconfig is given."""
    configuration = kubernetes.client.Configuration()
    config: Any = kubernetes.config
    try:
        if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
            )
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ClusterError(f"cannot load a kubeconfig from {where}: {exc}") from exc
    # One attempt per request: an unreachable cluster should say so in seconds, not after urllib3's retries.
    configuration.retries = urllib3.Retry(total=0, redirect=0, raise_on_redirect=True)
    return kubernetes.client.ApiClient(configuration)


def _call(what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One API call returning its JSON body, or ClusterError saying what failed (None for a 404)."""
    try:
        response = method(*args, _preload_content=False, _request_timeout=_TIMEOUT, **kwargs)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        detail = exc.reason
        with contextlib.suppress(Exception):  # a Status body says more than the reason phrase
            detail = json.loads(exc.body or "{}").get("message") or detail
        hint = " (grant the gpugate-auditor roles in deploy/audit; see docs/audit.md)" if exc.status == 403 else ""
        if exc.status == 410 and "_continue" in kwargs:
            token = ""
            with contextlib.suppress(Exception):
                token = str((json.loads(exc.body or "{}").get("metadata") or {}).get("continue") or "")
            raise _ContinueExpired(f"{what}: HTTP 410: {detail}", token) from exc
        raise ClusterError(f"{what}: HTTP {exc.status}: {detail}{hint}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ClusterError(f"{what}: cannot reach the cluster: {reason}") from exc
    return _read_json(response)


def served_kinds(
    client: Any, *, wanted: Iterable[tuple[str, str, str, Sequence[str]]]
) -> dict[tuple[str, str], tuple[str, str]]:
    """(group, kind) -> (version, plural) for each wanted (group, kind, plural, versions) the cluster serves,
    through discovery: the first of `versions` the group serves, else its preferred version. Kinds it does not
    serve (a CRD that is not installed) are left out."""
    wanted = list(wanted)
    core: Any = kubernetes.client.CoreV1Api(client)
    custom: Any = kubernetes.client.CustomObjectsApi(client)
    served: dict[str, tuple[list[str], str]] = {"": (["v1"], "v1")}  # group -> (versions, preferred)
    if any(group for group, *_ in wanted):
        apis = _call("discovery GET /apis", kubernetes.client.ApisApi(client).get_api_versions) or {}
        for group in apis.get("groups") or []:
            listed = [str(v.get("version")) for v in group.get("versions") or []]
            served[str(group.get("name"))] = (listed, str((group.get("preferredVersion") or {}).get("version", "")))
    resources: dict[tuple[str, str], dict[str, str]] = {}  # (group, version) -> kind -> plural

    def kinds_in(group: str, version: str) -> dict[str, str]:
        if (group, version) not in resources:
            if group == "":
                body = _call("discovery GET /api/v1", core.get_api_resources)
            else:
                body = _call(f"discovery GET /apis/{group}/{version}", custom.get_api_resources, group, version)
            resources[(group, version)] = {
                str(r.get("kind")): str(r.get("name"))
                for r in (body or {}).get("resources") or []
                if "/" not in str(r.get("name", "")) and "list" in (r.get("verbs") or [])
            }
        return resources[(group, version)]

    out: dict[tuple[str, str], tuple[str, str]] = {}
    for group, kind, plural, versions in wanted:
        if group not in served:
            continue
        available, preferred = served[group]
        for version in [v for v in versions if v in available] + [preferred]:
            found = kinds_in(group, version).get(kind)
            if found and (not plural or found == plural):
                out[(group, kind)] = (version, found)
                break
    return out


def list_objects(
    client: Any, *, group: str, version: str, plural: str, kind: str, namespace: str | None = None, page_size: int = 500
) -> Iterator[dict[str, Any]]:
    """Every object of one resource, a page (`limit`/`continue`) at a time: only one page is in memory.
    Items get their apiVersion and kind back (a list response leaves them out of each item)."""
    api_version = f"{group}/{version}" if group else version
    path = f"/api{'s/' + group if group else ''}/{version}{f'/namespaces/{namespace}' if namespace else ''}/{plural}"
    custom: Any = kubernetes.client.CustomObjectsApi(client)
    core: Any = kubernetes.client.CoreV1Api(client)
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        what = f"list {path}"
        try:
            body = _page(what, core, custom, group=group, version=version, plural=plural, namespace=namespace, **kwargs)
        except _ContinueExpired as expired:
            if not expired.token:
                raise
            # The apiserver hands out a token that continues from the next key in its current state: the
            # rest of the list is then from a newer snapshot (KEP-365; the `continue` field's API doc).
            log.warning("%s: continue token expired; the rest of the list is from a newer snapshot", what)
            token = expired.token
            continue
        if body is None:
            return
        for item in body.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            (item.get("metadata") or {}).pop("managedFields", None)  # large, and never read
            yield item
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def _page(
    what: str, core: Any, custom: Any, *, group: str, version: str, plural: str, namespace: str | None, **kwargs: Any
) -> Any:
    """One page of a list, through the generated client method for the resource."""
    if group:
        if namespace:
            return _call(what, custom.list_namespaced_custom_object, group, version, namespace, plural, **kwargs)
        return _call(what, custom.list_cluster_custom_object, group, version, plural, **kwargs)
    method = {
        ("pods", True): core.list_namespaced_pod,
        ("pods", False): core.list_pod_for_all_namespaces,
        ("podtemplates", True): core.list_namespaced_pod_template,
        ("podtemplates", False): core.list_pod_template_for_all_namespaces,
    }[(plural, bool(namespace))]
    return _call(what, method, *([namespace] if namespace else []), **kwargs)


def namespace_labels(client: Any) -> dict[str, dict[str, str]]:
    """Every namespace's labels, from one paged list."""
    core: Any = kubernetes.client.CoreV1Api(client)
    out: dict[str, dict[str, str]] = {}
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": 500, **({"_continue": token} if token else {})}
        body = _call("list namespaces", core.list_namespace, **kwargs) or {}
        for item in body.get("items") or []:
            name, labels = _labels_of(item)
            out[name] = dict(labels)
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return out


def installed_policies(
    client: Any, *, namespace: str, deployment: str, configmap: str | None, policies_path: str = ""
) -> tuple[str, dict[str, str]]:
    """(where they came from, file name -> text) of the policies the installed gpugate serves: the ConfigMap
    mounted at its --policies directory (kustomize gives the ConfigMap a content-hash suffix, so the
    Deployment is the only reliable pointer), or the ConfigMap named by `configmap`."""
    if not configmap:
        apps: Any = kubernetes.client.AppsV1Api(client)
        body = _call(f"get deployment {namespace}/{deployment}", apps.read_namespaced_deployment, deployment, namespace)
        if body is None:
            raise ClusterError(
                f"no gpugate Deployment {namespace}/{deployment}: is gpugate installed? "
                "Name it with --gpugate-namespace/--gpugate-deployment, or pass --policies DIR"
            )
        configmap = _policies_configmap(body, policies_path)
        if configmap is None:
            raise ClusterError(
                f"deployment {namespace}/{deployment} mounts no policy ConfigMap; "
                "name it with --policies-configmap, or pass --policies DIR"
            )
    core: Any = kubernetes.client.CoreV1Api(client)
    found = _call(f"get configmap {namespace}/{configmap}", core.read_namespaced_config_map, configmap, namespace)
    if found is None:
        raise ClusterError(f"no ConfigMap {namespace}/{configmap}")
    data = {str(k): str(v) for k, v in (found.get("data") or {}).items()}
    return f"configmap {namespace}/{configmap}", data


def _policies_configmap(deployment: Mapping[str, Any], policies_path: str) -> str | None:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if v.get("configMap")}
    for container in spec.get("containers") or []:
        args = [str(a) for a in container.get("args") or []]
        path = policies_path
        if not path and "--policies" in args[:-1]:
            path = args[args.index("--policies") + 1]
        for mount in container.get("volumeMounts") or []:
            if mount.get("mountPath", "").rstrip("/") == path.rstrip("/") and mount.get("name") in volumes:
                return str(volumes[mount["name"]]["configMap"]["name"])
    if "policies" in volumes:
        return str(volumes["policies"]["configMap"]["name"])
    return None


REPORT_GROUP, REPORT_VERSION, REPORT_PLURAL = "wgpolicyk8s.io", "v1alpha2", "policyreports"


def replace_policy_reports(
    client: Any, reports: Iterable[Mapping[str, Any]], *, label_selector: str, namespace: str | None = None
) -> tuple[int, int]:
    """Create or replace each report, then delete our reports (by `label_selector`) in namespaces this run
    did not report on (within `namespace` when given). Returns (written, deleted)."""
    if not served_kinds(client, wanted=[(REPORT_GROUP, "PolicyReport", REPORT_PLURAL, [REPORT_VERSION])]).get(
        (REPORT_GROUP, "PolicyReport")
    ) == (REPORT_VERSION, REPORT_PLURAL):
        raise ClusterError(
            "the cluster serves no wgpolicyk8s.io PolicyReport: install its CRD "
            "(Kyverno and Policy Reporter ship it; see docs/audit.md)"
        )
    custom: Any = kubernetes.client.CustomObjectsApi(client)
    args = (REPORT_GROUP, REPORT_VERSION)
    written: set[tuple[str, str]] = set()
    for report in reports:
        meta = report["metadata"]
        ns, name = meta["namespace"], meta["name"]
        what = f"policyreport {ns}/{name}"
        current = _call(f"get {what}", custom.get_namespaced_custom_object, *args, ns, REPORT_PLURAL, name)
        if current is None:
            _call(f"create {what}", custom.create_namespaced_custom_object, *args, ns, REPORT_PLURAL, dict(report))
        else:
            body = {**report, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
            _call(f"replace {what}", custom.replace_namespaced_custom_object, *args, ns, REPORT_PLURAL, name, body)
        written.add((ns, name))
    deleted = 0
    stale = list_objects(
        client,
        group=REPORT_GROUP,
        version=REPORT_VERSION,
        plural=REPORT_PLURAL,
        kind="PolicyReport",
        namespace=namespace,
    )
    for item in list(stale):
        meta = item.get("metadata") or {}
        if not _matches(meta.get("labels") or {}, label_selector):
            continue
        if (meta.get("namespace"), meta.get("name")) not in written:
            _call(
                f"delete policyreport {meta.get('namespace')}/{meta.get('name')}",
                custom.delete_namespaced_custom_object,
                *args,
                meta["namespace"],
                REPORT_PLURAL,
                meta["name"],
            )
            deleted += 1
    return len(written), deleted


def _matches(labels: Mapping[str, str], selector: str) -> bool:
    pairs = (item.partition("=") for item in selector.split(",") if item)
    return all(labels.get(k) == v for k, _, v in pairs)
