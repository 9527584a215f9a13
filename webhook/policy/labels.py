"""Kubernetes names and label selectors, as apimachinery checks and matches them."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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


# kube-state-metrics internal/store/utils.go (labelName, SanitizeLabelName, toSnakeCase).
_METRIC_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_METRIC_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


@functools.lru_cache(maxsize=4096)  # every GPU pod's label keys go through it (two regex passes: ~2 µs a key)
def metric_label_name(key: str) -> str:
    """The Prometheus label name kube-state-metrics exports a label key under, without its ``label_`` prefix:
    every character outside ``[a-zA-Z0-9_]`` becomes ``_``, a capital after a lower-case letter or digit gets a
    ``_`` before it, and the whole is lower-cased (``gpugate.io/TEAM``, ``gpugate-io/team`` and
    ``gpugate.io/Team`` are all ``gpugate_io_team``; ``gpugate.io/costCenter`` is ``gpugate_io_cost_center``)."""
    return _METRIC_CAMEL.sub(r"\1_\2", _METRIC_INVALID.sub("_", key)).lower()


def is_dns_subdomain(name: str) -> bool:
    return 0 < len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


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
