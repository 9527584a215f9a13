"""Loading policies: build the model from parsed YAML documents, reporting every error with its file, document
and field (``reader``). Reading the directory and the YAML is ``files``; the deprecated forms are ``legacy``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .classes import ModelClass, Models
from .devices import parse_devices
from .keys import MODEL_LABEL, WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL
from .labels import is_dns_subdomain, is_label_key, is_label_value, metric_label_name
from .legacy import check_api_version, deprecation, legacy_device
from .model import (
    KIND,
    NODE_POOL_KIND,
    WORKLOAD_KIND,
    AttributionLabel,
    Device,
    GPUHolders,
    Limits,
    Match,
    NodePoolDecl,
    Policy,
    WorkloadKind,
)
from .reader import Doc, PolicyError, PolicyIssue
from .vendors import (
    DEFAULT_GPU_RUNTIME_CLASSES,
    DEFAULT_HOLDER_ANNOTATIONS,
    DEFAULT_HOLDER_SCHEDULERS,
    NVIDIA_DEVICE_VARIABLES,
)

# The errors are the reader's; they are part of what loading raises and reports, so they are named here too.
__all__ = ["PolicyError", "PolicyIssue", "parse_policy", "parse_workload_kind"]

CLASS_FIELDS = ("values", "resources", "device", "aliases", "deviceClasses", "nodeSelector")


# Over 60 lines: one check per field of a class, in the order of the schema.
def _model_class(
    doc: Doc, name: str, value: Any, path: str, devices: Mapping[str, Device], legacy: Device | None
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
    c = doc.mapping(value, path, CLASS_FIELDS)
    if not c:
        doc.fail(path, "must give values (node label values) and resources (what its nodes offer)")
        return None
    vals = doc.strings(c.get("values"), f"{path}.values", check=is_label_value, what="node label value") or ()
    device_classes = (
        doc.strings(c.get("deviceClasses"), f"{path}.deviceClasses", check=is_dns_subdomain, what="DeviceClass name")
        or ()
    )
    node_selector = doc.labels(c.get("nodeSelector"), f"{path}.nodeSelector")
    if not vals and not device_classes and not node_selector:
        doc.fail(
            f"{path}.values",
            "must list at least one node label value, exactly as the nodes carry it (or give the class a "
            "nodeSelector, or name the DRA pool's deviceClasses)",
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
    if not (vals or device_classes or node_selector) or not resources:
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


def _models(doc: Doc, value: Any, path: str, devices: Mapping[str, Device], legacy: Device | None) -> Models | None:
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


def _holders(doc: Doc, value: Any, path: str) -> GPUHolders:
    raw = doc.mapping(value, path, ("resourceClaims", "annotations", "annotationSchedulers", "annotationDevice"))
    claims = raw.get("resourceClaims", True)
    if not isinstance(claims, bool):
        doc.fail(f"{path}.resourceClaims", f"must be true or false, got {claims!r}")
        claims = True
    annotations = doc.strings(raw.get("annotations"), f"{path}.annotations", check=is_label_key, what="annotation key")
    schedulers = doc.strings(
        raw.get("annotationSchedulers"), f"{path}.annotationSchedulers", check=is_dns_subdomain, what="scheduler name"
    )
    device = raw.get("annotationDevice", "nvidia")
    if device is not None and (not isinstance(device, str) or not is_label_value(device)):
        doc.fail(f"{path}.annotationDevice", f"must be a device name such as nvidia, or null, got {device!r}")
        device = "nvidia"
    return GPUHolders(
        resource_claims=claims,
        annotation_device=device,
        annotations=annotations if annotations is not None else DEFAULT_HOLDER_ANNOTATIONS,
        annotation_schedulers=schedulers if schedulers is not None else DEFAULT_HOLDER_SCHEDULERS,
    )


def _attribution(doc: Doc, value: Any, path: str) -> tuple[AttributionLabel, ...]:
    raw = doc.mapping(value, path, ("labels",))
    labels = doc.mapping(raw.get("labels"), f"{path}.labels", None)
    out = []
    exported = {metric_label_name(k): k for k in (WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL)}
    for key, spec in labels.items():
        lpath = f"{path}.labels[{key}]"
        if not isinstance(key, str) or not is_label_key(key):
            doc.fail(lpath, f"{key!r} is not a valid label key")
            continue
        other = exported.setdefault(metric_label_name(key), key)
        if other != key:
            doc.fail(
                lpath,
                f"kube-state-metrics exports {key} and {other} under the same name, label_{metric_label_name(key)}, "
                "and then neither under it; keep one of them",
            )
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


SPEC_FIELDS = (
    "priority",
    "mode",
    "match",
    "devices",
    "limits",
    "models",
    "gpuHolders",
    "attribution",
    "gpuRuntimeClasses",
    "nonGPUPods",
    "security",
    "initOnlyGPUs",
    "mutateTemplates",
    # the 0.1 format, still read: one device's fields at the top (policies/README.md, "Migrating")
    "gpuResources",
    "runtimeClassName",
    "tolerations",
)

SECURITY_FIELDS = (
    "visibleDevicesOverride",
    "attributionEdits",
    "sharedGPUContainers",
    "visibleDevicesEnvFrom",
    "cdiAnnotations",
    "privilegedGPUContainers",
    "deviceVariables",
)


# Over 60 lines: one GPUPolicy field per few lines, in the order of the schema.
def parse_policy(
    document: Any, *, file: str, index: int, issues: list[PolicyIssue], notes: list[PolicyIssue] | None = None
) -> Policy | None:
    """Build a Policy from one YAML document, appending an issue for every invalid field (and to ``notes``, what
    a document in a deprecated form should change)."""
    doc = Doc(file, index, issues)
    before = len(issues)
    top = doc.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"))
    if not isinstance(document, dict):
        return None
    raw = top.get("spec")
    raw_spec: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if check_api_version(doc, top, raw_spec, layout=True) and notes is not None:
        notes.append(PolicyIssue(file, index, "apiVersion", deprecation(KIND, raw_spec)))
    if top.get("kind") != KIND:
        doc.fail("kind", f"must be {KIND}, {WORKLOAD_KIND} or {NODE_POOL_KIND}, got {top.get('kind')!r}")
    meta = doc.mapping(top.get("metadata"), "metadata", ("name", "labels", "annotations"))
    name = doc.string(meta.get("name"), "metadata.name", check=is_dns_subdomain, what="name (lower-case DNS subdomain)")
    if "name" not in meta:
        doc.fail("metadata.name", "is required")
    spec = doc.mapping(top.get("spec"), "spec", SPEC_FIELDS)
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
    legacy = legacy_device(doc, spec, spec.get("models"))
    if legacy is not None and "gpuResources" in spec:
        devices = {legacy.name: legacy}  # 0.1: exactly what gpuResources lists counts as a GPU
    else:
        devices = parse_devices(doc, spec.get("devices"), "spec.devices")
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
    runtime_classes = doc.strings(
        spec.get("gpuRuntimeClasses"), "spec.gpuRuntimeClasses", check=is_dns_subdomain, what="RuntimeClass name"
    )
    non_gpu = doc.mapping(spec.get("nonGPUPods"), "spec.nonGPUPods", ("gpuTolerations", "gpuRuntimeClass"))
    non_gpu_runtime_class = doc.choice(
        non_gpu.get("gpuRuntimeClass"), "spec.nonGPUPods.gpuRuntimeClass", ("deny", "allow"), "deny"
    )
    non_gpu_tolerations = doc.choice(
        non_gpu.get("gpuTolerations"), "spec.nonGPUPods.gpuTolerations", ("deny", "strip", "allow"), "deny"
    )
    security = doc.mapping(spec.get("security"), "spec.security", SECURITY_FIELDS)
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
    env_from = doc.choice(
        security.get("visibleDevicesEnvFrom"), "spec.security.visibleDevicesEnvFrom", ("deny", "allow"), "deny"
    )
    cdi_annotations = doc.choice(
        security.get("cdiAnnotations"), "spec.security.cdiAnnotations", ("deny", "allow"), "deny"
    )
    privileged = doc.choice(
        security.get("privilegedGPUContainers"), "spec.security.privilegedGPUContainers", ("deny", "allow"), "deny"
    )
    device_variables = doc.strings(security.get("deviceVariables"), "spec.security.deviceVariables") or ()
    unknown = sorted(set(device_variables) - set(NVIDIA_DEVICE_VARIABLES))
    if unknown:
        doc.fail(
            "spec.security.deviceVariables",
            f"unknown variable(s) {', '.join(unknown)}: the NVIDIA toolkit's device variables are "
            f"{', '.join(NVIDIA_DEVICE_VARIABLES)} (NVIDIA_VISIBLE_DEVICES has visibleDevicesOverride)",
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
        runtime_classes=runtime_classes if runtime_classes is not None else DEFAULT_GPU_RUNTIME_CLASSES,
        init_only_gpus=init_only,  # type: ignore[arg-type]
        visible_devices_override=visible_devices,  # type: ignore[arg-type]
        attribution_edits=attribution_edits,  # type: ignore[arg-type]
        privileged_gpu_containers=privileged,  # type: ignore[arg-type]
        shared_gpu_containers=frozenset(shared),
        visible_devices_env_from=env_from,  # type: ignore[arg-type]
        cdi_annotations=cdi_annotations,  # type: ignore[arg-type]
        device_variables=frozenset(device_variables),
    )


_TEMPLATE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[\*\])?(\.([A-Za-z_][A-Za-z0-9_]*(\[\*\])?|\*))*")


def parse_workload_kind(
    document: Mapping[str, Any],
    *,
    file: str,
    index: int,
    issues: list[PolicyIssue],
    notes: list[PolicyIssue] | None = None,
) -> WorkloadKind | None:
    """A ``GPUWorkloadKind`` document: a kind (usually a CRD) and the paths of its pod templates."""
    doc = Doc(file, index, issues)
    before = len(issues)
    top = doc.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"))
    if check_api_version(doc, top, {}, layout=False) and notes is not None:
        notes.append(PolicyIssue(file, index, "apiVersion", deprecation(WORKLOAD_KIND, {})))
    meta = doc.mapping(top.get("metadata"), "metadata", ("name", "labels", "annotations"))
    doc.string(meta.get("name"), "metadata.name", check=is_dns_subdomain, what="name (lower-case DNS subdomain)")
    spec = doc.mapping(top.get("spec"), "spec", ("group", "kind", "plural", "versions", "podTemplates", "podSpecs"))
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
    pod_specs = _pod_specs(doc, spec.get("podSpecs"))
    if not templates and not pod_specs:
        doc.fail(
            "spec.podTemplates", "must list at least one path to a pod template (or spec.podSpecs one to a PodSpec)"
        )
    if len(issues) > before or group is None or kind is None:
        return None
    return WorkloadKind(
        group=group,
        kind=kind,
        templates=templates,
        plural=plural,
        versions=versions,
        source=f"{file}#{index}",
        pod_specs=pod_specs,
    )


_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _pod_specs(doc: Doc, value: Any) -> tuple[tuple[str, str], ...]:
    """``spec.podSpecs``: bare PodSpecs, each ``{path, podMetadata}`` — where the pods' labels and annotations
    come from, relative to the PodSpec's parent (absent: the parent itself), as LLMInferenceService's."""
    if value is None:
        return ()
    if not isinstance(value, list):
        doc.fail("spec.podSpecs", "must be a list of {path, podMetadata}")
        return ()
    out = []
    for i, item in enumerate(value):
        where = f"spec.podSpecs[{i}]"
        entry = doc.mapping(item, where, ("path", "podMetadata"))
        path = doc.string(entry.get("path"), f"{where}.path")
        meta = doc.string(entry.get("podMetadata"), f"{where}.podMetadata") or ""
        if path is None:
            doc.fail(f"{where}.path", "is required: the dotted path of a PodSpec (spec.template)")
        elif not _TEMPLATE_PATH.fullmatch(path):
            doc.fail(
                f"{where}.path", f"{path!r} is not a path; write dotted field names, [*] after a list, * for a map"
            )
        elif meta and not _FIELD_PATH.fullmatch(meta):
            doc.fail(f"{where}.podMetadata", f"{meta!r} is not a field path beside the PodSpec (extraPodMetadata)")
        else:
            out.append((path, meta))
    return tuple(out)


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_node_pool(
    document: Mapping[str, Any], *, file: str, index: int, issues: list[PolicyIssue]
) -> NodePoolDecl | None:
    """A ``GPUNodePool`` document: a node pool that scales up (from zero too) whose node template gpugate cannot
    read, with the labels, taints and GPUs of the nodes it adds. A GPU pod only such a pool could host is
    admitted and waits for the autoscaler, never refused as infeasible."""
    doc = Doc(file, index, issues)
    before = len(issues)
    top = doc.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"))
    if top.get("apiVersion") != "gpugate.io/v2":
        doc.fail("apiVersion", f"must be gpugate.io/v2 for {NODE_POOL_KIND}, got {top.get('apiVersion')!r}")
    meta = doc.mapping(top.get("metadata"), "metadata", ("name", "labels", "annotations"))
    name = doc.string(meta.get("name"), "metadata.name", check=is_dns_subdomain, what="name (lower-case DNS subdomain)")
    if name is None and "name" not in meta:
        doc.fail("metadata.name", "is required")
    spec = doc.mapping(top.get("spec"), "spec", ("labels", "taints", "allocatable", "maxNodes"))
    labels = doc.labels(spec.get("labels"), "spec.labels")
    taints: list[tuple[str, str, str]] = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        doc.fail("spec.taints", "must be a list of {key, value, effect}")
        raw_taints = []
    for i, raw in enumerate(raw_taints):
        where = f"spec.taints[{i}]"
        taint = doc.mapping(raw, where, ("key", "value", "effect"))
        key = doc.string(taint.get("key"), f"{where}.key", check=is_label_key, what="taint key")
        value = taint.get("value", "")
        if not isinstance(value, str) or (value and not is_label_value(value)):
            doc.fail(f"{where}.value", f"{value!r} is not a valid taint value")
            value = ""
        effect = doc.choice(taint.get("effect"), f"{where}.effect", _TAINT_EFFECTS, "")
        if taint.get("effect") is None:
            doc.fail(f"{where}.effect", f"is required: one of {', '.join(_TAINT_EFFECTS)}")
        if key is None and "key" not in taint:
            doc.fail(f"{where}.key", "is required")
        if key is not None and effect:
            taints.append((key, value, effect))
    allocatable: list[tuple[str, int]] = []
    for resource, count in doc.mapping(spec.get("allocatable"), "spec.allocatable", None).items():
        if not isinstance(resource, str) or "/" not in resource:
            doc.fail("spec.allocatable", f"{resource!r} is not an extended resource name (nvidia.com/gpu)")
            continue
        amount = doc.positive_int(count, f"spec.allocatable[{resource}]")
        if amount is not None:
            allocatable.append((resource, amount))
    if not allocatable and "allocatable" not in spec:
        doc.fail("spec.allocatable", "is required: the GPUs one node of the pool offers ({nvidia.com/gpu: 8})")
    max_nodes = doc.positive_int(spec.get("maxNodes"), "spec.maxNodes")
    if len(issues) > before or name is None:
        return None
    return NodePoolDecl(
        name,
        tuple(sorted(labels.items())),
        tuple(taints),
        tuple(sorted(allocatable)),
        max_nodes,
        source=f"{file}#{index}",
    )
