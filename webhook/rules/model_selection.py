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
from typing import Any

from ..pods.affinity import label_expressions, required_terms, requirement_text
from ..pods.fields import NODE_SELECTOR_TERM, STRINGS
from ..policy.classes import ModelClass
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation, map_changes
from .choice import RULE
from .registry import rule


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


@record.validator(pods="gpu")
def require_allowed_model(pod: PodView, ctx: PodContext) -> list[Violation]:
    return ctx.model.violations  # the choice the engine worked out (rules.choice)


@record.mutator(pods="gpu")
def select_model(editor: PodEditor, ctx: PodContext) -> list[Change]:
    choice = ctx.model  # worked out from the pod as admitted; no mutator before this one changes what it reads
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
