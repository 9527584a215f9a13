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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..inventory.model import Inventory, claim_of
from ..pods.claims import gpu_requests, request_devices
from ..policy.model import NamespaceLabelsUnavailable, Policy
from ..rules.base import Violation
from .decision import Decision, Environment, allowed, denied, fit, labels_unavailable

#: The kinds judged here (group resource.k8s.io, any version the apiserver converts to).
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
GROUP = "resource.k8s.io"
RULE = "gpu-limits"


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
