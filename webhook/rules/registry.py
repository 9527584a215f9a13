"""The rule registry: every rule registers itself with a record of what it is; the engine only iterates.

As in Kubernetes' pod-security-admission (policy/registry.go), each rule topic lives in one module and
registers when its package loads. Its record (``Rule``) names the topic, gives its place in the run order,
and declares the pod fields it reads (the JSON-type guard checks exactly those) and the fields its mutators
touch (the engine's "not mutated" check and the audit's change descriptions read them). Each of its
functions (``Check``) says whether it mutates or validates, which pods it looks at (GPU pods, pods without
GPUs, any), whether it needs a governing policy (a check that does not runs on every pod, so a pod no
policy governs sees only those: a property test pins this), and what it means on UPDATE.

The registry validates itself when ``rules`` finishes loading: unique names and orders, known actions and
pods, fields declared, and every module of the package registered (see ``Registry.seal``).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..policy.model import BUILTIN
from .base import Change, PodContext, PodEditor, PodView, Touch, Violation

Action = Literal["mutate", "validate"]
Pods = Literal["gpu", "non-gpu", "any"]
#: What a check means on UPDATE. ``new-only``: only what the update made worse counts (a violation the old
#: object had too is not the user's doing now; for a mutator: a change the old object lacked too is not
#: required). ``all``: every violation counts (a check that compares old and new itself). ``skip``: a
#: mutator whose changes are not required after UPDATE (its fields are guarded by a check of its own).
OnUpdate = Literal["new-only", "all", "skip"]
Validator = Callable[[PodView, PodContext], list[Violation]]
Mutator = Callable[[PodEditor, PodContext], list[Change]]
#: A check of a Binding (``pods/binding``): the binding object and the label keys the policies attribute.
BindingCheck = Callable[[Mapping[str, Any], set[str]], list[Violation]]

#: Modules of ``rules`` that hold the shared vocabulary or a fact the engine computes once per pod, not a rule.
INFRASTRUCTURE = frozenset({"base", "registry", "choice"})


class RegistryError(Exception):
    """The registered rules are inconsistent; raised while the rules package loads."""


@dataclass(frozen=True, eq=False)
class Check:
    """One registered function of a rule."""

    rule: Rule
    action: Action
    pods: Pods
    needs_policy: bool
    on_update: OnUpdate
    run: Callable[[Any, PodContext], list[Any]]

    @property
    def name(self) -> str:
        return self.rule.name

    def applies(self, ctx: PodContext) -> bool:
        if self.needs_policy and ctx.policy is BUILTIN:
            return False
        if self.pods == "any":
            return True
        return ctx.gpu.holds_gpu == (self.pods == "gpu")


@dataclass(eq=False)
class Rule:
    """One rule topic: its name (what violations and metrics carry), its place in the run order, the pod
    fields it reads (path -> JSON schema, see ``pods.fields``) and the fields its mutators touch."""

    name: str
    order: int
    reads: Mapping[str, Any]
    touches: tuple[Touch, ...] = ()
    module: str = ""
    registry: Registry | None = None
    checks: list[Check] = field(default_factory=list)
    #: Checks of a Binding, which carries no pod (``binding``).
    bindings: list[BindingCheck] = field(default_factory=list)

    def binding(self, fn: BindingCheck) -> BindingCheck:
        """Register a check of Bindings: the engine runs every rule's on a ``pods/binding`` request."""
        self.bindings.append(fn)
        return fn

    def validator(
        self, *, pods: Pods, needs_policy: bool = True, on_update: OnUpdate = "new-only"
    ) -> Callable[[Validator], Validator]:
        def register(fn: Validator) -> Validator:
            self._add(Check(self, "validate", pods, needs_policy, on_update, fn))
            return fn

        return register

    def mutator(self, *, pods: Pods, on_update: OnUpdate = "new-only") -> Callable[[Mutator], Mutator]:
        def register(fn: Mutator) -> Mutator:
            self._add(Check(self, "mutate", pods, True, on_update, fn))
            return fn

        return register

    def touch(self, name: str) -> Touch:
        for touch in self.touches:
            if touch.name == name:
                return touch
        raise RegistryError(f'rule "{self.name}" changed {name!r}, which it does not declare in touches')

    def _add(self, check: Check) -> None:
        problems = _check_problems(check)
        if problems:
            raise RegistryError(f'rule "{self.name}" ({self.module}): ' + "; ".join(problems))
        self.checks.append(check)
        if self.registry is not None:
            self.registry.invalidate()


def _check_problems(check: Check) -> list[str]:
    problems = []
    if check.action not in get_args(Action):
        problems.append(f"unknown action {check.action!r}")
    if check.pods not in get_args(Pods):
        problems.append(f"unknown pods {check.pods!r} (one of {', '.join(get_args(Pods))})")
    allowed: tuple[str, ...] = ("new-only", "all") if check.action == "validate" else ("new-only", "skip")
    if check.on_update not in allowed:
        problems.append(f"on_update {check.on_update!r} for a {check.action} check (one of {', '.join(allowed)})")
    if check.action == "mutate" and not check.rule.touches:
        problems.append("a mutator, but the rule declares no touches")
    return problems


class Registry:
    """The rules in force, in their declared order."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []
        self._ordered: dict[Action, tuple[Check, ...]] | None = None

    def rule(
        self, name: str, *, order: int, reads: Mapping[str, Any], touches: Iterable[Touch] = (), module: str = ""
    ) -> Rule:
        """Register a rule topic; its module calls this once, at import, and decorates its checks with it."""
        rule = Rule(name, order, dict(reads), tuple(touches), module=module, registry=self)
        problems = []
        if not name or name != name.strip():
            problems.append("needs a name")
        if any(r.name == name for r in self._rules):
            problems.append(f'the name "{name}" is already registered by {_owner(self._rules, name)}')
        if any(r.order == order for r in self._rules):
            taken = next(r for r in self._rules if r.order == order)
            problems.append(f'order {order} is already taken by rule "{taken.name}"')
        if not reads:
            problems.append("declares no fields it reads (reads=...)")
        names = [t.name for t in rule.touches]
        if len(set(names)) != len(names):
            problems.append(f"declares a touched field twice ({', '.join(names)})")
        if problems:
            raise RegistryError(f'rule "{name}" ({module or "?"}): ' + "; ".join(problems))
        self._rules.append(rule)
        self.invalidate()
        return rule

    def invalidate(self) -> None:
        self._ordered = None

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(sorted(self._rules, key=lambda r: r.order))

    def checks(self, action: Action) -> tuple[Check, ...]:
        """The checks of one action, in rule order and, within a rule, in the order its module defines them."""
        if self._ordered is None:
            ordered = [c for r in self.rules for c in r.checks]
            self._ordered = {
                "mutate": tuple(c for c in ordered if c.action == "mutate"),
                "validate": tuple(c for c in ordered if c.action == "validate"),
            }
        return self._ordered[action]

    def touches(self) -> tuple[Touch, ...]:
        """Every field a mutator may change, once each, in rule order."""
        seen: dict[str, Touch] = {}
        for rule in self.rules:
            for touch in rule.touches:
                seen.setdefault(touch.path, touch)
        return tuple(seen.values())

    def binding_violations(self, binding: Mapping[str, Any], attribution_keys: set[str]) -> list[Violation]:
        """What every rule's binding checks find in a Binding, in rule order."""
        return [v for rule in self.rules for check in rule.bindings for v in check(binding, attribution_keys)]

    def reads(self) -> list[tuple[str, Any]]:
        """(path, schema) of every field a rule reads, in rule order."""
        return [(path, schema) for rule in self.rules for path, schema in rule.reads.items()]

    def seal(self, package: str, path: Iterable[str]) -> None:
        """Check the registry once the package has loaded: every module in ``path`` registered a rule, and
        every rule has at least one check. A module left out of the package's imports would otherwise never
        run, silently."""
        problems = []
        registered = {r.module for r in self._rules}
        for info in pkgutil.iter_modules(list(path)):
            module = f"{package}.{info.name}"
            if info.name not in INFRASTRUCTURE and module not in registered:
                problems.append(f"{module} registers no rule (is it imported in {package}/__init__.py?)")
        problems += [f'rule "{r.name}" ({r.module}) has no validator or mutator' for r in self._rules if not r.checks]
        if problems:
            raise RegistryError("; ".join(problems))


def _owner(rules: list[Rule], name: str) -> str:
    return next((r.module for r in rules if r.name == name), "?")


REGISTRY = Registry()


def rule(name: str, *, order: int, reads: Mapping[str, Any], touches: Iterable[Touch] = (), module: str) -> Rule:
    """Register a rule topic in the registry the engine reads (``module``: the caller's ``__name__``)."""
    return REGISTRY.rule(name, order=order, reads=reads, touches=touches, module=module)


def checks(action: Action) -> tuple[Check, ...]:
    return REGISTRY.checks(action)


def validations(pod: PodView, ctx: PodContext, *, policy_free_only: bool = False) -> list[tuple[Check, Violation]]:
    """Each violation with the check that found it. ``policy_free_only``: only checks that need no policy."""
    return [
        (c, v)
        for c in REGISTRY.checks("validate")
        if c.applies(ctx) and not (policy_free_only and c.needs_policy)
        for v in c.run(pod, ctx)
    ]


def validate_pod(pod: PodView, ctx: PodContext, *, policy_free_only: bool = False) -> list[Violation]:
    return [v for _, v in validations(pod, ctx, policy_free_only=policy_free_only)]


def mutations(editor: PodEditor, ctx: PodContext) -> list[tuple[Check, Change]]:
    """Each change with the check that made it; a change to a field its rule does not declare is a bug."""
    out = []
    for check in REGISTRY.checks("mutate"):
        if check.applies(ctx):
            for change in check.run(editor, ctx):
                check.rule.touch(change.field)  # raises for an undeclared field
                out.append((check, change))
    return out


def mutate_pod(editor: PodEditor, ctx: PodContext) -> list[Change]:
    return [c for _, c in mutations(editor, ctx)]
