"""The decision: mutate or validate one admission request against the governing policy. No I/O here."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .patch import Operation, make_patch
from .pods import PodShape, dig, requests_gpu, shape_of
from .policy.model import BUILTIN, NamespaceLabelsUnavailable, Policy, PolicySet
from .rules import (
    attribution,
    gpu_limits,
    gpu_placement,
    gpu_quantities,
    gpu_shapes,
    model_selection,
    runtime_class,
    tolerations,
    visible_devices,
)
from .rules.base import Change, PodContext, PodEditor, Violation

POLICY_ANNOTATION = "gpugate.io/policy"
MUTATED_ANNOTATION = "gpugate.io/mutated"
WARNING_LIMIT = 120  # api admission/v1 types.go: "Limit warnings to 120 characters if possible."


@dataclass
class Decision:
    """What gpugate answers: allowed or denied, with a patch, warnings and audit annotations."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[Operation] | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    policy: str = ""
    mode: str = ""

    @property
    def verdict(self) -> str:
        if not self.allowed:
            return "error" if self.code >= 500 else "denied"
        return "patched" if self.patch else "allowed"


def allowed(**kw: Any) -> Decision:
    return Decision(allowed=True, **kw)


def denied(message: str, *, code: int = 403, reason: str = "Forbidden", **kw: Any) -> Decision:
    return Decision(allowed=False, code=code, reason=reason, message=message, **kw)


def errored(message: str, *, code: int = 500, reason: str = "InternalError") -> Decision:
    return Decision(allowed=False, code=code, reason=reason, message=message)


@dataclass(frozen=True)
class Environment:
    """What a decision needs besides the request: the policies and a way to read a namespace's labels."""

    policies: PolicySet
    namespace_labels: Callable[[str], Mapping[str, str] | None] = lambda _name: {}


def shorten(text: str, limit: int = WARNING_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pack(prefix: str, items: list[str], limit: int = WARNING_LIMIT) -> list[str]:
    """As few warnings as fit ``limit`` characters each, every one starting with ``prefix``."""
    out: list[str] = []
    current = ""
    for item in items:
        if current and len(prefix) + len(current) + 2 + len(item) > limit:
            out.append(shorten(prefix + current, limit))
            current = ""
        current = f"{current}, {item}" if current else item
    if current:
        out.append(shorten(prefix + current, limit))
    return out


# ------------------------------------------------------------------------------------------ the rules

Check = Callable[[Mapping[str, Any], PodContext], list[Violation]]
Mutator = Callable[[PodEditor, PodContext], list[Change]]

BUILTIN_CHECKS: tuple[Check, ...] = (
    gpu_quantities.require_whole_gpus,
    gpu_placement.require_gpus_in_containers,
)
#: Policy rules for any pod: a zero-GPU request makes a pod that is not a GPU pod, but still wrong.
POLICY_CHECKS: tuple[Check, ...] = (gpu_shapes.require_sensible_gpu_shapes,)
GPU_POD_CHECKS: tuple[Check, ...] = (
    gpu_limits.limit_gpus,
    runtime_class.require_runtime_class,
)
ANY_POD_CHECKS: tuple[Check, ...] = (visible_devices.forbid_visible_devices_override,)
NON_GPU_POD_CHECKS: tuple[Check, ...] = (
    tolerations.forbid_gpu_tolerations_without_gpus,
    runtime_class.forbid_gpu_runtime_without_gpus,
)
GPU_POD_MUTATORS: tuple[Mutator, ...] = (
    runtime_class.inject_runtime_class,
    tolerations.add_gpu_tolerations,
    model_selection.select_model,
    attribution.attribute_to_team,
)
NON_GPU_POD_MUTATORS: tuple[Mutator, ...] = (tolerations.strip_gpu_tolerations_without_gpus,)


@dataclass(frozen=True)
class _Subject:
    """The pod (or pod template) found in an admitted object, with its governing policy."""

    obj: Mapping[str, Any]
    shape: PodShape
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    ctx: PodContext
    gpu: bool

    @property
    def policy(self) -> Policy:
        return self.ctx.policy


def _subject(obj: Any, request: Mapping[str, Any], env: Environment) -> _Subject | None:
    if not isinstance(obj, Mapping):
        return None
    shape = shape_of(obj, name=str(request.get("name") or ""))
    if shape is None:
        return None
    spec = dig(obj, shape.spec_keys)
    meta = dig(obj, shape.meta_keys) or {}
    if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
        return None
    namespace = str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
    cache: list[Mapping[str, str] | None] = []

    def namespace_labels() -> Mapping[str, str] | None:
        if not cache:
            cache.append(env.namespace_labels(namespace))
        return cache[0]

    pod_labels = meta.get("labels") or {}
    policy = env.policies.governing(namespace=namespace, pod_labels=pod_labels, namespace_labels=namespace_labels)
    labels: Mapping[str, str] = {}
    if policy.uses_namespace_labels:
        found = namespace_labels()
        if found is None:
            raise NamespaceLabelsUnavailable(namespace)
        labels = found
    ctx = PodContext(shape=shape, policy=policy, namespace=namespace, namespace_labels=labels,
                     operation=str(request.get("operation")), object_meta=obj.get("metadata") or {})
    return _Subject(obj, shape, meta, spec, ctx, requests_gpu(spec, policy.counts_as_gpu))


def _mutations(subject: _Subject) -> tuple[PodEditor, list[Change]]:
    editor = PodEditor(subject.obj, subject.shape)
    changes: list[Change] = []
    for mutator in GPU_POD_MUTATORS if subject.gpu else NON_GPU_POD_MUTATORS:
        changes += mutator(editor, subject.ctx)
    return editor, changes


def _violations(subject: _Subject) -> list[Violation]:
    checks = BUILTIN_CHECKS + ANY_POD_CHECKS + (GPU_POD_CHECKS if subject.gpu else NON_GPU_POD_CHECKS)
    if subject.policy is not BUILTIN:  # without a policy only the built-in checks run (PRODUCT.md §2)
        checks += POLICY_CHECKS
    found = [v for check in checks for v in check(subject.spec, subject.ctx)]
    if subject.gpu:
        found += model_selection.require_allowed_model(subject.meta, subject.spec, subject.ctx)
    return found


def _unapplied(subject: _Subject, changes: list[Change]) -> list[Violation]:
    """Mutations the policy requires that the final object lacks (the mutating call was skipped)."""
    return [Violation("not-mutated", subject.ctx.spec_field(c.field) if c.field != "labels"
                      else subject.ctx.meta_field("labels"), "pod",
                      f'lacks {c.summary} that policy "{subject.policy.name}" requires',
                      "re-create it so gpugate's mutating webhook can add it, or add it yourself")
            for c in changes]


def _denial_message(subject: _Subject, violations: list[Violation]) -> str:
    policy = subject.policy
    where = f' in namespace "{subject.ctx.namespace}"' if subject.ctx.namespace else ""
    origin = f' ({policy.source})' if policy.source not in ("built-in", "<inline>") else ""
    head = f'{subject.shape.describe()}{where} violates GPU policy "{policy.name}"{origin}:'
    return "\n".join([head, *(f"- {v.message()}" for v in violations)])


def _verdict(subject: _Subject, violations: list[Violation], *, warnings: list[str],
             patch: list[Operation] | None = None) -> Decision:
    """Apply the policy's mode: enforce denies, warn warns, audit records; built-in checks always deny."""
    policy = subject.policy
    enforced = [v for v in violations if v.builtin or policy.mode == "enforce"]
    others = [v for v in violations if v not in enforced]
    common: dict[str, Any] = {"violations": violations, "policy": policy.name, "mode": policy.mode}
    if enforced:
        return denied(_denial_message(subject, enforced), warnings=warnings, **common)
    audit: dict[str, str] = {}
    if others and policy.mode == "warn":
        warnings = warnings + [shorten(f"gpugate: {v.short()}") for v in others]
    elif others:
        audit = {"policy": policy.name, "violations": json.dumps([v.message() for v in others])}
    return allowed(patch=patch or None, warnings=warnings, audit_annotations=audit, **common)


# ---------------------------------------------------------------------------------------- endpoints


def mutate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/mutate``: refuse GPU quantities the apiserver would refuse, then inject what the policy says."""
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed()
    try:
        subject = _subject(request.get("object"), request, env)
    except NamespaceLabelsUnavailable as err:
        return _labels_unavailable(err)
    if subject is None:
        return allowed()
    builtin = [v for check in BUILTIN_CHECKS for v in check(subject.spec, subject.ctx)]
    if builtin:
        return _verdict(subject, builtin, warnings=[])
    if (not subject.shape.is_template and request.get("operation") != "CREATE") or (
        subject.shape.is_template and not subject.policy.mutate_templates
    ):
        return allowed(policy=subject.policy.name)
    editor, changes = _mutations(subject)
    if not changes:
        return allowed(policy=subject.policy.name)
    fields = {c.field for c in changes} | set(filter(None, editor.annotations.get(MUTATED_ANNOTATION, "").split(",")))
    editor.set_annotation(POLICY_ANNOTATION, subject.policy.name)
    editor.set_annotation(MUTATED_ANNOTATION, ",".join(sorted(fields)))
    warnings = [shorten(c.warning) for c in changes if c.warning]
    return allowed(patch=make_patch(subject.obj, editor.root), warnings=warnings, policy=subject.policy.name)


def validate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/validate``: check the final object; on UPDATE only what the update made worse."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return allowed()
    try:
        subject = _subject(request.get("object"), request, env)
        old = _subject(request.get("oldObject"), request, env) if operation == "UPDATE" else None
    except NamespaceLabelsUnavailable as err:
        return _labels_unavailable(err)
    if subject is None:
        return allowed()
    mutable = not subject.shape.is_template or subject.policy.mutate_templates
    violations = _violations(subject)
    _, changes = _mutations(subject)
    warnings: list[str] = []
    if mutable:
        violations += _unapplied(subject, changes)
    elif subject.gpu:
        warnings = pack(f"{subject.shape.describe()}: pods will get ", [c.summary for c in changes])
    if old is not None:
        _, old_changes = _mutations(old)
        before = {(v.rule, v.path, v.text) for v in
                  _violations(old) + (_unapplied(old, old_changes) if mutable else [])}
        violations = [v for v in violations if (v.rule, v.path, v.text) not in before
                      and not (v.rule == "not-mutated" and v.path.endswith(".labels"))]
        if mutable:
            violations += attribution.forbid_attribution_edits(old.meta, subject.meta, subject.ctx)
    return _verdict(subject, violations, warnings=warnings)


def _labels_unavailable(err: NamespaceLabelsUnavailable) -> Decision:
    return errored(f'gpugate cannot read the labels of namespace "{err.namespace}" right now, and a GPU '
                   "policy selects or attributes by them; retry in a few seconds (see gpugate's logs)",
                   code=503, reason="ServiceUnavailable")
