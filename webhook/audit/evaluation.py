"""Audit: what gpugate would say about objects already stored in a cluster, from plain dicts; no I/O here.

Every object goes through gpugate's own decision code (`admission.mutate` and `admission.validate`) as a
synthesized CREATE request, through the pipeline `gpugate check` uses (`admission.offline.judge`): the
mutating pass first, its patch applied, then the validating pass on the result. What that yields for an
object that already exists:

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..admission import Decision, Environment
from ..admission.offline import judge
from ..pods.objects import PodShape, dig, shapes_of, workload_kinds
from ..policy.model import PolicySet, WorkloadKind
from ..rules.base import PodChange
from ..rules.registry import REGISTRY

#: Pods in these phases hold no GPU any more; they are counted, not evaluated.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
VERDICTS = ("refused", "warned", "changed", "fine")


def audited_kinds(*policy_sets: PolicySet | None) -> list[WorkloadKind]:
    """Every kind gpugate reads, Pod first: the registry in `webhook.pods.objects`, plus the kinds the policy
    directories add (GPUWorkloadKind documents)."""
    kinds = workload_kinds()
    for policies in policy_sets:
        kinds.update(workload_kinds(policies.workloads if policies is not None else None))
    return sorted(kinds.values(), key=lambda w: ((w.group, w.kind) != ("", "Pod"), w.group, w.kind))


# ------------------------------------------------------------------------------------------ one object


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


def pod_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[PodChange]:
    """What /mutate's patch does to a pod, in words: the patched pod compared with the stored one field by field
    (the patch itself may add a whole map or list at once, so its operations alone do not read well). Each field
    a rule touches says how a change to it reads (``rules.base.Touch``); other spec fields only that they
    changed."""
    out: list[PodChange] = []
    handled = set()
    for touch in REGISTRY.touches():
        out += touch.describe(dig(before, touch.keys), dig(after, touch.keys))
        if touch.keys[0] == "spec":
            handled.add(touch.keys[1])
    before_spec, after_spec = before.get("spec") or {}, after.get("spec") or {}
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
            enforced = v.refused_by_apiserver or decision.mode == "enforce"
            seen[(v.rule, v.path, v.message())] = enforced
    return tuple((rule, path, message, enforced) for (rule, path, message), enforced in seen.items())


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
    spec, meta = dig(obj, shape.spec_keys), dig(obj, shape.meta_keys)
    if not isinstance(spec, Mapping):
        return []
    meta = meta if isinstance(meta, Mapping) else {}
    if shape.pod_meta is not None:  # a bare PodSpec's pods take only labels and annotations from their holder
        meta = {key: meta[key] for key in ("labels", "annotations") if key in meta}
    template = {"metadata": meta, "spec": spec}
    pod = _pod_of_template(obj, template)
    mutation, _, mutated = judge(pod, env, uid=uid)
    if not mutation.allowed or not mutation.patch:
        return []
    changes = pod_changes(pod, mutated)
    return [PodChange(c.field, f"{prefix}{c.text}", c.action, c.key, c.value) for c in changes] if prefix else changes


def evaluate(obj: Mapping[str, Any], env: Environment, *, uid: str = "audit") -> Evaluation | None:
    """gpugate's verdict on one stored object, or None for an object it does not read."""
    shapes = shapes_of(obj, workloads=workload_kinds(env.policies.workloads))
    if shapes is None:
        return None
    mutation, validation, mutated = judge(obj, env, uid=uid)
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
