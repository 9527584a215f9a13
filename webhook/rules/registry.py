"""The rule registry: every mutator and validator registers itself with what it is; the engine only iterates.

As in Kubernetes' pod-security-admission (policy/registry.go), each rule lives in one module, registers when
its package loads, and carries a record: whether it mutates or validates, which pods it looks at (GPU pods,
pods without GPUs, any), and whether it is built in. Built-in rules run with or without a governing policy;
every other rule runs only under one, so a pod no policy governs sees built-in violations only (a property
test pins this). Separately, a violation marked ``builtin`` denies whatever the policy's mode, because the
apiserver would refuse the object anyway (GPU quantities and placement).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..policy.model import BUILTIN
from .base import Change, PodContext, PodEditor, PodView, Violation

Action = Literal["mutate", "validate"]
Pods = Literal["gpu", "non-gpu", "any"]
Validator = Callable[[PodView, PodContext], list[Violation]]
Mutator = Callable[[PodEditor, PodContext], list[Change]]


@dataclass(frozen=True)
class Rule:
    name: str
    action: Action
    pods: Pods
    builtin: bool
    run: Callable[[Any, PodContext], list[Any]]

    def applies(self, ctx: PodContext) -> bool:
        if not self.builtin and ctx.policy is BUILTIN:
            return False
        if self.pods == "any":
            return True
        return ctx.gpu.holds_gpu == (self.pods == "gpu")


_RULES: list[Rule] = []


def validator(name: str, *, pods: Pods, builtin: bool = False) -> Callable[[Validator], Validator]:
    def register(fn: Validator) -> Validator:
        _RULES.append(Rule(name, "validate", pods, builtin, fn))
        return fn

    return register


def mutator(name: str, *, pods: Pods) -> Callable[[Mutator], Mutator]:
    """Mutators run in registration order (the order ``rules/__init__`` imports their modules)."""

    def register(fn: Mutator) -> Mutator:
        _RULES.append(Rule(name, "mutate", pods, False, fn))
        return fn

    return register


def rules(action: Action) -> tuple[Rule, ...]:
    return tuple(r for r in _RULES if r.action == action)


def validate_pod(pod: PodView, ctx: PodContext, *, builtin_only: bool = False) -> list[Violation]:
    return [v for r in rules("validate") if r.applies(ctx) and (r.builtin or not builtin_only) for v in r.run(pod, ctx)]


def mutate_pod(editor: PodEditor, ctx: PodContext) -> list[Change]:
    return [c for r in rules("mutate") if r.applies(ctx) for c in r.run(editor, ctx)]
