"""The native tier's writes for ``gpugate serve --native-sync``: discovery of the MutatingAdmissionPolicy API,
server-side apply of gpugate's own admission objects under its own field manager, their removal by name, and
the Lease that lets one writer at a time do it.

Raw JSON through ``client.request``, as everything in this package: plain dicts, never client models. Every
call names the object it writes, so that RBAC can grant it by ``resourceNames`` (deploy/components/native-sync).
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Mapping
from typing import Any

import kubernetes.client
import urllib3

from .client import read_json

GROUP = "admissionregistration.k8s.io"
VERSION = "v1"
#: The field manager of every apply: ``kubectl get -o yaml --show-managed-fields`` names it beside the
#: install's (kubectl, helm, argocd), and its fields are the only ones it changes.
FIELD_MANAGER = "gpugate-serve"
_TIMEOUT = (5.0, 30.0)

PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


class NativeError(Exception):
    """A request of the native sync failed; the message names the request, the object and why."""


def request(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Mapping[str, Any] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> Any:
    """One request's JSON body; None for a 404. NativeError for anything else that is not 2xx."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    # A dict is serialized by the client for a JSON content type; the apply content type takes a string.
    payload = body
    try:
        method_, url, headers_, body_, _ = api_client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=payload,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(method_, url, header_params=headers_, body=body_, _request_timeout=_TIMEOUT)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise NativeError(f"{method} {path}: cannot reach the cluster: {getattr(exc, 'reason', None) or exc}") from exc
    raw = getattr(response, "response", response)
    if response.status == 404:
        try:
            _ = raw.data  # read, so that the connection goes back to the pool clean
        finally:
            raw.release_conn()
        return None
    if response.status >= 400:
        try:
            detail = raw.data.decode("utf-8", "replace")
        finally:
            raw.release_conn()
        with contextlib.suppress(Exception):  # a Status body says more than the reason phrase
            detail = json.loads(detail).get("message") or detail
        hint = " (grant gpugate the native-sync role: deploy/components/native-sync)" if response.status == 403 else ""
        raise NativeError(f"{method} {path}: HTTP {response.status}: {detail}{hint}")
    return read_json(raw)


def serves_mutating_policies(api_client: Any) -> bool:
    """Whether discovery lists MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 (GA and on by default
    in Kubernetes 1.36; v1beta1 and off by default in 1.34-1.35, which gpugate does not write)."""
    body = request(api_client, "GET", f"/apis/{GROUP}/{VERSION}")
    return any(r.get("kind") == "MutatingAdmissionPolicy" for r in (body or {}).get("resources") or [])


def path_of(obj: Mapping[str, Any]) -> str:
    kind = str(obj.get("kind"))
    if kind not in PLURALS:
        raise NativeError(f"{kind} is not one of gpugate's admission kinds")
    return f"/apis/{GROUP}/{VERSION}/{PLURALS[kind]}/{obj['metadata']['name']}"


def apply(api_client: Any, obj: Mapping[str, Any]) -> Any:
    """Server-side apply of ``obj`` with gpugate's field manager. Forced: the objects are gpugate's own, and a
    field another manager set (a hand edit) is taken back rather than left to disagree with the policies."""
    return request(
        api_client,
        "PATCH",
        path_of(obj),
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
        body=json.dumps(obj, sort_keys=True),  # JSON is YAML: the apply content type takes it as it is
        content_type="application/apply-patch+yaml",
    )


def get(api_client: Any, kind: str, name: str) -> Any:
    return request(api_client, "GET", path_of({"kind": kind, "metadata": {"name": name}}))


def delete(api_client: Any, kind: str, name: str) -> None:
    request(api_client, "DELETE", path_of({"kind": kind, "metadata": {"name": name}}))


# ------------------------------------------------------------------------------------------ the Lease


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> datetime.datetime | None:
    for layout in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        with contextlib.suppress(ValueError):
            return datetime.datetime.strptime(text, layout).replace(tzinfo=datetime.UTC)
    return None


def hold_lease(api_client: Any, *, namespace: str, name: str, identity: str, duration: int) -> bool:
    """Take or renew the coordination.k8s.io Lease ``namespace/name`` for ``identity``; False while another
    holder's is current. The update carries the resourceVersion read, so of two candidates racing for an
    expired Lease the apiserver lets one win (409 Conflict for the other, answered here as False)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    now = _now()
    lease = request(api_client, "GET", f"{path}/{name}")
    spec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "renewTime": _micro(now),
    }
    if lease is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "acquireTime": _micro(now)},
        }
        try:
            request(api_client, "POST", path, body=body)
        except NativeError as err:
            if "HTTP 409" in str(err):
                return False
            raise
        return True
    current = lease.get("spec") or {}
    holder = current.get("holderIdentity") or ""
    renewed = _parse(str(current.get("renewTime") or ""))
    lasting = int(current.get("leaseDurationSeconds") or duration)
    if holder and holder != identity and renewed is not None and (now - renewed).total_seconds() < lasting:
        return False
    acquired = current.get("acquireTime") if holder == identity else _micro(now)
    lease["spec"] = {**current, **spec, "acquireTime": acquired}
    try:
        request(api_client, "PUT", f"{path}/{name}", body=lease)
    except NativeError as err:
        if "HTTP 409" in str(err):
            return False
        raise
    return True


def api_client_for(configured: Any) -> Any:
    return kubernetes.client.ApiClient(configured)


def tier_in_force(api_client: Any) -> str:
    """Which admission tier the cluster has, as ``gpugate fleet`` reports it: the native objects' policy digest
    and who applied them (server-side apply's field manager), or why the webhook decides alone."""
    try:
        if not serves_mutating_policies(api_client):
            return "webhook only: the cluster does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"
        always = get(api_client, "ValidatingAdmissionPolicy", "gpugate-always")
        mutate = get(api_client, "MutatingAdmissionPolicy", "gpugate-mutate")
    except NativeError as err:
        return f"unknown: {err}"
    if always is None or mutate is None:
        return "webhook only: the native objects are not installed (deploy/components/native-tier or --native-sync)"
    metadata = always.get("metadata") or {}
    digest = (metadata.get("annotations") or {}).get("gpugate.io/policy-digest", "?")
    managers = sorted({str(m.get("manager")) for m in metadata.get("managedFields") or [] if m.get("manager")})
    by = f", applied by {', '.join(managers)}" if managers else ""
    return f"native + webhook: the native objects of policies {digest} are in force{by}"
