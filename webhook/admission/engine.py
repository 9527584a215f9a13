"""The engine: mutate or validate one admission request against the governing policy. No I/O here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import rules  # noqa: F401  (registers every rule)
from ..inventory.model import Inventory, ScalablePool, claim_of, declared_pool
from ..pods.gpus import gpu_use
from ..pods.objects import DEFAULTED_GROUPS, PodShape, dig, group_of, shapes_of, workload_kinds
from ..pods.operated import operated_pods, operator_scheduler, runtime_note
from ..policy.keys import MUTATED_ANNOTATION, POLICY_ANNOTATION
from ..policy.model import BUILTIN, NamespaceLabelsUnavailable, NodePoolDecl
from ..rules.base import Change, PodContext, PodEditor, PodView, Violation
from ..rules.choice import resolve
from ..rules.registry import REGISTRY, Check, mutations, validate_pod, validations
from .claims import RULE as LIMITS_RULE
from .claims import claim_pods, is_claim, over_with_pods, validate_claim
from .decision import Decision, Environment, Subject, allowed, denied, fit, labels_unavailable, pack, verdict
from .patch import make_patch

# --------------------------------------------------------------------------------------------- subjects


def _declared(pool: NodePoolDecl) -> ScalablePool:
    return declared_pool(
        pool.name, labels=pool.labels, taints=pool.taints, allocatable=pool.allocatable, max_nodes=pool.max_nodes
    )


def _fleet(env: Environment) -> Inventory | None:
    """The inventory with the pools the policy directory declares, None while it is unknown."""
    fleet = env.fleet()
    if fleet is not None and env.policies.pools:
        pools = env.policies.pools
        fleet = fleet.with_pools(pools, lambda: [_declared(p) for p in pools])
    return fleet


def _subjects(
    obj: Any, request: Mapping[str, Any], env: Environment, *, old: Mapping[str, Any] | None = None
) -> list[Subject] | None:
    """Every pod template in ``obj`` with its context, or None for kinds gpugate does not read; then the pods an
    operator builds from fields that are not templates (``pods.operated``), never mutable.
    ``old``: the object before an UPDATE, whose templates at the same paths are each subject's ``old``."""
    if not isinstance(obj, Mapping):
        return None
    workloads = workload_kinds(env.policies.workloads)
    shapes = shapes_of(obj, name=str(request.get("name") or ""), workloads=workloads)
    if shapes is None:
        return None
    namespace = str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
    cache: list[Mapping[str, str] | None] = []
    fleet = _fleet(env)
    defaulted = group_of(str(obj.get("apiVersion") or "")) in DEFAULTED_GROUPS
    set_by_operator = operator_scheduler(obj)

    def namespace_labels() -> Mapping[str, str] | None:
        if not cache:
            # A cluster-scoped object (a ClusterTrainingRuntime) is in no namespace, so has no namespace labels.
            cache.append(env.namespace_labels(namespace) if namespace else {})
        return cache[0]

    def subject(
        shape: PodShape, meta: Mapping[str, Any], spec: Mapping[str, Any], before: PodView | None, *, operated: bool
    ) -> Subject:
        policy = env.policies.governing(
            namespace=namespace, pod_labels=meta.get("labels") or {}, namespace_labels=namespace_labels
        )
        labels: Mapping[str, str] = {}
        selector_keys = shape.selector_keys
        if policy.uses_namespace_labels:
            found = namespace_labels()
            if found is None:
                raise NamespaceLabelsUnavailable(namespace)
            labels = found
        ctx = PodContext(
            shape=shape,
            policy=policy,
            namespace=namespace,
            namespace_labels=labels,
            operation=str(request.get("operation")),
            object_meta=obj.get("metadata") or {},
            gpu=gpu_use(
                meta,
                spec,
                policy,
                namespace=namespace,
                inventory=fleet,
                claims=env.claims,
                defaulted=defaulted,
                # A pod template is what each pod is created with; a pod's spec on UPDATE may be a scheduler's bind.
                created=shape.is_template or str(request.get("operation")) == "CREATE",
                operator_scheduler=set_by_operator if shape.is_template else None,
            ),
            old=before,
            # The pods an operator builds from its own fields cannot be patched here: what they get is reported.
            mutable=not operated and (not shape.is_template or policy.mutate_templates),
            fleet=fleet,
            selector=dig(obj, selector_keys) if selector_keys and not operated else None,
            sub_resource=str(request.get("subResource") or ""),
        )
        view = PodView(meta, spec)
        # The model-class choice, once per pod: model selection, runtime class and feasibility all read it.
        return Subject(view, dataclasses.replace(ctx, model=resolve(view, ctx)))

    subjects = []
    for shape in shapes:
        spec = dig(obj, shape.spec_keys)
        meta = dig(obj, shape.meta_keys) or {}
        if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
            continue
        old_spec = dig(old, shape.spec_keys) if old is not None else None
        old_meta = dig(old, shape.meta_keys) if old is not None else None
        before = (
            PodView(old_meta if isinstance(old_meta, Mapping) else {}, old_spec)
            if isinstance(old_spec, Mapping)
            else None
        )
        subjects.append(subject(shape, meta, spec, before, operated=False))
    pods = operated_pods(obj, namespace=namespace, runtimes=env.runtimes)
    if pods:
        # Each judged inside a stand-in object (operated[i]), so that the rules and mutators read and name it as
        # any template; Subject.located names the field of the admitted object instead.
        root = {**obj, "operated": [{"metadata": p.metadata, "spec": p.spec} for p in pods]}
        previous = {p.label: p for p in operated_pods(old, namespace=namespace, runtimes=env.runtimes)} if old else {}
        name = shapes[0].name if shapes else str((obj.get("metadata") or {}).get("name") or request.get("name") or "")
        for index, pod in enumerate(pods):
            was = previous.get(pod.label)
            shape = PodShape(kind=str(obj.get("kind")), name=name, template=("operated", index))
            made = subject(
                shape, pod.metadata, pod.spec, PodView(was.metadata, was.spec) if was else None, operated=True
            )
            subjects.append(Subject(made.view, made.ctx, operated=pod, root=root))
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
            subject.ctx.locate(touch.path),
            "pod",
            f'lacks {c.summary} that policy "{subject.policy.name}" requires',
            "re-create it so gpugate's mutating webhook can add it, or add it yourself",
            # Attribution and a sidecar's void hold in every mode, also when /mutate (fail-open) was skipped.
            security=touch.security,
        )
        for check, c in changes
        if not (update and check.on_update == "skip")
        for touch in (check.rule.touch(c.field),)
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
        (s, s.located(v))
        for s in subjects
        for v in validate_pod(s.view, s.ctx, policy_free_only=True)
        if v.refused_by_apiserver
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
    warnings = [w for touched in changes for _, c in touched if c.warning for w in fit(c.warning)]
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
    warnings = [w for c in kept if c.warning for w in fit(c.warning)]
    return allowed(patch=make_patch(obj, target), warnings=warnings, policy=policy)


def validate(request: Mapping[str, Any], env: Environment) -> Decision:
    """``/validate``: check the final object; on UPDATE only what the update made worse."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return allowed()
    obj = request.get("object")
    if _is_binding(request):
        return _binding(obj, request, env)
    if is_claim(request):  # a claim is judged on its own too: created after its pod, it is still judged
        return _claim(request, env)
    old_obj = request.get("oldObject") if operation == "UPDATE" else None
    try:
        subjects = _subjects(obj, request, env, old=old_obj if isinstance(old_obj, Mapping) else None)
        olds = _subjects(old_obj, request, env) if isinstance(old_obj, Mapping) else None
    except NamespaceLabelsUnavailable as err:
        return labels_unavailable(err)
    where = str(request.get("namespace") or "")
    note = runtime_note(obj, namespace=where, runtimes=env.runtimes) if isinstance(obj, Mapping) else None
    if not subjects or not isinstance(obj, Mapping):
        return allowed(warnings=fit(f"{_named(obj, request)}: {note}") if note else [])
    found: list[tuple[Subject, Violation]] = []
    named = _Naming()
    warnings: list[str] = fit(f"{named.lead(subjects[0], whole=True)}{note}") if note else []
    before_by_shape = {s.shape.template: s for s in olds or []}
    for subject in subjects:
        old = before_by_shape.get(subject.shape.template)
        checked = validations(subject.view, subject.ctx)
        _, (changes,) = _mutations(subject.root or obj, [subject])
        if subject.operated is not None:
            warnings += [w for text in subject.operated.notes for w in fit(f"{named.lead(subject)}{text}")]
        unapplied: list[Violation] = []
        if subject.ctx.mutable:
            unapplied = _unapplied(subject, changes, update=old is not None)
        elif subject.ctx.gpu.holds_gpu and changes:
            first = named.lead(subject)
            warnings += pack(
                f"{named.lead(subject)}pods will get ", [c.summary for _, c in changes], first=f"{first}pods will get "
            )
        if subject.ctx.shape.is_template and subject.ctx.gpu.fractional and subject.ctx.gpu.scheduler is None:
            warnings += fit(f"{named.lead(subject)}{_scheduler_unknown(subject)}")
        violations = [v for _, v in checked] + unapplied
        if old is not None:
            # On UPDATE only what the update made worse counts, unless the check's record says otherwise.
            _, (old_changes,) = _mutations(old.root or old_obj, [old])  # type: ignore[arg-type]
            before = {
                (v.rule, v.path, v.text)
                for v in validate_pod(old.view, old.ctx) + (_unapplied(old, old_changes) if subject.ctx.mutable else [])
            }
            violations = [v for c, v in checked if c.on_update == "all" or (v.rule, v.path, v.text) not in before]
            violations += [v for v in unapplied if (v.rule, v.path, v.text) not in before]
        found += [(subject, subject.located(v)) for v in violations]
    return verdict(subjects, found, warnings=warnings)


def _claim(request: Mapping[str, Any], env: Environment) -> Decision:
    """A ResourceClaim or template alone (``admission.claims``); a ResourceClaim being created, also added to
    the pods that name it and were admitted before it existed (``claim_pods``)."""
    alone = validate_claim(request, env, _fleet(env))
    obj = request.get("object")
    kind = (request.get("kind") or {}).get("kind")
    if (
        not alone.allowed
        or request.get("operation") != "CREATE"
        or kind != "ResourceClaim"
        or not isinstance(obj, Mapping)
    ):
        return alone
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or request.get("name") or "")
    key = ("ResourceClaim", namespace, name)
    created = claim_of({**obj, "kind": "ResourceClaim"})
    found = []
    try:
        for pod, made_from in claim_pods(obj, namespace, name, env):
            before = _limits(pod, namespace, env, key, None)
            after = _limits(pod, namespace, env, key, created)
            if after is None:
                continue
            policy, violations = after
            seen = {(v.path, v.text) for v in (before[1] if before is not None else [])}
            found.append((pod, made_from, policy, [v for v in violations if (v.path, v.text) not in seen]))
    except NamespaceLabelsUnavailable as err:
        return labels_unavailable(err)
    return over_with_pods(alone, name, namespace, found)


def _limits(
    pod: Mapping[str, Any], namespace: str, env: Environment, key: tuple[str, str, str], claim: Any
) -> tuple[Any, list[Violation]] | None:
    """The pod's policy and its ``gpu-limits`` violations with the claim ``key`` read as ``claim`` (None: not
    created yet), every other claim as ``env`` reads it."""
    claims = env.claims

    def lookup(kind: str, ns: str, name: str) -> Any:
        if (kind, ns, name) == key:
            return claim
        return claims(kind, ns, name) if claims is not None else None

    raw = pod.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    as_created = {
        "operation": "CREATE",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": namespace,
        "name": str(meta.get("name") or ""),
        "object": {**pod, "apiVersion": "v1", "kind": "Pod"},
    }
    subjects = _subjects(as_created["object"], as_created, dataclasses.replace(env, claims=lookup))
    if not subjects:
        return None
    subject = subjects[0]
    return subject.policy, [v for v in validate_pod(subject.view, subject.ctx) if v.rule == LIMITS_RULE]


def _scheduler_unknown(subject: Subject) -> str:
    """What a fraction annotation in a template that names no scheduler gets: only the operator knows the scheduler
    of the pods it makes (KubeRay sets it from its own batchScheduler option, pods.operated.OPERATOR_SCHEDULERS)."""
    held = ", ".join(h.removeprefix("annotation ") for h in subject.ctx.gpu.holders if h.startswith("annotation "))
    schedulers = " or ".join(subject.ctx.policy.holders.annotation_schedulers) or "a scheduler that implements it"
    return (
        f"{held} holds a GPU only if the operator gives the pods schedulerName {schedulers} (KubeRay's batchScheduler "
        "option); pods of another scheduler are refused when created"
    )


def _named(obj: Any, request: Mapping[str, Any]) -> str:
    """An object as messages name it when it has no pod template to name it by."""
    meta = (obj.get("metadata") if isinstance(obj, Mapping) else None) or {}
    kind = obj.get("kind") if isinstance(obj, Mapping) else ""
    return f'{kind} "{meta.get("name") or request.get("name") or ""}"'


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
    violations = REGISTRY.binding_violations(obj, keys)
    if not violations:
        return allowed()
    name = str((obj.get("metadata") or {}).get("name") or request.get("name") or "")
    where = f' in namespace "{request.get("namespace")}"' if request.get("namespace") else ""
    lines = [f'Binding of pod "{name}"{where} is refused by gpugate:'] + [f"- {v.message()}" for v in violations]
    return denied("\n".join(lines), violations=violations, policy=BUILTIN.name)


class _Naming:
    """How the warnings of one response name what they are about: the object in the first (``Deployment "x":``,
    ``LeaderWorkerSet "x" leaderWorkerTemplate.leaderTemplate:``), then only the template, or nothing for a kind
    of one template, so that each warning spends its characters on what the pods get (kubectl prints a
    response's warnings together, under the object they came with)."""

    def __init__(self) -> None:
        self.objects: set[str] = set()

    def lead(self, subject: Subject, *, whole: bool = False) -> str:
        described = subject.shape.describe()
        where = described if whole else _where(subject)
        if described not in self.objects:
            self.objects.add(described)
            return f"{where}: "
        short = where.removeprefix(described).strip()
        return f"{short}: " if short else ""


def _where(subject: Subject) -> str:
    """How a warning names a pod template: the object, and which template when its kind has several."""
    shape = subject.shape
    if subject.operated is not None:
        return f"{shape.describe()} {subject.operated.label}"
    template = shape.template_path
    if template in ("", "template", "spec.template", "spec.jobTemplate.spec.template"):
        return shape.describe()
    # A kind that nests a whole object template (AIBrix's StormService, a Trainer runtime's JobSet) is named
    # from inside it: StormService "x" roles[0], not template.spec.roles[0].
    short = template.removeprefix("spec.").removeprefix("template.spec.")
    short = short.removesuffix(".template").removesuffix(".template.spec")
    return f"{shape.describe()} {short}"
