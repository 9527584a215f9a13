"""Where a pod spec lives in each admitted object, and read-only views of its containers and GPU requests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from .inventory.claims import ClaimLookup, claims_of, dra_resource_vendor
from .inventory.model import Inventory
from .policy.model import IMPLICIT_DRA_PREFIX, Device, Policy, WorkloadKind
from .quantity import QuantityError, parse_quantity

#: The kinds gpugate reads and where their pod templates are. Built-in kinds, then the workload CRDs most GPU
#: work arrives through; a policy directory adds more with GPUWorkloadKind documents. Template paths were
#: checked against each project's CRD schema (tests/fixtures/crds/README.md): ``[*]`` walks a list, ``*``
#: every value of a map. ``"."`` is the object itself (a Pod).
BUILTIN_WORKLOADS: tuple[WorkloadKind, ...] = (
    WorkloadKind("", "Pod", (".",), "pods", ("v1",)),
    WorkloadKind("", "PodTemplate", ("template",), "podtemplates", ("v1",)),
    WorkloadKind("apps", "Deployment", ("spec.template",), "deployments", ("v1",)),
    WorkloadKind("apps", "StatefulSet", ("spec.template",), "statefulsets", ("v1",)),
    WorkloadKind("apps", "DaemonSet", ("spec.template",), "daemonsets", ("v1",)),
    WorkloadKind("apps", "ReplicaSet", ("spec.template",), "replicasets", ("v1",)),
    WorkloadKind("batch", "Job", ("spec.template",), "jobs", ("v1",)),
    WorkloadKind("batch", "CronJob", ("spec.jobTemplate.spec.template",), "cronjobs", ("v1",)),
    # KubeRay (ray-project/kuberay ray-operator/config/crd/bases)
    WorkloadKind(
        "ray.io",
        "RayCluster",
        ("spec.headGroupSpec.template", "spec.workerGroupSpecs[*].template"),
        "rayclusters",
        ("v1",),
    ),
    WorkloadKind(
        "ray.io",
        "RayJob",
        (
            "spec.rayClusterSpec.headGroupSpec.template",
            "spec.rayClusterSpec.workerGroupSpecs[*].template",
            "spec.submitterPodTemplate",
        ),
        "rayjobs",
        ("v1",),
    ),
    WorkloadKind(
        "ray.io",
        "RayService",
        ("spec.rayClusterConfig.headGroupSpec.template", "spec.rayClusterConfig.workerGroupSpecs[*].template"),
        "rayservices",
        ("v1",),
    ),
    # Kubeflow training-operator
    WorkloadKind("kubeflow.org", "PyTorchJob", ("spec.pytorchReplicaSpecs.*.template",), "pytorchjobs", ("v1",)),
    # kubernetes-sigs/jobset: each replicated job is a Job template
    WorkloadKind(
        "jobset.x-k8s.io", "JobSet", ("spec.replicatedJobs[*].template.spec.template",), "jobsets", ("v1alpha2",)
    ),
    # kubernetes-sigs/lws
    WorkloadKind(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        ("spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate"),
        "leaderworkersets",
        ("v1",),
    ),
    # volcano-sh/volcano
    WorkloadKind("batch.volcano.sh", "Job", ("spec.tasks[*].template",), "jobs", ("v1alpha1",)),
)
_BUILTIN_BY_KIND = {(w.group, w.kind): w for w in BUILTIN_WORKLOADS}

Key = str | int


def workload_kinds(extra: Mapping[tuple[str, str], WorkloadKind] | None = None) -> dict[tuple[str, str], WorkloadKind]:
    """(group, kind) -> WorkloadKind: the built-in ones, and those a policy directory adds (which win)."""
    return {**_BUILTIN_BY_KIND, **(extra or {})}


def _expand(node: Any, parts: list[str], prefix: tuple[Key, ...]) -> Iterator[tuple[Key, ...]]:
    """The concrete key paths of a template path pattern in one object (only those that exist)."""
    if not parts:
        if isinstance(node, Mapping):
            yield prefix
        return
    part, rest = parts[0], parts[1:]
    if part == "*":
        if isinstance(node, Mapping):
            for key in node:
                yield from _expand(node[key], rest, (*prefix, str(key)))
        return
    name, star = (part[:-3], True) if part.endswith("[*]") else (part, False)
    if not isinstance(node, Mapping) or name not in node:
        return
    child = node[name]
    if star:
        if isinstance(child, list):
            for index, item in enumerate(child):
                yield from _expand(item, rest, (*prefix, name, index))
        return
    yield from _expand(child, rest, (*prefix, name))


CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _dotted(keys: tuple[Key, ...]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


@dataclass(frozen=True)
class PodShape:
    """Where one pod (or pod template) sits inside an admitted object."""

    kind: str
    name: str
    template: tuple[Key, ...]

    @property
    def is_template(self) -> bool:
        return self.kind != "Pod"

    @property
    def meta_keys(self) -> tuple[Key, ...]:
        return (*self.template, "metadata") if self.template else ("metadata",)

    @property
    def spec_keys(self) -> tuple[Key, ...]:
        return (*self.template, "spec")

    @property
    def spec_path(self) -> str:
        return _dotted(self.spec_keys)

    @property
    def meta_path(self) -> str:
        return _dotted(self.meta_keys)

    def describe(self) -> str:
        return f'{self.kind} "{self.name}"' if self.name else self.kind


def shapes_of(
    obj: Mapping[str, Any], *, name: str = "", workloads: Mapping[tuple[str, str], WorkloadKind] | None = None
) -> list[PodShape] | None:
    """Every pod template in an object (one for a Pod), or None for kinds gpugate does not read."""
    api_version = obj.get("apiVersion") or ""
    kind = obj.get("kind") or ""
    known = (workloads or _BUILTIN_BY_KIND).get((group_of(str(api_version)), str(kind)))
    if known is None:
        return None
    meta = obj.get("metadata") or {}
    display = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "") or name
    found: list[PodShape] = []
    for pattern in known.templates:
        if pattern == ".":
            found.append(PodShape(kind=str(kind), name=str(display), template=()))
            continue
        for keys in _expand(obj, pattern.split("."), ()):
            found.append(PodShape(kind=str(kind), name=str(display), template=keys))
    return found


def shape_of(obj: Mapping[str, Any], *, name: str = "") -> PodShape | None:
    """The first pod shape of a Pod or built-in workload object, or None."""
    shapes = shapes_of(obj, name=name)
    return shapes[0] if shapes else None


def dig(obj: Mapping[str, Any], keys: tuple[Key, ...]) -> Any:
    node: Any = obj
    for key in keys:
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
        elif isinstance(node, Mapping):
            node = node.get(key)
        else:
            return None
    return node


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Every container with its field (initContainers, containers, ephemeralContainers) and index."""
    for fld in CONTAINER_FIELDS:
        items = spec.get(fld)
        if isinstance(items, list):
            for index, container in enumerate(items):
                if isinstance(container, Mapping):
                    yield fld, index, container


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container with ``restartPolicy: Always`` runs beside the app containers (KEP-753)."""
    return container.get("restartPolicy") == "Always"


def gpu_amounts(container: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPU resource -> amount for one container: the limit, else the request; unparsable values skipped."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    out: dict[str, Fraction] = {}
    for section in ("requests", "limits"):  # limits last: they win, as scheduling uses request == limit
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for resource, raw in values.items():
            if is_gpu(resource):
                try:
                    out[resource] = parse_quantity(raw)
                except QuantityError:
                    continue
    return out


def requests_gpu(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> bool:
    """True when any container asks for a positive amount of a GPU resource."""
    return any(amount > 0 for _, _, c in containers(spec) for amount in gpu_amounts(c, is_gpu).values())


def gpu_resources_requested(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> set[str]:
    return {r for _, _, c in containers(spec) for r, amount in gpu_amounts(c, is_gpu).items() if amount > 0}


def container_label(fld: str, container: Mapping[str, Any]) -> str:
    kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}.get(fld, "container")
    return f'{kind} "{container.get("name", "?")}"'


_NO_CLAIMS: Mapping[str, tuple[str, int | None]] = MappingProxyType({})


@dataclass(frozen=True)
class GPUUse:
    """How a pod holds GPUs under a policy: counted GPU resources, their vendors, and other holds."""

    #: GPU count resources requested with a positive amount.
    resources: frozenset[str]
    #: The vendors of the GPU and auxiliary resources the pod requests, in policy order.
    devices: tuple[Device, ...]
    #: Other ways the pod holds a GPU: "spec.resourceClaims[0]", "annotation gpu-fraction", ...
    holders: tuple[str, ...] = ()
    #: Counted resources served only through DRA (``deviceclass.resource.kubernetes.io/<class>``, or a GPU
    #: DeviceClass's own ``extendedResourceName`` that no device profile lists): no device-plugin pool has them.
    dra_resources: frozenset[str] = frozenset()
    #: GPU DeviceClasses the pod's claims use.
    device_classes: tuple[str, ...] = ()
    #: The pod holds admin-access claims on GPUs (monitoring): it observes GPUs, holds none.
    observer: bool = False
    #: Claim path -> (GPU DeviceClass, devices; None for All), and (path, DeviceClass) the inventory lacks.
    claim_wants: Mapping[str, tuple[str, int | None]] = field(default_factory=lambda: _NO_CLAIMS)
    missing_classes: tuple[tuple[str, str], ...] = ()

    @property
    def holds_gpu(self) -> bool:
        return bool(self.resources or self.devices or self.holders)

    @property
    def device(self) -> Device | None:
        """The one vendor whose profile applies; None for none or (a violation) several."""
        return self.devices[0] if len(self.devices) == 1 else None

    @property
    def device_plugin_resources(self) -> frozenset[str]:
        """The counted resources a device plugin serves (or DRA through the same name, KEP-5004)."""
        return self.resources - self.dra_resources

    @property
    def fractional(self) -> bool:
        return any(h.startswith("annotation ") for h in self.holders)

    def counts(self, resource: str, policy: Policy) -> bool:
        """A GPU count resource for this pod: the policy's, or one DRA serves as a GPU."""
        return resource in self.dra_resources or policy.counts_as_gpu(resource)


def gpu_use(
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    policy: Policy,
    *,
    namespace: str = "",
    inventory: Inventory | None = None,
    claims: ClaimLookup | None = None,
) -> GPUUse:
    counted: set[str] = set()
    dra: set[str] = set()
    vendors: dict[str, Device] = {}
    for _, _, container in containers(spec):
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            continue
        for section in ("requests", "limits"):
            values = resources.get(section)
            if not isinstance(values, Mapping):
                continue
            for resource, raw in values.items():
                name = str(resource)
                device = policy.device_of(name)
                if device is None:
                    if "/" not in name:
                        continue  # cpu, memory, ephemeral-storage, hugepages-*
                    device = dra_resource_vendor(name, policy, inventory)
                    if device is None:
                        continue
                    served_by_dra = True
                else:
                    served_by_dra = name.startswith(IMPLICIT_DRA_PREFIX)
                try:
                    amount = parse_quantity(raw)
                except QuantityError:
                    continue
                if amount <= 0:
                    continue
                if served_by_dra or device.counts(name):
                    counted.add(name)
                if served_by_dra:
                    dra.add(name)
                vendors.setdefault(device.name, device)
    holders: list[str] = []
    observer = False
    classes: list[str] = []
    use = None
    if spec.get("resourceClaims"):
        use = claims_of(spec, namespace=namespace, policy=policy, inventory=inventory, lookup=claims)
        for path, (device, device_class) in use.gpus.items():
            holders.append(path)
            vendors.setdefault(device.name, device)
            classes.append(device_class)
        if policy.holders.resource_claims:
            holders += use.unknown
        observer = bool(use.observers) and not use.gpus
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping):
        by_annotation = [f"annotation {a}" for a in policy.holders.annotations if a in annotations]
        holders += by_annotation
        device = policy.devices.get(policy.holders.annotation_device or "")
        if by_annotation and device is not None:
            vendors.setdefault(device.name, device)
    order = list(policy.devices)
    devices = tuple(sorted(vendors.values(), key=lambda d: order.index(d.name) if d.name in order else len(order)))
    return GPUUse(frozenset(counted), devices, tuple(holders), frozenset(dra), tuple(dict.fromkeys(classes)), observer)
