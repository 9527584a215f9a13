"""GPU policies: the frozen model, loading a directory of YAML files, and choosing the governing policy."""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

log = logging.getLogger("gpugate.policy")

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


# ------------------------------------------------------------------------------------------- loading


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


class PolicyStore:
    """The policy set in force, reloaded when the directory changes; a broken edit keeps the last good set.

    Checks are lazy (on access, at most every ``interval`` seconds), so no thread is needed per worker.
    """

    def __init__(self, directory: str | os.PathLike[str], *, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._fingerprint = self._stat()
        self._policies = load_policies(self.directory)
        self._checked = clock()
        self.generation = 1
        self.reload_errors = 0
        self.last_error: str | None = None

    def _stat(self) -> tuple[tuple[str, int, int, int], ...]:
        try:
            files = policy_files(self.directory)
        except OSError:
            return ()
        out = []
        for path in files:
            try:
                st = path.stat()  # follows the ConfigMap's ..data symlinks
            except OSError:
                continue
            out.append((path.name, st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def current(self) -> PolicySet:
        now = self._clock()
        if now - self._checked >= self.interval and self._lock.acquire(blocking=False):
            try:
                self._checked = now
                self._reload_if_changed()
            finally:
                self._lock.release()
        return self._policies

    def _reload_if_changed(self) -> None:
        fingerprint = self._stat()
        if fingerprint == self._fingerprint:
            return
        self._fingerprint = fingerprint
        try:
            policies = load_policies(self.directory)
        except PolicyError as err:
            self.reload_errors += 1
            self.last_error = str(err)
            log.error("policy reload failed; the last good policies (%s) stay in force\n%s",
                      self._policies.digest, err)
            return
        if policies.digest != self._policies.digest:
            self._policies = policies
            self.generation += 1
            log.info("policies reloaded: generation %d, %d policies, digest %s",
                     self.generation, len(policies.policies), policies.digest)
        self.last_error = None
