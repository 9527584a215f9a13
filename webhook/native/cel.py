"""CEL text for the native tier: literals, globs as RE2 patterns, label selectors. Pure string building.

Every literal is printed the same way for the same value (sorted keys, one quoting rule), so the compiled
objects are byte-identical for the same policy directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..policy.labels import LabelSelector, metric_label_name


def string(value: str) -> str:
    """A CEL string literal (JSON's double-quoted form is valid CEL, escapes included)."""
    return json.dumps(value, ensure_ascii=True)


def literal(value: Any) -> str:
    """A CEL literal for plain data: str, bool, int, list/tuple, and maps with string keys (sorted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{string(str(k))}: {literal(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def glob_pattern(glob: str) -> str:
    """An anchored RE2 pattern for an fnmatch glob (``*``, ``?``, ``[seq]``, ``[!seq]``), as the policy model
    matches resource names and namespaces (``fnmatch.fnmatchcase``)."""
    out, i = [], 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


def any_glob(globs: Iterable[str]) -> str:
    """One anchored pattern matching any of the globs ("a^" matches nothing)."""
    parts = sorted({glob_pattern(g)[1:-1] for g in globs})
    return "^(" + "|".join(parts) + ")$" if parts else "a^"


def selector(sel: LabelSelector, labels: str) -> str:
    """A CEL condition that a LabelSelector matches the map expression ``labels``."""
    terms = [
        f"({string(k)} in {labels} && {labels}[{string(k)}] == {string(v)})"
        for k, v in sorted(sel.match_labels.items())
    ]
    for r in sel.match_expressions:
        key, values = string(r.key), literal(list(r.values))
        if r.operator == "In":
            terms.append(f"({key} in {labels} && {labels}[{key}] in {values})")
        elif r.operator == "NotIn":
            terms.append(f"(!({key} in {labels}) || !({labels}[{key}] in {values}))")
        elif r.operator == "Exists":
            terms.append(f"({key} in {labels})")
        else:
            terms.append(f"!({key} in {labels})")
    return " && ".join(terms) or "true"


def look_alike_pattern(key: str) -> str:
    """A pattern over a lower-cased label key that every key kube-state-metrics exports under the same metric
    label name as ``key`` matches (``gpugate.io/TEAM``, ``gpugate-io/team``): its letters and digits in order,
    anything else around them. A superset, so the native tier leaves every look-alike to the webhook."""
    skeleton = [c for c in metric_label_name(key) if c.isalnum()]
    gap = "[^a-z0-9]*"
    return "^" + gap + gap.join(re.escape(c) for c in skeleton) + gap + "$"
