"""Feasibility: a GPU pod that no node of the cluster could ever host is refused at apply time, not left Pending.

Guards what the final pod asks the scheduler for: its GPU resources and their amounts, ``spec.nodeSelector``,
required node affinity, ``spec.tolerations`` against node taints, ``spec.runtimeClassName`` and the
DeviceClasses of its claims and DRA-backed extended resources. Judged against the inventory (``ctx.fleet``)
only once it has synced; with no inventory there is no verdict, so gpugate never refuses on missing data.
"Could ever host" ignores what is in use: a node offers what its allocatable (device plugin) or its
ResourceSlices (DRA) say, so a pod refused here would stay Pending on an empty cluster too. And it counts what
the cluster *can have*: a pod no node hosts now but a pool that scales up could (a Karpenter NodePool read
live, a ``GPUNodePool`` the policy directory declares) is admitted with a warning and waits for the
autoscaler; where gpugate cannot tell what a pool's nodes hold, it warns and never refuses. The message
names what exists: the nodes that offer the resource, the largest amount one node has, the values nodes
carry, the RuntimeClasses and DeviceClasses there are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from ..inventory.model import Inventory, Node, ScalablePool
from ..pods.affinity import required_terms
from ..pods.fields import NODE_SELECTOR_TERM, RESOURCES, STRINGS, TOLERATION
from ..pods.fit import _amount, capacity, class_largest, per_node_amounts
from ..pods.objects import containers
from ..policy.keys import MODEL_LABEL
from ..policy.vendors import IMPLICIT_DRA_PREFIX
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "feasibility"
record = rule(
    RULE,
    order=100,
    reads={
        "container.resources": RESOURCES,
        "container.restartPolicy": str,
        "spec.nodeName": str,
        "spec.nodeSelector": STRINGS,
        "spec.affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_SELECTOR_TERM]}
            }
        },
        "spec.tolerations": [TOLERATION],
        "spec.runtimeClassName": str,
    },
    module=__name__,
)
_SHOWN = 6  # pools named in a message before "and N more"


def _amounts(spec: Mapping[str, Any], ctx: PodContext) -> dict[str, Fraction]:
    return per_node_amounts(spec, ctx.counts_as_gpu)


def _matches(expr: Mapping[str, Any], labels: Mapping[str, str], node: Node) -> bool | None:
    """One NodeSelectorRequirement on a node; None when the node's labels were truncated and lack the key."""
    key = str(expr.get("key") or "")
    operator = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if key not in labels and node.truncated:
        return None
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term_matches(term: Mapping[str, Any], node: Node) -> bool:
    for expr in term.get("matchExpressions") or []:
        if isinstance(expr, Mapping) and _matches(expr, node.labels, node) is False:
            return False
    for expr in term.get("matchFields") or []:
        field_ok = _matches({**expr, "key": "name"}, {"name": node.name}, node) if isinstance(expr, Mapping) else True
        if isinstance(expr, Mapping) and expr.get("key") == "metadata.name" and field_ok is False:
            return False
    return True


def selects(spec: Mapping[str, Any], node: Node) -> bool:
    """The pod's nodeName, nodeSelector and required node affinity admit the node."""
    if spec.get("nodeName") and spec["nodeName"] != node.name:
        return False
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value and not (node.truncated and key not in node.labels):
            return False
    terms = required_terms(spec)
    return not terms or any(_term_matches(t, node) for t in terms)


def tolerates(spec: Mapping[str, Any], node: Node) -> bool:
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    return all(t.tolerated_by(tolerations) for t in node.taints if t.effect in ("NoSchedule", "NoExecute"))


def pool_of(node: Node, fleet: Inventory, model_label: str | None) -> str:
    """How a message names a node's pool: its model label value, its DRA product, its instance type."""
    if model_label and node.labels.get(model_label):
        return node.labels[model_label]
    products = [p for s in fleet.slices_on(node.name) for p in s.products]
    if products:
        return products[0]
    return node.labels.get("node.kubernetes.io/instance-type") or node.name


def _pools(nodes: Iterable[Node], fleet: Inventory, model_label: str | None) -> str:
    counts: dict[str, int] = {}
    for node in nodes:
        name = pool_of(node, fleet, model_label)
        counts[name] = counts.get(name, 0) + 1
    shown = [f"{name} ({n} node{'s' if n != 1 else ''})" for name, n in list(counts.items())[:_SHOWN]]
    more = len(counts) - _SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _offered(fleet: Inventory, prefix: str) -> list[str]:
    """The resources of a vendor's domain some node offers (to say what exists instead of a MIG profile)."""
    found = {r for n in fleet.nodes for r, a in n.allocatable.items() if r.startswith(prefix) and _amount(a) > 0}
    return sorted(found)


def _fmt(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else str(float(amount))


def _as_admitted(pod: PodView, ctx: PodContext) -> Mapping[str, Any]:
    """The pod spec the scheduler will see. A pod is judged after gpugate's mutation; a workload template
    gpugate only checks is judged as its pods will be: with the vendor's tolerations and the selector of
    the class they land in (what the warnings say they "will get")."""
    if ctx.mutable or ctx.gpu.device is None:
        return pod.spec
    spec = dict(pod.spec)
    spec["tolerations"] = [*(spec.get("tolerations") or []), *ctx.gpu.device.tolerations]
    choice = ctx.model  # the class the template's pods land in (rules.choice)
    chosen, label = choice.model_class, ctx.gpu.device.model_label
    if chosen is not None and (not choice.own or choice.constrain) and not choice.violations:
        selector = {**chosen.node_selector, **(spec.get("nodeSelector") or {})}
        if label and len(chosen.values) == 1:
            selector.setdefault(label, chosen.values[0])
        spec["nodeSelector"] = selector
    return spec


def _resource_violations(pod: PodView, ctx: PodContext, fleet: Inventory) -> list[Violation]:
    spec = _as_admitted(pod, ctx)
    if not _has_vendor_gpus(fleet, ctx):
        return []  # none of this vendor's GPU nodes exist yet: scale-from-zero autoscaling, or still provisioning
    reachable = [n for n in fleet.nodes if selects(spec, n) and tolerates(spec, n)]
    violations = []
    for resource, amount in sorted(_amounts(spec, ctx).items()):
        refusal = _on_nodes(spec, ctx, fleet, reachable, resource, amount, named=MODEL_LABEL in pod.labels)
        if refusal is not None:
            violations.append(_unless_a_pool_adds_one(refusal, spec, fleet, resource, amount))
    return violations


def _on_nodes(
    spec: Mapping[str, Any],
    ctx: PodContext,
    fleet: Inventory,
    reachable: list[Node],
    resource: str,
    amount: Fraction,
    *,
    named: bool,
) -> Violation | None:
    """Why no node the cluster has now can host the pod's ``amount`` of ``resource``, or None if one can."""
    label = ctx.gpu.device.model_label if ctx.gpu.device is not None else None
    where = _field_of(spec, ctx, resource)
    offering = [n for n in fleet.nodes if capacity(fleet, n, resource) > 0]
    if not offering:
        domain = resource.partition("/")[0] + "/"
        others = [r for r in _offered(fleet, domain) if r != resource]
        exists = f"nodes offer {', '.join(others)}" if others else f"no node offers any {domain} resource"
        if resource.startswith(IMPLICIT_DRA_PREFIX):
            exists = "no ResourceSlice publishes devices for its DeviceClass"
        return Violation(
            RULE,
            where,
            "pod",
            f"requests {resource}, which no node of the cluster offers ({exists})",
            "request a resource a node offers, or add nodes that offer it",
        )
    able = [n for n in offering if n in reachable]
    if not able:
        return Violation(
            RULE,
            where,
            "pod",
            f"requests {resource}, but no node its selector, affinity and tolerations admit offers it"
            f"{_selector_note(spec, fleet)}; nodes offering it: {_pools(offering, fleet, label)}",
            "choose a class whose nodes offer it (label gpugate.io/model) or drop the selector",
        )
    largest = max(able, key=lambda n: capacity(fleet, n, resource))
    most = capacity(fleet, largest, resource)
    if amount <= most:
        return None
    holders = [n for n in able if capacity(fleet, n, resource) == most]
    return Violation(
        RULE,
        where,
        "pod",
        f"requests {_fmt(amount)} × {resource} on one node, more than any node it can land on has "
        f"(largest: {_fmt(most)} × {resource} on {_pools(holders, fleet, label).split(' (')[0]} nodes)",
        f"request at most {_fmt(most)}{'' if named else _larger_classes(ctx, fleet, resource, amount)}, "
        "or split the work across pods",
    )


def _larger_classes(ctx: PodContext, fleet: Inventory, resource: str, amount: Fraction) -> str:
    """For a pod that names no class: the classes of its vendor whose nodes (or pools) hold ``amount``."""
    models, device = ctx.policy.models, ctx.gpu.device
    if models is None or device is None:
        return ""
    larger = [
        c.name
        for c in models.classes.values()
        if c.device == device.name
        and c.offers([resource])
        and (most := class_largest(fleet, c, device, resource)) is not None
        and most >= amount
    ]
    return (
        f", label the pod {MODEL_LABEL} with a class whose nodes hold {_fmt(amount)} ({', '.join(larger)})"
        if larger
        else ""
    )


def pool_admits(spec: Mapping[str, Any], pool: ScalablePool) -> bool:
    """A node the pool would add could be chosen by the pod: no ``nodeName``, its nodeSelector and one required
    node-affinity term satisfiable by the pool's labels and requirements, every NoSchedule/NoExecute taint of
    the pool tolerated (Karpenter's own test before it provisions for a pod)."""
    if spec.get("nodeName"):
        return False
    if not pool.admits_selector(spec.get("nodeSelector") or {}):
        return False
    terms = required_terms(spec)
    if terms and not any(pool.admits_term(t) for t in terms):
        return False
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    return all(t.tolerated_by(tolerations) for t in pool.taints if t.effect in ("NoSchedule", "NoExecute"))


def _unless_a_pool_adds_one(
    refusal: Violation, spec: Mapping[str, Any], fleet: Inventory, resource: str, amount: Fraction
) -> Violation:
    """The refusal, unless a pool that scales up could add a node for the pod: then a warning, and the pod waits
    Pending for the autoscaler (that pending pod is what makes it add the node). Where gpugate cannot tell
    what a pool's nodes hold, or may not read the pools, it warns too: it refuses only what no node, existing
    or provisionable, could ever host."""
    fits: list[ScalablePool] = []
    unknown: list[ScalablePool] = []
    short: list[tuple[ScalablePool, int]] = []
    for pool in fleet.pools:
        if not pool_admits(spec, pool):
            continue
        if pool.gpus_unknown:
            unknown.append(pool)
        elif resource in pool.gpus:
            most = pool.gpus[resource]
            if most is None:
                unknown.append(pool)
            elif amount <= most:
                fits.append(pool)
            else:
                short.append((pool, most))
    # Warnings stay short (kubectl shows 120 characters): the pool's name and what happens next.
    head = f"no node can host {_fmt(amount)} × {resource} now"
    if fits:
        text = f"{head}; {_names(fits)} can add one (Pending until then)"
        return Violation(RULE, refusal.path, "pod", text, advisory=True)
    if unknown or "nodepools" in fleet.unread:
        why = (
            f"{_names(unknown)} may add one (its GPUs are unknown)"
            if unknown
            else "Karpenter NodePools are unreadable (RBAC), one may add it"
        )
        return Violation(RULE, refusal.path, "pod", f"{head}; {why}", advisory=True)
    if not short:
        return refusal
    scaling = ", ".join(f"{p.describe()} (up to {n} × {resource} per node)" for p, n in short[:_SHOWN])
    return dataclasses.replace(refusal, text=f"{refusal.text}; pools that scale up cannot either: {scaling}")


def _names(pools: list[ScalablePool]) -> str:
    shown = " or ".join(p.describe() for p in pools[:_SHOWN])
    return shown + (f" and {len(pools) - _SHOWN} more" if len(pools) > _SHOWN else "")


def _has_vendor_gpus(fleet: Inventory, ctx: PodContext) -> bool:
    """Some node offers a GPU of the pod's vendor (device plugin or DRA). A cluster with none may be
    waiting for an autoscaler to create them from zero (Karpenter, cluster-autoscaler node groups at size
    0): no verdict then, never a refusal of every GPU pod."""
    device = ctx.gpu.device
    if device is None:
        return False
    return bool(
        fleet.memo(
            ("vendor-gpus", device.name),
            lambda: (
                any(any(device.counts(r) and _amount(a) > 0 for r, a in n.allocatable.items()) for n in fleet.nodes)
                or any(s.driver in device.dra_drivers and s.devices > 0 for s in fleet.slices)
            ),
        )
    )


def _field_of(spec: Mapping[str, Any], ctx: PodContext, resource: str) -> str:
    """The first container limit (or request) of the resource."""
    for fld, index, container in containers(spec):
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if resource in (resources.get(section) or {}):
                return ctx.spec_field(f"{fld}[{index}].resources.{section}[{resource}]")
    return ctx.spec_field("containers")


def _selector_note(spec: Mapping[str, Any], fleet: Inventory) -> str:
    """The selector entries, and the ``In`` values of a required node-affinity term the pod has only one of, that
    no node carries at all (a class value or a cloud's GPU name that matches nothing)."""

    def carried(key: str, values: list[str]) -> bool:
        return any(n.labels.get(key) in values or (n.truncated and key not in n.labels) for n in fleet.nodes)

    missing = [f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items() if not carried(str(k), [str(v)])]
    terms = required_terms(spec)
    if len(terms) == 1:  # with several terms (ORed), no single expression is required
        for e in _expressions(terms[0]):
            values = [str(v) for v in e.get("values") or []]
            if e.get("operator") == "In" and values and not carried(str(e.get("key")), values):
                missing.append(
                    f"{e.get('key')} in [{', '.join(values)}]" if len(values) > 1 else f"{e.get('key')}={values[0]}"
                )
    return f" (no node carries {', '.join(missing)})" if missing else ""


def _expressions(term: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping)]


@record.validator(pods="gpu")
def require_a_node_that_can_host(pod: PodView, ctx: PodContext) -> list[Violation]:
    fleet = ctx.fleet
    if fleet is None:
        return []  # not synced, no cluster access, no --fleet: no verdict
    violations = []
    runtime_class = pod.spec.get("runtimeClassName")
    if isinstance(runtime_class, str) and runtime_class and runtime_class not in fleet.runtime_classes:
        there = ", ".join(sorted(fleet.runtime_classes)) or "none"
        violations.append(
            Violation(
                RULE,
                ctx.spec_field("runtimeClassName"),
                "pod",
                f'RuntimeClass "{runtime_class}" does not exist in the cluster (there are: {there})',
                "remove runtimeClassName or create the RuntimeClass",
            )
        )
    for path, device_class in ctx.gpu.missing_classes:
        there = ", ".join(sorted(fleet.device_classes)) or "none"
        violations.append(
            Violation(
                RULE,
                ctx.spec_field(path.removeprefix("spec.")),
                "pod",
                f'claims devices of DeviceClass "{device_class}", which does not exist (there are: {there})',
                "name an existing DeviceClass in the claim",
            )
        )
    for resource in sorted(r for r in ctx.gpu.resources if r.startswith(IMPLICIT_DRA_PREFIX)):
        name = resource[len(IMPLICIT_DRA_PREFIX) :]
        if name not in fleet.device_classes:
            there = ", ".join(sorted(fleet.device_classes)) or "none"
            violations.append(
                Violation(
                    RULE,
                    _field_of(pod.spec, ctx, resource),
                    "pod",
                    f'requests {resource}, but DeviceClass "{name}" does not exist (there are: {there})',
                    "request an existing DeviceClass",
                )
            )
            return violations
    violations += _resource_violations(pod, ctx, fleet)
    violations += _claim_violations(pod, ctx, fleet)
    return violations


def _claim_violations(pod: PodView, ctx: PodContext, fleet: Inventory) -> list[Violation]:
    out = []
    spec = _as_admitted(pod, ctx)
    reachable = [n for n in fleet.nodes if selects(spec, n) and tolerates(spec, n)]
    for path, (device_class, count) in ctx.gpu.claim_wants.items():
        found = fleet.device_classes.get(device_class)
        if found is None or not found.drivers:
            continue
        everywhere = max((fleet.devices_on(n.name, found.drivers) for n in fleet.nodes), default=0)
        if everywhere == 0:
            continue  # no node publishes this driver's devices yet (scale from zero): no verdict
        most = max((fleet.devices_on(n.name, found.drivers) for n in reachable), default=0)
        if most == 0 or (count is not None and count > most):
            text = (
                f'claims {count if count is not None else "all"} device(s) of DeviceClass "{device_class}", '
                f"but no node the pod can land on publishes {'enough ' if most else ''}devices of driver "
                f"{', '.join(found.drivers)}"
                + (f" (largest: {most} on one node)" if most else "")
                + (f"; {everywhere} on the largest node of the cluster" if everywhere and not most else "")
            )
            out.append(Violation(RULE, ctx.spec_field(path.removeprefix("spec.")), "pod", text, "claim fewer devices"))
    return out
