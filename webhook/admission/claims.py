"""ResourceClaims and ResourceClaimTemplates judged on their own, when they are created (and updated), so that a
claim created after the pod that names it is judged too: the order of creation no longer matters.

A claim is used by pods gpugate has not seen (or has seen before the claim existed), so it is judged against
every policy that could govern a pod of its namespace (``PolicySet.possible``) and refused only when it would be
over the limits of each: the most permissive one decides, in its own mode. What is over a limit for a claim
alone: its GPU requests together taking more devices than ``maxPerPod`` (every pod naming it holds them all),
one GPU request taking more than ``maxPerContainer`` (every container naming the request gets all of its
devices), and a GPU request whose worst case cannot be known (``allocationMode: All`` of a class no node
publishes yet) where a limit applies. Devices are counted as for a pod (``webhook.pods.claims``): only GPU
DeviceClasses, never admin-access requests, ``firstAvailable`` at its worst alternative.

On UPDATE only what the update made worse counts (a claim's spec is immutable, so in practice nothing does: a
label edit of a claim made before gpugate judged claims is not refused).

And a ResourceClaim is added to the pods that name it and were admitted before it existed, so that several
claims each within the limits cannot add up unseen: ``/mutate`` labels a pod naming a ResourceClaim it cannot read
``gpugate.io/claims-pending`` (``rules.attribution``), and at the claim's CREATE one label-selected list of the
namespace's pods (:func:`claim_pods`, at most ``PENDING_LIMIT``, under the request's lookup budget) finds them; a
claim kube-controller-manager makes from a template for one pod (annotation ``resource.kubernetes.io/pod-claim-name``
naming the pod's entry, a controller ownerReference to the pod: kubernetes/kubernetes
pkg/controller/resourceclaim/controller.go ``handleClaim``, ``podResourceClaimAnnotation``) is added to that pod,
read by name. Each pod is judged by its own policy's limits (``gpu-limits``), with this claim known and the other
claims it names as they are now; only what this claim makes over the limits counts, in that policy's mode
(``engine``). Pods that cannot be listed or read are not judged (gpugate never refuses on missing data).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..inventory.model import Inventory, claim_of
from ..pods.claims import gpu_requests, request_devices
from ..policy.keys import CLAIMS_PENDING_LABEL
from ..policy.model import NamespaceLabelsUnavailable, Policy
from ..rules.base import Violation
from .decision import Decision, Environment, allowed, denied, fit, labels_unavailable

#: The kinds judged here (group resource.k8s.io, any version the apiserver converts to).
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
GROUP = "resource.k8s.io"
RULE = "gpu-limits"
#: Set by kube-controller-manager on a claim it makes from a template: the pod's ``spec.resourceClaims`` entry
#: (kubernetes/kubernetes pkg/controller/resourceclaim/controller.go, ``podResourceClaimAnnotation``).
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: Pods one claim's CREATE lists (``limit`` of the one list): a claim is shared by a handful of pods at most.
PENDING_LIMIT = 32


def is_claim(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return isinstance(kind, Mapping) and kind.get("group") == GROUP and kind.get("kind") in CLAIM_KINDS


def _requests_path(kind: str) -> str:
    return "spec.spec.devices.requests" if kind == "ResourceClaimTemplate" else "spec.devices.requests"


def _indexes(obj: Mapping[str, Any], kind: str) -> dict[str, int]:
    """Request name -> its index in the object, for the field a message names."""
    node: Any = obj
    for key in _requests_path(kind).split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    found: dict[str, int] = {}
    for index, raw in enumerate(node if isinstance(node, list) else []):
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            found.setdefault(raw["name"], index)
    return found


def claim_violations(obj: Mapping[str, Any], kind: str, policy: Policy, inventory: Inventory | None) -> list[Violation]:
    """What is over ``policy``'s limits in this claim or claim template alone."""
    limits = policy.limits
    if limits.max_per_pod is None and limits.max_per_container is None:
        return []
    claim = gpu_requests(claim_of({**obj, "kind": kind}), policy, inventory)
    where = _indexes(obj, kind)
    base = _requests_path(kind)
    out: list[Violation] = []
    total = 0
    parts = []
    for request in claim.requests:
        counted = request_devices(request, inventory, policy)
        path = f"{base}[{where[request.request]}]" if request.request in where else base
        named = f'request "{request.request}"'
        bounds = [(limits.max_per_pod, "pod"), (limits.max_per_container, "container")]
        if counted.devices is None:
            limit, scope = min(((n, s) for n, s in bounds if n is not None), key=lambda bound: bound[0])
            out.append(
                Violation(
                    RULE,
                    path,
                    named,
                    f"takes {counted.how}, so the GPUs it takes cannot be counted against the {limit} per {scope} "
                    f'that policy "{policy.name}" allows',
                    f"claim a number of devices: exactly.count (allocationMode ExactCount) of at most {limit}",
                )
            )
            continue
        total += counted.devices
        parts.append(f"{named}: {counted.how}")
        most = limits.max_per_container
        if most is not None and counted.devices > most:
            out.append(
                Violation(
                    RULE,
                    path,
                    named,
                    f"takes {counted.devices} GPUs ({counted.how}), more than the {most} per container that policy "
                    f'"{policy.name}" allows: every container naming it would be over the limit',
                    f"request at most {most} devices, or split them over several requests",
                )
            )
    most = limits.max_per_pod
    if most is not None and total > most:
        out.append(
            Violation(
                RULE,
                base,
                "claim",
                f"takes {total} GPUs in all ({'; '.join(parts)}), more than the {most} per pod that policy "
                f'"{policy.name}" allows: every pod naming it would be over the limit',
                f"claim at most {most} GPU devices, or split the work across pods",
            )
        )
    return out


def validate_claim(request: Mapping[str, Any], env: Environment, inventory: Inventory | None) -> Decision:
    """``/validate`` for a ResourceClaim or ResourceClaimTemplate; ``inventory``: the fleet as the engine sees it
    (pools that scale included), None while unknown."""
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return allowed()
    kind = str((request.get("kind") or {}).get("kind"))
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or request.get("name") or "")
    try:
        candidates = env.policies.possible(
            namespace=namespace, namespace_labels=lambda: env.namespace_labels(namespace)
        )
    except NamespaceLabelsUnavailable as err:
        return labels_unavailable(err)
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    judged: list[tuple[Policy, list[Violation]]] = []
    for policy in candidates:
        found = claim_violations(obj, kind, policy, inventory)
        if isinstance(old, Mapping):
            before = {(v.path, v.text) for v in claim_violations(old, kind, policy, inventory)}
            found = [v for v in found if (v.path, v.text) not in before]
        if not found:
            return allowed(policy=policy.name, mode=policy.mode)
        judged.append((policy, found))
    if not judged:
        return allowed()
    # Over every possible policy's limits: the most permissive decides (one that would only warn or record).
    policy, found = next(((p, v) for p, v in judged if p.mode != "enforce"), judged[0])
    common: dict[str, Any] = {"violations": found, "policy": policy.name, "mode": policy.mode}
    where = f' in namespace "{namespace}"' if namespace else ""
    if policy.mode == "enforce":
        origin = f" ({policy.source})" if policy.source not in ("built-in", "<inline>") else ""
        others = [p.name for p, _ in judged if p is not policy]
        also = f" (and every other policy a pod of this namespace may have: {', '.join(others)})" if others else ""
        lines = [f'{kind} "{name}"{where} violates GPU policy "{policy.name}"{origin}{also}:']
        lines += [f"- {v.message()}" for v in found]
        return denied("\n".join(lines), **common)
    if policy.mode == "audit":
        return allowed(
            audit_annotations={"policy": policy.name, "violations": json.dumps([v.message() for v in found])},
            **common,
        )
    return allowed(warnings=[w for v in found for w in fit(f"gpugate: {kind} {name}: {v.short()}")], **common)


def template_owner(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(pod name, pod uid, entry name) of a claim kube-controller-manager made from a template for one pod: the
    ``resource.kubernetes.io/pod-claim-name`` annotation and a controller ownerReference to a v1 Pod."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    annotations = meta.get("annotations")
    entry = annotations.get(POD_CLAIM_ANNOTATION) if isinstance(annotations, Mapping) else None
    refs = meta.get("ownerReferences")
    if not isinstance(entry, str) or not entry or not isinstance(refs, list):
        return None
    for ref in refs:
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == "Pod"
            and ref.get("apiVersion") == "v1"
            and ref.get("controller") is True
            and isinstance(ref.get("name"), str)
            and ref["name"]
        ):
            return ref["name"], str(ref.get("uid") or ""), entry
    return None


def _finished(pod: Mapping[str, Any]) -> bool:
    """A pod that will never run again: being deleted, or Succeeded or Failed."""
    meta, status = pod.get("metadata"), pod.get("status")
    deleting = isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))
    return deleting or (isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"))


def _entries(pod: Mapping[str, Any]) -> list[Any]:
    spec = pod.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    return entries if isinstance(entries, list) else []


def _names(pod: Mapping[str, Any], claim: str) -> bool:
    return any(isinstance(e, Mapping) and e.get("resourceClaimName") == claim for e in _entries(pod))


def _with_entry(pod: Mapping[str, Any], entry: str, claim: str) -> tuple[Mapping[str, Any], str] | None:
    """The pod with its entry ``entry`` naming ResourceClaim ``claim`` (as the controller resolves it), and the
    template that entry names; None when the pod has no such entry."""
    entries = _entries(pod)
    for index, e in enumerate(entries):
        if isinstance(e, Mapping) and e.get("name") == entry:
            made = [*entries[:index], {"name": entry, "resourceClaimName": claim}, *entries[index + 1 :]]
            spec = pod.get("spec")
            return {**pod, "spec": {**(spec if isinstance(spec, Mapping) else {}), "resourceClaims": made}}, str(
                e.get("resourceClaimTemplateName") or ""
            )
    return None


def claim_pods(
    obj: Mapping[str, Any], namespace: str, name: str, env: Environment
) -> list[tuple[Mapping[str, Any], str]]:
    """The pods a ResourceClaim being created is added to, each with its ``spec.resourceClaims`` naming the claim,
    and the template the claim was made from ("" when none): its owner pod for a claim made from a template
    (read by name), else the pods labelled ``gpugate.io/claims-pending`` with its name or ``Several`` that name it
    (one list). Pods being deleted or finished are left out."""
    owner = template_owner(obj)
    if owner is not None:
        pod_name, uid, entry = owner
        pod = env.pod(namespace, pod_name) if env.pod is not None else None
        if not isinstance(pod, Mapping) or _finished(pod):
            return []
        meta = pod.get("metadata")
        if uid and isinstance(meta, Mapping) and meta.get("uid") not in (None, uid):
            return []  # another pod of the same name: the claim's owner is gone
        made = _with_entry(pod, entry, name)
        return [made] if made is not None else []
    listed = env.pending_pods(namespace, name) if env.pending_pods is not None else None
    return [
        (pod, "")
        for pod in (listed or [])[:PENDING_LIMIT]
        if isinstance(pod, Mapping) and not _finished(pod) and _names(pod, name)
    ]


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def over_with_pods(
    alone: Decision,
    name: str,
    namespace: str,
    found: list[tuple[Mapping[str, Any], str, Policy, list[Violation]]],
) -> Decision:
    """``alone`` (the claim judged on its own, allowed), with what the claim makes over the limits of each pod
    that names it (pod, the template it was made from, the pod's policy, the new violations), in each pod's mode."""
    found = [f for f in found if f[3]]
    if not found:
        return alone
    where = f' in namespace "{namespace}"' if namespace else ""
    enforced = [f for f in found if f[2].mode == "enforce"]
    if enforced:
        lines = []
        for pod, made_from, policy, violations in enforced:
            origin = f" ({policy.source})" if policy.source not in ("built-in", "<inline>") else ""
            named = pod_name(pod)
            how = (
                f'made from ResourceClaimTemplate "{made_from}" for pod "{named}", which owns it'
                if made_from
                else f'named by pod "{named}", which was admitted before the claim existed (label '
                f"{CLAIMS_PENDING_LABEL})"
            )
            lines.append(
                f'ResourceClaim "{name}"{where}, {how}, would put the pod over GPU policy "{policy.name}"{origin}:'
            )
            lines += [f"- {v.message()}" for v in violations]
            fix = (
                f'give ResourceClaimTemplate "{made_from}" fewer GPU devices, or delete pod "{named}" and create it '
                "again with fewer GPUs in all"
                if made_from
                else f'create ResourceClaim "{name}" with fewer GPU devices, or delete pod "{named}" and create it '
                "again naming fewer GPUs in all (a pod's claims cannot change)"
            )
            lines.append(f"To fix: {fix}.")
        _, _, policy, _ = enforced[0]
        return denied(
            "\n".join(lines),
            violations=[v for f in enforced for v in f[3]],
            policy=policy.name,
            mode=policy.mode,
            warnings=alone.warnings,
        )
    warnings = list(alone.warnings)
    audit = dict(alone.audit_annotations)
    for pod, _, policy, violations in found:
        if policy.mode == "audit":
            audit = {"policy": policy.name, "violations": json.dumps([v.message() for v in violations])}
        else:
            warnings += [
                w for v in violations for w in fit(f"gpugate: ResourceClaim {name}: pod {pod_name(pod)}: {v.short()}")
            ]
    _, _, policy, _ = found[0]
    return allowed(
        warnings=warnings,
        audit_annotations=audit,
        violations=[*alone.violations, *(v for f in found for v in f[3])],
        policy=alone.policy or policy.name,
        mode=alone.mode or policy.mode,
    )
