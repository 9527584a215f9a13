"""Reading a pod's required node affinity: its terms, the expressions on one label, and how a requirement reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]


def requirement_text(r: Mapping[str, Any]) -> str:
    values = r.get("values") or []
    return (
        f"{r.get('key')} {r.get('operator')} [{', '.join(map(str, values))}]"
        if values
        else f"{r.get('key')} {r.get('operator')}"
    )


def label_expressions(term: Mapping[str, Any], label: str) -> list[Mapping[str, Any]]:
    """The match expressions of one node-selector term on ``label``."""
    return [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping) and e.get("key") == label]
