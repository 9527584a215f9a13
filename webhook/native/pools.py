"""The pool digest: what the live inventory offers, written as literals into ``gpugate-always`` (:func:`with_pools`),
so that a pod the narrowed webhooks skip (its ``claimsFormed``) still meets feasibility. No I/O.

The digest is small and changes only when the pools do: per GPU resource a plain pod can be formed for, the
largest amount one node (or a pool that scales up) offers, the RuntimeClasses and DeviceClasses present, and the
GPU runtime classes only the inventory knows: RuntimeClasses whose handler is a GPU runtime's under a name the
static lists do not hold (an alias ``my-gpu`` with ``handler: nvidia``, ``webhook.pods.runtime_classes``). A pod
without GPUs under one of those is refused here in every mode, as the webhook's rule refuses it (a security rule),
where the policy governing it denies GPU runtime classes to pods without GPUs: the webhooks' ``involves-gpus``
and the backstop name classes by their names only, so such a pod never reaches the webhook.
It judges only what the webhook's feasibility rule (``webhook.rules.feasibility``) would refuse in every
reading of the fleet, and never more: it ignores selectors and taints (any node counts), a resource no node
of its vendor offers gets no verdict (a fleet scaling from zero), and a pool whose GPUs are unknown (or
unreadable NodePools) lifts the bound. Only policies in enforce mode refuse here; warn and audit stay warnings
the webhook writes for the pods it sees.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

from ..inventory.model import Inventory, ScalablePool, declared_pool
from ..pods.fit import class_bound
from ..pods.runtime_classes import by_handler
from ..policy.classes import ModelClass
from ..policy.model import Device, PolicySet
from ..policy.vendors import DEFAULT_GPU_RUNTIME_CLASSES
from .cel import literal
from .compiler import POOLS_READ, PREFIX, Compiled, _counted, _entries, _named_entries, _plain_tables

LEGACY_NAME = f"{PREFIX}-pools"  # where the digest was written before it joined gpugate-always
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
    ``runtimeClasses`` and ``deviceClasses`` (sorted names), and ``gpuRuntimeClasses``: the RuntimeClasses found
    to be GPU ones by their handler, beside the names the static lists (webhooks, backstop) already hold, each with
    its handler."""
    pools = [*inventory.pools, *_declared(policies)]
    unknown = "nodepools" in inventory.unread or any(p.gpus_unknown for p in pools)
    resources = sorted({r for profile in _plain_tables(policies.policies)["candidates"].values() for r in profile})
    largest: dict[str, int] = {}
    for resource in resources:
        device = next((p.device_of(resource) for p in policies.policies if p.device_of(resource)), None)
        if device is None:
            continue
        offered = [_whole(n.allocatable.get(resource, "0")) for n in inventory.nodes]
        if not _vendor_present(inventory, device):
            continue  # no GPU of this vendor anywhere: perhaps scaling from zero, no verdict
        scaled = [p.gpus[resource] for p in pools if resource in p.gpus]
        if unknown or any(v is None for v in scaled):
            continue
        largest[resource] = max([*offered, *(v for v in scaled if v is not None)], default=0)
    return {
        "largest": largest,
        "classLargest": {} if unknown else _class_largest(inventory, policies, pools),
        "runtimeClasses": sorted(inventory.runtime_classes),
        "deviceClasses": sorted(inventory.device_classes),
        "gpuRuntimeClasses": {
            n: inventory.runtime_handlers[n] for n in by_handler(inventory) if n not in DEFAULT_GPU_RUNTIME_CLASSES
        },
    }


def _class_largest(inventory: Inventory, policies: PolicySet, pools: list[ScalablePool]) -> dict[str, list[Any]]:
    """Per key of ``gpugate-mutate``'s tables (profile, the class a pod names, the resource): the most one node of
    the class the pod is formed for can hold, now or once a pool scales up (``pods.fit.class_bound``), and that
    class's name, for the
    classes a pod names and for a pod that names none. Only where the webhook's feasibility rule refuses in every
    reading: no entry for a vendor without a GPU anywhere (scaling from zero) or a class gpugate cannot size. For a
    pod that names no class, the bound is that of the class the native tier forms it for, the first default; the
    webhook would try the next default that holds a larger pod (``rules.choice``), so such a pod is refused here,
    told to name a class, rather than formed for nodes that can never hold it."""
    rows = _plain_tables(policies.policies)["profiles"]
    out: dict[str, list[Any]] = {}
    done: set[str] = set()
    for policy in policies.policies:
        profile = rows.get(policy.name)
        if profile is None or profile in done or policy.models is None:
            continue
        done.add(profile)
        models = policy.models
        keys: list[tuple[str, str, ModelClass | None]] = [
            (c, r, models.classes.get(c)) for c, r in _named_entries(policy)
        ]
        for resource in _entries(policy)[0]:
            device = policy.device_of(resource)
            keys.append(("", resource, models.default_for(device.name, [resource]) if device is not None else None))
        for model, resource, cls in keys:
            device = policy.device_of(resource)
            if device is None or cls is None or not _vendor_present(inventory, device):
                continue
            bound = class_bound(inventory, cls, device, resource, pools)
            if bound is not None:
                out[f"{profile}|{model}|{resource}"] = [int(bound), cls.name]
    return out


def _vendor_present(inventory: Inventory, device: Device) -> bool:
    return any(any(device.counts(r) and _whole(a) > 0 for r, a in n.allocatable.items()) for n in inventory.nodes)


def fingerprint(digest: dict[str, Any]) -> str:
    return hashlib.sha256(literal(digest).encode()).hexdigest()[:16]


def with_pools(compiled: Compiled, policies: PolicySet, digest: dict[str, Any]) -> Compiled:
    """``compiled`` with the checks of ``digest`` in its ``gpugate-always`` (Deny, every mode), which keeps the
    variables they read (compiler.POOLS_READ: the claim and the pod's one GPU resource) and computes them once.

    Not a ValidatingAdmissionPolicy of its own: the apiserver converts the pod for each policy it evaluates (four
    times per policy: its matchConditions, validations, messageExpressions and auditAnnotations each build an
    activation, k8s.io/apiserver pkg/admission/plugin/policy/validating/validator.go), and a second policy
    would evaluate ``claimsFormed`` and the resource again. ``gpugate-always`` carries the digest's fingerprint in
    ``DIGEST_ANNOTATION``; a pool change re-applies it."""
    name = f"{PREFIX}-always"
    always = next(o for o in compiled.objects if o["metadata"]["name"] == name and "validations" in o["spec"])
    enforce = sorted(p.name for p in policies.policies if p.mode == "enforce")
    amount = (
        "quantity(string(has(c.resources.limits) && variables.resource in c.resources.limits ? "
        "c.resources.limits[variables.resource] : c.resources.requests[variables.resource]))"
    )
    has = "has(c.resources) && ((has(c.resources.limits) && variables.resource in c.resources.limits) || "
    has += "(has(c.resources.requests) && variables.resource in c.resources.requests))"
    # The quantity parsed once (a one-element list binds it): each parse allocates, and this runs for every pod.
    each = f"({has} ? [{amount}].map(q, q.isInteger() ? q.asInteger() : 0)[0] : 0)"
    # At least what one node must hold (the app containers together, or one init container): never more than
    # the KEP-753 total the webhook counts, so this refuses nothing the webhook admits.
    total = f"([object.spec.containers.map(c, {each}).sum()] + variables.init.map(c, {each})).max()"
    bounds: dict[str, list[Any]] = digest.get("classLargest") or {}
    own = [
        {"name": "largest", "expression": f"{literal(digest['largest'])}[?variables.resource].orValue(-1)"},
        {"name": "gpus", "expression": total},
        # The most one node of the class the pod is formed for holds (-1: no verdict), and that class (CEL lists
        # and maps hold one type: two tables).
        {
            "name": "classLargest",
            "expression": f"{literal({k: v[0] for k, v in bounds.items()})}[?variables.key].orValue(-1)",
        },
        {
            "name": "className",
            "expression": f"{literal({k: v[1] for k, v in bounds.items()})}[?variables.key].orValue('')",
        },
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
            # The class's own nodes, once the fleet-wide bound above holds (one message per pod).
            "expression": "!variables.claimsFormed || (variables.largest >= 0 && variables.gpus > variables.largest) "
            "|| variables.classLargest < 0 || variables.gpus <= variables.classLargest",
            "messageExpression": "'pod: requests ' + string(variables.gpus) + ' × ' + variables.resource + "
            "(variables.classLargest == 0 ? ', which no node of GPU model class \"' + variables.className "
            "+ '\" offers and no pool adds for it' : ', more than the ' + string(variables.classLargest) + "
            "' one node of GPU model class \"' + variables.className + '\" (or a pool that scales up for it) "
            "offers') + (variables.model == '' ? '; label the pod gpugate.io/model with a class whose nodes hold it' "
            ": '; request at most what its nodes have, or name a class whose nodes hold it in gpugate.io/model') + "
            "' (policy \"' + variables.policy + '\", gpugate pool digest)'",
            "message": "gpugate: no node of the pod's GPU model class could host its GPUs",
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
    # The two bounds' messages say nothing for a pod within them: the apiserver evaluates every messageExpression
    # of a policy for every request, in a context of its own (its variables computed again), and building these two
    # strings costs a pod more than testing the bound (111 allocations per GPU pod, bench/native_cost.py --pools).
    # The test is the validation's without claimsFormed (which only a failing pod's message would pay for): it
    # implies the validation holds, so a pod it refuses still gets its message.
    # Before that test, a cheaper one where it is sound (_least_bound): the pod's GPUs as the scheduler counts them
    # (podGPUs, which the limits' messages read in the same context) within the least bound of the digest. The
    # test only spares building a message, never decides: the validation is what refuses.
    least = _least_bound(digest, policies) if "podGPUs" in {v["name"] for v in always["spec"]["variables"]} else None
    for v in validations[:2]:
        within = v["expression"].removeprefix("!variables.claimsFormed || ")
        if least is not None:
            within = f"variables.podGPUs <= {least} || {within}"
        v["messageExpression"] = f"({within}) ? '' : ({v['messageExpression']})"
    guarded = [{**v, "expression": f"!({_in(enforce)}) || {v['expression']}"} for v in validations]
    conditions = always["spec"]["matchConditions"]
    aliases: dict[str, str] = dict(digest.get("gpuRuntimeClasses") or {})
    if aliases:
        guarded.append(_alias_validation(aliases, policies))
        under = f"has(object.spec.runtimeClassName) && object.spec.runtimeClassName in {literal(sorted(aliases))}"
        # Also the pods without GPUs under an alias: the webhooks' condition (and gpugate-always's own) never sees
        # one. gpugate-always's other checks pass a pod that involves no GPU: each is guarded by what makes a pod
        # a GPU one (holdsGPU, a GPU resource, the claim), which its matchCondition only spares evaluating.
        conditions = [{**c, "expression": f"({c['expression']}) || ({under})"} for c in conditions]
    known = {v["name"] for v in always["spec"]["variables"]}
    missing = [n for n in POOLS_READ if n not in known]
    if missing:  # compiler.POOLS_READ keeps them; a compiler that dropped one is a bug, not a pod to admit
        raise ValueError(f"gpugate-always lacks the variables the pool digest reads: {', '.join(missing)}")
    merged = {
        **always,
        "metadata": {
            **always["metadata"],
            "annotations": {**always["metadata"]["annotations"], DIGEST_ANNOTATION: fingerprint(digest)},
        },
        "spec": {
            **always["spec"],
            "matchConditions": conditions,
            "variables": [*always["spec"]["variables"], *own],
            "validations": [*always["spec"]["validations"], *guarded],
        },
    }
    return replace(compiled, objects=tuple(merged if o is always else o for o in compiled.objects))


def _least_bound(digest: dict[str, Any], policies: PolicySet) -> int | None:
    """The least of the digest's bounds (``largest`` and ``classLargest``), where a pod within it is within every
    bound: ``gpus`` (the amount of the pod's one GPU resource one node must hold: the app containers' sum, or one
    init container's) is never more than ``podGPUs`` (compiler._mode_validations: every GPU count of the pod's
    policy, app containers and sidecars together, or an init container with the sidecars before it) when every
    resource a policy can form a pod for is one of that policy's GPU counts. None where one is not, or where the
    digest has no bound."""
    tables = _plain_tables(policies.policies)
    for p in policies.policies:
        profile = tables["profiles"].get(p.name)
        counted = re.compile(_counted(p))
        for key, resources in tables["candidates"].items():
            if key.split("|", 1)[0] == profile and not all(counted.fullmatch(r) for r in resources):
                return None
    bounds = [*digest.get("largest", {}).values(), *(v[0] for v in (digest.get("classLargest") or {}).values())]
    return min(bounds) if bounds else None


def _alias_validation(aliases: dict[str, str], policies: PolicySet) -> dict[str, Any]:
    """A pod without GPUs (no GPU or auxiliary resource, no fraction annotation its scheduler honours, no DRA
    claim: the webhook judges those) under an alias, refused in every mode where its governing policy says
    ``nonGPUPods.gpuRuntimeClass: deny``; CREATE only, as the backstop (runtimeClassName is immutable)."""
    deny = sorted(p.name for p in policies.policies if p.non_gpu_runtime_class == "deny")
    rc = "object.spec.runtimeClassName"
    return {
        "expression": f"request.operation != 'CREATE' || !has({rc}) || !({rc} in {literal(sorted(aliases))}) || "
        f"!({_in(deny)}) || variables.holdsGPU || "
        "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
        "messageExpression": f"'pod: requests no GPU but runs under the GPU runtime class \"' + {rc} + '\" "
        f"(RuntimeClass \"' + {rc} + '\" has handler \"' + {literal(aliases)}[{rc}] + '\", a GPU runtime\\'s), "
        "which can expose the node\\'s GPUs to it; remove runtimeClassName, or request a GPU in resources.limits "
        "(policy \"' + variables.policy + '\", gpugate pool digest)'",
        "message": "gpugate: a pod without GPUs runs under a GPU runtime class",
        "reason": "Forbidden",
    }


def _in(names: list[str]) -> str:
    return f"variables.policy in {literal(names)}" if names else "false"
