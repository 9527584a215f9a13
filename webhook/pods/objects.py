"""Where a pod spec lives in each admitted object, and read-only views of its containers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..policy.model import WorkloadKind

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
    # Kubeflow training-operator v1 (tag v1.9.0 manifests/base/crds): a map of replica types to replica specs
    WorkloadKind("kubeflow.org", "PyTorchJob", ("spec.pytorchReplicaSpecs.*.template",), "pytorchjobs", ("v1",)),
    WorkloadKind("kubeflow.org", "TFJob", ("spec.tfReplicaSpecs.*.template",), "tfjobs", ("v1",)),
    # kubeflow/mpi-operator v2beta1 (manifests/base/kubeflow.org_mpijobs.yaml). training-operator v1.9.0's legacy
    # v1 MPIJob is a CRD of the same name (one or the other is installed); its template path is the same
    WorkloadKind("kubeflow.org", "MPIJob", ("spec.mpiReplicaSpecs.*.template",), "mpijobs", ("v2beta1",)),
    # Kubeflow Trainer v2 (kubeflow/trainer manifests/base/crds): a runtime's template is a JobSet spec
    WorkloadKind(
        "trainer.kubeflow.org",
        "TrainingRuntime",
        ("spec.template.spec.replicatedJobs[*].template.spec.template",),
        "trainingruntimes",
        ("v1alpha1",),
    ),
    WorkloadKind(
        "trainer.kubeflow.org",
        "ClusterTrainingRuntime",
        ("spec.template.spec.replicatedJobs[*].template.spec.template",),
        "clustertrainingruntimes",
        ("v1alpha1",),
        cluster_scoped=True,
    ),
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
    # KServe LLMInferenceService (kserve/kserve config/crd/full/llmisvc): bare PodSpecs; the controller puts
    # spec.labels/annotations (spec.prefill.* for the prefill pods) on their pods (pkg/controller/v1alpha2/llmisvc
    # workload_multi_node.go, PropagateMap). baseRefs may add a template from an LLMInferenceServiceConfig,
    # which is not in the request: its pods are judged when the controller creates them.
    WorkloadKind(
        "serving.kserve.io",
        "LLMInferenceService",
        (),
        "llminferenceservices",
        ("v1alpha1", "v1alpha2"),
        pod_specs=(
            ("spec.template", ""),
            ("spec.worker", ""),
            ("spec.prefill.template", ""),
            ("spec.prefill.worker", ""),
        ),
    ),
    # Kubeflow Trainer v2 TrainJob: no pod template of its own (the runtime has it; its runtimePatches are
    # patches, not pods); spec.trainer.resourcesPerNode is read as the trainer pods' request (pods.operated)
    WorkloadKind("trainer.kubeflow.org", "TrainJob", (), "trainjobs", ("v1alpha1",)),
    # NVIDIA Dynamo (ai-dynamo/dynamo deploy/cloud/operator): each of spec.services is a pod the operator builds
    # from resources, extraPodSpec and extraPodMetadata (pods.operated)
    WorkloadKind("nvidia.com", "DynamoGraphDeployment", (), "dynamographdeployments", ("v1alpha1",)),
    # AIBrix orchestration (vllm-project/aibrix config/crd/orchestration): a StormService holds a RoleSet
    # template, a RoleSet its roles, a PodSet one pod template; RayClusterFleet and RayClusterReplicaSet
    # a KubeRay RayCluster template
    WorkloadKind("orchestration.aibrix.ai", "PodSet", ("spec.template",), "podsets", ("v1alpha1",)),
    WorkloadKind("orchestration.aibrix.ai", "RoleSet", ("spec.roles[*].template",), "rolesets", ("v1alpha1",)),
    WorkloadKind(
        "orchestration.aibrix.ai",
        "StormService",
        ("spec.template.spec.roles[*].template",),
        "stormservices",
        ("v1alpha1",),
    ),
    WorkloadKind(
        "orchestration.aibrix.ai",
        "RayClusterFleet",
        ("spec.template.spec.headGroupSpec.template", "spec.template.spec.workerGroupSpecs[*].template"),
        "rayclusterfleets",
        ("v1alpha1",),
    ),
    WorkloadKind(
        "orchestration.aibrix.ai",
        "RayClusterReplicaSet",
        ("spec.template.spec.headGroupSpec.template", "spec.template.spec.workerGroupSpecs[*].template"),
        "rayclusterreplicasets",
        ("v1alpha1",),
    ),
)
_BUILTIN_BY_KIND = {(w.group, w.kind): w for w in BUILTIN_WORKLOADS}
#: Kubernetes' own API groups among the kinds gpugate reads: the apiserver fills their pod specs (a Pod's, a
#: workload's template) with defaults before admission (``schedulerName: default-scheduler`` among them), while
#: a custom resource's templates arrive as written; the audit names their kinds without a group.
DEFAULTED_GROUPS = frozenset({"", "apps", "batch"})

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
    """Where one pod (or pod template) sits inside an admitted object. ``template`` is the PodTemplateSpec, or,
    with ``pod_meta``, a bare PodSpec whose pods take their labels and annotations from ``pod_meta``."""

    kind: str
    name: str
    template: tuple[Key, ...]
    pod_meta: tuple[Key, ...] | None = None

    @property
    def is_template(self) -> bool:
        return self.kind != "Pod"

    @property
    def meta_keys(self) -> tuple[Key, ...]:
        if self.pod_meta is not None:
            return self.pod_meta
        return (*self.template, "metadata") if self.template else ("metadata",)

    @property
    def spec_keys(self) -> tuple[Key, ...]:
        return self.template if self.pod_meta is not None else (*self.template, "spec")

    @property
    def template_path(self) -> str:
        """The field that names this template in messages (``spec.workerGroupSpecs[0].template``)."""
        return _dotted(self.template)

    @property
    def spec_path(self) -> str:
        return _dotted(self.spec_keys)

    @property
    def selector_keys(self) -> tuple[Key, ...] | None:
        """Where the label selector of the controller that makes pods from this template sits: beside the
        template (``spec.selector`` of a Deployment or Job, ``spec.jobTemplate.spec.selector`` of a CronJob,
        each replicated Job's of a JobSet). None for a Pod."""
        return (*self.template[:-1], "selector") if self.template else None

    @property
    def selector_path(self) -> str:
        return _dotted(self.selector_keys or ())

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
    for pattern, meta in known.pod_specs:
        for keys in _expand(obj, pattern.split("."), ()):
            pod_meta = (*keys[:-1], *meta.split(".")) if meta else keys[:-1]
            found.append(PodShape(kind=str(kind), name=str(display), template=keys, pod_meta=pod_meta))
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


def container_label(fld: str, container: Mapping[str, Any]) -> str:
    kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}.get(fld, "container")
    return f'{kind} "{container.get("name", "?")}"'


def controller_ref(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked ``controller: true`` (the one object that manages this one), or None."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def through_replica_set(kind: str, name: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """A pod's ReplicaSet as the Deployment that made it: the ReplicaSet is named after the Deployment plus
    ``-<pod-template-hash>``, the label every pod it creates carries (k/k pkg/controller/deployment)."""
    template_hash = (meta.get("labels") or {}).get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        return "Deployment", name[: -len(template_hash) - 1]
    return kind, name
