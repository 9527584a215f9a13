"""What gpugate answers: the Decision, its constructors, and each policy's mode applied to what the rules found."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..inventory.model import Inventory
from ..pods.claims import ClaimLookup
from ..pods.objects import PodShape
from ..pods.operated import OperatedPod, RuntimeLookup
from ..policy.model import NamespaceLabelsUnavailable, Policy, PolicySet
from ..rules.base import PodContext, PodView, Violation
from .patch import Operation

# api admission/v1 types.go: "Limit warnings to 120 characters if possible. Warnings over 256 characters and
# large numbers of warnings may be truncated." The apiserver cuts each warning at 256 runes only once a
# request's warnings pass 4096 runes in all (k8s.io/apiserver pkg/endpoints/filters/warning.go,
# truncateItemRunes / truncateAtTotalRunes, fed by the webhook dispatchers through pkg/warning/context.go).
# So gpugate aims at 120 when it groups items and never writes a warning over 256: it splits, never cuts.
WARNING_LIMIT = 120
WARNING_MAX = 256
CONTINUED = "(continued) "


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
    #: At a ResourceClaim's CREATE, the pods of a namespace that may name it: (namespace, claim name) -> the pods
    #: labelled ``gpugate.io/claims-pending`` with its name or ``Several`` (one bounded list), None when they
    #: cannot be listed now (no cluster, RBAC, the budget spent).
    pending_pods: Callable[[str, str], list[Mapping[str, Any]] | None] | None = None
    #: (namespace, name) -> that Pod, or None when it cannot be read now: the owner of a claim made from a template.
    pod: Callable[[str, str], Mapping[str, Any] | None] | None = None
    #: Finds a TrainJob's TrainingRuntime or ClusterTrainingRuntime where it is visible (``gpugate check`` of a
    #: manifest holding it); None in the server, which judges a runtime when it is applied.
    runtimes: RuntimeLookup | None = None


def fit(text: str, limit: int = WARNING_MAX) -> list[str]:
    """``text`` whole as one warning, or, past ``limit`` characters, split at spaces into several that each
    fit: never cut, so what a pod will get is readable in full in ``kubectl`` output."""
    if len(text) <= limit:
        return [text]
    out: list[str] = []
    current = ""
    for word in text.split(" "):
        piece = f"{current} {word}" if current else word
        if len(piece) <= limit:
            current = piece
            continue
        if current:
            out.append(current)
        while len(CONTINUED + word) > limit:  # one word longer than a warning: split it, nothing dropped
            room = limit - len(CONTINUED)
            out.append(CONTINUED + word[:room])
            word = word[room:]
        current = CONTINUED + word
    if current:
        out.append(current)
    return out


def pack(prefix: str, items: list[str], limit: int = WARNING_LIMIT, *, first: str | None = None) -> list[str]:
    """As few warnings as keep ``limit`` characters each, every one starting with ``prefix`` (the first with
    ``first`` when given: the one that names the object); an item that does not fit beside others gets a
    warning of its own, whole (split, never cut, past WARNING_MAX)."""
    out: list[str] = []
    current = ""
    for item in items:
        lead = first if first is not None and not out else prefix
        if current and len(lead) + len(current) + 2 + len(item) > limit:
            out += fit(lead + current)
            current = ""
        current = f"{current}, {item}" if current else item
    if current:
        out += fit((first if first is not None and not out else prefix) + current)
    return out


@dataclass(frozen=True, eq=False)
class Subject:
    """One pod (or pod template) found in an admitted object, with its governing policy. ``operated``: a pod
    an operator builds from fields that are not a pod template (a TrainJob's resourcesPerNode), judged as
    that pod inside ``root``, a stand-in object whose ``operated[i]`` holds it."""

    view: PodView
    ctx: PodContext
    operated: OperatedPod | None = None
    root: Mapping[str, Any] | None = None

    def located(self, violation: Violation) -> Violation:
        """The violation naming the field of the admitted object (an operated pod's own field otherwise)."""
        if self.operated is None:
            return violation
        within = violation.path.removeprefix(f"{self.shape.template_path}.")
        return replace(violation, path=self.operated.locate(within))

    @property
    def policy(self) -> Policy:
        return self.ctx.policy

    @property
    def shape(self) -> PodShape:
        return self.ctx.shape


def denial_message(subject: Subject, found: list[tuple[Subject, Violation]]) -> str:
    lines = []
    where = f' in namespace "{subject.ctx.namespace}"' if subject.ctx.namespace else ""
    for policy in dict.fromkeys(s.policy for s, _ in found):
        origin = f" ({policy.source})" if policy.source not in ("built-in", "<inline>") else ""
        lines.append(f'{subject.shape.describe()}{where} violates GPU policy "{policy.name}"{origin}:')
        lines += [f"- {v.message()}" for s, v in found if s.policy is policy]
    return "\n".join(lines)


def verdict(
    subjects: list[Subject],
    found: list[tuple[Subject, Violation]],
    *,
    warnings: list[str],
    patch: list[Operation] | None = None,
) -> Decision:
    """Apply each policy's mode: enforce denies, warn warns, audit records; a violation the apiserver would
    refuse anyway and a security one (webhook.rules.base.Violation.security) always deny, an advisory one
    never does."""
    policy = subjects[0].policy
    enforced = [(s, v) for s, v in found if v.enforced_in_every_mode or (s.policy.mode == "enforce" and not v.advisory)]
    others = [
        (s, v) for s, v in found if not (v.enforced_in_every_mode or (s.policy.mode == "enforce" and not v.advisory))
    ]
    violations = [v for _, v in found]
    common: dict[str, Any] = {"violations": violations, "policy": policy.name, "mode": policy.mode}
    if enforced:
        return denied(denial_message(subjects[0], enforced), warnings=warnings, **common)
    audit: dict[str, str] = {}
    audited = [v for s, v in others if s.policy.mode == "audit"]
    warnings = warnings + [w for s, v in others if s.policy.mode != "audit" for w in fit(f"gpugate: {v.short()}")]
    if audited:
        audit = {"policy": policy.name, "violations": json.dumps([v.message() for v in audited])}
    return allowed(patch=patch or None, warnings=warnings, audit_annotations=audit, **common)


def labels_unavailable(err: NamespaceLabelsUnavailable) -> Decision:
    return errored(
        f'gpugate cannot read the labels of namespace "{err.namespace}" right now, and a GPU '
        "policy selects or attributes by them; retry in a few seconds (see gpugate's logs)",
        code=503,
        reason="ServiceUnavailable",
    )
