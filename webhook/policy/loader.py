"""Loading policies: read a directory of YAML files and build the model, reporting every error with its
file, document and field."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .model import (
    API_VERSION,
    DEFAULT_GPU_RESOURCES,
    KIND,
    MODEL_LABEL,
    AttributionLabel,
    LabelSelector,
    Limits,
    Match,
    Models,
    Policy,
    PolicySet,
    Requirement,
    is_dns_subdomain,
    is_label_key,
    is_label_value,
)


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


class _Doc:
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
            self.fail(path, f"must be a mapping, got {_kind(value)}")
            return {}
        if allowed is None:
            return value
        allowed = set(allowed)
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                self.fail(where, f"unknown field (allowed: {', '.join(sorted(allowed))})")
        return value

    def string(self, value: Any, path: str, *, check: Callable[[str], bool] | None = None,
               what: str = "") -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or value == "":
            self.fail(path, f"must be a non-empty string, got {_kind(value)}")
            return None
        if check is not None and not check(value):
            self.fail(path, f"{value!r} is not a valid {what}")
            return None
        return value

    def strings(self, value: Any, path: str, *, check: Callable[[str], bool] | None = None,
                what: str = "") -> tuple[str, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            self.fail(path, f"must be a list of strings, got {_kind(value)}")
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

    def selector(self, value: Any, path: str) -> LabelSelector | None:
        if value is None:
            return None
        raw = self.mapping(value, path, ("matchLabels", "matchExpressions"))
        labels: dict[str, str] = {}
        for key, val in self.mapping(raw.get("matchLabels"), f"{path}.matchLabels", None).items():
            if not isinstance(key, str) or not is_label_key(key):
                self.fail(f"{path}.matchLabels", f"{key!r} is not a valid label key")
            elif not isinstance(val, str) or not is_label_value(val):
                self.fail(f"{path}.matchLabels[{key}]", f"{val!r} is not a valid label value")
            else:
                labels[key] = val
        requirements = []
        exprs = raw.get("matchExpressions") or []
        if not isinstance(exprs, list):
            self.fail(f"{path}.matchExpressions", f"must be a list, got {_kind(exprs)}")
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


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:60]


_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _toleration(doc: _Doc, value: Any, path: str) -> dict[str, Any] | None:
    raw = doc.mapping(value, path, _TOLERATION_FIELDS)
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


def _models(doc: _Doc, value: Any, path: str) -> Models | None:
    if value is None:
        return None
    raw = doc.mapping(value, path, ("nodeLabel", "default", "classes"))
    node_label = doc.string(raw.get("nodeLabel"), f"{path}.nodeLabel", check=is_label_key, what="node label key")
    if raw and "nodeLabel" not in raw:
        doc.fail(f"{path}.nodeLabel", "is required (e.g. nvidia.com/gpu.product)")
    classes: dict[str, tuple[str, ...]] = {}
    raw_classes = raw.get("classes")
    if not isinstance(raw_classes, dict) or not raw_classes:
        doc.fail(f"{path}.classes", "must map at least one class name to a list of node label values")
    else:
        for name, values in raw_classes.items():
            cpath = f"{path}.classes.{name}"
            if not isinstance(name, str) or not is_label_value(name) or not name:
                doc.fail(cpath, f"class name {name!r} must be a valid label value (pods name it in {MODEL_LABEL})")
                continue
            vals = doc.strings(values, cpath, check=is_label_value, what="node label value")
            if not vals:
                if vals is not None or values is None:
                    doc.fail(cpath, "must list at least one node label value")
                continue
            classes[name] = vals
    default = doc.string(raw.get("default"), f"{path}.default")
    if default is not None and classes and default not in classes:
        doc.fail(f"{path}.default", f"{default!r} is not one of the classes ({', '.join(classes)})")
    if node_label is None or not classes:
        return None
    return Models(node_label=node_label, classes=classes, default=default)


def _attribution(doc: _Doc, value: Any, path: str) -> tuple[AttributionLabel, ...]:
    raw = doc.mapping(value, path, ("labels",))
    labels = doc.mapping(raw.get("labels"), f"{path}.labels", None)
    out = []
    for key, spec in labels.items():
        lpath = f"{path}.labels[{key}]"
        if not isinstance(key, str) or not is_label_key(key):
            doc.fail(lpath, f"{key!r} is not a valid label key")
            continue
        s = doc.mapping(spec, lpath, ("fromNamespaceLabel", "value", "default"))
        source = doc.string(s.get("fromNamespaceLabel"), f"{lpath}.fromNamespaceLabel",
                            check=is_label_key, what="label key")
        fixed = s.get("value")
        default = s.get("default", "unassigned")
        for fname, val in (("value", fixed), ("default", default)):
            if val is not None and (not isinstance(val, str) or not is_label_value(val)):
                doc.fail(f"{lpath}.{fname}", f"{val!r} is not a valid label value (at most 63 of A-Z a-z 0-9 - _ .)")
        if (source is None) == (fixed is None):
            doc.fail(lpath, "give exactly one of fromNamespaceLabel or value")
            continue
        out.append(AttributionLabel(key=key, default=str(default), from_namespace_label=source,
                                    value=fixed if isinstance(fixed, str) else None))
    return tuple(out)


_SPEC_FIELDS = ("priority", "mode", "match", "gpuResources", "limits", "runtimeClassName", "tolerations",
                "models", "attribution", "nonGPUPods", "mutateTemplates")


def parse_policy(document: Any, *, file: str, index: int, issues: list[PolicyIssue]) -> Policy | None:
    """Build a Policy from one YAML document, appending an issue for every invalid field."""
    doc = _Doc(file, index, issues)
    before = len(issues)
    top = doc.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"))
    if not isinstance(document, dict):
        return None
    if top.get("apiVersion") != API_VERSION:
        doc.fail("apiVersion", f"must be {API_VERSION}, got {top.get('apiVersion')!r}")
    if top.get("kind") != KIND:
        doc.fail("kind", f"must be {KIND}, got {top.get('kind')!r}")
    meta = doc.mapping(top.get("metadata"), "metadata", ("name", "labels", "annotations"))
    name = doc.string(meta.get("name"), "metadata.name", check=is_dns_subdomain, what="name (lower-case DNS subdomain)")
    if "name" not in meta:
        doc.fail("metadata.name", "is required")
    spec = doc.mapping(top.get("spec"), "spec", _SPEC_FIELDS)
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        doc.fail("spec.priority", f"must be a whole number, got {priority!r}")
        priority = 0
    mode = doc.choice(spec.get("mode"), "spec.mode", ("enforce", "warn", "audit"), "enforce")
    m = doc.mapping(spec.get("match"), "spec.match", ("namespaces", "namespaceSelector", "podSelector"))
    match = Match(
        namespaces=doc.strings(m.get("namespaces"), "spec.match.namespaces") or (),
        namespace_selector=doc.selector(m.get("namespaceSelector"), "spec.match.namespaceSelector"),
        pod_selector=doc.selector(m.get("podSelector"), "spec.match.podSelector"),
    )
    gpu_resources = doc.strings(spec.get("gpuResources"), "spec.gpuResources")
    if gpu_resources == ():
        doc.fail("spec.gpuResources", "must not be empty (omit it for the defaults)")
    lim = doc.mapping(spec.get("limits"), "spec.limits", ("maxPerContainer", "maxPerPod"))
    limits = Limits(doc.positive_int(lim.get("maxPerContainer"), "spec.limits.maxPerContainer"),
                    doc.positive_int(lim.get("maxPerPod"), "spec.limits.maxPerPod"))
    runtime_class = doc.string(spec.get("runtimeClassName"), "spec.runtimeClassName",
                               check=is_dns_subdomain, what="RuntimeClass name")
    raw_tolerations = spec.get("tolerations") or []
    if not isinstance(raw_tolerations, list):
        doc.fail("spec.tolerations", f"must be a list, got {_kind(raw_tolerations)}")
        raw_tolerations = []
    parsed = [_toleration(doc, t, f"spec.tolerations[{i}]") for i, t in enumerate(raw_tolerations)]
    tolerations = tuple(t for t in parsed if t is not None)
    models = _models(doc, spec.get("models"), "spec.models")
    attribution = _attribution(doc, spec.get("attribution"), "spec.attribution")
    non_gpu = doc.mapping(spec.get("nonGPUPods"), "spec.nonGPUPods", ("gpuTolerations", "gpuRuntimeClass"))
    non_gpu_runtime_class = doc.choice(non_gpu.get("gpuRuntimeClass"), "spec.nonGPUPods.gpuRuntimeClass",
                                       ("deny", "allow"), "deny")
    non_gpu_tolerations = doc.choice(non_gpu.get("gpuTolerations"), "spec.nonGPUPods.gpuTolerations",
                                     ("deny", "strip", "allow"), "deny")
    mutate_templates = spec.get("mutateTemplates", False)
    if not isinstance(mutate_templates, bool):
        doc.fail("spec.mutateTemplates", f"must be true or false, got {mutate_templates!r}")
        mutate_templates = False
    if len(issues) > before or name is None:
        return None
    return Policy(
        name=name, source=f"{file}#{index}", priority=priority, mode=mode,  # type: ignore[arg-type]
        match=match, gpu_resources=gpu_resources or DEFAULT_GPU_RESOURCES, limits=limits,
        runtime_class_name=runtime_class, tolerations=tolerations, models=models, attribution=attribution,
        non_gpu_tolerations=non_gpu_tolerations, mutate_templates=mutate_templates,  # type: ignore[arg-type]
        non_gpu_runtime_class=non_gpu_runtime_class,  # type: ignore[arg-type]
    )


def policy_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``*.yaml``/``*.yml`` files directly in ``directory`` (ConfigMap mounts: the ``..data`` links)."""
    root = Path(directory)
    return sorted(p for p in root.iterdir()
                  if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file())


def load_policies(directory: str | os.PathLike[str]) -> PolicySet:
    """Load and validate every policy in ``directory`` as a whole; raise :class:`PolicyError` if any is wrong."""
    root = Path(directory)
    if not root.is_dir():
        raise PolicyError([PolicyIssue(str(root), None, "", "is not a directory")])
    issues: list[PolicyIssue] = []
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    digest = hashlib.sha256()
    for path in policy_files(root):
        try:
            text = path.read_bytes()
        except OSError as err:
            issues.append(PolicyIssue(path.name, None, "", f"cannot be read: {err.strerror}"))
            continue
        digest.update(path.name.encode() + b"\0" + text + b"\0")
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            issues.append(PolicyIssue(path.name, None, "", f"is not valid YAML{where}: {getattr(err, 'problem', err)}"))
            continue
        for index, document in enumerate(documents):
            if document is None:
                continue
            policy = parse_policy(document, file=path.name, index=index, issues=issues)
            if policy is None:
                continue
            if policy.name in seen:
                issues.append(PolicyIssue(path.name, index, "metadata.name",
                                          f"{policy.name!r} is already defined in {seen[policy.name]}"))
                continue
            seen[policy.name] = f"{path.name} document {index}"
            policies.append(policy)
    if issues:
        raise PolicyError(issues)
    return PolicySet.of(policies, digest.hexdigest()[:12])
