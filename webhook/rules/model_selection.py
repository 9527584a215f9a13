"""Model selection: a GPU pod lands on a GPU model class that offers what it requests, or on its own choice.

Guards ``metadata.labels[gpugate.io/model]``, ``spec.nodeSelector`` and
``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``. A class lists node label
values exactly as the nodes carry them, on its vendor's model label (NVIDIA GPU Feature Discovery:
``nvidia.com/gpu.product``), and the resources its nodes offer. GFD's product label depends on how a pool
shares its GPUs (NVIDIA/k8s-device-plugin internal/lm/resource.go, mig-strategy.go): time-slicing without
renaming keeps ``nvidia.com/gpu`` and appends ``-SHARED``; renaming to ``nvidia.com/gpu.shared`` keeps the
plain product; MIG mixed keeps the parent product and offers ``nvidia.com/mig-<profile>``; MIG single
offers ``nvidia.com/gpu`` on ``<parent>-MIG-<profile>``. So gpugate never rewrites values, and only ever
steers a pod to a class that offers every GPU resource it requests.

Which class: the pod's ``gpugate.io/model`` label; else the pod's own choice, a selector or required
affinity ``In`` on the model label or a known alias label (``cloud.google.com/gke-accelerator``), or a
scheduler's choice annotation (HAMi ``nvidia.com/use-gputype``), which wins: gpugate adds nothing, refuses
it only when it maps to a class that cannot serve the pod, and warns when it cannot map it; else the first
default class that offers the request, or the only class that does. One value becomes a nodeSelector entry;
several an ``In`` expression added to every required node-affinity term (terms are ORed, so each must
carry it; user terms are never replaced).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..pods.affinity import label_expressions, required_terms, requirement_text
from ..pods.fields import NODE_SELECTOR_TERM, STRINGS
from ..pods.fit import class_largest, per_node_amounts
from ..policy.classes import ModelClass, Models
from ..policy.keys import MODEL_LABEL
from ..policy.model import Device
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation, map_changes
from .registry import rule

RULE = "model-selection"
_AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _affinity_changes(before: Any, after: Any) -> list[PodChange]:
    if before == after:
        return []
    old = [r for term in required_terms({"affinity": before}) for r in term.get("matchExpressions") or []]
    new = [r for term in required_terms({"affinity": after}) for r in term.get("matchExpressions") or []]
    texts = sorted({requirement_text(r) for r in new if r not in old}) or ["changed"]
    return [PodChange("affinity", f"required node affinity {text}") for text in texts]


def _selector_changes(before: Any, after: Any) -> list[PodChange]:
    return map_changes("nodeSelector", "nodeSelector", before, after, previous=False)


NODE_SELECTOR = Touch("nodeSelector", "spec.nodeSelector", in_place=False, describe=_selector_changes)
AFFINITY = Touch("affinity", "spec.affinity", in_place=False, describe=_affinity_changes)
record = rule(
    RULE,
    order=70,
    reads={
        "metadata.labels": STRINGS,
        "metadata.annotations": STRINGS,
        "spec.nodeName": str,
        "spec.nodeSelector": STRINGS,
        "spec.affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_SELECTOR_TERM]}
            }
        },
    },
    touches=[NODE_SELECTOR, AFFINITY],
    module=__name__,
)


@dataclass
class Choice:
    """The class a pod lands in, as far as the policy can tell, and what is wrong with its choice."""

    model_class: ModelClass | None = None
    #: The pod chose its hardware itself (selector, affinity or annotation): gpugate adds nothing...
    own: bool = False
    violations: list[Violation] = field(default_factory=list)
    #: ...except the chosen class's own constraint, when the choice alone also reaches another pool.
    constrain: bool = False


def _names(classes: list[ModelClass]) -> str:
    return ", ".join(c.name for c in classes)


def _own_choices(pod: PodView, device: Device) -> list[tuple[str, str, list[str]]]:
    """(key, field path, values) of every choice the pod made on the model label, an alias or an annotation.
    A choice is a nodeSelector entry, or an ``In`` expression present in every required affinity term."""
    keys = [k for k in (device.model_label, *device.model_aliases) if k]
    spec = pod.spec
    found: list[tuple[str, str, list[str]]] = []
    selector = spec.get("nodeSelector") or {}
    terms = required_terms(spec)
    for key in keys:
        if key in selector:
            found.append((key, f"nodeSelector[{key}]", [str(selector[key])]))
            continue
        if not terms:
            continue
        per_term = [[e for e in label_expressions(t, key) if e.get("operator") == "In"] for t in terms]
        if all(per_term):
            for t, exprs in enumerate(per_term):
                e = next(i for i, x in enumerate(terms[t].get("matchExpressions") or []) if x is exprs[0])
                found.append(
                    (
                        key,
                        f"{_AFFINITY}.nodeSelectorTerms[{t}].matchExpressions[{e}]",
                        [str(v) for v in exprs[0].get("values") or []],
                    )
                )
    annotations = pod.annotations if device.choice_annotations else {}
    for key in device.choice_annotations:
        if key in annotations:
            values = [v.strip() for v in str(annotations[key]).split(",") if v.strip()]
            found.append((key, f"metadata.annotations[{key}]", values))
    return found


def _class_of(models: Models, device: Device, key: str, value: str) -> ModelClass | None:
    for c in models.classes.values():
        if c.device != device.name:
            continue
        if (key == device.model_label and value in c.values) or value in c.aliases.get(key, ()):
            return c
    return None


# Over 60 lines: the choice order of the module docstring, one branch per source of a choice.
def resolve(pod: PodView, ctx: PodContext) -> Choice:
    """Which class the pod lands in; shared by the mutator (what to add) and the validator (what is wrong)."""
    models, device = ctx.policy.models, ctx.gpu.device
    if models is None or device is None or not ctx.gpu.device_plugin_resources:
        return Choice()  # no GPU resource, or only DRA-served ones: the DeviceClass chooses the hardware
    requested = sorted(ctx.gpu.device_plugin_resources)
    wanted = ", ".join(requested)
    able = models.offering(device.name, requested)
    able_fix = f"use one of: {_names(able)}" if able else f'no class of policy "{ctx.policy.name}" offers {wanted}'
    named = pod.labels.get(MODEL_LABEL)
    if named:
        path = ctx.meta_field(f"labels[{MODEL_LABEL}]")
        found = models.classes.get(named)
        if found is None or found.device != device.name:
            return Choice(
                violations=[
                    Violation(
                        RULE,
                        path,
                        "pod",
                        f'GPU model class "{named}" is not allowed by policy "{ctx.policy.name}"',
                        able_fix,
                    )
                ]
            )
        if not found.offers(requested):
            return Choice(
                violations=[
                    Violation(
                        RULE,
                        path,
                        "pod",
                        f'GPU model class "{named}" cannot serve {wanted}: its nodes offer '
                        f"{', '.join(found.resources)}",
                        able_fix,
                    )
                ]
            )
        return Choice(found, violations=_outside_class(pod, ctx, found, device))
    if pod.spec.get("nodeName"):
        return Choice(own=True)  # bound to a node already (e.g. by an operator): a selector could only break it
    choices = _own_choices(pod, device)
    if choices:
        violations = []
        for key, path, values in choices:
            meta = path.startswith("metadata.")
            where = ctx.meta_field(path.removeprefix("metadata.")) if meta else ctx.spec_field(path)
            unmapped = []
            for value in values:
                mapped = _class_of(models, device, key, value)
                if mapped is None and key == device.model_label:
                    violations.append(
                        Violation(
                            RULE,
                            where,
                            "pod",
                            f'selects {key}={value}, outside every GPU model class of policy "{ctx.policy.name}"',
                            f"remove the selector (gpugate adds one) or {able_fix}",
                        )
                    )
                elif mapped is None:
                    unmapped.append(value)
                elif mapped not in able:
                    violations.append(
                        Violation(
                            RULE,
                            where,
                            "pod",
                            f'chooses {key}={value} (class "{mapped.name}"), whose nodes do not offer {wanted}: '
                            f"they offer {', '.join(mapped.resources)}",
                            f"request {' or '.join(mapped.resources)} instead" + (f", or {able_fix}" if able else ""),
                        )
                    )
            if unmapped:
                violations.append(
                    Violation(
                        RULE,
                        where,
                        "pod",
                        f'{key}={",".join(unmapped)} left as chosen: no class of policy "{ctx.policy.name}" names it',
                        f"or name a class with label {MODEL_LABEL} ({_names(able)})",
                        advisory=True,
                    )
                )
        if violations:
            return Choice(own=True, violations=violations)
        return _own_class(ctx, models, device, choices, able)
    defaults = models.defaults_for(device.name, requested)
    if defaults:
        return _fitting_default(pod, ctx, defaults, device)
    text = (
        f'requests {wanted}, which no GPU model class of policy "{ctx.policy.name}" offers'
        if not able
        else f"names no GPU model class, and several offer {wanted}"
    )
    offers = "; ".join(
        f"{c.name}: {', '.join(c.resources)}" for c in models.classes.values() if c.device == device.name
    )
    fix = (
        f"label the pod {MODEL_LABEL} with one of: {_names(able)}"
        if able
        else f"request what a class offers ({offers})"
        if offers
        else f"run it where a policy has {device.name} GPU classes (this one has {', '.join(models.classes)})"
    )
    return Choice(violations=[Violation(RULE, ctx.meta_field(f"labels[{MODEL_LABEL}]"), "pod", text, fix)])


def _fitting_default(pod: PodView, ctx: PodContext, defaults: list[ModelClass], device: Device) -> Choice:
    """The first default class whose nodes can hold the pod (the live inventory's nodes and the pools that can
    scale up for the class; a class of unknown size fits), so a pod too large for the first default's nodes
    is never steered where it would stay Pending for ever. Without an inventory, or when no default holds
    it, the first default: feasibility then refuses the pod, naming the classes whose nodes would."""
    fleet = ctx.fleet
    if fleet is not None and len(defaults) > 1:
        amounts = per_node_amounts(pod.spec, ctx.counts_as_gpu)
        for cls in defaults:
            if all(
                (most := class_largest(fleet, cls, device, resource)) is None or amount <= most
                for resource, amount in amounts.items()
            ):
                return Choice(cls, violations=_outside_class(pod, ctx, cls, device))
    return Choice(defaults[0], violations=_outside_class(pod, ctx, defaults[0], device))


def _own_class(
    ctx: PodContext, models: Models, device: Device, choices: list[tuple[str, str, list[str]]], able: list[ModelClass]
) -> Choice:
    """The pod's own choice, with the one class it maps to when that choice alone also reaches another pool
    (an instance type can carry whole GPUs or MIG slices: p5.48xlarge in the reference fleet). gpugate then
    adds that class's own constraint, which narrows the choice and never contradicts it."""
    if any(key == device.model_label for key, _, _ in choices):
        return Choice(own=True)  # a choice on the model label itself is never narrowed
    mapped = [
        c
        for c in models.classes.values()
        if c.device == device.name
        and any(
            v in c.aliases.get(key, ()) or (key == device.model_label and v in c.values)
            for key, _, vs in choices
            for v in vs
        )
    ]
    serving = [c for c in mapped if c in able]
    if not serving:
        return Choice(own=True)
    # Several classes share the choice (one instance type, whole GPUs or MIG slices): the first default
    # among them, else the first the policy lists.
    chosen = next((c for name in models.defaults for c in serving if c.name == name), serving[0])
    shared = len(mapped) > 1
    if ctx.fleet is not None:
        shared = _reaches_other_pools(ctx, device, chosen, choices, policy_says=shared)
    return Choice(chosen, own=True, constrain=shared)


def _reaches_other_pools(
    ctx: PodContext,
    device: Device,
    chosen: ModelClass,
    choices: list[tuple[str, str, list[str]]],
    *,
    policy_says: bool,
) -> bool:
    """With the inventory: some node the choice selects carries another model label value, and every one
    carries the label, so the class's own value narrows the choice without stranding it (GKE's own device
    plugin, say, writes no GFD label: a product selector would match none of its nodes)."""
    label = device.model_label or ""
    if not chosen.values:
        return False
    selected = [
        n
        for n in (ctx.fleet.nodes if ctx.fleet is not None else ())
        if all(n.labels.get(k) in vs for k, path, vs in choices if not path.startswith("metadata."))
    ]
    if not selected:
        return policy_says
    if any(label not in n.labels for n in selected):
        return False
    return any(n.labels[label] not in chosen.values for n in selected)


def _outside_class(pod: PodView, ctx: PodContext, chosen: ModelClass, device: Device) -> list[Violation]:
    """A pod that names (or defaults to) a class and also selects the model label must stay inside it."""
    label = device.model_label or ""
    values = chosen.values
    shown = ", ".join(values)
    spec = pod.spec
    violations = []
    selected = (spec.get("nodeSelector") or {}).get(label)
    if selected is not None and selected not in values:
        violations.append(
            Violation(
                RULE,
                ctx.spec_field(f"nodeSelector[{label}]"),
                "pod",
                f'selects {label}={selected}, outside class "{chosen.name}" ({shown})',
                f"remove the selector (gpugate adds it) or choose the class with label {MODEL_LABEL}",
            )
        )
    for t, term in enumerate(required_terms(spec)):
        for e, expr in enumerate(term.get("matchExpressions") or []):
            if not isinstance(expr, Mapping) or expr.get("key") != label:
                continue
            operator, picked = expr.get("operator"), set(expr.get("values") or [])
            if (operator == "In" and not picked <= set(values)) or operator == "DoesNotExist":
                violations.append(
                    Violation(
                        RULE,
                        ctx.spec_field(f"{_AFFINITY}.nodeSelectorTerms[{t}].matchExpressions[{e}]"),
                        "pod",
                        f"node affinity {operator} {sorted(picked)} on {label} reaches outside class "
                        f'"{chosen.name}" ({shown})',
                        f"drop the expression (gpugate adds it) or choose the class with label {MODEL_LABEL}",
                    )
                )
    return violations


@record.validator(pods="gpu")
def require_allowed_model(pod: PodView, ctx: PodContext) -> list[Violation]:
    return resolve(pod, ctx).violations


@record.mutator(pods="gpu")
def select_model(editor: PodEditor, ctx: PodContext) -> list[Change]:
    choice = resolve(PodView(editor.metadata, editor.spec), ctx)
    device = ctx.gpu.device
    if choice.model_class is None or (choice.own and not choice.constrain) or choice.violations or device is None:
        return []  # nothing to add, the pod's own choice, or a violation that the validating endpoint reports
    changes = _add_pool_labels(editor, choice.model_class)
    if not device.model_label or not choice.model_class.values:
        return changes  # a DRA pool: no model label to select (its DeviceClass picks the devices)
    return changes + _add_model_values(editor, choice.model_class, device.model_label)


def _add_pool_labels(editor: PodEditor, chosen: ModelClass) -> list[Change]:
    """The class's ``nodeSelector`` entries the pod lacks (a key it already selects stays the pod's)."""
    selector = editor.spec.get("nodeSelector") or {}
    changes = []
    for key, value in chosen.node_selector.items():
        if key not in selector:
            editor.set_node_selector(key, value)
            changes.append(Change("nodeSelector", f"nodeSelector {key}={value}"))
    return changes


def _add_model_values(editor: PodEditor, chosen: ModelClass, label: str) -> list[Change]:
    spec = editor.spec
    values = chosen.values
    if label in (spec.get("nodeSelector") or {}):
        return []
    terms = required_terms(spec)
    lacking = [
        i for i, term in enumerate(terms) if not any(e.get("operator") == "In" for e in label_expressions(term, label))
    ]
    if terms and not lacking:
        return []
    if len(values) == 1 and not any(label_expressions(term, label) for term in terms):
        editor.set_node_selector(label, values[0])
        return [Change("nodeSelector", f"nodeSelector {label}={values[0]}")]
    expression = {"key": label, "operator": "In", "values": list(values)}
    affinity = copy.deepcopy(dict(spec.get("affinity") or {}))
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    new_terms = required.setdefault("nodeSelectorTerms", [])
    if not new_terms:
        new_terms.append({"matchExpressions": [expression]})
    else:
        for i in lacking:
            new_terms[i].setdefault("matchExpressions", []).append(copy.deepcopy(expression))
    editor.set_spec("affinity", affinity)
    return [Change("affinity", f"node affinity {label} In ({', '.join(values)})")]
