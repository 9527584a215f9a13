"""Audit: what gpugate would say about objects already stored in a cluster, from plain dicts; no I/O here.

Every object goes through gpugate's own decision code (`admission.mutate` and `admission.validate`) as a
synthesized CREATE request, exactly as `gpugate check` does offline: the mutating pass first, its patch
applied, then the validating pass on the result. What that yields for an object that already exists:

- *refused*: gpugate would refuse to create it today (an `enforce` violation, or a built-in one);
- *warned*: allowed, but a `warn` or `audit` policy records violations;
- *changed* (pods only): `/mutate` would add something the stored pod lacks. The mutating webhook never
  saw this pod (it predates gpugate, or the webhook was skipped: `failurePolicy: Ignore`). Most of a
  running pod's spec is immutable, so such a pod keeps running as it is until it is re-created;
- *fine*.

For workloads (a Deployment and the like) the verdict is the one `kubectl apply` of the workload would get;
what /mutate adds to their pods is reported as information ("pods will get"), not as a finding, since the
webhook adds it to every pod the controller creates.
"""

from __future__ import annotations

import copy
import datetime
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import jsonpatch

from ..admission import Decision, Environment, mutate, validate
from ..pods.objects import PodShape, containers, dig, gpu_amounts, group_of, is_sidecar, shapes_of, workload_kinds
from ..pods.quantity import format_quantity
from ..policy.model import BUILTIN, Policy, PolicySet, WorkloadKind

#: Annotations gpugate writes for its own bookkeeping: not worth a line in an audit.
BOOKKEEPING_ANNOTATIONS = frozenset({"gpugate.io/policy", "gpugate.io/mutated", "gpugate.io/workload"})
TEAM_LABEL = "gpugate.io/team"
#: Fields of a running pod that an UPDATE may still change. k/k pkg/apis/core/validation/validation.go
#: ValidatePodUpdate: metadata (labels, annotations) and "spec.tolerations (only additions to existing
#: tolerations)"; runtimeClassName, nodeSelector and affinity are fixed once the pod exists.
IN_PLACE_FIELDS = frozenset({"labels", "annotations", "tolerations"})
#: Pods in these phases hold no GPU any more; they are counted, not evaluated.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
VERDICTS = ("refused", "warned", "changed", "fine")
_BUILTIN_GROUPS = frozenset({"", "apps", "batch"})


def audited_kinds(*policy_sets: PolicySet | None) -> list[WorkloadKind]:
    """Every kind gpugate reads, Pod first: the registry in `webhook.pods.objects`, plus the kinds the policy
    directories add (GPUWorkloadKind documents)."""
    kinds = workload_kinds()
    for policies in policy_sets:
        kinds.update(workload_kinds(policies.workloads if policies is not None else None))
    return sorted(kinds.values(), key=lambda w: ((w.group, w.kind) != ("", "Pod"), w.group, w.kind))


# ------------------------------------------------------------------------------------------ one object


@dataclass(frozen=True)
class PodChange:
    """One thing /mutate would do to a pod: the pod field, the change in words, and for a label (or an
    annotation, a node selector) its key and new value; `action` is add, replace or remove."""

    field: str
    text: str
    action: str = "add"
    key: str = ""
    value: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "change": self.text}


@dataclass(frozen=True)
class Evaluation:
    """The verdict on one object under one policy set."""

    verdict: str  # refused | warned | changed | fine | error
    policy: str
    mode: str
    violations: tuple[tuple[str, str, str, bool], ...]  # (rule, path, message, enforced)
    changes: tuple[PodChange, ...]
    error: str = ""

    def fingerprint(self) -> tuple[str, frozenset[tuple[str, str]], frozenset[str]]:
        return (self.verdict, frozenset((v[0], v[2]) for v in self.violations), frozenset(c.text for c in self.changes))


def _request(obj: Mapping[str, Any], *, uid: str) -> dict[str, Any]:
    """A CREATE AdmissionReview request for a stored object, as the apiserver would build it."""
    meta = obj.get("metadata") or {}
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    return {
        "uid": uid,
        "operation": "CREATE",
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "kind": {"group": group, "version": version, "kind": obj.get("kind")},
        "object": obj,
        "oldObject": None,
        "dryRun": True,
    }


def _fmt_toleration(t: Mapping[str, Any]) -> str:
    text = str(t.get("key", "*"))
    if t.get("operator") == "Equal" or "value" in t:
        text += f"={t.get('value', '')}"
    elif t.get("operator"):
        text += f" {t['operator']}"
    if t.get("effect"):
        text += f":{t['effect']}"
    return text


def _required_terms(spec: Mapping[str, Any]) -> list[Any]:
    return (
        dig(spec, ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
        or []
    )


def _fmt_requirement(r: Mapping[str, Any]) -> str:
    values = r.get("values") or []
    return (
        f"{r.get('key')} {r.get('operator')} [{', '.join(map(str, values))}]"
        if values
        else f"{r.get('key')} {r.get('operator')}"
    )


def pod_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[PodChange]:
    """What /mutate's patch does to a pod, in words: the patched pod compared with the stored one field by field
    (the patch itself may add a whole map or list at once, so its operations alone do not read well)."""
    before_meta, before_spec = before.get("metadata") or {}, before.get("spec") or {}
    after_meta, after_spec = after.get("metadata") or {}, after.get("spec") or {}
    out: list[PodChange] = []
    if before_spec.get("runtimeClassName") != after_spec.get("runtimeClassName"):
        out.append(PodChange("runtimeClassName", f"runtimeClassName: {after_spec.get('runtimeClassName')}"))
    old_tol = list(before_spec.get("tolerations") or [])
    new_tol = list(after_spec.get("tolerations") or [])
    out += [PodChange("tolerations", f"toleration {_fmt_toleration(t)}") for t in new_tol if t not in old_tol]
    out += [
        PodChange("tolerations", f"toleration {_fmt_toleration(t)} removed", action="remove")
        for t in old_tol
        if t not in new_tol
    ]
    old_sel = before_spec.get("nodeSelector") or {}
    for key, value in (after_spec.get("nodeSelector") or {}).items():
        if old_sel.get(key) != value:
            out.append(
                PodChange(
                    "nodeSelector",
                    f"nodeSelector {key}={value}",
                    action="replace" if key in old_sel else "add",
                    key=key,
                    value=str(value),
                )
            )
    if before_spec.get("affinity") != after_spec.get("affinity"):
        old_reqs = [r for term in _required_terms(before_spec) for r in term.get("matchExpressions") or []]
        new_reqs = [r for term in _required_terms(after_spec) for r in term.get("matchExpressions") or []]
        added = [r for r in new_reqs if r not in old_reqs]
        texts = sorted({_fmt_requirement(r) for r in added}) or ["changed"]
        out += [PodChange("affinity", f"required node affinity {text}") for text in texts]
    for section, word in (("labels", "label"), ("annotations", "annotation")):
        old = before_meta.get(section) or {}
        for key, value in (after_meta.get(section) or {}).items():
            if old.get(key) == value or (section == "annotations" and key in BOOKKEEPING_ANNOTATIONS):
                continue
            text = f"{word} {key}={value}" if key not in old else f"{word} {key}={value} (was {old[key]})"
            out.append(
                PodChange(section, text, action="add" if key not in old else "replace", key=key, value=str(value))
            )
    handled = {"runtimeClassName", "tolerations", "nodeSelector", "affinity"}
    for key in sorted(set(before_spec) | set(after_spec)):
        if key not in handled and before_spec.get(key) != after_spec.get(key):
            out.append(PodChange(key, f"spec.{key} changed"))
    return out


def _violations(*decisions: Decision | None) -> tuple[tuple[str, str, str, bool], ...]:
    seen: dict[tuple[str, str, str], bool] = {}
    for decision in decisions:
        if decision is None:
            continue
        for v in decision.violations:
            enforced = v.builtin or decision.mode == "enforce"
            seen[(v.rule, v.path, v.message())] = enforced
    return tuple((rule, path, message, enforced) for (rule, path, message), enforced in seen.items())


def _decide(obj: Mapping[str, Any], env: Environment, *, uid: str) -> tuple[Decision, Decision | None, Any]:
    """Both passes, as the apiserver runs them: /mutate, its patch applied, then /validate on the result."""
    mutation = mutate(_request(obj, uid=uid), env)
    if not mutation.allowed:
        return mutation, None, obj
    mutated = jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj
    return mutation, validate(_request(mutated, uid=uid), env), mutated


def _pod_of_template(obj: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a workload's controller would create from its template, owned by the workload."""
    meta = dict(template.get("metadata") or {})
    owner = obj.get("metadata") or {}
    meta["namespace"] = owner.get("namespace", "")
    meta["generateName"] = f"{owner.get('name', '')}-"
    meta["ownerReferences"] = [
        {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": owner.get("name", ""),
            "uid": owner.get("uid", ""),
            "controller": True,
        }
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


def _template_changes(
    obj: Mapping[str, Any], shape: PodShape, env: Environment, *, uid: str, prefix: str
) -> list[PodChange]:
    """What /mutate would add to the pods a workload's controller creates from one of its templates."""
    template = dig(obj, shape.template)
    if not isinstance(template, Mapping):
        return []
    pod = _pod_of_template(obj, template)
    mutation, _, mutated = _decide(pod, env, uid=uid)
    if not mutation.allowed or not mutation.patch:
        return []
    changes = pod_changes(pod, mutated)
    return [PodChange(c.field, f"{prefix}{c.text}", c.action, c.key, c.value) for c in changes] if prefix else changes


def evaluate(obj: Mapping[str, Any], env: Environment, *, uid: str = "audit") -> Evaluation | None:
    """gpugate's verdict on one stored object, or None for an object it does not read."""
    shapes = shapes_of(obj, workloads=workload_kinds(env.policies.workloads))
    if shapes is None:
        return None
    mutation, validation, mutated = _decide(obj, env, uid=uid)
    final = validation or mutation
    if not final.allowed and final.code >= 500:
        return Evaluation("error", final.policy, final.mode, (), (), error=final.message)
    violations = _violations(mutation, validation)
    template = not shapes or shapes[0].is_template
    changes: list[PodChange] = []
    if template:
        for shape in shapes:  # a RayCluster has a head and worker templates: say which one gets what
            prefix = f"{shape.spec_path.removesuffix('.spec')}: " if len(shapes) > 1 else ""
            changes += _template_changes(obj, shape, env, uid=uid, prefix=prefix)
    else:
        changes = pod_changes(obj, mutated)
    if not final.allowed:
        verdict = "refused"
    elif violations:
        verdict = "warned"
    elif changes and not template:
        verdict = "changed"
    else:
        verdict = "fine"
    return Evaluation(verdict, final.policy or mutation.policy, final.mode or mutation.mode, violations, tuple(changes))


def pod_gpus(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPUs a pod holds, per resource, counted as the scheduler counts: app containers and sidecars add up;
    an ordinary init container runs alone, so it counts only when it asks for more (k/k
    pkg/api/v1/resource/helpers.go PodRequests)."""
    app: Counter[str] = Counter()
    init_peak: dict[str, Fraction] = {}
    running_sidecars: Counter[str] = Counter()
    for fld, _, container in containers(spec):
        amounts = gpu_amounts(container, is_gpu)
        if fld == "containers":
            app.update(amounts)
        elif fld == "initContainers":
            if is_sidecar(container):
                running_sidecars.update(amounts)
                app.update(amounts)
            else:
                for resource, amount in amounts.items():
                    # an init container runs beside the sidecars started before it
                    peak = amount + running_sidecars.get(resource, 0)
                    init_peak[resource] = max(init_peak.get(resource, Fraction(0)), peak)
    out = {r: Fraction(v) for r, v in app.items()}
    for resource, peak in init_peak.items():
        out[resource] = max(out.get(resource, Fraction(0)), peak)
    return {r: v for r, v in out.items() if v > 0}


# ----------------------------------------------------------------------------------------- the audit


def describe(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": str(obj.get("apiVersion", "")),
        "kind": str(obj.get("kind", "")),
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
    }


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return group_of(str(ref.get("apiVersion", ""))), str(ref.get("kind", ""))
    return None


#: Controllers whose pods `kubectl rollout restart` re-creates.
_RESTARTABLE = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


def _remedy(obj: Mapping[str, Any], changes: Iterable[PodChange]) -> str:
    """How to get what the mutating webhook would have added onto a pod that already runs."""
    fields = {c.field for c in changes}
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    owner = next((ref for ref in refs if isinstance(ref, Mapping) and ref.get("controller")), None)
    if owner is None:
        recreate = "delete and re-create it"
    else:
        kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
        template_hash = (meta.get("labels") or {}).get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            kind, name = "Deployment", name[: -len(template_hash) - 1]  # the ReplicaSet a Deployment made
        recreate = (
            f"re-create it: kubectl rollout restart {kind.lower()}/{name}"
            if kind in _RESTARTABLE
            else f"delete it and let its {kind} {name} re-create it"
        )
    if fields <= {"labels", "annotations"}:
        return "the mutating webhook never saw this pod; labels can be added in place (kubectl label), or " + recreate
    if fields <= IN_PLACE_FIELDS:
        return (
            "the mutating webhook never saw this pod; labels and added tolerations can be set in place, or " + recreate
        )
    return (
        "the mutating webhook never saw this pod, and a running pod's runtimeClassName, nodeSelector and "
        "affinity cannot change: " + recreate
    )


@dataclass
class _Tally:
    """Counts for one namespace or team."""

    gpu_pods: int = 0
    gpus: Counter[str] = field(default_factory=Counter)
    unlabelled: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpuPods": self.gpu_pods,
            "gpus": {r: format_quantity(Fraction(v)) for r, v in sorted(self.gpus.items())},
            "missingAttributionLabels": self.unlabelled,
            **{v: self.verdicts.get(v, 0) for v in (*VERDICTS, "error")},
        }


class Audit:
    """Feed it stored objects one at a time (`add`); it keeps only findings and counts, never the objects,
    so memory stays flat however many pods a cluster holds. `compare_to` previews a policy change."""

    def __init__(
        self,
        policies: PolicySet,
        *,
        namespace_labels: Mapping[str, Mapping[str, str]],
        compare_to: PolicySet | None = None,
        team_label: str = TEAM_LABEL,
    ) -> None:
        self.policies = policies
        self.proposed = compare_to
        self.team_label = team_label
        labels = namespace_labels
        self.env = Environment(policies=policies, namespace_labels=lambda ns: labels.get(ns, {}))
        self.proposed_env = (
            Environment(policies=compare_to, namespace_labels=lambda ns: labels.get(ns, {}))
            if compare_to is not None
            else None
        )
        # The kinds judged; a ReplicaSet that a Deployment controls (a Job a CronJob, a RayCluster a RayJob)
        # repeats its owner's template, so a workload controlled by one of these kinds is skipped.
        self.kinds = {(w.group, w.kind) for w in audited_kinds(policies, compare_to)}
        self.findings: list[dict[str, Any]] = []
        self.differences: list[dict[str, Any]] = []
        self.namespaces: dict[str, _Tally] = defaultdict(_Tally)
        self.teams: dict[str, _Tally] = defaultdict(_Tally)
        self.counts: Counter[str] = Counter()
        self._seq = 0

    # -- feeding ------------------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any]) -> None:
        key = (group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or ""))
        if key not in self.kinds:
            return
        is_pod = key == ("", "Pod")
        # Volcano's Job is not batch's Job: name a CRD kind with its group, as kubectl does (jobs.batch.volcano.sh)
        self.counts[f"listed:{key[1] if key[0] in _BUILTIN_GROUPS else f'{key[1]}.{key[0]}'}"] += 1
        if not is_pod and (owner := controller_of(obj)) and owner in self.kinds:
            self.counts["skipped:owned"] += 1
            return
        if is_pod and (obj.get("status") or {}).get("phase") in FINISHED_PHASES:
            self.counts["skipped:finished"] += 1
            return
        self._seq += 1
        uid = f"audit-{self._seq}"
        current = evaluate(obj, self.env, uid=uid)
        if current is None:
            return
        self.counts["audited"] += 1
        self._account(obj, current, template=not is_pod)
        if self.proposed_env is not None:
            proposed = evaluate(obj, self.proposed_env, uid=uid)
            if proposed is not None and proposed.fingerprint() != current.fingerprint():
                self.differences.append(_difference(obj, current, proposed))

    def _account(self, obj: Mapping[str, Any], ev: Evaluation, *, template: bool) -> None:
        who = describe(obj)
        namespace = who["namespace"]
        self.counts[ev.verdict] += 1
        tally = self.namespaces[namespace]
        tally.verdicts[ev.verdict] += 1
        missing = [c.key for c in ev.changes if c.field == "labels" and c.action == "add"]
        if not template:
            policy = self._policy(ev.policy)
            gpus = pod_gpus(obj.get("spec") or {}, policy.counts_as_gpu)
            labels = (obj.get("metadata") or {}).get("labels") or {}
            team = labels.get(self.team_label) or _label_value(ev.changes, self.team_label) or "-"
            teams = self.teams[team]
            teams.verdicts[ev.verdict] += 1
            if gpus:
                for t in (tally, teams):
                    t.gpu_pods += 1
                    t.gpus.update(gpus)
            if missing:
                tally.unlabelled += 1
                teams.unlabelled += 1
        if ev.verdict == "fine":
            return
        record: dict[str, Any] = {**who, "verdict": ev.verdict, "policy": ev.policy, "mode": ev.mode}
        if ev.error:
            record["error"] = ev.error
        if ev.violations:
            record["violations"] = [{"rule": r, "path": p, "message": m, "enforced": e} for r, p, m, e in ev.violations]
        if ev.changes:
            record["podsWillGet" if template else "wouldAdd"] = [c.as_dict() for c in ev.changes]
        if missing and not template:
            record["missingAttributionLabels"] = missing
        if ev.changes and not template:
            record["note"] = _remedy(obj, ev.changes)
        self.findings.append(record)

    def _policy(self, name: str) -> Policy:
        for policy in self.policies.policies:
            if policy.name == name:
                return policy
        return BUILTIN

    # -- results ------------------------------------------------------------------------------------

    @property
    def found(self) -> bool:
        """Something to act on: a finding (or, when comparing, an object the change would affect)."""
        if self.proposed is not None:
            return bool(self.differences)
        return any(f["verdict"] != "fine" for f in self.findings)

    def report(self, *, policies_source: str, proposed_source: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "apiVersion": "gpugate.io/v1",
            "kind": "AuditReport",
            "policies": {"source": policies_source, "names": [p.name for p in self.policies.policies]},
            "totals": {
                "audited": self.counts["audited"],
                **{v: self.counts[v] for v in (*VERDICTS, "error")},
                "skippedOwned": self.counts["skipped:owned"],
                "skippedFinished": self.counts["skipped:finished"],
                "listed": {k.split(":", 1)[1]: n for k, n in sorted(self.counts.items()) if k.startswith("listed:")},
            },
            "findings": self.findings,
            "namespaces": {ns: t.as_dict() for ns, t in sorted(self.namespaces.items())},
            "teams": {team: t.as_dict() for team, t in sorted(self.teams.items())},
        }
        if self.proposed is not None:
            out["proposed"] = {"source": proposed_source or "", "names": [p.name for p in self.proposed.policies]}
            out["differences"] = self.differences
        return out


def _label_value(changes: Iterable[PodChange], key: str) -> str:
    return next((c.value for c in changes if c.field == "labels" and c.key == key), "")


def _difference(obj: Mapping[str, Any], before: Evaluation, after: Evaluation) -> dict[str, Any]:
    old_v = {(v[0], v[2]) for v in before.violations}
    new_v = {(v[0], v[2]) for v in after.violations}
    old_c = {c.text for c in before.changes}
    new_c = {c.text for c in after.changes}
    out: dict[str, Any] = {
        **describe(obj),
        "verdict": {"from": before.verdict, "to": after.verdict},
        "policy": {"from": before.policy, "to": after.policy},
    }
    if new_v - old_v:
        out["newViolations"] = sorted(m for _, m in new_v - old_v)
    if old_v - new_v:
        out["resolvedViolations"] = sorted(m for _, m in old_v - new_v)
    if new_c - old_c:
        out["newChanges"] = sorted(new_c - old_c)
    if old_c - new_c:
        out["droppedChanges"] = sorted(old_c - new_c)
    return out


# --------------------------------------------------------------------------------------- rendering


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _gpus_text(gpus: Mapping[str, str]) -> str:
    return ", ".join(f"{r}: {n}" for r, n in gpus.items()) or "-"


def render_table(report: Mapping[str, Any]) -> str:
    """The report for a person: findings (or differences), then the namespace and team summaries."""
    lines: list[str] = []
    totals = report["totals"]
    source = report["policies"]["source"]
    if "differences" in report:
        lines.append(f"Policy change preview: {source} -> {report['proposed']['source']}")
        diffs = report["differences"]
        if not diffs:
            lines.append("No object changes verdict or injections.")
        for d in diffs:
            where = f"{d['kind']} {d['namespace']}/{d['name']}"
            lines.append(
                f"{where}: {d['verdict']['from']} -> {d['verdict']['to']}"
                + (
                    f" (policy {d['policy']['from']} -> {d['policy']['to']})"
                    if d["policy"]["from"] != d["policy"]["to"]
                    else ""
                )
            )
            for key, sign in (
                ("newViolations", "+ violation"),
                ("resolvedViolations", "- violation"),
                ("newChanges", "+ adds"),
                ("droppedChanges", "- no longer adds"),
            ):
                lines += [f"    {sign}: {item}" for item in d.get(key, [])]
        lines.append("")
    else:
        lines.append(f"Policies: {source} ({', '.join(report['policies']['names']) or 'none'})")
        findings = report["findings"]
        if findings:
            rows = [["NAMESPACE", "KIND", "NAME", "VERDICT", "POLICY"]]
            rows += [
                [
                    f["namespace"],
                    f["kind"],
                    f["name"],
                    f["verdict"].upper() if f["verdict"] == "refused" else f["verdict"],
                    f["policy"],
                ]
                for f in findings
            ]
            header, *body = _columns(rows)
            lines.append(header)
            for finding, row in zip(findings, body, strict=True):
                lines.append(row)
                if finding.get("error"):
                    lines.append(f"    error: {finding['error']}")
                for v in finding.get("violations", []):
                    how = "refused" if v["enforced"] else "violation"
                    lines.append(f"    {how}: {v['message']}")
                for c in finding.get("wouldAdd", []):
                    lines.append(f"    lacks: {c['change']}")
                for c in finding.get("podsWillGet", []):
                    lines.append(f"    pods will get: {c['change']}")
                if finding.get("note"):
                    lines.append(f"    note: {finding['note']}")
        else:
            lines.append("No findings.")
        lines.append("")
    for title, key in (("NAMESPACE", "namespaces"), ("TEAM", "teams")):
        table = report[key]
        if not table:
            continue
        rows = [[title, "GPU PODS", "GPUS", "MISSING LABELS", "REFUSED", "WARNED", "CHANGED", "FINE"]]
        rows += [
            [
                name or "-",
                str(t["gpuPods"]),
                _gpus_text(t["gpus"]),
                str(t["missingAttributionLabels"]),
                str(t["refused"]),
                str(t["warned"]),
                str(t["changed"]),
                str(t["fine"]),
            ]
            for name, t in table.items()
        ]
        lines += [*_columns(rows), ""]
    listed = ", ".join(f"{n} {k}" for k, n in totals["listed"].items()) or "nothing"
    lines.append(
        f"Listed {listed}; audited {totals['audited']}: {totals['refused']} refused, {totals['warned']} "
        f"warned, {totals['changed']} changed, {totals['fine']} fine"
        + (f", {totals['error']} errors" if totals["error"] else "")
        + f" ({totals['skippedOwned']} owned workloads and {totals['skippedFinished']} finished pods "
        "skipped)."
    )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- PolicyReports

REPORT_NAME = "gpugate-audit"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpugate-audit"}
#: Results kept per report: etcd refuses objects over 1.5 MiB (its --max-request-bytes default), and a result is
#: up to about 1 KB. The summary still counts every result.
MAX_RESULTS = 1000
_SEVERITY = {"refused": "high", "warned": "medium", "changed": "medium", "error": "high"}
_RESULT = {"refused": "fail", "warned": "warn", "changed": "fail", "error": "error"}


def policy_reports(report: Mapping[str, Any], *, now: datetime.datetime) -> list[dict[str, Any]]:
    """One wgpolicyk8s.io/v1alpha2 PolicyReport per audited namespace (the shape Kyverno and Policy Reporter
    read; schema: kubernetes-sigs/wg-policy-prototypes policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml).

    A result for each finding; objects without one count as `pass` in the summary only, which keeps a report
    of a namespace with thousands of pods well under the apiserver's object size limit.
    """
    stamp = {"seconds": int(now.timestamp()), "nanos": 0}
    by_namespace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in report["findings"]:
        resource = {k: finding[k] for k in ("apiVersion", "kind", "namespace", "name", "uid") if finding.get(k)}
        base = {
            "source": "gpugate",
            "policy": finding["policy"] or "built-in",
            "category": "GPU",
            "severity": _SEVERITY[finding["verdict"]],
            "timestamp": stamp,
            "resources": [resource],
            "scored": True,
        }
        results = by_namespace[finding["namespace"]]
        for v in finding.get("violations", []):
            results.append(
                {
                    **base,
                    "rule": v["rule"],
                    "result": "fail" if v["enforced"] else "warn",
                    "message": v["message"],
                    "properties": {"path": v["path"]},
                }
            )
        if finding.get("wouldAdd"):
            changes = "; ".join(c["change"] for c in finding["wouldAdd"])
            results.append(
                {
                    **base,
                    "rule": "not-mutated",
                    "result": "fail",
                    "message": f"lacks what gpugate's mutating webhook adds: {changes}. {finding['note']}",
                }
            )
        if finding.get("error"):
            results.append({**base, "rule": "error", "result": "error", "message": finding["error"]})
    out = []
    for namespace, tally in report["namespaces"].items():
        results = by_namespace.get(namespace, [])
        summary = Counter(r["result"] for r in results)
        if len(results) > MAX_RESULTS:
            left_out = len(results) - MAX_RESULTS + 1
            results = [
                *results[: MAX_RESULTS - 1],
                {
                    "source": "gpugate",
                    "policy": "gpugate-audit",
                    "rule": "truncated",
                    "result": "skip",
                    "timestamp": stamp,
                    "message": f"{left_out} more results left out (the summary counts them): "
                    f"run gpugate audit -n {namespace} for all of them",
                },
            ]
        out.append(
            {
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport",
                "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
                "summary": {
                    "pass": tally["fine"],
                    "fail": summary["fail"],
                    "warn": summary["warn"],
                    "error": summary["error"],
                    "skip": 0,
                },
                "results": results,
            }
        )
    return out
