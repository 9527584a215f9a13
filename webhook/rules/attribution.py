"""Attribution: pod labels that charge GPU metrics to a team, set by gpugate and never by the tenant.

Guards the policy's ``attribution.labels`` keys and ``gpugate.io/workload-kind`` /
``gpugate.io/workload-name`` in ``metadata.labels``. dcgm-exporter (``--kubernetes-enable-pod-labels``)
and kube-state-metrics (``kube_pod_labels``) read POD LABELS; annotations never reach them. Values come
from the namespace's labels (the platform's) or the policy; a value the user put there is overwritten on
CREATE, with a warning; adding, changing or removing one on UPDATE is a violation, unless it is what /mutate
writes into a workload's template. ``pods/status`` can rewrite a pod's labels and annotations too
(k/k pkg/registry/core/pod/strategy.go, podStatusStrategy keeps only spec and ownerReferences): there no
``gpugate.io`` key may change at all. A label key kube-state-metrics exports under the same name as an
attribution label, and a workload selecting on one, are refused. The owning workload is
resolved through ownerReferences: ReplicaSet -> Deployment via ``pod-template-hash``, Job -> CronJob via
the CronJob controller's ``<cronjob>-<scheduled minutes>`` Job names (k/k pkg/controller/cronjob
getJobName).

``gpugate.io/claims-pending`` is gpugate's too, and protected whatever the policy's mode or attribution: on CREATE
``/mutate`` gives a pod that names ResourceClaims (``resourceClaimName``) gpugate cannot read yet the claim's
name (``Several`` for more than one, or a name that is not a label value), so that ``admission.claims`` finds the
pod when the claim is created and adds the claim to what the pod holds. A value the tenant wrote is replaced (a
value that still covers the pod's claims, ``Several`` or the name of a claim it names, is kept: the claim may have
been created between the mutating and the validating call); adding, changing or removing it on UPDATE is refused
in every mode, so a pod cannot shed it before its claims are created.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ..pods.fields import STRINGS
from ..pods.objects import controller_ref, through_replica_set
from ..policy.keys import (
    BOOKKEEPING_ANNOTATIONS,
    CLAIMS_PENDING_LABEL,
    CLAIMS_PENDING_SEVERAL,
    GROUP,
    WORKLOAD_ANNOTATION,
    WORKLOAD_KIND_LABEL,
    WORKLOAD_NAME_LABEL,
)
from ..policy.labels import is_label_value, metric_label_name
from .base import Change, PodChange, PodContext, PodEditor, PodView, Touch, Violation, map_changes
from .registry import rule

RULE = "attribution"


def _label_changes(before: Any, after: Any) -> list[PodChange]:
    return map_changes("labels", "label", before, after)


def _annotation_changes(before: Any, after: Any) -> list[PodChange]:
    return map_changes("annotations", "annotation", before, after, skip=BOOKKEEPING_ANNOTATIONS)


LABELS = Touch("labels", "metadata.labels", in_place=True, describe=_label_changes, security=True)
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
    """The labels gpugate writes on this policy's GPU pods (none without ``attribution``)."""
    if not ctx.policy.attribution:
        return set()
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


def named_claims(spec: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims (``resourceClaimName``) a pod spec names, in order, once each."""
    entries = spec.get("resourceClaims")
    names = [
        str(e["resourceClaimName"])
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, Mapping) and isinstance(e.get("resourceClaimName"), str) and e["resourceClaimName"]
    ]
    return list(dict.fromkeys(names))


def claims_pending_value(absent: tuple[str, ...] | list[str]) -> str | None:
    """What ``gpugate.io/claims-pending`` holds for these unread claims: the one name, else ``Several``."""
    if not absent:
        return None
    if len(absent) == 1 and is_label_value(absent[0]) and absent[0] != CLAIMS_PENDING_SEVERAL:
        return absent[0]
    return CLAIMS_PENDING_SEVERAL


def _covers(current: str, spec: Mapping[str, Any], absent: tuple[str, ...]) -> bool:
    """A present value that still finds the pod when each of its unread claims is created."""
    named = named_claims(spec)
    if current == CLAIMS_PENDING_SEVERAL:
        return bool(named)
    return current in named and all(a == current for a in absent)


@record.mutator(pods="any", on_update="skip")
def mark_pending_claims(editor: PodEditor, ctx: PodContext) -> list[Change]:
    """A pod naming ResourceClaims gpugate cannot read yet carries their name, for when they are created."""
    if ctx.shape.is_template or ctx.operation != "CREATE":
        return []  # a template's pods are each judged (and labelled) when they are created
    current = editor.labels.get(CLAIMS_PENDING_LABEL)
    absent = ctx.gpu.absent_claims
    wanted = claims_pending_value(absent)
    if current is not None and _covers(current, editor.spec, absent):
        return []
    if wanted is None:
        if current is None:
            return []
        editor.remove_label(CLAIMS_PENDING_LABEL)
        return [
            Change(
                "labels",
                f"the removal of label {CLAIMS_PENDING_LABEL}={current}",
                warning=f"label {CLAIMS_PENDING_LABEL}={current} removed: gpugate sets it, for claims it cannot read",
            )
        ]
    editor.set_label(CLAIMS_PENDING_LABEL, wanted)
    warning = None
    if current is not None:
        warning = f"label {CLAIMS_PENDING_LABEL}={current} replaced with {wanted}: gpugate sets it"
    return [Change("labels", f"label {CLAIMS_PENDING_LABEL}={wanted}", warning=warning)]


@record.validator(pods="any", needs_policy=False, on_update="all")
def forbid_claims_pending_edits(pod: PodView, ctx: PodContext) -> list[Violation]:
    """On UPDATE, in every mode and whatever the policy: ``gpugate.io/claims-pending`` stays as gpugate wrote it
    (``pods/status`` is ``forbid_status_metadata_edits``'s)."""
    if ctx.old is None or ctx.shape.is_template or ctx.sub_resource == "status":
        return []
    old, new = ctx.old.labels.get(CLAIMS_PENDING_LABEL), pod.labels.get(CLAIMS_PENDING_LABEL)
    if old == new:
        return []
    if old is None:
        text = f"label {CLAIMS_PENDING_LABEL}={new} was added"
    else:
        text = f"label {CLAIMS_PENDING_LABEL}={old} " + ("was removed" if new is None else f"was changed to {new}")
    return [
        Violation(
            RULE,
            ctx.meta_field(f"labels[{CLAIMS_PENDING_LABEL}]"),
            "pod",
            f"{text}: gpugate sets it when it admits a pod naming ResourceClaims it cannot read yet, so that their "
            "GPUs are added to the pod's when they are created",
            f"leave {CLAIMS_PENDING_LABEL} as gpugate wrote it",
            security=True,
        )
    ]


@record.validator(pods="any", on_update="all")
def forbid_attribution_edits(pod: PodView, ctx: PodContext) -> list[Violation]:
    """On UPDATE: only gpugate's own mutation adds, changes or removes its attribution labels. /mutate relabels
    a pod at CREATE only, and a workload's template on UPDATE too (``mutateTemplates``): a template label with
    exactly the value /mutate writes is gpugate's."""
    if ctx.old is None or not ctx.mutable or ctx.sub_resource == "status" or ctx.policy.attribution_edits == "allow":
        return []
    old = ctx.old.labels
    new = pod.labels
    ours = desired_labels(pod.metadata, ctx) if ctx.shape.is_template else {}
    violations = []
    for key in sorted(owned_label_keys(ctx)):
        if old.get(key) == new.get(key) or (key in new and ours.get(key) == new[key]):
            continue
        if key not in old:
            text = f"attribution label {key}={new[key]} was added: gpugate sets attribution labels when it admits a pod"
        else:
            now = "removed" if key not in new else f"changed to {new[key]}"
            text = f"attribution label {key}={old[key]} is set by gpugate and cannot be edited ({now})"
        violations.append(
            Violation(
                RULE,
                ctx.meta_field(f"labels[{key}]"),
                "pod",
                text,
                "leave gpugate.io attribution labels alone; ask the platform team to relabel the namespace",
                security=True,
            )
        )
    return violations


def _gpugate_keys(ctx: PodContext, *maps: Mapping[str, str]) -> list[str]:
    owned = owned_label_keys(ctx)
    return sorted({k for m in maps for k in m if k in owned or k.startswith(f"{GROUP}/")})


@record.validator(pods="any", needs_policy=False, on_update="all")
def forbid_status_metadata_edits(pod: PodView, ctx: PodContext) -> list[Violation]:
    """``pods/status``: no gpugate label or annotation (``gpugate.io/*``, the policy's attribution keys) may be
    added, changed or removed, whatever the policy; the backstop refuses the same (admission-policy.yaml)."""
    if ctx.sub_resource != "status" or ctx.old is None:
        return []
    violations = []
    for what, old, new in (("label", ctx.old.labels, pod.labels), ("annotation", ctx.old.annotations, pod.annotations)):
        for key in _gpugate_keys(ctx, old, new):
            if old.get(key) == new.get(key):
                continue
            now = "removed" if key not in new else f"set to {new[key]}"
            violations.append(
                Violation(
                    RULE,
                    ctx.meta_field(f"{what}s[{key}]"),
                    "pod",
                    f"a status update cannot change gpugate's {what} {key} ({now})",
                    "update status only through pods/status; gpugate's labels and annotations are set when it "
                    "admits a pod",
                    security=True,
                )
            )
    return violations


@record.validator(pods="gpu")
def forbid_look_alike_keys(pod: PodView, ctx: PodContext) -> list[Violation]:
    """A label key kube-state-metrics exports under an attribution label's name. Its ``kube_pod_labels`` then
    carries neither under that name: it sorts the keys and renames every key of a shared name ``<name>_conflict1``,
    ``_conflict2``... (kubernetes/kube-state-metrics internal/store/utils.go mapToPrometheusLabels), so the
    pod's GPUs leave its team. dcgm-exporter only replaces characters, so its collisions are among these."""
    ours = _exported_names(frozenset(owned_label_keys(ctx)))
    look_alikes = [k for k in pod.labels if ours.get(metric_label_name(k), k) != k]
    violations = []
    for key in sorted(look_alikes):
        name = metric_label_name(key)
        owned = ours[name]
        violations.append(
            Violation(
                RULE,
                ctx.meta_field(f"labels[{key}]"),
                "pod",
                f"label {key} is exported by kube-state-metrics as label_{name}, the name of gpugate's attribution "
                f"label {owned}: both are renamed label_{name}_conflict<N> and the pod's GPUs are no longer "
                "charged to its team",
                f"remove or rename {key} (gpugate sets {owned})",
                security=True,
            )
        )
    return violations


@functools.lru_cache(maxsize=256)
def _exported_names(keys: frozenset[str]) -> Mapping[str, str]:
    """kube-state-metrics' name of each of ``keys`` -> the key (a policy's attribution keys, once per policy)."""
    return {metric_label_name(k): k for k in sorted(keys)}


def _selector_keys(selector: Any) -> list[tuple[str, str]]:
    """(path within the selector, label key) of every key a metav1.LabelSelector names."""
    if not isinstance(selector, Mapping):
        return []
    out = []
    labels = selector.get("matchLabels")
    if isinstance(labels, Mapping):
        out += [(f"matchLabels[{k}]", str(k)) for k in labels]
    expressions = selector.get("matchExpressions")
    if isinstance(expressions, list):
        out += [
            (f"matchExpressions[{i}].key", str(e.get("key")))
            for i, e in enumerate(expressions)
            if isinstance(e, Mapping)
        ]
    return out


@record.validator(pods="gpu")
def forbid_selectors_on_attribution_labels(pod: PodView, ctx: PodContext) -> list[Violation]:
    """A workload whose selector names a label gpugate sets on its pods: a pod gpugate labelled otherwise than
    the selector wants is orphaned by its controller (with its GPUs) and replaced, without end."""
    if ctx.selector is None:  # a Pod, or a kind without one
        return []
    owned = owned_label_keys(ctx)
    return [
        Violation(
            RULE,
            f"{ctx.shape.selector_path}.{where}",
            "workload",
            f"selects its pods by {key}, an attribution label gpugate sets on every pod it admits: a pod whose "
            "value gpugate sets differently no longer matches, and the controller orphans it with its GPUs and "
            "creates another, without end",
            f"select on labels of your own (such as app) and leave {key} out of the selector",
            security=True,
        )
        for where, key in _selector_keys(ctx.selector)
        if key in owned
    ]


@record.binding
def binding_violations(binding: Mapping[str, Any], attribution_keys: set[str]) -> list[Violation]:
    """A Binding (``pods/binding`` or ``bindings``, the scheduler's) merges its annotations, and with
    PodTopologyLabelsAdmission (beta, on since 1.35) its labels, into the pod it binds (k/k
    pkg/registry/core/pod/storage/storage.go setPodNodeAndMetadata): none of them may be gpugate's."""
    meta = binding.get("metadata") or {}
    violations = []
    for what in ("labels", "annotations"):
        found = meta.get(what) or {}
        for key in sorted(k for k in found if k in attribution_keys or k.startswith(f"{GROUP}/")):
            violations.append(
                Violation(
                    RULE,
                    f"metadata.{what}[{key}]",
                    "",
                    f"a Binding cannot set gpugate's {what[:-1]} {key} on the pod it binds (the apiserver copies a "
                    "Binding's labels and annotations onto the pod)",
                    f"bind without {key}: gpugate sets its labels and annotations when it admits a pod",
                    security=True,
                )
            )
    return violations
