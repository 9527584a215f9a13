"""The model-class choice: which GPU model class of its policy a pod lands in, as far as the policy can tell,
and what is wrong with the pod's own choice. A fact of the pod like ``GPUUse``: the engine works it out once
per pod into ``PodContext.model``; model selection (what to add, what to refuse), runtime class (a DRA-only
class gets none) and feasibility (where the pod can land) read it there and never call each other.

The order of the choice is model selection's (``rules.model_selection``, its module docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pods.affinity import label_expressions, required_terms
from ..pods.fit import class_largest, per_node_amounts
from ..policy.classes import ModelClass, Models
from ..policy.keys import MODEL_LABEL
from ..policy.model import Device
from ..policy.vendors import HAMI_UUID_ANNOTATIONS
from .base import Choice, PodContext, PodView, Violation

#: The rule whose violations these are (a choice the policy refuses is model selection's to report).
RULE = "model-selection"
_AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


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


def _classes_of(models: Models, device: Device, key: str, value: str) -> list[ModelClass]:
    """Every class of the device that a chosen ``key=value`` means (an alias value can mean several: one
    instance type with whole GPUs or MIG slices, HAMi's ``vgpu-mode: mig`` on every MIG-capable class)."""
    return [
        c
        for c in models.classes.values()
        if c.device == device.name
        and ((key == device.model_label and value in c.values) or value in c.aliases.get(key, ()))
    ]


def _pinned(pod: PodView, device: Device) -> str | None:
    """The annotation with which the pod pins its GPUs by UUID for HAMi's scheduler, if it does."""
    key = HAMI_UUID_ANNOTATIONS.get(device.name)
    value = pod.annotations.get(key) if key else None
    return key if isinstance(value, str) and value.strip() else None


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
    if _pinned(pod, device):
        return Choice(own=True)  # GPUs pinned by UUID: any product gpugate added could only contradict them
    choices = _own_choices(pod, device)
    if choices:
        violations = []
        for key, path, values in choices:
            meta = path.startswith("metadata.")
            where = ctx.meta_field(path.removeprefix("metadata.")) if meta else ctx.spec_field(path)
            unmapped = []
            for value in values:
                meant = _classes_of(models, device, key, value)
                mapped = next((c for c in meant if c in able), meant[0] if meant else None)
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
        return _own_class(pod, ctx, models, device, choices, able)
    defaults = models.defaults_for(device.name, requested)
    if defaults:
        return _fitting_default(pod, ctx, defaults, device)
    if not defaults:
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
    cls = _first_fitting(pod, ctx, defaults, device)
    return Choice(cls, violations=_outside_class(pod, ctx, cls, device))


def _first_fitting(pod: PodView, ctx: PodContext, candidates: list[ModelClass], device: Device) -> ModelClass:
    """The first of `candidates` whose nodes can hold the pod (see `_fitting_default`), else the first."""
    fleet = ctx.fleet
    if fleet is not None and len(candidates) > 1:
        amounts = per_node_amounts(pod.spec, ctx.counts_as_gpu)
        for cls in candidates:
            if all(
                (most := class_largest(fleet, cls, device, resource)) is None or amount <= most
                for resource, amount in amounts.items()
            ):
                return cls
    return candidates[0]


def _own_class(
    pod: PodView,
    ctx: PodContext,
    models: Models,
    device: Device,
    choices: list[tuple[str, str, list[str]]],
    able: list[ModelClass],
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
    # Several classes share the choice (one instance type, whole GPUs or MIG slices; HAMi's hami-core mode on
    # every whole-GPU class): the first default among them whose nodes can hold the pod, as for a pod that
    # chose nothing, else the first the policy lists.
    ordered = [c for name in models.defaults for c in serving if c.name == name]
    ordered += [c for c in serving if c not in ordered]
    chosen = _first_fitting(pod, ctx, ordered, device)
    if all(path.startswith("metadata.") for _, path, _ in choices):
        # Chosen by a scheduler's annotation only (HAMi's use-gputype, vgpu-mode): kube-scheduler reads no
        # annotation, so the class's own constraint is what keeps the pod on that class's nodes.
        return Choice(chosen, own=True, constrain=True)
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
