"""One way to reach the Kubernetes API: a client configuration (kubeconfig, in-cluster, one attempt per
request), raw GETs and their JSON bodies, and paging through a list with ``limit``/``continue``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3


def configuration(kubeconfig: str | None, *, context: str | None = None, default_kubeconfig: bool = True) -> Any | None:
    """The client configuration for ``kubeconfig``; without one (and without ``context``) the in-cluster
    service account when running in a pod; else $KUBECONFIG or ~/.kube/config, as kubectl, when
    ``default_kubeconfig``, or None. Raises what the kubernetes client's loaders raise."""
    config: Any = kubernetes.config  # its loaders carry no type hints
    configured = kubernetes.client.Configuration()
    if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configured)
    elif kubeconfig or context or default_kubeconfig:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configured, persist_config=False
        )
    else:
        return None
    # One attempt per request: urllib3 retries 3 times by default, which would multiply every timeout; an
    # unreachable cluster should say so in seconds, and the namespace watch does its own retrying.
    configured.retries = urllib3.Retry(total=0, redirect=0, raise_on_redirect=True)
    return configured


def pages(fetch: Callable[[dict[str, Any]], Mapping[str, Any] | None], *, limit: int) -> Iterator[Mapping[str, Any]]:
    """Each page of a list: ``fetch`` gets the paging arguments (``limit``, ``_continue``) and returns the
    page's JSON body, or None (nothing to list: stop). Only one page is in memory at a time."""
    token: str | None = None
    while True:
        body = fetch({"limit": limit, **({"_continue": token} if token else {})})
        if body is None:
            return
        yield body
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def get(api_client: Any, path: str, query: Mapping[str, Any], *, timeout: Any) -> Any:
    """A raw GET of ``path`` (the urllib3 response, body unread): objects are read from plain JSON, never decoded
    into the client's models. An ApiException for an HTTP error, as the generated API calls raise."""
    method, url, headers, _, _ = api_client.param_serialize(
        "GET",
        path,
        query_params=list(query.items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, header_params=headers, _request_timeout=timeout)
    raw = getattr(response, "response", response)
    if response.status >= 400:
        try:
            body = raw.data
        finally:
            raw.release_conn()
        raise kubernetes.client.ApiException(status=response.status, reason=response.reason, body=body)
    return raw


def labels_of(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return str(metadata.get("name", "")), MappingProxyType({str(k): str(v) for k, v in labels.items()})


def close(response: Any) -> None:
    """Drop a (watch) response and its connection; safe to call from another thread mid-read."""
    # shutdown() (urllib3 >= 2.3) unblocks a read in progress in another thread; close() then closes the
    # socket itself. Never release_conn() here: that would hand a half-read stream back to the pool.
    for method in ("shutdown", "close"):
        with contextlib.suppress(Exception):  # already closed or half-closed: nothing left to release
            getattr(response, method, lambda: None)()


def read_json(response: Any) -> Any:
    """The whole body of a plain (non-watch) response as JSON; the connection goes back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()
