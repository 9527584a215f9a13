"""Loading policies: build the model from parsed YAML documents, reporting every error with its file, document
and field. Reading the directory and the YAML is ``files``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .keys import API_VERSION, MODEL_LABEL
from .model import (
    BUILTIN_DEVICE_RESOURCES,
    BUILTIN_DRA,
    DEFAULT_HOLDER_ANNOTATIONS,
    KIND,
    RUNTIME_CLASS_PODS,
    WORKLOAD_KIND,
    AttributionLabel,
    Device,
    GPUHolders,
    LabelSelector,
    Limits,
    Match,
    ModelClass,
    Models,
    Policy,
    Requirement,
    WorkloadKind,
    builtin_devices,
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

    def string(
        self, value: Any, path: str, *, check: Callable[[str], bool] | None = None, what: str = ""
    ) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or value == "":
            self.fail(path, f"must be a non-empty string, got {_kind(value)}")
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


def _tolerations(doc: _Doc, value: Any, path: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        doc.fail(path, f"must be a list, got {_kind(value)}")
        return ()
    parsed = [_toleration(doc, t, f"{path}[{i}]") for i, t in enumerate(value)]
    return tuple(t for t in parsed if t is not None)


_DEVICE_FIELDS = (
    "resources",
    "auxiliaryResources",
    "runtimeClassName",
    "tolerations",
    "modelLabel",
    "modelAliases",
    "choiceAnnotations",
    "draDrivers",
    "deviceClasses",
    "runtimeClassPods",
)


def _devices(doc: _Doc, value: Any, path: str) -> dict[str, Device]:
    """``spec.devices``: vendor profiles laid over the built-in ones (which inject nothing)."""
    devices = builtin_devices()
    for name, raw in doc.mapping(value, path, None).items():
        dpath = f"{path}.{name}"
        if not isinstance(name, str) or not is_label_value(name) or not name:
            doc.fail(dpath, f"device name {name!r} must be a short name such as nvidia, amd or intel")
            continue
        d = doc.mapping(raw, dpath, _DEVICE_FIELDS)
        base = devices.get(name)
        resources = doc.strings(d.get("resources"), f"{dpath}.resources")
        if resources == () or (resources is None and base is None):
            doc.fail(
                f"{dpath}.resources", "must list the resources that count as this vendor's GPUs (e.g. [amd.com/gpu])"
            )
            continue
        auxiliary = doc.strings(d.get("auxiliaryResources"), f"{dpath}.auxiliaryResources")
        devices[name] = Device(
            name=name,
            resources=resources if resources is not None else base.resources,  # type: ignore[union-attr]
            auxiliary_resources=auxiliary if auxiliary is not None else (base.auxiliary_resources if base else ()),
            runtime_class_name=doc.string(
                d.get("runtimeClassName"), f"{dpath}.runtimeClassName", check=is_dns_subdomain, what="RuntimeClass name"
            ),
            tolerations=_tolerations(doc, d.get("tolerations"), f"{dpath}.tolerations"),
            model_label=doc.string(
                d.get("modelLabel"), f"{dpath}.modelLabel", check=is_label_key, what="node label key"
            ),
            model_aliases=doc.strings(
                d.get("modelAliases"), f"{dpath}.modelAliases", check=is_label_key, what="node label key"
            )
            or (),
            choice_annotations=doc.strings(
                d.get("choiceAnnotations"), f"{dpath}.choiceAnnotations", check=is_label_key, what="annotation key"
            )
            or (),
            **_dra_fields(doc, d, dpath, base),
        )
    # Put the policy's own devices first: a resource both name (a legacy glob) belongs to the policy's.
    own = [n for n in doc.mapping(value, path, None) if n in devices]
    return {n: devices[n] for n in [*own, *(n for n in devices if n not in own)]}


def _dra_fields(doc: _Doc, d: Mapping[str, Any], dpath: str, base: Device | None) -> dict[str, Any]:
    """A device profile's DRA drivers, DeviceClasses and runtime-class pods (the built-in profile's if unset)."""
    drivers = doc.strings(d.get("draDrivers"), f"{dpath}.draDrivers", check=is_dns_subdomain, what="DRA driver name")
    classes = doc.strings(d.get("deviceClasses"), f"{dpath}.deviceClasses")
    pods = doc.strings(d.get("runtimeClassPods"), f"{dpath}.runtimeClassPods")
    for i, kind in enumerate(pods or ()):
        if kind not in RUNTIME_CLASS_PODS:
            doc.fail(f"{dpath}.runtimeClassPods[{i}]", f"{kind!r} is not one of {', '.join(RUNTIME_CLASS_PODS)}")
    return {
        "dra_drivers": drivers if drivers is not None else (base.dra_drivers if base else ()),
        "device_classes": classes if classes is not None else (base.device_classes if base else ()),
        "runtime_class_pods": tuple(p for p in pods if p in RUNTIME_CLASS_PODS)
        if pods is not None
        else RUNTIME_CLASS_PODS,
    }


_CLASS_FIELDS = ("values", "resources", "device", "aliases", "deviceClasses", "nodeSelector")


def _model_class(
    doc: _Doc, name: str, value: Any, path: str, devices: Mapping[str, Device], legacy: Device | None
) -> ModelClass | None:
    if isinstance(value, list):  # the 0.1 form: class -> node label values, on the one legacy device
        vals = doc.strings(value, path, check=is_label_value, what="node label value")
        if not vals:
            doc.fail(path, "must list at least one node label value")
            return None
        if legacy is None:
            doc.fail(
                path,
                "give the class as {values: [...], resources: [...]} (the list form needs the "
                "0.1 fields spec.models.nodeLabel / spec.runtimeClassName; see policies/README.md, "
                '"Migrating policy files")',
            )
            return None
        return ModelClass(name, legacy.name, vals, legacy.resources)
    c = doc.mapping(value, path, _CLASS_FIELDS)
    if not c:
        doc.fail(path, "must give values (node label values) and resources (what its nodes offer)")
        return None
    vals = doc.strings(c.get("values"), f"{path}.values", check=is_label_value, what="node label value") or ()
    device_classes = (
        doc.strings(c.get("deviceClasses"), f"{path}.deviceClasses", check=is_dns_subdomain, what="DeviceClass name")
        or ()
    )
    node_selector: dict[str, str] = {}
    for key, val in doc.mapping(c.get("nodeSelector"), f"{path}.nodeSelector", None).items():
        if not isinstance(key, str) or not is_label_key(key):
            doc.fail(f"{path}.nodeSelector", f"{key!r} is not a valid label key")
        elif not isinstance(val, str) or not is_label_value(val):
            doc.fail(f"{path}.nodeSelector[{key}]", f"{val!r} is not a valid label value")
        else:
            node_selector[key] = val
    if not vals and not device_classes:
        doc.fail(
            f"{path}.values",
            "must list at least one node label value, exactly as the nodes carry it (or name the DRA pool's "
            "deviceClasses)",
        )
    resources = doc.strings(c.get("resources"), f"{path}.resources")
    if not resources:
        doc.fail(
            f"{path}.resources",
            "must list the GPU resources this class's nodes offer (e.g. [nvidia.com/gpu] or [nvidia.com/mig-1g.10gb])",
        )
    device_name = doc.string(c.get("device"), f"{path}.device")
    aliases: dict[str, tuple[str, ...]] = {}
    for key, avals in doc.mapping(c.get("aliases"), f"{path}.aliases", None).items():
        if not isinstance(key, str) or not is_label_key(key):
            doc.fail(f"{path}.aliases", f"{key!r} is not a valid label or annotation key")
            continue
        got = doc.strings(avals, f"{path}.aliases[{key}]")
        if got:
            aliases[key] = got
    if not (vals or device_classes) or not resources:
        return None
    if device_name is not None:
        device = devices.get(device_name)
        if device is None:
            doc.fail(f"{path}.device", f"{device_name!r} is not a device of this policy ({', '.join(devices)})")
            return None
    else:
        owners = [d for d in devices.values() if all(d.counts(r) for r in resources)]
        if len(owners) != 1:
            doc.fail(
                f"{path}.resources",
                f"{', '.join(resources)} must all be GPU resources of exactly one device "
                f"(found {', '.join(d.name for d in owners) or 'none'}); set {path}.device",
            )
            return None
        device = owners[0]
    if device.model_label is None and vals:
        doc.fail(
            f"{path}",
            f"device {device.name!r} has no modelLabel to select class {name!r} by; set "
            f"spec.devices.{device.name}.modelLabel (e.g. nvidia.com/gpu.product)",
        )
        return None
    return ModelClass(name, device.name, vals, resources, aliases, device_classes, node_selector)


def _models(doc: _Doc, value: Any, path: str, devices: Mapping[str, Device], legacy: Device | None) -> Models | None:
    if value is None:
        return None
    raw = doc.mapping(value, path, ("nodeLabel", "default", "classes"))
    classes: dict[str, ModelClass] = {}
    raw_classes = raw.get("classes")
    if not isinstance(raw_classes, dict) or not raw_classes:
        doc.fail(f"{path}.classes", "must map at least one class name to its node label values and resources")
    else:
        for name, spec in raw_classes.items():
            cpath = f"{path}.classes.{name}"
            if not isinstance(name, str) or not is_label_value(name) or not name:
                doc.fail(cpath, f"class name {name!r} must be a valid label value (pods name it in {MODEL_LABEL})")
                continue
            found = _model_class(doc, name, spec, cpath, devices, legacy)
            if found is not None:
                classes[name] = found
    default = raw.get("default")
    defaults = (
        doc.strings([default], f"{path}.default")
        if isinstance(default, str)
        else doc.strings(default, f"{path}.default")
    ) or ()
    for d in defaults:
        if classes and d not in classes:
            doc.fail(f"{path}.default", f"{d!r} is not one of the classes ({', '.join(classes)})")
    if not classes:
        return None
    return Models(classes=classes, defaults=defaults)


def _holders(doc: _Doc, value: Any, path: str) -> GPUHolders:
    raw = doc.mapping(value, path, ("resourceClaims", "annotations", "annotationDevice"))
    claims = raw.get("resourceClaims", True)
    if not isinstance(claims, bool):
        doc.fail(f"{path}.resourceClaims", f"must be true or false, got {claims!r}")
        claims = True
    annotations = doc.strings(raw.get("annotations"), f"{path}.annotations", check=is_label_key, what="annotation key")
    device = raw.get("annotationDevice", "nvidia")
    if device is not None and (not isinstance(device, str) or not is_label_value(device)):
        doc.fail(f"{path}.annotationDevice", f"must be a device name such as nvidia, or null, got {device!r}")
        device = "nvidia"
    return GPUHolders(
        resource_claims=claims,
        annotation_device=device,
        annotations=annotations if annotations is not None else DEFAULT_HOLDER_ANNOTATIONS,
    )


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
        source = doc.string(
            s.get("fromNamespaceLabel"), f"{lpath}.fromNamespaceLabel", check=is_label_key, what="label key"
        )
        fixed = s.get("value")
        default = s.get("default", "unassigned")
        for fname, val in (("value", fixed), ("default", default)):
            if val is not None and (not isinstance(val, str) or not is_label_value(val)):
                doc.fail(f"{lpath}.{fname}", f"{val!r} is not a valid label value (at most 63 of A-Z a-z 0-9 - _ .)")
        if (source is None) == (fixed is None):
            doc.fail(lpath, "give exactly one of fromNamespaceLabel or value")
            continue
        out.append(
            AttributionLabel(
                key=key,
                default=str(default),
                from_namespace_label=source,
                value=fixed if isinstance(fixed, str) else None,
            )
        )
    return tuple(out)


_SPEC_FIELDS = (
    "priority",
    "mode",
    "match",
    "devices",
    "limits",
    "models",
    "gpuHolders",
    "attribution",
    "nonGPUPods",
    "security",
    "initOnlyGPUs",
    "mutateTemplates",
    # the 0.1 format, still read: one device's fields at the top (policies/README.md, "Migrating")
    "gpuResources",
    "runtimeClassName",
    "tolerations",
)
_LEGACY_FIELDS = ("gpuResources", "runtimeClassName", "tolerations")


def _legacy_device(doc: _Doc, spec: Mapping[str, Any], models: Any) -> Device | None:
    """The 0.1 format's one device: ``gpuResources``, ``runtimeClassName``, ``tolerations`` and
    ``models.nodeLabel`` at the top of the spec. Without ``gpuResources`` it is NVIDIA's."""
    node_label = models.get("nodeLabel") if isinstance(models, dict) else None
    if not any(f in spec for f in _LEGACY_FIELDS) and node_label is None:
        return None
    if "devices" in spec:
        for f in (*_LEGACY_FIELDS, "models.nodeLabel"):
            if f in spec or (f == "models.nodeLabel" and node_label is not None):
                doc.fail(
                    f"spec.{f}",
                    "cannot be combined with spec.devices: move it into "
                    'spec.devices.<vendor> (see policies/README.md, "Migrating policy files")',
                )
        return None
    resources = doc.strings(spec.get("gpuResources"), "spec.gpuResources")
    if resources == ():
        doc.fail("spec.gpuResources", "must not be empty (omit it for the defaults)")
    nvidia_resources, nvidia_auxiliary = BUILTIN_DEVICE_RESOURCES["nvidia"]
    return Device(
        name="nvidia" if not resources else "gpu",
        resources=resources or nvidia_resources,
        auxiliary_resources=nvidia_auxiliary
        if not resources
        else tuple(a for _, aux in BUILTIN_DEVICE_RESOURCES.values() for a in aux),
        runtime_class_name=doc.string(
            spec.get("runtimeClassName"), "spec.runtimeClassName", check=is_dns_subdomain, what="RuntimeClass name"
        ),
        tolerations=_tolerations(doc, spec.get("tolerations"), "spec.tolerations"),
        model_label=doc.string(node_label, "spec.models.nodeLabel", check=is_label_key, what="node label key"),
        dra_drivers=BUILTIN_DRA["nvidia"][0] if not resources else (),
        device_classes=BUILTIN_DRA["nvidia"][1] if not resources else (),
    )


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
        doc.fail("kind", f"must be {KIND} or {WORKLOAD_KIND}, got {top.get('kind')!r}")
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
    legacy = _legacy_device(doc, spec, spec.get("models"))
    if legacy is not None and "gpuResources" in spec:
        devices = {legacy.name: legacy}  # 0.1: exactly what gpuResources lists counts as a GPU
    else:
        devices = _devices(doc, spec.get("devices"), "spec.devices")
        if legacy is not None:
            devices = {legacy.name: legacy, **{n: d for n, d in devices.items() if n != legacy.name}}
    lim = doc.mapping(spec.get("limits"), "spec.limits", ("maxPerContainer", "maxPerPod"))
    limits = Limits(
        doc.positive_int(lim.get("maxPerContainer"), "spec.limits.maxPerContainer"),
        doc.positive_int(lim.get("maxPerPod"), "spec.limits.maxPerPod"),
    )
    models = _models(doc, spec.get("models"), "spec.models", devices, legacy)
    holders = _holders(doc, spec.get("gpuHolders"), "spec.gpuHolders")
    attribution = _attribution(doc, spec.get("attribution"), "spec.attribution")
    non_gpu = doc.mapping(spec.get("nonGPUPods"), "spec.nonGPUPods", ("gpuTolerations", "gpuRuntimeClass"))
    non_gpu_runtime_class = doc.choice(
        non_gpu.get("gpuRuntimeClass"), "spec.nonGPUPods.gpuRuntimeClass", ("deny", "allow"), "deny"
    )
    non_gpu_tolerations = doc.choice(
        non_gpu.get("gpuTolerations"), "spec.nonGPUPods.gpuTolerations", ("deny", "strip", "allow"), "deny"
    )
    security = doc.mapping(
        spec.get("security"), "spec.security", ("visibleDevicesOverride", "attributionEdits", "sharedGPUContainers")
    )
    shared = security.get("sharedGPUContainers", [])
    if not isinstance(shared, list) or not all(isinstance(n, str) and n for n in shared):
        doc.fail("spec.security.sharedGPUContainers", f"must be a list of container names, got {shared!r}")
        shared = []
    visible_devices = doc.choice(
        security.get("visibleDevicesOverride"), "spec.security.visibleDevicesOverride", ("deny", "allow"), "deny"
    )
    attribution_edits = doc.choice(
        security.get("attributionEdits"), "spec.security.attributionEdits", ("deny", "allow"), "deny"
    )
    init_only = doc.choice(spec.get("initOnlyGPUs"), "spec.initOnlyGPUs", ("deny", "warn", "allow"), "warn")
    mutate_templates = spec.get("mutateTemplates", False)
    if not isinstance(mutate_templates, bool):
        doc.fail("spec.mutateTemplates", f"must be true or false, got {mutate_templates!r}")
        mutate_templates = False
    if len(issues) > before or name is None:
        return None
    return Policy(
        name=name,
        source=f"{file}#{index}",
        priority=priority,
        mode=mode,  # type: ignore[arg-type]
        match=match,
        devices=devices,
        limits=limits,
        models=models,
        holders=holders,
        attribution=attribution,
        non_gpu_tolerations=non_gpu_tolerations,  # type: ignore[arg-type]
        mutate_templates=mutate_templates,
        non_gpu_runtime_class=non_gpu_runtime_class,  # type: ignore[arg-type]
        init_only_gpus=init_only,  # type: ignore[arg-type]
        visible_devices_override=visible_devices,  # type: ignore[arg-type]
        attribution_edits=attribution_edits,  # type: ignore[arg-type]
        shared_gpu_containers=frozenset(shared),
    )


_TEMPLATE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[\*\])?(\.([A-Za-z_][A-Za-z0-9_]*(\[\*\])?|\*))*")


def parse_workload_kind(
    document: Mapping[str, Any], *, file: str, index: int, issues: list[PolicyIssue]
) -> WorkloadKind | None:
    """A ``GPUWorkloadKind`` document: a kind (usually a CRD) and the paths of its pod templates."""
    doc = _Doc(file, index, issues)
    before = len(issues)
    top = doc.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"))
    if top.get("apiVersion") != API_VERSION:
        doc.fail("apiVersion", f"must be {API_VERSION}, got {top.get('apiVersion')!r}")
    meta = doc.mapping(top.get("metadata"), "metadata", ("name", "labels", "annotations"))
    doc.string(meta.get("name"), "metadata.name", check=is_dns_subdomain, what="name (lower-case DNS subdomain)")
    spec = doc.mapping(top.get("spec"), "spec", ("group", "kind", "plural", "versions", "podTemplates"))
    group = doc.string(spec.get("group"), "spec.group", check=is_dns_subdomain, what="API group")
    kind = doc.string(spec.get("kind"), "spec.kind")
    plural = doc.string(spec.get("plural"), "spec.plural", check=is_dns_subdomain, what="resource name") or ""
    versions = doc.strings(spec.get("versions"), "spec.versions") or ()
    templates = doc.strings(spec.get("podTemplates"), "spec.podTemplates") or ()
    for i, t in enumerate(templates):
        if not _TEMPLATE_PATH.fullmatch(t):
            doc.fail(
                f"spec.podTemplates[{i}]",
                f"{t!r} is not a template path; write dotted field names, "
                "[*] after a list field, * for every value of a map (spec.workerGroupSpecs[*].template)",
            )
    for fld, got in (("group", group), ("kind", kind)):
        if got is None:
            doc.fail(f"spec.{fld}", "is required")
    if not templates:
        doc.fail("spec.podTemplates", "must list at least one path to a pod template")
    if len(issues) > before or group is None or kind is None:
        return None
    return WorkloadKind(
        group=group, kind=kind, templates=templates, plural=plural, versions=versions, source=f"{file}#{index}"
    )
