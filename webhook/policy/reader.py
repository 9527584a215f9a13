"""Reading policy documents field by field: each problem found is kept with its file, document and field path,
so one run reports every mistake in a directory (``PolicyIssue``, ``PolicyError``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .labels import LabelSelector, Requirement, is_label_key, is_label_value


@dataclass(frozen=True)
class PolicyIssue:
    """One thing wrong with a policy file: where (file, document, field) and what."""

    file: str
    document: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.document is None else f"{self.file}: document {self.document}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class PolicyError(Exception):
    """The policy directory is not valid; ``issues`` says every place that is wrong."""

    def __init__(self, issues: Sequence[PolicyIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"invalid policy ({len(self.issues)} error{'s' if len(self.issues) != 1 else ''}):"]
        lines += [f"  {issue}" for issue in self.issues]
        return "\n".join(lines)


class Doc:
    """Reads one policy document, recording an issue for every field that is wrong."""

    def __init__(self, file: str, index: int, issues: list[PolicyIssue]) -> None:
        self.file, self.index, self.issues = file, index, issues

    def fail(self, path: str, message: str) -> None:
        self.issues.append(PolicyIssue(self.file, self.index, path, message))

    def mapping(self, value: Any, path: str, allowed: Iterable[str] | None) -> dict[str, Any]:
        """``value`` as a mapping; ``allowed`` lists its fields (None: any key, e.g. label maps)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping, got {json_kind(value)}")
            return {}
        if allowed is None:
            return value
        allowed = set(allowed)
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                self.fail(where, f"unknown field (allowed: {', '.join(sorted(allowed))})")
        return value

    def string(
        self, value: Any, path: str, *, check: Callable[[str], bool] | None = None, what: str = ""
    ) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or value == "":
            self.fail(path, f"must be a non-empty string, got {json_kind(value)}")
            return None
        if check is not None and not check(value):
            self.fail(path, f"{value!r} is not a valid {what}")
            return None
        return value

    def strings(
        self, value: Any, path: str, *, check: Callable[[str], bool] | None = None, what: str = ""
    ) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            self.fail(path, f"must be a list of strings, got {json_kind(value)}")
            return None
        out = [self.string(v, f"{path}[{i}]", check=check, what=what) for i, v in enumerate(value)]
        return tuple(v for v in out if v is not None)

    def positive_int(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(path, f"must be a whole number of at least 1, got {value!r}")
            return None
        return value

    def choice(self, value: Any, path: str, choices: Sequence[str], default: str) -> str:
        if value is None:
            return default
        if value not in choices:
            self.fail(path, f"{value!r} is not one of {', '.join(choices)}")
            return default
        return str(value)

    def labels(self, value: Any, path: str) -> dict[str, str]:
        """A map of label keys to label values (``matchLabels``, ``nodeSelector``); invalid entries are left out."""
        out: dict[str, str] = {}
        for key, val in self.mapping(value, path, None).items():
            if not isinstance(key, str) or not is_label_key(key):
                self.fail(path, f"{key!r} is not a valid label key")
            elif not isinstance(val, str) or not is_label_value(val):
                self.fail(f"{path}[{key}]", f"{val!r} is not a valid label value")
            else:
                out[key] = val
        return out

    def selector(self, value: Any, path: str) -> LabelSelector | None:
        if value is None:
            return None
        raw = self.mapping(value, path, ("matchLabels", "matchExpressions"))
        labels = self.labels(raw.get("matchLabels"), f"{path}.matchLabels")
        requirements = []
        exprs = raw.get("matchExpressions") or []
        if not isinstance(exprs, list):
            self.fail(f"{path}.matchExpressions", f"must be a list, got {json_kind(exprs)}")
            exprs = []
        for i, expr in enumerate(exprs):
            epath = f"{path}.matchExpressions[{i}]"
            e = self.mapping(expr, epath, ("key", "operator", "values"))
            req_key = self.string(e.get("key"), f"{epath}.key", check=is_label_key, what="label key")
            op = self.choice(e.get("operator"), f"{epath}.operator", ("In", "NotIn", "Exists", "DoesNotExist"), "")
            values = self.strings(e.get("values"), f"{epath}.values") or ()
            if op in ("In", "NotIn") and not values:
                self.fail(f"{epath}.values", f"must be non-empty for operator {op}")
            if op in ("Exists", "DoesNotExist") and values:
                self.fail(f"{epath}.values", f"must be empty for operator {op}")
            if req_key and op:
                requirements.append(Requirement(req_key, op, values))  # type: ignore[arg-type]
        return LabelSelector(labels, tuple(requirements))


def json_kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:60]


TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def toleration(doc: Doc, value: Any, path: str) -> dict[str, Any] | None:
    raw = doc.mapping(value, path, TOLERATION_FIELDS)
    if not raw:
        if value is not None and isinstance(value, dict):
            doc.fail(path, "an empty toleration tolerates nothing; give at least key and effect")
        return None
    out: dict[str, Any] = {}
    key = doc.string(raw.get("key"), f"{path}.key", check=is_label_key, what="taint key")
    operator = doc.choice(raw.get("operator"), f"{path}.operator", ("Exists", "Equal"), "Equal")
    if key:
        out["key"] = key
    elif operator != "Exists":
        doc.fail(f"{path}.key", "is required unless operator is Exists")
    if "operator" in raw:
        out["operator"] = operator
    if "value" in raw:
        val = raw["value"]
        if not isinstance(val, str) or not is_label_value(val):
            doc.fail(f"{path}.value", f"{val!r} is not a valid taint value")
        elif operator == "Exists" and val:
            doc.fail(f"{path}.value", "must be empty when operator is Exists")
        else:
            out["value"] = val
    if "effect" in raw:
        out["effect"] = doc.choice(raw["effect"], f"{path}.effect", _EFFECTS, "")
    if "tolerationSeconds" in raw:
        seconds = raw["tolerationSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            doc.fail(f"{path}.tolerationSeconds", f"must be a whole number, got {seconds!r}")
        elif out.get("effect") != "NoExecute":
            doc.fail(f"{path}.tolerationSeconds", "is only allowed with effect NoExecute")
        else:
            out["tolerationSeconds"] = seconds
    return out


def tolerations(doc: Doc, value: Any, path: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        doc.fail(path, f"must be a list, got {json_kind(value)}")
        return ()
    parsed = [toleration(doc, t, f"{path}[{i}]") for i, t in enumerate(value)]
    return tuple(t for t in parsed if t is not None)
