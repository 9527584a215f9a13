"""The decision: mutate or validate one admission request against the governing policy. No I/O here."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import rules  # noqa: F401  (registers every rule)
from .inventory.claims import ClaimLookup
from .inventory.model import Inventory
from .patch import Operation, make_patch
from .pods import PodShape, dig, gpu_use, shapes_of, workload_kinds
from .policy.model import NamespaceLabelsUnavailable, Policy, PolicySet
from .rules.base import Change, PodContext, PodEditor, PodView, Violation
from .rules.registry import mutate_pod, validate_pod

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
    #: The cluster's inventory, or None while it is unknown (not synced, no cluster access, no --fleet).
    fleet: Callable[[], Inventory | None] = lambda: None
    #: Reads a ResourceClaim or ResourceClaimTemplate a pod names, or None when it cannot be known now.
    claims: ClaimLookup | None = None


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


# --------------------------------------------------------------------------------------------- subjects


@dataclass(frozen=True, eq=False)
class _Subject:
    """One pod (or pod template) found in an admitted object, with its governing policy."""

    view: PodView
    ctx: PodContext

    @property
    def policy(self) -> Policy:
        return self.ctx.policy

    @property
    def shape(self) -> PodShape:
        return self.ctx.shape


def _subjects(
    obj: Any, request: Mapping[str, Any], env: Environment, *, old: Mapping[str, Any] | None = None
) -> list[_Subject] | None:
    """Every pod template in ``obj`` with its context, or None for kinds gpugate does not read.
    ``old``: the object before an UPDATE, whose templates at the same paths are each subject's ``old``."""
    if not isinstance(obj, Mapping):
        return None
    workloads = workload_kinds(env.policies.workloads)
    shapes = shapes_of(obj, name=str(request.get("name") or ""), workloads=workloads)
    if shapes is None:
        return None
    namespace = str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
    cache: list[Mapping[str, str] | None] = []
    fleet = env.fleet()

    def namespace_labels() -> Mapping[str, str] | None:
        if not cache:
            cache.append(env.namespace_labels(namespace))
        return cache[0]

    subjects = []
    for shape in shapes:
        spec = dig(obj, shape.spec_keys)
        meta = dig(obj, shape.meta_keys) or {}
        if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
            continue
        pod_labels = meta.get("labels") or {}
        policy = env.policies.governing(namespace=namespace, pod_labels=pod_labels, namespace_labels=namespace_labels)
        labels: Mapping[str, str] = {}
        if policy.uses_namespace_labels:
            found = namespace_labels()
            if found is None:
                raise NamespaceLabelsUnavailable(namespace)
            labels = found
        old_spec = dig(old, shape.spec_keys) if old is not None else None
        old_meta = dig(old, shape.meta_keys) if old is not None else None
        before = (
            PodView(old_meta if isinstance(old_meta, Mapping) else {}, old_spec)
            if isinstance(old_spec, Mapping)
            else None
        )
        mutable = not shape.is_template or policy.mutate_templates
        ctx = PodContext(
            shape=shape,
            policy=policy,
            namespace=namespace,
            namespace_labels=labels,
            operation=str(request.get("operation")),
            object_meta=obj.get("metadata") or {},
            gpu=gpu_use(meta, spec, policy, namespace=namespace, inventory=fleet, claims=env.claims),
            old=before,
            mutable=mutable,
            fleet=fleet,
        )
        subjects.append(_Subject(PodView(meta, spec), ctx))
    return subjects


def _mutations(obj: Mapping[str, Any], subjects: list[_Subject]) -> tuple[PodEditor | None, list[list[Change]]]:
    """One editor over the whole object, and each subject's changes."""
    editor: PodEditor | None = None
    changes: list[list[Change]] = []
    for subject in subjects:
        editor = PodEditor(obj, subject.shape) if editor is None else editor.on(subject.shape)
        changes.append(mutate_pod(editor, subject.ctx))
    return editor, changes


def _unapplied(subject: _Subject, changes: list[Change]) -> list[Violation]:
    """Mutations the policy requires that the final object lacks (the mutating call was skipped)."""
    return [
        Violation(
            "not-mutated",
            subject.ctx.spec_field(c.field) if c.field != "labels" else subject.ctx.meta_field("labels"),
            "pod",
            f'lacks {c.summary} that policy "{subject.policy.name}" requires',
            "re-create it so gpugate's mutating webhook can add it, or add it yourself",
        )
        for c in changes
    ]


def _denial_message(subject: _Subject, found: list[tuple[_Subject, Violation]]) -> str:
    lines = []
    where = f' in namespace "{subject.ctx.namespace}"' if subject.ctx.namespace else ""
    for policy in dict.fromkeys(s.policy for s, _ in found):
        origin = f" ({policy.source})" if policy.source not in ("built-in", "<inline>") else ""
        lines.append(f'{subject.shape.describe()}{where} violates GPU policy "{policy.name}"{origin}:')
        lines += [f"- {v.message()}" for s, v in found if s.policy is policy]
    return "\n".join(lines)


def _verdict(
    subjects: list[_Subject],
    found: list[tuple[_Subject, Violation]],
    *,
    warnings: list[str],
    patch: list[Operation] | None = None,
) -> Decision:
    """Apply each policy's mode: enforce denies, warn warns, audit records; built-in violations always deny,
    advisory ones never do."""
    policy = subjects[0].policy
    enforced = [(s, v) for s, v in found if v.builtin or (s.policy.mode == "enforce" and not v.advisory)]
    others = [(s, v) for s, v in found if not (v.builtin or (s.policy.mode == "enforce" and not v.advisory))]
    violations = [v for _, v in found]
    common: dict[str, Any] = {"violations": violations, "policy": policy.name, "mode": policy.mode}
    if enforced:
        return denied(_denial_message(subjects[0], enforced), warnings=warnings, **common)
    audit: dict[str, str] = {}
    audited = [v for s, v in others if s.policy.mode == "audit"]
    warnings = warnings + [shorten(f"gpugate: {v.short()}") for s, v in others if s.policy.mode != "audit"]
    if audited:
        audit = {"policy": policy.name, "violations": json.dumps([v.message() for v in audited])}
    return allowed(patch=patch or None, warnings=warnings, audit_annotations=audit, **common)


# ---------------------------------------------------------------------------------------- endpoints


def mutate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/mutate``: refuse GPU quantities the apiserver would refuse, then inject what the policy says."""
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed()
    obj = request.get("object")
    try:
        subjects = _subjects(obj, request, env)
    except NamespaceLabelsUnavailable as err:
        return _labels_unavailable(err)
    if not subjects or not isinstance(obj, Mapping):
        return allowed()
    # What the apiserver would refuse anyway is refused here, where it is seen first (its own checks run
    # only after mutating webhooks); everything else is the validating call's to judge.
    builtin = [(s, v) for s in subjects for v in validate_pod(s.view, s.ctx, builtin_only=True) if v.builtin]
    if builtin:
        return _verdict(subjects, builtin, warnings=[])
    policy = subjects[0].policy.name
    is_template = subjects[0].shape.is_template
    mutable = [s for s in subjects if s.ctx.mutable]
    if (not is_template and request.get("operation") != "CREATE") or not mutable:
        return allowed(policy=policy)
    editor, changes = _mutations(obj, mutable)
    if editor is None or not any(changes):
        return allowed(policy=policy)
    warnings = [shorten(c.warning) for touched in changes for c in touched if c.warning]
    for subject, touched in zip(mutable, changes, strict=True):
        if not touched:
            continue
        pod = editor.on(subject.shape)
        fields = {c.field for c in touched} | set(filter(None, pod.annotations.get(MUTATED_ANNOTATION, "").split(",")))
        pod.set_annotation(POLICY_ANNOTATION, subject.policy.name)
        pod.set_annotation(MUTATED_ANNOTATION, ",".join(sorted(fields)))
    return allowed(patch=make_patch(obj, editor.root), warnings=warnings, policy=policy)


def validate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/validate``: check the final object; on UPDATE only what the update made worse."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return allowed()
    obj = request.get("object")
    old_obj = request.get("oldObject") if operation == "UPDATE" else None
    try:
        subjects = _subjects(obj, request, env, old=old_obj if isinstance(old_obj, Mapping) else None)
        olds = _subjects(old_obj, request, env) if isinstance(old_obj, Mapping) else None
    except NamespaceLabelsUnavailable as err:
        return _labels_unavailable(err)
    if not subjects or not isinstance(obj, Mapping):
        return allowed()
    found: list[tuple[_Subject, Violation]] = []
    warnings: list[str] = []
    before_by_shape = {s.shape.template: s for s in olds or []}
    for subject in subjects:
        violations = validate_pod(subject.view, subject.ctx)
        _, (changes,) = _mutations(obj, [subject])
        if subject.ctx.mutable:
            violations += _unapplied(subject, changes)
        elif subject.ctx.gpu.holds_gpu and changes:
            warnings += pack(f"{_where(subject)}: pods will get ", [c.summary for c in changes])
        old = before_by_shape.get(subject.shape.template)
        if old is not None:
            _, (old_changes,) = _mutations(old_obj, [old])  # type: ignore[arg-type]
            before = {
                (v.rule, v.path, v.text)
                for v in validate_pod(old.view, old.ctx) + (_unapplied(old, old_changes) if subject.ctx.mutable else [])
            }
            violations = [
                v
                for v in violations
                if (v.rule == "attribution" and v.text.startswith("attribution label"))
                or (
                    (v.rule, v.path, v.text) not in before
                    and not (v.rule == "not-mutated" and v.path.endswith(".labels"))
                )
            ]
        found += [(subject, v) for v in violations]
    return _verdict(subjects, found, warnings=warnings)


def _where(subject: _Subject) -> str:
    """How a warning names a pod template: the object, and which template when its kind has several."""
    shape = subject.shape
    template = shape.meta_path.removesuffix("metadata").removesuffix(".")
    if template in ("", "template", "spec.template", "spec.jobTemplate.spec.template"):
        return shape.describe()
    short = template.removeprefix("spec.").removesuffix(".template").removesuffix(".template.spec")
    return f"{shape.describe()} {short}"


def _labels_unavailable(err: NamespaceLabelsUnavailable) -> Decision:
    return errored(
        f'gpugate cannot read the labels of namespace "{err.namespace}" right now, and a GPU '
        "policy selects or attributes by them; retry in a few seconds (see gpugate's logs)",
        code=503,
        reason="ServiceUnavailable",
    )
