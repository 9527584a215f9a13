"""Cluster reads for `gpugate audit` (discovery, paged lists, the installed policies) and its optional
PolicyReport writes. Raw JSON through the generated clients with _preload_content=False, as in ``namespaces``:
plain dicts, never client models."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3

from .client import configuration, labels_of, pages, read_json

log = logging.getLogger(__name__)


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
    config: Any = kubernetes.config
    try:
        configured = configuration(kubeconfig, context=context)
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ClusterError(f"cannot load a kubeconfig from {where}: {exc}") from exc
    return kubernetes.client.ApiClient(configured)


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
    return read_json(response)


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
    what = f"list {path}"

    def fetch(paging: dict[str, Any]) -> Any:
        while True:
            try:
                return _page(
                    what, core, custom, group=group, version=version, plural=plural, namespace=namespace, **paging
                )
            except _ContinueExpired as expired:
                if not expired.token:
                    raise
                # The apiserver hands out a token that continues from the next key in its current state: the
                # rest of the list is then from a newer snapshot (KEP-365; the `continue` field's API doc).
                log.warning("%s: continue token expired; the rest of the list is from a newer snapshot", what)
                paging = {**paging, "_continue": expired.token}

    for body in pages(fetch, limit=page_size):
        for item in body.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            (item.get("metadata") or {}).pop("managedFields", None)  # large, and never read
            yield item


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
    for body in pages(lambda paging: _call("list namespaces", core.list_namespace, **paging) or {}, limit=500):
        for item in body.get("items") or []:
            name, labels = labels_of(item)
            out[name] = dict(labels)
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
