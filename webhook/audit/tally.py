"""The audit of a whole cluster: every evaluation tallied by namespace, workload and verdict, the policy-change
preview, and the report dict the renderers and PolicyReports read."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..admission import Environment
from ..pods.gpus import scheduled_gpus
from ..pods.objects import DEFAULTED_GROUPS, controller_ref, group_of, through_replica_set
from ..pods.quantity import format_quantity
from ..policy.keys import AUDIT_API_VERSION, TEAM_LABEL
from ..policy.model import BUILTIN, Policy, PolicySet
from ..rules.base import PodChange
from ..rules.registry import REGISTRY
from .evaluation import (
    FINISHED_PHASES,
    VERDICTS,
    Evaluation,
    audited_kinds,
    evaluate,
)


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
    """(group, kind) of the object's controller."""
    ref = controller_ref(obj.get("metadata") or {})
    return (group_of(str(ref.get("apiVersion", ""))), str(ref.get("kind", ""))) if ref is not None else None


#: Controllers whose pods `kubectl rollout restart` re-creates.
_RESTARTABLE = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


def _remedy(obj: Mapping[str, Any], changes: Iterable[PodChange]) -> str:
    """How to get what the mutating webhook would have added onto a pod that already runs."""
    fields = {c.field for c in changes}
    meta = obj.get("metadata") or {}
    owner = controller_ref(meta)
    if owner is None:
        recreate = "delete and re-create it"
    else:
        kind, name = through_replica_set(str(owner.get("kind", "")), str(owner.get("name", "")), meta)
        recreate = (
            f"re-create it: kubectl rollout restart {kind.lower()}/{name}"
            if kind in _RESTARTABLE
            else f"delete it and let its {kind} {name} re-create it"
        )
    touches = {t.name: t for t in REGISTRY.touches()}
    changed = [touches[f] for f in fields if f in touches]
    if len(changed) == len(fields) and all(t.keys[0] == "metadata" for t in changed):
        return "the mutating webhook never saw this pod; labels can be added in place (kubectl label), or " + recreate
    if len(changed) == len(fields) and all(t.in_place for t in changed):
        return (
            "the mutating webhook never saw this pod; labels and added tolerations can be set in place, or " + recreate
        )
    fixed = [t.name for t in touches.values() if not t.in_place]
    return f"the mutating webhook never saw this pod, and a running pod's {_words(fixed)} cannot change: " + recreate


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


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
        self.counts[f"listed:{key[1] if key[0] in DEFAULTED_GROUPS else f'{key[1]}.{key[0]}'}"] += 1
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
            gpus = scheduled_gpus(obj.get("spec") or {}, policy.counts_as_gpu)
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
            "apiVersion": AUDIT_API_VERSION,
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
