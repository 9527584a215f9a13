"""Model selection: a GPU pod lands on the GPU model its class allows.

Guards ``metadata.labels[gpugate.io/model]``, ``spec.nodeSelector`` and
``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``. The pod names a class with
the label ``gpugate.io/model`` (else the policy's ``models.default``); the class maps to accepted values of
the node label (GPU Feature Discovery's ``nvidia.com/gpu.product``). One value becomes a nodeSelector
entry; several become an ``In`` expression added to every required node-affinity term (terms are ORed, so
each must carry it; user terms are never replaced). GFD appends ``-SHARED`` to the product label of nodes
that time-slice or run MPS (gpu-feature-discovery, lm/resource.go), so pods requesting
``nvidia.com/gpu.shared`` are steered to those variants.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..pods import gpu_resources_requested
from ..policy.model import MODEL_LABEL, Models
from .base import Change, PodContext, PodEditor, Violation

RULE = "model-selection"
SHARED_SUFFIX = "-SHARED"


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]


def _model_expressions(term: Mapping[str, Any], label: str) -> list[Mapping[str, Any]]:
    return [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping) and e.get("key") == label]


def accepted_values(models: Models, model_class: str, spec: Mapping[str, Any], ctx: PodContext) -> tuple[str, ...]:
    values = models.classes[model_class]
    if any(r.endswith(".shared") for r in gpu_resources_requested(spec, ctx.policy.counts_as_gpu)):
        values = tuple(v if v.endswith(SHARED_SUFFIX) else v + SHARED_SUFFIX for v in values)
    return values


def chosen_class(labels: Mapping[str, str], models: Models) -> str | None:
    return labels.get(MODEL_LABEL) or models.default


def require_allowed_model(meta: Mapping[str, Any], spec: Mapping[str, Any], ctx: PodContext) -> list[Violation]:
    models = ctx.policy.models
    if models is None:
        return []
    labels = meta.get("labels") or {}
    model_class = chosen_class(labels, models)
    classes = ", ".join(models.classes)
    if model_class is None:
        return [Violation(RULE, ctx.meta_field(f"labels[{MODEL_LABEL}]"), "pod",
                          f'names no GPU model class and policy "{ctx.policy.name}" has no default',
                          f"label the pod {MODEL_LABEL} with one of: {classes}")]
    if model_class not in models.classes:
        return [Violation(RULE, ctx.meta_field(f"labels[{MODEL_LABEL}]"), "pod",
                          f'GPU model class "{model_class}" is not allowed by policy "{ctx.policy.name}"',
                          f"use one of: {classes}")]
    values = accepted_values(models, model_class, spec, ctx)
    wanted = ", ".join(values)
    violations = []
    selected = (spec.get("nodeSelector") or {}).get(models.node_label)
    if selected is not None and selected not in values:
        violations.append(Violation(
            RULE, ctx.spec_field(f"nodeSelector[{models.node_label}]"), "pod",
            f'selects {models.node_label}={selected}, outside class "{model_class}" ({wanted})',
            f"remove the selector (gpugate adds it) or choose the class with label {MODEL_LABEL}"))
    for t, term in enumerate(_required_terms(spec)):
        for e, expr in enumerate(term.get("matchExpressions") or []):
            if not isinstance(expr, Mapping) or expr.get("key") != models.node_label:
                continue
            operator, chosen = expr.get("operator"), set(expr.get("values") or [])
            if (operator == "In" and not chosen <= set(values)) or operator == "DoesNotExist":
                violations.append(Violation(
                    RULE, ctx.spec_field("affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                                         f".nodeSelectorTerms[{t}].matchExpressions[{e}]"), "pod",
                    f"node affinity {operator} {sorted(chosen)} on {models.node_label} reaches outside class "
                    f'"{model_class}" ({wanted})',
                    f"drop the expression (gpugate adds it) or choose the class with label {MODEL_LABEL}"))
    return violations


def select_model(editor: PodEditor, ctx: PodContext) -> list[Change]:
    models = ctx.policy.models
    if models is None or require_allowed_model(editor.metadata, editor.spec, ctx):
        return []  # nothing to add, or a violation that the validating endpoint reports
    spec = editor.spec
    model_class = chosen_class(editor.labels, models)
    assert model_class is not None
    values = accepted_values(models, model_class, spec, ctx)
    label = models.node_label
    if label in (spec.get("nodeSelector") or {}):
        return []
    terms = _required_terms(spec)
    lacking = [i for i, term in enumerate(terms)
               if not any(e.get("operator") == "In" for e in _model_expressions(term, label))]
    if terms and not lacking:
        return []
    if len(values) == 1 and not any(_model_expressions(term, label) for term in terms):
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
