"""The engine: mutate or validate one admission request against the governing policy. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import rules  # noqa: F401  (registers every rule)
from ..pods.gpus import gpu_use
from ..pods.objects import DEFAULTED_GROUPS, dig, group_of, shapes_of, workload_kinds
from ..policy.keys import MUTATED_ANNOTATION, POLICY_ANNOTATION
from ..policy.model import BUILTIN, NamespaceLabelsUnavailable
from ..rules.attribution import binding_violations
from ..rules.base import Change, PodContext, PodEditor, PodView, Violation
from ..rules.registry import Check, mutations, validate_pod, validations
from .decision import Decision, Environment, Subject, allowed, denied, labels_unavailable, pack, shorten, verdict
from .patch import make_patch

# --------------------------------------------------------------------------------------------- subjects


def _subjects(
    obj: Any, request: Mapping[str, Any], env: Environment, *, old: Mapping[str, Any] | None = None
) -> list[Subject] | None:
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
    defaulted = group_of(str(obj.get("apiVersion") or "")) in DEFAULTED_GROUPS

    def namespace_labels() -> Mapping[str, str] | None:
        if not cache:
            # A cluster-scoped object (a ClusterTrainingRuntime) is in no namespace, so has no namespace labels.
            cache.append(env.namespace_labels(namespace) if namespace else {})
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
        selector_keys = shape.selector_keys
        ctx = PodContext(
            shape=shape,
            policy=policy,
            namespace=namespace,
            namespace_labels=labels,
            operation=str(request.get("operation")),
            object_meta=obj.get("metadata") or {},
            gpu=gpu_use(
                meta, spec, policy, namespace=namespace, inventory=fleet, claims=env.claims, defaulted=defaulted
            ),
            old=before,
            mutable=mutable,
            fleet=fleet,
            selector=dig(obj, selector_keys) if selector_keys else None,
            sub_resource=str(request.get("subResource") or ""),
        )
        subjects.append(Subject(PodView(meta, spec), ctx))
    return subjects


Changes = list[tuple[Check, Change]]


def _mutations(obj: Mapping[str, Any], subjects: list[Subject]) -> tuple[PodEditor | None, list[Changes]]:
    """One editor over the whole object, and each subject's changes with the mutator that made each."""
    editor: PodEditor | None = None
    changes: list[Changes] = []
    for subject in subjects:
        editor = PodEditor(obj, subject.shape) if editor is None else editor.on(subject.shape)
        changes.append(mutations(editor, subject.ctx))
    return editor, changes


def _unapplied(subject: Subject, changes: Changes, *, update: bool = False) -> list[Violation]:
    """Mutations the policy requires that the final object lacks (the mutating call was skipped). On an
    UPDATE, a mutator whose record says ``on_update="skip"`` requires nothing."""
    return [
        Violation(
            "not-mutated",
            subject.ctx.locate(check.rule.touch(c.field).path),
            "pod",
            f'lacks {c.summary} that policy "{subject.policy.name}" requires',
            "re-create it so gpugate's mutating webhook can add it, or add it yourself",
        )
        for check, c in changes
        if not (update and check.on_update == "skip")
    ]


# ---------------------------------------------------------------------------------------- endpoints


def mutate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/mutate``: refuse GPU quantities the apiserver would refuse, then inject what the policy says."""
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed()
    obj = request.get("object")
    old_obj = request.get("oldObject")
    debug = _adds_ephemeral_containers(request)
    try:
        subjects = _subjects(obj, request, env, old=old_obj if debug and isinstance(old_obj, Mapping) else None)
    except NamespaceLabelsUnavailable as err:
        return labels_unavailable(err)
    if not subjects or not isinstance(obj, Mapping):
        return allowed()
    # What the apiserver would refuse anyway is refused here, where it is seen first (its own checks run
    # only after mutating webhooks); everything else is the validating call's to judge.
    refused = [
        (s, v) for s in subjects for v in validate_pod(s.view, s.ctx, policy_free_only=True) if v.refused_by_apiserver
    ]
    if refused:
        return verdict(subjects, refused, warnings=[])
    policy = subjects[0].policy.name
    if debug:
        return _mutate_ephemeral_containers(obj, subjects[0], policy)
    is_template = subjects[0].shape.is_template
    mutable = [s for s in subjects if s.ctx.mutable]
    if (not is_template and request.get("operation") != "CREATE") or not mutable:
        return allowed(policy=policy)
    editor, changes = _mutations(obj, mutable)
    if editor is None or not any(changes):
        return allowed(policy=policy)
    warnings = [shorten(c.warning) for touched in changes for _, c in touched if c.warning]
    for subject, touched in zip(mutable, changes, strict=True):
        if not touched:
            continue
        pod = editor.on(subject.shape)
        fields = {c.field for _, c in touched} | set(
            filter(None, pod.annotations.get(MUTATED_ANNOTATION, "").split(","))
        )
        pod.set_annotation(POLICY_ANNOTATION, subject.policy.name)
        pod.set_annotation(MUTATED_ANNOTATION, ",".join(sorted(fields)))
    return allowed(patch=make_patch(obj, editor.root), warnings=warnings, policy=policy)


def _adds_ephemeral_containers(request: Mapping[str, Any]) -> bool:
    """An UPDATE of a Pod's ``ephemeralcontainers`` subresource: how ``kubectl debug`` adds a container."""
    return (
        request.get("operation") == "UPDATE"
        and request.get("subResource") == "ephemeralcontainers"
        and (request.get("kind") or {}).get("kind") == "Pod"
    )


def _mutate_ephemeral_containers(obj: Mapping[str, Any], subject: Subject, policy: str) -> Decision:
    """Only what the mutators do to ``spec.ephemeralContainers``: of this update the apiserver keeps nothing
    else (k/k pkg/registry/core/pod/strategy.go, podEphemeralContainersStrategy.PrepareForUpdate), so the patch
    changes nothing else, and no annotation records it."""
    editor, (changes,) = _mutations(obj, [subject])
    kept = [c for check, c in changes if check.rule.touch(c.field).path == "spec.ephemeralContainers"]
    spec, after = obj.get("spec"), (editor.root if editor is not None else obj).get("spec")
    if not kept or not isinstance(spec, Mapping) or not isinstance(after, Mapping):
        return allowed(policy=policy)
    target = {**obj, "spec": {**spec, "ephemeralContainers": after.get("ephemeralContainers")}}
    warnings = [shorten(c.warning) for c in kept if c.warning]
    return allowed(patch=make_patch(obj, target), warnings=warnings, policy=policy)


def validate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/validate``: check the final object; on UPDATE only what the update made worse."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return allowed()
    obj = request.get("object")
    if _is_binding(request):
        return _binding(obj, request, env)
    old_obj = request.get("oldObject") if operation == "UPDATE" else None
    try:
        subjects = _subjects(obj, request, env, old=old_obj if isinstance(old_obj, Mapping) else None)
        olds = _subjects(old_obj, request, env) if isinstance(old_obj, Mapping) else None
    except NamespaceLabelsUnavailable as err:
        return labels_unavailable(err)
    if not subjects or not isinstance(obj, Mapping):
        return allowed()
    found: list[tuple[Subject, Violation]] = []
    warnings: list[str] = []
    before_by_shape = {s.shape.template: s for s in olds or []}
    for subject in subjects:
        old = before_by_shape.get(subject.shape.template)
        checked = validations(subject.view, subject.ctx)
        _, (changes,) = _mutations(obj, [subject])
        unapplied: list[Violation] = []
        if subject.ctx.mutable:
            unapplied = _unapplied(subject, changes, update=old is not None)
        elif subject.ctx.gpu.holds_gpu and changes:
            warnings += pack(f"{_where(subject)}: pods will get ", [c.summary for _, c in changes])
        violations = [v for _, v in checked] + unapplied
        if old is not None:
            # On UPDATE only what the update made worse counts, unless the check's record says otherwise.
            _, (old_changes,) = _mutations(old_obj, [old])  # type: ignore[arg-type]
            before = {
                (v.rule, v.path, v.text)
                for v in validate_pod(old.view, old.ctx) + (_unapplied(old, old_changes) if subject.ctx.mutable else [])
            }
            violations = [v for c, v in checked if c.on_update == "all" or (v.rule, v.path, v.text) not in before]
            violations += [v for v in unapplied if (v.rule, v.path, v.text) not in before]
        found += [(subject, v) for v in violations]
    return verdict(subjects, found, warnings=warnings)


def _is_binding(request: Mapping[str, Any]) -> bool:
    resource = request.get("resource") or {}
    return request.get("subResource") == "binding" or (
        isinstance(resource, Mapping) and resource.get("group") == "" and resource.get("resource") == "bindings"
    )


def _binding(obj: Any, request: Mapping[str, Any], env: Environment) -> Decision:
    """A Binding writes its labels and annotations into the pod it binds: none may be gpugate's."""
    if not isinstance(obj, Mapping):
        return allowed()
    keys = {a.key for p in env.policies.policies for a in p.attribution}
    violations = binding_violations(obj, keys)
    if not violations:
        return allowed()
    name = str((obj.get("metadata") or {}).get("name") or request.get("name") or "")
    where = f' in namespace "{request.get("namespace")}"' if request.get("namespace") else ""
    lines = [f'Binding of pod "{name}"{where} is refused by gpugate:'] + [f"- {v.message()}" for v in violations]
    return denied("\n".join(lines), violations=violations, policy=BUILTIN.name)


def _where(subject: Subject) -> str:
    """How a warning names a pod template: the object, and which template when its kind has several."""
    shape = subject.shape
    template = shape.meta_path.removesuffix("metadata").removesuffix(".")
    if template in ("", "template", "spec.template", "spec.jobTemplate.spec.template"):
        return shape.describe()
    # A kind that nests a whole object template (AIBrix's StormService, a Trainer runtime's JobSet) is named
    # from inside it: StormService "x" roles[0], not template.spec.roles[0].
    short = template.removeprefix("spec.").removeprefix("template.spec.")
    short = short.removesuffix(".template").removesuffix(".template.spec")
    return f"{shape.describe()} {short}"
