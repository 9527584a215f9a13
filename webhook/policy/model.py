"""The GPU policy model: frozen dataclasses, label-name validators, and choosing the governing policy. No I/O."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .classes import Models, matches_any, remember
from .labels import LabelSelector
from .vendors import (
    BUILTIN_DEVICE_RESOURCES,
    BUILTIN_DRA,
    DEFAULT_GPU_RUNTIME_CLASSES,
    DEFAULT_HOLDER_ANNOTATIONS,
    DEFAULT_HOLDER_SCHEDULERS,
    IMPLICIT_DRA_PREFIX,
    RUNTIME_CLASS_PODS,
)

KIND = "GPUPolicy"
WORKLOAD_KIND = "GPUWorkloadKind"
NODE_POOL_KIND = "GPUNodePool"


Mode = Literal["enforce", "warn", "audit"]
NonGPUTolerations = Literal["deny", "strip", "allow"]

# --------------------------------------------------------------------------------------------- model


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
        return matches_any(device_class, self.device_classes)

    def _implicit(self, resource: str) -> bool:
        return resource.startswith(IMPLICIT_DRA_PREFIX) and self.gpu_class(resource[len(IMPLICIT_DRA_PREFIX) :])

    def counts(self, resource: str) -> bool:
        return bool(
            remember(
                self._cache,
                ("counts", resource),
                lambda: (
                    (matches_any(resource, self.resources) or self._implicit(resource))
                    and not matches_any(resource, self.auxiliary_resources)
                ),
            )
        )

    def owns(self, resource: str) -> bool:
        return bool(
            remember(
                self._cache,
                ("owns", resource),
                lambda: (
                    matches_any(resource, self.resources)
                    or matches_any(resource, self.auxiliary_resources)
                    or self._implicit(resource)
                ),
            )
        )


@dataclass(frozen=True)
class GPUHolders:
    """Other ways a pod holds a GPU than a GPU resource: DRA resource claims, fractional-GPU annotations."""

    resource_claims: bool = True
    annotations: tuple[str, ...] = DEFAULT_HOLDER_ANNOTATIONS
    #: The schedulers that implement those annotations: only a pod one of them places holds a GPU by one.
    annotation_schedulers: tuple[str, ...] = DEFAULT_HOLDER_SCHEDULERS
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
    #: ``spec.gpuRuntimeClasses``: runtime classes that can expose GPUs, beside each device's runtimeClassName.
    runtime_classes: tuple[str, ...] = DEFAULT_GPU_RUNTIME_CLASSES
    #: Security exceptions, each in a field of its own: ``mode`` never turns these checks into warnings.
    visible_devices_override: Literal["deny", "allow"] = "deny"
    attribution_edits: Literal["deny", "allow"] = "deny"
    privileged_gpu_containers: Literal["deny", "allow"] = "deny"
    #: Containers (by name) of a GPU pod that may see its GPUs without requesting any: no ``void`` for them.
    shared_gpu_containers: frozenset[str] = frozenset()
    #: ``envFrom`` that can set ``NVIDIA_*`` in a container that sees GPUs (``allow``: a trusted namespace).
    visible_devices_env_from: Literal["deny", "allow"] = "deny"
    #: CDI device annotations (``cdi.k8s.io/...``) on a pod (``allow``: a trusted namespace).
    cdi_annotations: Literal["deny", "allow"] = "deny"
    #: ``spec.security.deviceVariables``: NVIDIA toolkit device variables besides NVIDIA_VISIBLE_DEVICES
    #: (``vendors.NVIDIA_DEVICE_VARIABLES``) this policy's pods may set, one opt-in per feature (e.g. NVIDIA_GDS).
    device_variables: frozenset[str] = frozenset()
    init_only_gpus: Literal["deny", "warn", "allow"] = "warn"
    mutate_templates: bool = False
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def counts_as_gpu(self, resource: str) -> bool:
        return bool(
            remember(self._cache, ("counts", resource), lambda: any(d.counts(resource) for d in self.devices.values()))
        )

    def device_of(self, resource: str) -> Device | None:
        """The device whose GPU or auxiliary resource this is (the first, in policy order)."""
        found: Device | None = remember(
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
        """Every runtime class under which a container can reach GPUs: the policy's list, then each device's."""
        own = (d.runtime_class_name for d in self.devices.values() if d.runtime_class_name)
        return tuple(dict.fromkeys((*self.runtime_classes, *own)))

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
    #: Cluster-scoped kind (ClusterTrainingRuntime): its webhook rule has ``scope: Cluster``.
    cluster_scoped: bool = False
    #: Bare PodSpecs (no PodTemplateSpec around them), each with where the operator takes its pods' labels and
    #: annotations from, relative to the PodSpec's parent ("" for the parent itself): KServe's
    #: LLMInferenceService puts ``spec.labels`` on the pods of ``spec.template`` and ``spec.worker``.
    pod_specs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodePoolDecl:
    """A node pool that scales up, declared in the policy directory (``GPUNodePool``): the labels, taints and
    GPUs of the nodes it would add. For autoscalers whose node templates gpugate cannot read (the cluster
    autoscaler's node groups, GKE/EKS/AKS managed node pools scaled to zero); Karpenter NodePools are read
    live instead. Hashable: the inventory keeps what it builds from these per policy set."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    #: (key, value, effect)
    taints: tuple[tuple[str, str, str], ...] = ()
    #: GPU resource -> how many one node offers
    allocatable: tuple[tuple[str, int], ...] = ()
    max_nodes: int | None = None
    source: str = "<inline>"


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
    #: What the files should change, though they load (deprecated forms), one line each with file and document.
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: Node pools that scale up, as the policy directory declares them (``GPUNodePool`` documents).
    pools: tuple[NodePoolDecl, ...] = ()
    # The index behind governing(): namespace -> candidates, (namespace, labels) -> candidates. Derived
    # from ``policies`` alone, so it is no part of the set's identity.
    _by_namespace: dict[str, tuple[tuple[Policy, ...], bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[Policy, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @staticmethod
    def of(
        policies: Iterable[Policy],
        digest: str = "",
        workloads: Iterable[WorkloadKind] = (),
        *,
        notes: Iterable[str] = (),
        pools: Iterable[NodePoolDecl] = (),
    ) -> PolicySet:
        return PolicySet(
            tuple(sorted(policies, key=lambda p: (-p.priority, p.name))),
            digest,
            {(w.group, w.kind): w for w in workloads},
            tuple(notes),
            tuple(sorted(pools, key=lambda p: p.name)),
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

    def possible(
        self, *, namespace: str, namespace_labels: Callable[[], Mapping[str, str] | None]
    ) -> tuple[Policy, ...]:
        """Every policy that may govern some pod of ``namespace``, whatever its labels, in order: those whose
        namespace selectors admit it, up to the first that selects no pod labels (it takes every pod the ones
        before leave), else with :data:`BUILTIN` last. What judges an object that pods of any labels may use (a
        ResourceClaim). Raises :class:`NamespaceLabelsUnavailable` when a selector needs labels not known now."""
        candidates, selects_by_labels = self._for_namespace(namespace)
        if selects_by_labels:
            labels = namespace_labels()
            if labels is None:
                raise NamespaceLabelsUnavailable(namespace)
            candidates = self._for_labels(namespace, candidates, labels)
        out: list[Policy] = []
        for policy in candidates:
            out.append(policy)
            if policy.match.pod_selector is None:
                return tuple(out)
        return (*out, BUILTIN)

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
