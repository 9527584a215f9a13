"""The vocabulary every rule shares: the pod under review, a violation, a change, and a copy-on-write editor."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..inventory.model import Inventory
from ..pods.gpus import GPUUse
from ..pods.objects import Key, PodShape, dig
from ..policy.classes import ModelClass
from ..policy.model import Policy


@dataclass(frozen=True)
class Violation:
    """Something wrong with a pod: the field, whose it is, what is wrong (apiserver wording) and the fix."""

    rule: str
    path: str
    subject: str
    text: str
    fix: str = ""
    #: Enforced whatever the policy's mode: the apiserver would refuse the object anyway.
    refused_by_apiserver: bool = False
    #: Never denies, whatever the mode: a warning (an audit annotation in audit mode).
    advisory: bool = False
    #: Enforced whatever the mode: a way to reach GPUs the pod did not request or to rewrite attribution.
    #: Only a policy field of the check's own (``nonGPUPods``, ``security``) makes an exception.
    security: bool = False

    @property
    def enforced_in_every_mode(self) -> bool:
        return self.refused_by_apiserver or self.security

    def message(self) -> str:
        head = f"{self.path}: {self.subject}: {self.text}" if self.subject else f"{self.path}: {self.text}"
        return f"{head}; {self.fix}" if self.fix else head

    def short(self) -> str:
        """A one-line form for kubectl warnings (cut to 120 characters by the caller)."""
        return f"{self.subject}: {self.text}" if self.subject else f"{self.path}: {self.text}"


@dataclass(frozen=True)
class Change:
    """One thing a mutator injected: the pod field it touched (a ``Touch`` name its rule declares), and what a
    person should read about it."""

    field: str
    summary: str
    warning: str | None = None


@dataclass(frozen=True)
class PodChange:
    """One difference between a stored pod and the pod /mutate would make of it, in words: the pod field, the
    change, and for a map entry (a label, an annotation, a node selector) its key and new value; ``action`` is
    add, replace or remove."""

    field: str
    text: str
    action: str = "add"
    key: str = ""
    value: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "change": self.text}


@dataclass(frozen=True)
class Touch:
    """A pod field a mutator may change: its name (in ``Change.field`` and the ``gpugate.io/mutated``
    annotation), its path in the pod, whether a running pod can still take the change, and how a change to it
    reads (``describe(stored value, value after /mutate)``)."""

    name: str
    path: str
    #: An UPDATE of a running pod may still change it. k/k pkg/apis/core/validation/validation.go
    #: ValidatePodUpdate: metadata (labels, annotations) and "spec.tolerations (only additions to existing
    #: tolerations)"; runtimeClassName, nodeSelector and affinity are fixed once the pod exists.
    in_place: bool
    describe: Callable[[Any, Any], list[PodChange]]
    #: A final object lacking the change is a security violation (every mode), not a placement one: what
    #: the change guards (attribution, a sidecar's ``void``) is undone when ``/mutate``, which fails open, is skipped.
    security: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.path.split("."))


def map_changes(
    name: str, word: str, before: Any, after: Any, *, skip: frozenset[str] = frozenset(), previous: bool = True
) -> list[PodChange]:
    """The entries ``after`` adds to or changes in the map ``before``, as "<word> key=value" (with "(was old)"
    for a changed one when ``previous``)."""
    old = before if isinstance(before, Mapping) else {}
    out = []
    for key, value in (after if isinstance(after, Mapping) else {}).items():
        if old.get(key) == value or key in skip:
            continue
        text = f"{word} {key}={value}" if key not in old or not previous else f"{word} {key}={value} (was {old[key]})"
        out.append(PodChange(name, text, action="add" if key not in old else "replace", key=key, value=str(value)))
    return out


@dataclass(frozen=True)
class PodView:
    """The pod (or pod template) a validating rule reads: its metadata and spec."""

    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.metadata.get("annotations") or {}


@dataclass(frozen=True)
class Choice:
    """The GPU model class a pod lands in, as far as the policy can tell, and what is wrong with its choice
    (worked out once per pod by ``rules.choice.resolve``)."""

    model_class: ModelClass | None = None
    #: The pod chose its hardware itself (selector, affinity or annotation): gpugate adds nothing...
    own: bool = False
    violations: list[Violation] = field(default_factory=list)
    #: ...except the chosen class's own constraint, when the choice alone also reaches another pool.
    constrain: bool = False


NO_CHOICE = Choice()
NO_GPU = GPUUse(frozenset(), ())


@dataclass(frozen=True)
class PodContext:
    """Everything a rule needs besides the pod itself. Rules never do I/O; it all arrives here."""

    shape: PodShape
    policy: Policy
    namespace: str
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    operation: str = "CREATE"
    #: The admitted object's own metadata (differs from the pod's for workload templates).
    object_meta: Mapping[str, Any] | None = None
    #: How the pod holds GPUs under the policy.
    gpu: GPUUse = NO_GPU
    #: The pod before an UPDATE (None on CREATE).
    old: PodView | None = None
    #: Whether gpugate's mutating webhook could have changed this object (pods on CREATE; templates only
    #: with ``mutateTemplates``): if not, what it would inject is reported, not required.
    mutable: bool = True
    #: The cluster's inventory once it has synced (None: unknown, so no rule judges against it).
    fleet: Inventory | None = None
    #: The label selector beside a workload's template (``PodShape.selector_keys``), None if it has none.
    selector: Any = None
    #: The request's subresource (``status`` for ``pods/status``), "" for the object itself.
    sub_resource: str = ""
    #: The GPU model class the pod lands in (``rules.choice``), worked out once by the engine, as ``gpu`` is.
    model: Choice = NO_CHOICE

    @property
    def counts_as_gpu(self) -> Callable[[str], bool]:
        """Whether a resource is a GPU count resource of this pod: the policy's, or a DRA-backed one (KEP-5004).
        The policy's own (cached) predicate when the pod has no DRA-backed resource: rules call it per resource."""
        if self.gpu.dra is None or not self.gpu.dra.resources:
            return self.policy.counts_as_gpu
        return lambda resource: self.gpu.counts(resource, self.policy)

    def spec_field(self, rest: str) -> str:
        return f"{self.shape.spec_path}.{rest}"

    def meta_field(self, rest: str) -> str:
        return f"{self.shape.meta_path}.{rest}"

    def locate(self, path: str) -> str:
        """A pod-relative path (``spec.tolerations``, ``metadata.labels``) as a path in the admitted object."""
        top, _, rest = path.partition(".")
        return self.meta_field(rest) if top == "metadata" else self.spec_field(rest)


class PodEditor:
    """Edits the pod inside an object without touching the original: containers along the written path are
    copied on first write and everything else is shared, so the diff afterwards only walks what changed.
    """

    def __init__(self, original: Mapping[str, Any], shape: PodShape) -> None:
        self.root: dict[str, Any] = dict(original)
        self.shape = shape
        self._copied: set[tuple[Key, ...]] = {()}

    def on(self, shape: PodShape) -> PodEditor:
        """An editor for another pod template of the same object, sharing this one's copy."""
        other = PodEditor.__new__(PodEditor)
        other.root, other.shape, other._copied = self.root, shape, self._copied
        return other

    def _writable(self, keys: tuple[Key, ...]) -> dict[str, Any]:
        node: Any = self.root
        for depth in range(1, len(keys) + 1):
            key = keys[depth - 1]
            if keys[:depth] not in self._copied:
                current = node[key] if isinstance(key, int) else node.get(key)
                node[key] = (
                    dict(current)
                    if isinstance(current, Mapping)
                    else list(current)
                    if isinstance(current, list)
                    else {}
                )
                self._copied.add(keys[:depth])
            node = node[key]
        return node  # type: ignore[no-any-return]

    # reading ---------------------------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        return dig(self.root, self.shape.meta_keys) or {}

    @property
    def spec(self) -> Mapping[str, Any]:
        return dig(self.root, self.shape.spec_keys) or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.metadata.get("annotations") or {}

    # writing ---------------------------------------------------------------------------------------
    def set_label(self, key: str, value: str) -> None:
        self._writable((*self.shape.meta_keys, "labels"))[key] = value

    def set_annotation(self, key: str, value: str) -> None:
        self._writable((*self.shape.meta_keys, "annotations"))[key] = value

    def remove_label(self, key: str) -> None:
        if key in self.labels:
            del self._writable((*self.shape.meta_keys, "labels"))[key]

    def set_spec(self, key: str, value: Any) -> None:
        self._writable(self.shape.spec_keys)[key] = value

    def set_container_env(self, fld: str, index: int, env: list[Any]) -> None:
        self._writable((*self.shape.spec_keys, fld, index))["env"] = env

    def set_node_selector(self, key: str, value: str) -> None:
        self._writable((*self.shape.spec_keys, "nodeSelector"))[key] = value
