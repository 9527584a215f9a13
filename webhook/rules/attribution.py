"""Attribution: pod labels that charge GPU metrics to a team, set by gpugate and never by the tenant.

Guards the policy's ``attribution.labels`` keys and ``gpugate.io/workload-kind`` /
``gpugate.io/workload-name`` in ``metadata.labels``. dcgm-exporter (``--kubernetes-enable-pod-labels``)
and kube-state-metrics (``kube_pod_labels``) read POD LABELS; annotations never reach them. Values come
from the namespace's labels (the platform's) or the policy; a value the user put there is overwritten on
CREATE, with a warning, and changing or removing one on UPDATE is a violation. The owning workload is
resolved through ownerReferences: ReplicaSet -> Deployment via ``pod-template-hash``, Job -> CronJob via
the CronJob controller's ``<cronjob>-<scheduled minutes>`` Job names (k/k pkg/controller/cronjob
getJobName).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ..pods.fields import STRINGS
from ..pods.objects import controller_ref, through_replica_set
from ..policy.keys import BOOKKEEPING_ANNOTATIONS, WORKLOAD_ANNOTATION, WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL
from ..policy.labels import is_label_value
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation, map_changes
from .registry import rule

RULE = "attribution"


def _label_changes(before: Any, after: Any) -> list[PodChange]:
    return map_changes("labels", "label", before, after)


def _annotation_changes(before: Any, after: Any) -> list[PodChange]:
    return map_changes("annotations", "annotation", before, after, skip=BOOKKEEPING_ANNOTATIONS)


LABELS = Touch("labels", "metadata.labels", in_place=True, describe=_label_changes)
ANNOTATIONS = Touch("annotations", "metadata.annotations", in_place=True, describe=_annotation_changes)
record = rule(
    RULE,
    order=80,
    reads={
        "metadata.name": str,
        "metadata.generateName": str,
        "metadata.labels": STRINGS,
        "metadata.annotations": STRINGS,
        "metadata.ownerReferences": [{"apiVersion": str, "kind": str, "name": str, "controller": bool}],
    },
    touches=[LABELS, ANNOTATIONS],
    module=__name__,
)
_CRONJOB_JOB = re.compile(r"(?P<cronjob>.+)-\d{8,}")


def label_safe(value: str) -> str:
    """A name as a label value: names up to 253 characters are cut to 63 with a stable hash suffix."""
    if is_label_value(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:54].strip("-_.")
    return f"{head}-{digest}" if head else digest


def owning_workload(meta: Mapping[str, Any], ctx: PodContext) -> tuple[str, str]:
    """(kind, name) of what runs this pod: the top of its controller chain as far as the pod shows it."""
    if ctx.shape.is_template:
        meta = ctx.object_meta or {}  # the workload's own metadata names it, not the template's
        kind, name = ctx.shape.kind, str(meta.get("name") or "")
    else:
        # generateName first: the mutating call sees no name yet, the validating call the generated one.
        kind, name = "Pod", str(meta.get("generateName") or "").rstrip("-") or str(meta.get("name") or "")
    ref = controller_ref(meta)
    if ref is not None:
        kind, name = str(ref.get("kind", kind)), str(ref.get("name", name))
    kind, name = through_replica_set(kind, name, meta)
    if kind == "Job" and (m := _CRONJOB_JOB.fullmatch(name)):
        return "CronJob", m["cronjob"]
    return kind, name


def desired_labels(meta: Mapping[str, Any], ctx: PodContext) -> dict[str, str]:
    """Label -> the value gpugate writes, for the policy's attribution labels and the workload labels."""
    if not ctx.policy.attribution:
        return {}
    out: dict[str, str] = {}
    for spec in ctx.policy.attribution:
        if spec.value is not None:
            out[spec.key] = spec.value
            continue
        value = ctx.namespace_labels.get(spec.from_namespace_label or "", "")
        out[spec.key] = value if value and is_label_value(value) else spec.default
    kind, name = owning_workload(meta, ctx)
    out[WORKLOAD_KIND_LABEL] = label_safe(kind)  # from an ownerReference the tenant may have written
    if name:
        out[WORKLOAD_NAME_LABEL] = label_safe(name)
    return out


def owned_label_keys(ctx: PodContext) -> set[str]:
    return {a.key for a in ctx.policy.attribution} | {WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL}


def _unusable_sources(ctx: PodContext) -> dict[str, str]:
    """Attribution labels whose namespace label is present but empty (or not a label value): key -> why."""
    out = {}
    for spec in ctx.policy.attribution:
        source = spec.from_namespace_label
        if source and source in ctx.namespace_labels:
            raw = ctx.namespace_labels[source]
            if not raw or not is_label_value(raw):
                out[spec.key] = f'namespace label {source}="{raw}" is unusable, so {spec.key}={spec.default}'
    return out


@record.mutator(pods="gpu", on_update="skip")
def attribute_to_team(editor: PodEditor, ctx: PodContext) -> list[Change]:
    changes = []
    labels = editor.labels
    unusable = _unusable_sources(ctx)
    for key, value in desired_labels(editor.metadata, ctx).items():
        current = labels.get(key)
        if current == value:
            continue
        warning = unusable.get(key)
        if current is not None:
            warning = f"label {key}={current} replaced with {value}: gpugate sets attribution labels"
        editor.set_label(key, value)
        changes.append(Change("labels", f"label {key}={value}", warning=warning))
    if changes:
        kind, name = owning_workload(editor.metadata, ctx)
        if name and editor.annotations.get(WORKLOAD_ANNOTATION) != f"{kind}/{name}":
            editor.set_annotation(WORKLOAD_ANNOTATION, f"{kind}/{name}")
    return changes


@record.validator(pods="any", on_update="all")
def forbid_attribution_edits(pod: PodView, ctx: PodContext) -> list[Violation]:
    """On UPDATE: gpugate's attribution labels keep the values they were created with."""
    if ctx.old is None or not ctx.mutable or ctx.policy.attribution_edits == "allow":
        return []
    old = ctx.old.labels
    new = pod.labels
    violations = []
    for key in sorted(owned_label_keys(ctx)):
        if key in old and old.get(key) != new.get(key):
            now = "removed" if key not in new else f"changed to {new[key]}"
            violations.append(
                Violation(
                    RULE,
                    ctx.meta_field(f"labels[{key}]"),
                    "pod",
                    f"attribution label {key}={old[key]} is set by gpugate and cannot be edited ({now})",
                    "leave gpugate.io attribution labels alone; ask the platform team to relabel the namespace",
                    security=True,
                )
            )
    return violations
