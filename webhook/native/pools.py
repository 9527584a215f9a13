"""The pool digest: what the live inventory offers, written into one ValidatingAdmissionPolicy as literals, so
that a pod the narrowed webhooks skip (``gpugate-always``'s ``claimsFormed``) still meets feasibility. No I/O.

The digest is small and changes only when the pools do: per GPU resource a plain pod can be formed for, the
largest amount one node (or a pool that scales up) offers, and the RuntimeClasses and DeviceClasses present.
It judges only what the webhook's feasibility rule (``webhook.rules.feasibility``) would refuse in every
reading of the fleet, and never more: it ignores selectors and taints (any node counts), a resource no node
of its vendor offers gets no verdict (a fleet scaling from zero), and a pool whose GPUs are unknown (or
unreadable NodePools) lifts the bound. Only policies in enforce mode refuse here; warn and audit stay warnings
the webhook writes for the pods it sees.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..inventory.model import Inventory, ScalablePool, declared_pool
from ..policy.model import PolicySet
from .cel import literal
from .compiler import API_VERSION, MANAGED, PREFIX, Compiled, _plain_tables

NAME = f"{PREFIX}-pools"
DIGEST_ANNOTATION = "gpugate.io/pool-digest"


def _declared(policies: PolicySet) -> list[ScalablePool]:
    return [
        declared_pool(p.name, labels=p.labels, taints=p.taints, allocatable=p.allocatable, max_nodes=p.max_nodes)
        for p in policies.pools
    ]


def _whole(value: str) -> int:
    try:
        return max(0, int(str(value).strip()))
    except ValueError:
        return 0


def digest_of(inventory: Inventory, policies: PolicySet) -> dict[str, Any]:
    """The digest: ``largest`` (resource -> the most one node or pool offers; only resources with a verdict),
    ``runtimeClasses`` and ``deviceClasses`` (sorted names)."""
    pools = [*inventory.pools, *_declared(policies)]
    unknown = "nodepools" in inventory.unread or any(p.gpus_unknown for p in pools)
    resources = sorted({r for profile in _plain_tables(policies.policies)["candidates"].values() for r in profile})
    largest: dict[str, int] = {}
    for resource in resources:
        device = next((p.device_of(resource) for p in policies.policies if p.device_of(resource)), None)
        if device is None:
            continue
        offered = [_whole(n.allocatable.get(resource, "0")) for n in inventory.nodes]
        vendor = any(any(device.counts(r) and _whole(a) > 0 for r, a in n.allocatable.items()) for n in inventory.nodes)
        if not vendor:
            continue  # no GPU of this vendor anywhere: perhaps scaling from zero, no verdict
        scaled = [p.gpus[resource] for p in pools if resource in p.gpus]
        if unknown or any(v is None for v in scaled):
            continue
        largest[resource] = max([*offered, *(v for v in scaled if v is not None)], default=0)
    return {
        "largest": largest,
        "runtimeClasses": sorted(inventory.runtime_classes),
        "deviceClasses": sorted(inventory.device_classes),
    }


def fingerprint(digest: dict[str, Any]) -> str:
    return hashlib.sha256(literal(digest).encode()).hexdigest()[:16]


def compile_pools(compiled: Compiled, policies: PolicySet, digest: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """``gpugate-pools`` and its binding (Deny) for ``digest``, reading the variables of ``compiled``'s
    ``gpugate-always`` it needs (the claim and the pod's one GPU resource)."""
    always = next(
        o for o in compiled.objects if o["metadata"]["name"] == f"{PREFIX}-always" and "validations" in o["spec"]
    )
    variables = {v["name"]: v for v in always["spec"]["variables"]}
    enforce = sorted(p.name for p in policies.policies if p.mode == "enforce")
    amount = (
        "quantity(string(has(c.resources.limits) && variables.resource in c.resources.limits ? "
        "c.resources.limits[variables.resource] : c.resources.requests[variables.resource]))"
    )
    has = "has(c.resources) && ((has(c.resources.limits) && variables.resource in c.resources.limits) || "
    has += "(has(c.resources.requests) && variables.resource in c.resources.requests))"
    each = f"({has} ? ({amount}.isInteger() ? {amount}.asInteger() : 0) : 0)"
    # At least what one node must hold (the app containers together, or one init container): never more than
    # the KEP-753 total the webhook counts, so this refuses nothing the webhook admits.
    total = f"([object.spec.containers.map(c, {each}).sum()] + variables.init.map(c, {each})).max()"
    own = [
        {"name": "largest", "expression": f"{literal(digest['largest'])}[?variables.resource].orValue(-1)"},
        {"name": "gpus", "expression": total},
    ]
    validations = [
        {
            "expression": "!variables.claimsFormed || variables.largest < 0 || variables.gpus <= variables.largest",
            "messageExpression": "'pod: requests ' + string(variables.gpus) + ' × ' + variables.resource + "
            "(variables.largest == 0 ? ', which no node of the cluster offers and no pool adds' : ', more than "
            "the ' + string(variables.largest) + ' one node of the cluster (or a pool that scales up) offers') + "
            "'; request at most what a node has, or add such nodes (policy \"' + variables.policy + "
            "'\", gpugate pool digest)'",
            "message": "gpugate: no node of the cluster could host the pod's GPUs",
            "reason": "Forbidden",
        },
        {
            "expression": "!variables.claimsFormed || !has(object.spec.runtimeClassName) || "
            f"object.spec.runtimeClassName in {literal(digest['runtimeClasses'])}",
            "messageExpression": "'pod: RuntimeClass \"' + object.spec.runtimeClassName + '\" does not exist in the "
            f"cluster (there are: {', '.join(digest['runtimeClasses']) or 'none'}); remove runtimeClassName or "
            "create the RuntimeClass (gpugate pool digest)'",
            "message": "gpugate: the pod's RuntimeClass does not exist",
            "reason": "Forbidden",
        },
    ]
    needed = _closure(["claimsFormed", "resource", "policy", "init"], variables)
    spec = {
        **{k: v for k, v in always["spec"].items() if k not in ("variables", "validations")},
        "variables": [variables[n] for n in variables if n in needed] + own,
        "validations": [{**v, "expression": f"!({_in(enforce)}) || {v['expression']}"} for v in validations],
    }
    meta = {
        "name": NAME,
        "labels": dict(MANAGED),
        "annotations": {
            "gpugate.io/policy-digest": always["metadata"]["annotations"]["gpugate.io/policy-digest"],
            DIGEST_ANNOTATION: fingerprint(digest),
        },
    }
    return (
        {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": meta, "spec": spec},
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": meta,
            "spec": {"policyName": NAME, "validationActions": ["Deny"]},
        },
    )


def _in(names: list[str]) -> str:
    return f"variables.policy in {literal(names)}" if names else "false"


def _closure(roots: list[str], variables: dict[str, dict[str, str]]) -> set[str]:
    """The variables ``roots`` read, and what those read, by name."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in variables:
            continue
        seen.add(name)
        todo += re.findall(r"variables\.(\w+)", variables[name]["expression"])
    return seen
