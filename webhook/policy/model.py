"""The GPU policy model: frozen dataclasses, label-name validators, and choosing the governing policy. No I/O."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

API_VERSION = "gpugate.io/v1"
KIND = "GPUPolicy"

#: What counts as a GPU when a policy names no ``gpuResources`` (PRODUCT.md §2).
DEFAULT_GPU_RESOURCES: tuple[str, ...] = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
)

#: The pod label through which a pod names its GPU model class.
MODEL_LABEL = "gpugate.io/model"

Mode = Literal["enforce", "warn", "audit"]
NonGPUTolerations = Literal["deny", "strip", "allow"]

# apimachinery pkg/util/validation/validation.go: qualified names and label values.
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_label_key(key: str) -> bool:
    """True for a valid label key: an optional DNS-subdomain prefix and a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix == "" and key.startswith("/")):
        return False
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME_PART.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """True for a valid label value: empty, or at most 63 alphanumerics with ``-_.`` inside."""
    return value == "" or (len(value) <= 63 and _NAME_PART.fullmatch(value) is not None)


def is_dns_subdomain(name: str) -> bool:
    return 0 < len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class LabelSelector:
    """A metav1.LabelSelector: every matchLabels entry and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True)
class Match:
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None


@dataclass(frozen=True)
class Limits:
    max_per_container: int | None = None
    max_per_pod: int | None = None


@dataclass(frozen=True)
class Models:
    node_label: str
    classes: Mapping[str, tuple[str, ...]]
    default: str | None = None


@dataclass(frozen=True)
class AttributionLabel:
    """One pod label gpugate owns: a fixed value, or a namespace label's value with a default."""

    key: str
    default: str
    from_namespace_label: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    source: str = "<inline>"
    priority: int = 0
    mode: Mode = "enforce"
    match: Match = field(default_factory=Match)
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    limits: Limits = field(default_factory=Limits)
    runtime_class_name: str | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    models: Models | None = None
    attribution: tuple[AttributionLabel, ...] = ()
    non_gpu_tolerations: NonGPUTolerations = "deny"
    non_gpu_runtime_class: Literal["deny", "allow"] = "deny"
    mutate_templates: bool = False

    def counts_as_gpu(self, resource: str) -> bool:
        return any(fnmatch.fnmatchcase(resource, glob) for glob in self.gpu_resources)

    @property
    def uses_namespace_labels(self) -> bool:
        return self.match.namespace_selector is not None or any(
            a.from_namespace_label for a in self.attribution
        )


#: The policy that stands in when none matches: built-in checks only, nothing injected.
BUILTIN = Policy(name="built-in", source="built-in", non_gpu_tolerations="allow", non_gpu_runtime_class="allow")


class NamespaceLabelsUnavailable(Exception):
    """A policy needs a namespace's labels and they cannot be known right now."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


@dataclass(frozen=True)
class PolicySet:
    """Every loaded policy, highest priority first (ties broken by name)."""

    policies: tuple[Policy, ...] = ()
    digest: str = ""

    @staticmethod
    def of(policies: Iterable[Policy], digest: str = "") -> PolicySet:
        return PolicySet(tuple(sorted(policies, key=lambda p: (-p.priority, p.name))), digest)

    def governing(
        self,
        *,
        namespace: str,
        pod_labels: Mapping[str, str],
        namespace_labels: Callable[[], Mapping[str, str] | None],
    ) -> Policy:
        """The highest-priority policy whose every selector matches, or :data:`BUILTIN`.

        ``namespace_labels`` is called only when a candidate policy selects by namespace labels; when it
        returns None the answer cannot be known and :class:`NamespaceLabelsUnavailable` is raised, rather
        than silently letting the pod fall through to a weaker policy.
        """
        for policy in self.policies:
            m = policy.match
            if m.namespaces and not any(fnmatch.fnmatchcase(namespace, g) for g in m.namespaces):
                continue
            if m.pod_selector is not None and not m.pod_selector.matches(pod_labels):
                continue
            if m.namespace_selector is not None:
                labels = namespace_labels()
                if labels is None:
                    raise NamespaceLabelsUnavailable(namespace)
                if not m.namespace_selector.matches(labels):
                    continue
            return policy
        return BUILTIN
