"""Pods an operator builds from fields that are not a pod template: the GPU request a workload CRD states in
its own words, as the pod the operator will make of it.

- Kubeflow Trainer v2 TrainJob: ``spec.trainer.resourcesPerNode`` (a ResourceRequirements) is merged, by
  strategic merge per resource, into the ``node`` container of the runtime's trainer job (kubeflow/trainer
  pkg/runtime/core/trainingruntime.go and pkg/util/trainingruntime/trainingruntime.go
  MergeResourceRequirements, commit 8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3). The runtime's template is in a
  TrainingRuntime or ClusterTrainingRuntime, judged when that is applied; here only what the TrainJob sets.
- NVIDIA Dynamo DynamoGraphDeployment: each of ``spec.services`` states ``resources.limits.gpu`` (a string),
  which the operator turns into a limit on ``resources.limits.gpuType`` or else ``nvidia.com/gpu``; the
  ``custom`` maps are copied as resource names; ``requests.gpu`` is not used at all (ai-dynamo/dynamo
  deploy/cloud/operator/internal/controller_common/resource.go GetResourcesConfig and getGPUResourceName,
  commit 21cb4d447eb1007facff34a376f0341a78f91b16; the types in deploy/cloud/operator/api/dynamo/common/common.go).
  ``extraPodSpec`` is the PodSpec the operator builds the pod from: ``mainContainer`` is merged into its own
  main container, appended after ``extraPodSpec.containers``, whose resources ``resources`` replaces when set;
  ``extraPodMetadata`` goes onto the pods (deploy/cloud/operator/internal/dynamo/graph.go GenerateBasePodSpec
  and GenerateGrovePodGangSet, commit 010c68fa39cf2e0820721849c47b19a5b4f0e393). ``labels``/``annotations``
  are "added to generated Kubernetes resources for this component (such as Pod ...)" (the type's own doc).

Each becomes an :class:`OperatedPod`: a pod spec for the rules, and how each of its fields maps back to the
field the user wrote, so every message names the CRD's own field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .objects import group_of

#: (kind, namespace, name) of a TrainingRuntime or ClusterTrainingRuntime -> the object, or None when it is not
#: visible (a server never sees it; `gpugate check` does when the manifest holds it).
RuntimeLookup = Callable[[str, str, str], Mapping[str, Any] | None]
#: The label that marks a runtime's trainer job (kubeflow/trainer pkg/constants LabelTrainJobAncestor and
#: AncestorTrainer).
TRAINER_ANCESTOR = ("trainer.kubeflow.org/trainjob-ancestor-step", "trainer")

#: The resource Dynamo's operator requests for ``limits.gpu`` when ``gpuType`` is empty
#: (deploy/cloud/operator/internal/consts KubeResourceGPUNvidia).
DYNAMO_DEFAULT_GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class OperatedPod:
    """A pod an operator will make from fields of the admitted object: its ``metadata`` and ``spec`` for the
    rules, ``label`` naming it in warnings (``trainer``, ``services.decode``), ``fields`` mapping a path in
    the pod (``spec.containers[1].resources``, ``metadata``) to the field of the object it came from (longest
    prefix wins; ``spec`` and ``metadata`` are always there), and ``notes``: warnings about what the operator
    does with what it was given."""

    label: str
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]
    fields: Mapping[str, str]
    notes: tuple[str, ...] = ()

    def locate(self, path: str) -> str:
        """A path in this pod (``spec.containers[0].resources.limits[nvidia.com/gpu]``) as the field of the
        admitted object it came from."""
        for prefix in sorted(self.fields, key=len, reverse=True):
            if path == prefix or path.startswith((f"{prefix}.", f"{prefix}[")):
                return self.fields[prefix] + path[len(prefix) :]
        return path


def _strings(value: Any) -> dict[str, Any]:
    """A map read defensively: an object with string keys, anything else nothing (the apiserver's schema for
    these CRDs guarantees the shape; a hostile or hand-made object gets no further)."""
    return {k: v for k, v in value.items() if isinstance(k, str)} if isinstance(value, Mapping) else {}


def runtime_ref(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The kind (default ClusterTrainingRuntime, as the CRD defaults it) and name of a TrainJob's runtime."""
    ref = _strings(_strings(obj.get("spec")).get("runtimeRef"))
    kind = ref.get("kind") if isinstance(ref.get("kind"), str) and ref.get("kind") else "ClusterTrainingRuntime"
    name = ref.get("name")
    return str(kind), name if isinstance(name, str) else "?"


def _trainjob(obj: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> Iterator[OperatedPod]:
    trainer = _strings(_strings(obj.get("spec")).get("trainer"))
    resources = _strings(trainer.get("resourcesPerNode"))
    if runtime is not None:
        yield from _with_runtime(obj, runtime, resources)
        return
    if not resources:
        return
    limits, requests = _strings(resources.get("limits")), _strings(resources.get("requests"))
    real = "spec.trainer.resourcesPerNode"
    fields = {"spec": "spec.trainer", "metadata": "spec.trainer", "spec.containers[0].resources": real}
    notes = []
    for resource, value in requests.items():
        # An extended resource (a domain-prefixed name: GPUs, NICs) needs a limit equal to its request. Merged into
        # the runtime's node container, whose own limit stays, so it is judged as the limit it must equal.
        if "/" in resource and resource not in limits:
            limits[resource] = value
            fields[f"spec.containers[0].resources.limits[{resource}]"] = f"{real}.requests[{resource}]"
            notes.append(f"{real}.requests[{resource}] has no limit: the runtime's node container must set it equal")
    spec = {"containers": [{"name": "node", "resources": {"limits": limits, "requests": requests}}]}
    yield OperatedPod("trainer", {}, spec, fields, tuple(notes))


def _with_runtime(
    obj: Mapping[str, Any], runtime: Mapping[str, Any], resources: Mapping[str, Any]
) -> Iterator[OperatedPod]:
    """The trainer pods of a runtime that is visible: each trainer job's pod template, resourcesPerNode merged
    per resource into its ``node`` container, as the trainer merges it."""
    kind, name = runtime_ref(obj)
    real = "spec.trainer.resourcesPerNode"
    limits, requests = _strings(resources.get("limits")), _strings(resources.get("requests"))
    jobs = _strings(_strings(_strings(runtime.get("spec")).get("template")).get("spec")).get("replicatedJobs")
    for index, raw in enumerate(jobs if isinstance(jobs, list) else []):
        job = _strings(_strings(raw).get("template"))
        key, value = TRAINER_ANCESTOR
        if _strings(_strings(job.get("metadata")).get("labels")).get(key) != value:
            continue
        template = _strings(_strings(job.get("spec")).get("template"))
        where = f'{kind} "{name}" spec.template.spec.replicatedJobs[{index}].template.spec.template'
        fields = {"spec": f"{where}.spec", "metadata": f"{where}.metadata"}
        spec = _strings(template.get("spec"))
        listed = spec.get("containers")
        containers = list(listed) if isinstance(listed, list) else []
        for at, container in enumerate(containers):
            if not isinstance(container, Mapping) or container.get("name") != "node":
                continue
            own = _strings(container.get("resources"))
            merged = {
                "limits": {**_strings(own.get("limits")), **limits},
                "requests": {**_strings(own.get("requests")), **requests},
            }
            containers[at] = {**container, "resources": merged}
            base = f"spec.containers[{at}].resources"
            fields |= {f"{base}.limits[{r}]": f"{real}.limits[{r}]" for r in limits}
            fields |= {f"{base}.requests[{r}]": f"{real}.requests[{r}]" for r in requests}
        yield OperatedPod("trainer", _strings(template.get("metadata")), {**spec, "containers": containers}, fields)


def _dynamo_resources(item: Any, path: str, *, gpu: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """One of Dynamo's ResourceItems as a ResourceList and the field each entry came from; ``gpu``: whether its
    ``gpu`` counts (only in limits: GetResourcesConfig never reads requests.gpu)."""
    values = _strings(item)
    out: dict[str, Any] = {}
    fields: dict[str, str] = {}
    gpu_type = values.get("gpuType")
    resource = gpu_type if isinstance(gpu_type, str) and gpu_type else DYNAMO_DEFAULT_GPU
    for name, value in _strings(values.get("custom")).items():
        out[name] = value
        fields[name] = f"{path}.custom[{name}]"
    if gpu and values.get("gpu") not in ("", None):
        out[resource] = values["gpu"]
        fields[resource] = f"{path}.gpu"
    return out, fields


def _dynamo(obj: Mapping[str, Any], _runtime: Mapping[str, Any] | None) -> Iterator[OperatedPod]:
    services = _strings(_strings(obj.get("spec")).get("services"))
    for service, raw in services.items():
        spec_of = _strings(raw)
        where = f"spec.services.{service}"
        extra = _strings(spec_of.get("extraPodSpec"))
        raw_main = extra.pop("mainContainer", None)
        main = _strings(raw_main)
        listed = extra.get("containers")
        containers = list(listed) if isinstance(listed, list) else []
        resources = _strings(spec_of.get("resources"))
        limits, limit_fields = _dynamo_resources(resources.get("limits"), f"{where}.resources.limits", gpu=True)
        requests, request_fields = _dynamo_resources(
            resources.get("requests"), f"{where}.resources.requests", gpu=False
        )
        notes = []
        if "gpu" in _strings(resources.get("requests")) and "gpu" not in _strings(resources.get("limits")):
            notes.append(f"{where}.resources.requests.gpu is ignored by the Dynamo operator; set limits.gpu")
        # The main container goes after extraPodSpec's own containers, so their indices stay as written.
        base = f"spec.containers[{len(containers)}]"
        fields = {
            "spec": f"{where}.extraPodSpec",
            "metadata": f"{where}.extraPodMetadata",
            base: f"{where}.extraPodSpec.mainContainer",
            f"{base}.resources": f"{where}.resources",
        }
        fields |= {f"{base}.resources.limits[{k}]": v for k, v in limit_fields.items()}
        fields |= {f"{base}.resources.requests[{k}]": v for k, v in request_fields.items()}
        merged: Any = {**main, "name": main.get("name") or "main"}
        if resources:  # replaces the main container's own resources (GenerateBasePodSpec)
            merged["resources"] = {"limits": limits, "requests": requests}
        else:  # the main container's own, named where they are
            fields[f"{base}.resources"] = f"{where}.extraPodSpec.mainContainer.resources"
        if raw_main is not None and not isinstance(raw_main, Mapping):
            merged = raw_main  # as written, for the type check to name (admission.shapes)
        meta_of = _strings(spec_of.get("extraPodMetadata"))
        metadata = {
            "labels": {**_strings(spec_of.get("labels")), **_strings(meta_of.get("labels"))},
            "annotations": {**_strings(spec_of.get("annotations")), **_strings(meta_of.get("annotations"))},
        }
        # containers that are not a list stay as written, for the type check to name; the rules skip them
        pod = {**extra, "containers": [*containers, merged] if listed is None or isinstance(listed, list) else listed}
        yield OperatedPod(f"services.{service}", metadata, pod, fields, tuple(notes))


_READERS = {
    ("trainer.kubeflow.org", "TrainJob"): _trainjob,
    ("nvidia.com", "DynamoGraphDeployment"): _dynamo,
}
#: The kinds whose pods are read from operator fields here (also listed in objects.BUILTIN_WORKLOADS).
OPERATED_KINDS = frozenset(_READERS)


def operated_pods(
    obj: Mapping[str, Any], *, namespace: str = "", runtimes: RuntimeLookup | None = None
) -> list[OperatedPod]:
    """The pods an operator builds from fields of ``obj`` that are not pod templates (none for other kinds).
    ``runtimes``: finds a TrainJob's runtime where it is visible (``gpugate check`` of a manifest that holds it)."""
    reader = _READERS.get((group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or "")))
    if reader is None:
        return []
    return list(reader(obj, _runtime_of(obj, namespace, runtimes)))


def _runtime_of(obj: Mapping[str, Any], namespace: str, runtimes: RuntimeLookup | None) -> Mapping[str, Any] | None:
    if runtimes is None or obj.get("kind") != "TrainJob":
        return None
    kind, name = runtime_ref(obj)
    return runtimes(kind, "" if kind == "ClusterTrainingRuntime" else namespace, name)


#: The workload kinds whose operator gives a pod that names no scheduler one from the object's own fields, and
#: its default: Volcano's job controller copies ``spec.schedulerName`` into every task's pod that names none
#: (volcano-sh/volcano pkg/controllers/job/job_controller_util.go ``createJobPod``, commit
#: fa40cb37140eb3c73524208cef0b8d757c695827), and its admission webhook defaults it to ``volcano``.
#: Of the other operated kinds none does: KubeRay sets the scheduler of every pod from its own configuration
#: (``batchScheduler``, one per operator: ray-project/kuberay ray-operator/controllers/ray/batchscheduler/
#: schedulermanager.go ``getSchedulerFactory``, kai-scheduler/kai_scheduler.go ``AddMetadataToChildResource``,
#: commit feeaf72facab4881ba2b179248bb67315634e229; the ``ray.io/scheduler-name`` label it once read for Volcano
#: was dropped in #2471 and removed in #4305), so its templates are judged with the scheduler unknown and each
#: pod again when KubeRay creates it. Kubeflow Trainer v2 leaves ``schedulerName`` to the runtime's template
#: (kubeflow/trainer proposals/2170-kubeflow-trainer-v2, "Gang-scheduling"; no plugin under
#: pkg/runtime/framework/plugins sets it, commit 8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3); JobSet, LWS, KServe
#: and Dynamo copy the templates they are given.
OPERATOR_SCHEDULERS: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("batch.volcano.sh", "Job"): (("spec", "schedulerName"), "volcano"),
}


def operator_scheduler(obj: Mapping[str, Any]) -> str | None:
    """The scheduler the operator of ``obj`` gives the pods of templates that name none, if it sets one from the
    object's fields."""
    found = OPERATOR_SCHEDULERS.get((group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or "")))
    if found is None:
        return None
    keys, default = found
    node: Any = obj
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, str) and node else default


def runtime_note(obj: Mapping[str, Any], *, namespace: str = "", runtimes: RuntimeLookup | None = None) -> str | None:
    """For a TrainJob: where its pod template is, and whether it was judged with it."""
    if group_of(str(obj.get("apiVersion") or "")) != "trainer.kubeflow.org" or obj.get("kind") != "TrainJob":
        return None
    kind, name = runtime_ref(obj)
    if _runtime_of(obj, namespace, runtimes) is not None:
        return f'judged with {kind} "{name}" of this manifest (resourcesPerNode merged)'
    return f'pod template in {kind} "{name}", judged when that is applied'
