"""The GPU policy model: frozen dataclasses, label-name validators, and choosing the governing policy. No I/O."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

KIND = "GPUPolicy"
WORKLOAD_KIND = "GPUWorkloadKind"

#: GPU count resources of the vendors gpugate knows, and their auxiliary resources (which make a pod a GPU
#: pod but are never counted as GPUs). Sources: NVIDIA k8s-device-plugin (``nvidia.com/gpu``, renamed
#: time-sliced ``nvidia.com/gpu.shared``, MIG mixed ``nvidia.com/mig-<profile>``); ROCm/k8s-device-plugin
#: (``amd.com/gpu``); intel/intel-device-plugins-for-kubernetes (``gpu.intel.com/i915`` and ``xe``, with
#: ``millicores``, ``memory.max`` and ``tiles`` for GPU-aware scheduling); HAMi (``nvidia.com/gpumem``,
#: ``gpumem-percentage``, ``gpucores`` beside a real ``nvidia.com/gpu`` count).
BUILTIN_DEVICE_RESOURCES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nvidia": (
        ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"),
        ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"),
    ),
    # AMD's device plugin under its "mixed" naming strategy exposes each partition kind as its own resource,
    # amd.com/<compute>_<memory> (spx/dpx/qpx/cpx × nps1/nps4: ROCm/gpu-operator docs/device_plugin).
    "amd": (("amd.com/gpu", "amd.com/[sdqc]px_nps*"), ()),
    "intel": (
        ("gpu.intel.com/i915", "gpu.intel.com/xe"),
        ("gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles"),
    ),
}
#: DRA: the drivers whose devices are each vendor's GPUs, and the DeviceClasses their charts install, known
#: without a cluster (NVIDIA's DRA driver: ``gpu.nvidia.com``, ``mig.nvidia.com``, ``vfio.gpu.nvidia.com``;
#: its compute-domain classes are no GPUs. ROCm/k8s-gpu-dra-driver: ``gpu.amd.com``. Intel's resource
#: drivers: ``gpu.intel.com``).
BUILTIN_DRA: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nvidia": (("gpu.nvidia.com",), ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")),
    "amd": (("gpu.amd.com",), ("gpu.amd.com",)),
    "intel": (("gpu.intel.com",), ("gpu.intel.com",)),
}
#: Every DeviceClass can be requested as an extended resource of this prefix and its name (KEP-5004,
#: "Implicit Extended Resource Name"); the scheduler then makes the claim itself.
IMPLICIT_DRA_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Which of a vendor's GPU pods get its runtime class: those served by the device plugin, and those holding a
#: fraction through a GPU-sharing scheduler's annotation. DRA-served pods never do (the driver injects
#: devices through CDI).
RUNTIME_CLASS_PODS: tuple[str, ...] = ("device-plugin", "fractional")
#: What counts as a GPU when a policy names no devices or ``gpuResources``.
DEFAULT_GPU_RESOURCES: tuple[str, ...] = tuple(r for res, _ in BUILTIN_DEVICE_RESOURCES.values() for r in res)
#: Pod annotations of fractional-GPU schedulers that hold a GPU without a GPU resource: KAI Scheduler's
#: ``gpu-fraction`` and ``gpu-memory`` (NVIDIA/KAI-Scheduler docs/gpu-sharing).
DEFAULT_HOLDER_ANNOTATIONS: tuple[str, ...] = ("gpu-fraction", "gpu-memory")
#: The annotation in which KAI's webhook names the ConfigMap its binder writes NVIDIA_VISIBLE_DEVICES into
#: (KAI-Scheduler pkg/binder/common/gpusharingconfigmap): ``<name>-<container index>``, ``-i<index>`` for
#: init containers.
KAI_SHARED_CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"


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


def _matches_any(resource: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, glob) for glob in globs)


_CACHE_LIMIT = 512  # resource names come from tenants: remember only so many answers per policy


def _remember(cache: dict[Any, Any], key: Any, compute: Callable[[], Any]) -> Any:
    """A policy's answer for ``key``, computed once while the cache is small (the decision's hot path
    matches resource names against globs for every container of every request)."""
    if key in cache:
        return cache[key]
    value = compute()
    if len(cache) < _CACHE_LIMIT:
        cache[key] = value
    return value


@dataclass(frozen=True)
class Device:
    """A vendor's device profile: which resources are its GPUs, and what a pod that requests them needs."""

    name: str
    #: GPU count resources: exact names, or globs such as ``nvidia.com/mig-*``.
    resources: tuple[str, ...]
    #: Make a pod a GPU pod of this vendor, never counted as GPUs (Intel millicores, HAMi gpumem).
    auxiliary_resources: tuple[str, ...] = ()
    runtime_class_name: str | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    #: The node label that names the GPU model (NVIDIA GFD: ``nvidia.com/gpu.product``).
    model_label: str | None = None
    #: Other node labels a pod may choose its hardware with (``cloud.google.com/gke-accelerator``).
    model_aliases: tuple[str, ...] = ()
    #: Scheduler annotations that choose the hardware (HAMi ``nvidia.com/use-gputype``).
    choice_annotations: tuple[str, ...] = ()
    #: DRA drivers whose devices are this vendor's GPUs (``gpu.nvidia.com``): a DeviceClass that selects them
    #: is a GPU class of this vendor, whatever its name.
    dra_drivers: tuple[str, ...] = ()
    #: DeviceClass names (globs) known to be this vendor's GPUs without reading the cluster.
    device_classes: tuple[str, ...] = ()
    #: Which GPU pods get ``runtime_class_name``: "device-plugin" and/or "fractional" (see RUNTIME_CLASS_PODS).
    runtime_class_pods: tuple[str, ...] = RUNTIME_CLASS_PODS
    _cache: dict[Any, bool] = field(default_factory=dict, compare=False, repr=False)

    def gpu_class(self, device_class: str) -> bool:
        """True for a DeviceClass this profile names as its GPUs (by name, without the cluster)."""
        return _matches_any(device_class, self.device_classes)

    def _implicit(self, resource: str) -> bool:
        return resource.startswith(IMPLICIT_DRA_PREFIX) and self.gpu_class(resource[len(IMPLICIT_DRA_PREFIX) :])

    def counts(self, resource: str) -> bool:
        return bool(
            _remember(
                self._cache,
                ("counts", resource),
                lambda: (
                    (_matches_any(resource, self.resources) or self._implicit(resource))
                    and not _matches_any(resource, self.auxiliary_resources)
                ),
            )
        )

    def owns(self, resource: str) -> bool:
        return bool(
            _remember(
                self._cache,
                ("owns", resource),
                lambda: (
                    _matches_any(resource, self.resources)
                    or _matches_any(resource, self.auxiliary_resources)
                    or self._implicit(resource)
                ),
            )
        )


@dataclass(frozen=True)
class ModelClass:
    """A GPU model class: node label values exactly as its nodes carry them, and the resources they offer."""

    name: str
    device: str
    values: tuple[str, ...]
    #: Resources the class's nodes offer (globs allowed); a pod is only steered here if all it requests is.
    resources: tuple[str, ...]
    #: Alias label or annotation key -> values that mean this class (``cloud.google.com/gke-accelerator``).
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: DeviceClasses of the class's DRA pools: their devices are this class's GPUs (DRA nodes carry no GFD label).
    device_classes: tuple[str, ...] = ()
    #: Node labels of the class's pools, added as they are (a DRA pool has no model label to select by).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    _cache: dict[Any, bool] = field(default_factory=dict, compare=False, repr=False)

    def offers(self, resources: Iterable[str]) -> bool:
        wanted = tuple(resources)
        return bool(_remember(self._cache, wanted, lambda: all(_matches_any(r, self.resources) for r in wanted)))


@dataclass(frozen=True)
class Models:
    classes: Mapping[str, ModelClass]
    #: Classes tried in order when a pod names none; the first that offers what the pod requests wins.
    defaults: tuple[str, ...] = ()

    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def has_dra_classes(self) -> bool:
        """Some class is DRA pools only (DeviceClasses, no model label values)."""
        found = self._cache.get("has-dra")
        if found is None:
            found = self._cache["has-dra"] = any(c.device_classes and not c.values for c in self.classes.values())
        return bool(found)

    def default_is_dra(self, device: str, resources: frozenset[str]) -> bool:
        """The class a pod that names none and chose nothing gets is DRA pools only."""
        key = ("default-dra", device, resources)
        found = self._cache.get(key)
        if found is None:
            chosen = self.default_for(device, sorted(resources))
            found = chosen is not None and bool(chosen.device_classes) and not chosen.values
            if len(self._cache) < _CACHE_LIMIT:
                self._cache[key] = found
        return bool(found)

    @property
    def dra_choice_keys(self) -> frozenset[str]:
        """The label and annotation keys through which a pod's own choice can reach a DRA-only class."""
        if "dra-keys" not in self._cache:
            dra = [c for c in self.classes.values() if c.device_classes and not c.values]
            self._cache["dra-keys"] = frozenset(k for c in dra for k in (*c.aliases, *c.node_selector))
        return self._cache["dra-keys"]  # type: ignore[no-any-return]

    def offering(self, device: str, resources: Iterable[str]) -> list[ModelClass]:
        wanted = tuple(resources)
        return [c for c in self.classes.values() if c.device == device and c.offers(wanted)]

    def default_for(self, device: str, resources: Iterable[str]) -> ModelClass | None:
        """The class a pod that names none gets: the first listed default that can serve it, else the only
        class that can; None when none or several can."""
        wanted = tuple(resources)
        return _remember(self._cache, ("default", device, wanted), lambda: self._default_for(device, wanted))  # type: ignore[no-any-return]

    def _default_for(self, device: str, wanted: tuple[str, ...]) -> ModelClass | None:
        candidates = self.offering(device, wanted)
        for name in self.defaults:
            for c in candidates:
                if c.name == name:
                    return c
        return candidates[0] if len(candidates) == 1 else None


@dataclass(frozen=True)
class GPUHolders:
    """Other ways a pod holds a GPU than a GPU resource: DRA resource claims, fractional-GPU annotations."""

    resource_claims: bool = True
    annotations: tuple[str, ...] = DEFAULT_HOLDER_ANNOTATIONS
    #: The vendor whose profile (runtime class, tolerations) a pod holding a GPU by annotation gets:
    #: KAI and HAMi share NVIDIA GPUs. DRA claims get none: their driver and DeviceClass decide.
    annotation_device: str | None = "nvidia"


@dataclass(frozen=True)
class AttributionLabel:
    """One pod label gpugate owns: a fixed value, or a namespace label's value with a default."""

    key: str
    default: str
    from_namespace_label: str | None = None
    value: str | None = None


def builtin_devices() -> dict[str, Device]:
    return {
        name: Device(name, res, aux, dra_drivers=BUILTIN_DRA[name][0], device_classes=BUILTIN_DRA[name][1])
        for name, (res, aux) in BUILTIN_DEVICE_RESOURCES.items()
    }


@dataclass(frozen=True, eq=False)  # a policy is itself: compared and hashed by identity
class Policy:
    name: str
    source: str = "<inline>"
    priority: int = 0
    mode: Mode = "enforce"
    match: Match = field(default_factory=Match)
    #: Vendor name -> device profile; the built-in vendors are always present (nothing injected for them).
    devices: Mapping[str, Device] = field(default_factory=builtin_devices)
    limits: Limits = field(default_factory=Limits)
    models: Models | None = None
    holders: GPUHolders = field(default_factory=GPUHolders)
    attribution: tuple[AttributionLabel, ...] = ()
    non_gpu_tolerations: NonGPUTolerations = "deny"
    non_gpu_runtime_class: Literal["deny", "allow"] = "deny"
    #: Security exceptions, each in a field of its own: ``mode`` never turns these checks into warnings.
    visible_devices_override: Literal["deny", "allow"] = "deny"
    attribution_edits: Literal["deny", "allow"] = "deny"
    #: Containers (by name) of a GPU pod that may see its GPUs without requesting any: no ``void`` for them.
    shared_gpu_containers: frozenset[str] = frozenset()
    init_only_gpus: Literal["deny", "warn", "allow"] = "warn"
    mutate_templates: bool = False
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def counts_as_gpu(self, resource: str) -> bool:
        return bool(
            _remember(self._cache, ("counts", resource), lambda: any(d.counts(resource) for d in self.devices.values()))
        )

    def device_of(self, resource: str) -> Device | None:
        """The device whose GPU or auxiliary resource this is (the first, in policy order)."""
        found: Device | None = _remember(
            self._cache,
            ("device", resource),
            lambda: next((d for d in self.devices.values() if d.owns(resource)), None),
        )
        return found

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        return tuple(r for d in self.devices.values() for r in d.resources)

    @property
    def gpu_tolerations(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(t for d in self.devices.values() for t in d.tolerations)

    @property
    def gpu_runtime_classes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.runtime_class_name for d in self.devices.values() if d.runtime_class_name))

    @property
    def uses_namespace_labels(self) -> bool:
        return self.match.namespace_selector is not None or any(a.from_namespace_label for a in self.attribution)


#: The policy that stands in when none matches: built-in checks only, nothing injected.
BUILTIN = Policy(
    name="built-in",
    source="built-in",
    non_gpu_tolerations="allow",
    non_gpu_runtime_class="allow",
    init_only_gpus="allow",
)


class NamespaceLabelsUnavailable(Exception):
    """A policy needs a namespace's labels and they cannot be known right now."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


@dataclass(frozen=True)
class WorkloadKind:
    """A kind whose objects carry pod templates, and where: ``spec.workerGroupSpecs[*].template``."""

    group: str
    kind: str
    #: Dotted paths to each PodTemplateSpec; ``[*]`` walks a list, ``*`` every value of a map.
    templates: tuple[str, ...]
    plural: str = ""
    versions: tuple[str, ...] = ()
    source: str = "built-in"


#: Namespaces (and namespace label sets) each policy set remembers its candidates for; past this the
#: memory starts again, so a cluster with more namespaces costs a rescan now and then, never unbounded memory.
INDEX_LIMIT = 8192


@dataclass(frozen=True)
class PolicySet:
    """Every loaded policy, highest priority first (ties broken by name), and the workload kinds the
    policy directory adds to the built-in ones."""

    policies: tuple[Policy, ...] = ()
    digest: str = ""
    workloads: Mapping[tuple[str, str], WorkloadKind] = field(default_factory=dict)
    # The index behind governing(): namespace -> candidates, (namespace, labels) -> candidates. Derived
    # from ``policies`` alone, so it is no part of the set's identity.
    _by_namespace: dict[str, tuple[tuple[Policy, ...], bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[Policy, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @staticmethod
    def of(policies: Iterable[Policy], digest: str = "", workloads: Iterable[WorkloadKind] = ()) -> PolicySet:
        return PolicySet(
            tuple(sorted(policies, key=lambda p: (-p.priority, p.name))),
            digest,
            {(w.group, w.kind): w for w in workloads},
        )

    def governing(
        self,
        *,
        namespace: str,
        pod_labels: Mapping[str, str],
        namespace_labels: Callable[[], Mapping[str, str] | None],
    ) -> Policy:
        """The highest-priority policy whose every selector matches, or :data:`BUILTIN`.

        ``namespace_labels`` is called when a policy that the namespace's name admits selects by namespace
        labels. When it returns None and the answer depends on them, :class:`NamespaceLabelsUnavailable` is
        raised, rather than silently letting the pod fall through to a weaker policy.

        The same answer as a scan of every policy in order (a property test holds the two together), from
        an index: the policies whose namespace globs admit a namespace are worked out once per namespace,
        and of those, the ones whose namespace selectors admit its labels once per label set, so a decision
        only checks pod selectors, whatever the number of policies.
        """
        candidates, selects_by_labels = self._for_namespace(namespace)
        if selects_by_labels:
            labels = namespace_labels()
            if labels is None:  # the scan decides whether the labels were needed at all
                return _scan(candidates, namespace=namespace, pod_labels=pod_labels, namespace_labels=namespace_labels)
            candidates = self._for_labels(namespace, candidates, labels)
        for policy in candidates:
            selector = policy.match.pod_selector
            if selector is None or selector.matches(pod_labels):
                return policy
        return BUILTIN

    def _for_namespace(self, namespace: str) -> tuple[tuple[Policy, ...], bool]:
        found = self._by_namespace.get(namespace)
        if found is None:
            candidates = tuple(
                p
                for p in self.policies
                if not p.match.namespaces or any(fnmatch.fnmatchcase(namespace, g) for g in p.match.namespaces)
            )
            found = candidates, any(p.match.namespace_selector is not None for p in candidates)
            if len(self._by_namespace) >= INDEX_LIMIT:
                self._by_namespace.clear()
            self._by_namespace[namespace] = found
        return found

    def _for_labels(
        self, namespace: str, candidates: tuple[Policy, ...], labels: Mapping[str, str]
    ) -> tuple[Policy, ...]:
        key = (namespace, frozenset(labels.items()))
        found = self._by_labels.get(key)
        if found is None:
            found = tuple(
                p
                for p in candidates
                if p.match.namespace_selector is None or p.match.namespace_selector.matches(labels)
            )
            if len(self._by_labels) >= INDEX_LIMIT:
                self._by_labels.clear()
            self._by_labels[key] = found
        return found


def _scan(
    policies: Iterable[Policy],
    *,
    namespace: str,
    pod_labels: Mapping[str, str],
    namespace_labels: Callable[[], Mapping[str, str] | None],
) -> Policy:
    """The first policy, in order, whose every selector matches: the definition governing() indexes."""
    for policy in policies:
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
