"""Where every example and real-world manifest lands: created for real on the reference fleet (kwok Nodes, the
real kube-scheduler and kube-controller-manager), once with gpugate registered and, for what gpugate refuses,
once without it, to record what would have happened.

- Pods are created directly; Deployments, Jobs, StatefulSets through the real controllers; a CronJob's pods
  through a Job made from it, as `kubectl create job --from=cronjob/...` makes one; the workload CRDs'
  pods as their operators would create them (the pod templates of the custom resource, with an owner
  reference to it; a JobSet's Jobs, whose pods the real Job controller makes).
- A case's outcome is the set of what happened to its pods: `Running on <pool>`, `Succeeded on <pool>`,
  `Pending: <the scheduler's reason>`, `not scheduled: schedulerName <name>` (a scheduler this fleet does
  not run), or `pods refused: <message>` (the controller could not create them).

    python -m tests.scheduling.placements            # run, compare with expected.yaml, print the table
    python -m tests.scheduling.placements --write    # ... and rewrite the table in docs/development/e2e.md

tests/scheduling/test_placements.py runs the same thing in `make check`.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import fleet, workload_crds
from tests.harness.gpugate import GPUGate, point_at, register, render_deploy
from tests.harness.kubeapi import ApiError, KubeAPI
from tests.harness.polling import eventually
from tests.harness.scheduling import FleetCluster, find_scheduling_binaries

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "policies" / "examples"
REAL = REPO / "tests" / "fixtures" / "real-manifests"
EXPECTED = Path(__file__).resolve().parent / "expected.yaml"
DOC = REPO / "docs" / "development" / "e2e.md"  # the development docs' end-to-end page
TABLE_BEGIN = "<!-- placements: begin (python -m tests.scheduling.placements --write) -->"
TABLE_END = "<!-- placements: end -->"

# Nodes per pool for the scheduled tests: two of each, so that "Insufficient" and "didn't match" counts read
# plainly in the scheduler's messages.
# Enough L4 and H100 that no case waits for another's GPUs, whatever order the scheduler sees them in: at the peak
# 41 L4 GPUs are in use (of 64), and on H100 three pods of 1-2 GPUs, which the scheduler spreads over as many nodes,
# beside three of 8 GPUs (a training pod, a LeaderWorkerSet's leader and worker) that each need a whole node: 6 of 7.
COUNTS = {**fleet.DEFAULT_COUNTS, "l4": 16, "h100": 7}
PINNED_NODE = "l4-0"
# Which policy governs a namespace depends on its name (serving: ml-serving, serving-*; research: research-*).
NAMESPACE_PREFIX = {"default": "fleet", "ml-serving": "serving", "research-nlp": "research-nlp"}
WORKLOAD_KINDS = {"Deployment", "Job", "CronJob", "StatefulSet", "ReplicaSet"}
# The workload CRDs whose operators' work operator_children() does (Volcano's Job too, told apart by group).
CR_KINDS = {
    "RayCluster",
    "RayService",
    "PyTorchJob",
    "TFJob",
    "MPIJob",
    "TrainJob",
    "JobSet",
    "LeaderWorkerSet",
    "DynamoGraphDeployment",
    "LLMInferenceService",
    "StormService",
    "RoleSet",
    "PodSet",
    "RayClusterFleet",
    "RayClusterReplicaSet",
}
FLEET_OBJECTS = {"DeviceClass"}  # the fleet has them already: not created again
MAX_REPLICAS = 2  # pods made per replicated template: enough to see where they land
SETTLE_TIMEOUT = 60.0


@dataclass
class Case:
    source: Path
    verdict: str  # gpugate's offline verdict from the directory's expected.yaml
    namespace_labels: dict[str, dict[str, str]]

    @property
    def name(self) -> str:
        return f"{self.source.parent.name}/{self.source.name}"

    def documents(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.source.read_text()) if d]


def cases() -> list[Case]:
    """Every example and real manifest with a verdict about kinds this cluster serves (not `skipped`)."""
    out = []
    for directory in (EXAMPLES, REAL):
        for entry in yaml.safe_load((directory / "expected.yaml").read_text()):
            # `fleet:` verdicts are gpugate check's against a fleet snapshot; the live inventory's are tested
            # apart (tests/scheduling/test_inventory.py).
            if entry["verdict"] == "skipped" or entry.get("fleet"):
                continue
            out.append(Case(directory / entry["file"], entry["verdict"], entry.get("namespaceLabels") or {}))
    return out


# ---- what gets created ----------------------------------------------------------------------------------


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod(
    template: dict[str, Any], name: str, namespace: str, owner: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), **(labels or {})},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [_owner(owner)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _replicas(value: Any) -> int:
    return max(1, min(MAX_REPLICAS, int(value if isinstance(value, int) else 1)))


def _child(
    api_version: str, kind: str, name: str, cr: dict[str, Any], spec: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    """An object an operator makes for `cr`: in its namespace, owned by it."""
    metadata = {"namespace": cr["metadata"]["namespace"], "ownerReferences": [_owner(cr)], **meta}
    if name:  # else generateName
        metadata["name"] = name
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def _deployment(
    name: str, cr: dict[str, Any], replicas: Any, labels: dict[str, str], pod: dict[str, Any]
) -> dict[str, Any]:
    """A Deployment of `pod` (metadata and spec) whose selector is `labels`."""
    template = {
        "metadata": {**pod.get("metadata", {}), "labels": {**pod.get("metadata", {}).get("labels", {}), **labels}}
    }
    spec = {
        "replicas": _replicas(replicas),
        "selector": {"matchLabels": labels},
        "template": {**template, "spec": pod["spec"]},
    }
    return _child("apps/v1", "Deployment", name, cr, spec, labels=dict(labels))


def operator_children(cr: dict[str, Any], siblings: Iterable[dict[str, Any]] = ()) -> Iterator[dict[str, Any]]:
    """What the operator of a workload CRD creates from `cr` (as stored): its pods, the Jobs or Deployments whose
    pods the real controllers make, or the custom resources another operator (emulated here too) turns into
    pods. `siblings`: the other objects of the same file (a TrainJob's runtime)."""
    ns, name, kind, spec = cr["metadata"]["namespace"], cr["metadata"]["name"], cr["kind"], cr.get("spec") or {}
    if kind in ("RayCluster", "RayService"):
        ray = spec.get("rayClusterConfig") if kind == "RayService" else spec
        ray = ray or {}
        if ray.get("headGroupSpec"):
            yield _pod(ray["headGroupSpec"]["template"], f"{name}-head", ns, cr)
        for group in ray.get("workerGroupSpecs") or []:
            count = _replicas(group.get("replicas", group.get("minReplicas", 1)))
            for i in range(count):
                yield _pod(group["template"], f"{name}-{group.get('groupName', 'workers')}-worker-{i}", ns, cr)
    elif kind in ("PyTorchJob", "TFJob"):
        # training-operator v1: a pod per replica of each replica type, `<job>-<type>-<index>`
        # (kubeflow/training-operator pkg/controller.v1/common/pod.go createNewPod, util.go GenGeneralName, v1.9.0).
        replica_specs = spec.get("pytorchReplicaSpecs" if kind == "PyTorchJob" else "tfReplicaSpecs") or {}
        for role, replica in replica_specs.items():
            for i in range(_replicas(replica.get("replicas", 1))):
                yield _pod(replica["template"], f"{name}-{role.lower()}-{i}", ns, cr)
    elif kind == "MPIJob":
        yield from _mpijob(cr)
    elif kind == "TrainJob":
        yield from _trainjob(cr, siblings)
    elif kind == "DynamoGraphDeployment":
        yield from _dynamo(cr)
    elif kind == "LLMInferenceService":
        yield from _llmisvc(cr)
    elif kind in ("StormService", "RoleSet", "PodSet", "RayClusterFleet", "RayClusterReplicaSet"):
        yield from _aibrix(cr)
    elif kind == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        worker = lws.get("workerTemplate") or {}
        leader = lws.get("leaderTemplate") or worker
        yield _pod(leader, f"{name}-0", ns, cr)
        for i in range(1, _replicas(lws.get("size", 1))):
            yield _pod(worker, f"{name}-0-{i}", ns, cr)
    elif kind == "JobSet":
        for rjob in spec.get("replicatedJobs") or []:
            template = rjob.get("template") or {}
            job_spec: dict[str, Any] = copy.deepcopy(template.get("spec") or {})
            # JobSet's defaulting webhook: Indexed completion, pods restart OnFailure unless the template
            # says otherwise (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, Default).
            job_spec.setdefault("completionMode", "Indexed")
            job_spec.setdefault("template", {}).setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rjob['name']}-0",
                    "namespace": ns,
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "ownerReferences": [_owner(cr)],
                },
                "spec": job_spec,
            }
            yield job
    elif kind == "Job" and cr["apiVersion"].startswith("batch.volcano.sh/"):
        for task in spec.get("tasks") or []:
            for i in range(_replicas(task.get("replicas", 1))):
                pod = _pod(task["template"], f"{name}-{task.get('name', 'task')}-{i}", ns, cr)
                pod["spec"].setdefault("schedulerName", spec.get("schedulerName", "volcano"))
                yield pod


def _mpijob(cr: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """mpi-operator v2beta1: worker pods `<job>-worker-<i>` and the launcher as a batch Job `<job>-launcher`, both
    from their replica's template with the operator's labels and the replica's restartPolicy (launcher default
    OnFailure, worker Never); the launcher is made at once unless launcherCreationPolicy is WaitForWorkersReady
    (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go newWorker, newLauncherJob, newLauncherPodTemplate;
    pkg/apis/kubeflow/v2beta1/constants.go, default.go; commit caa3c47fc42eb762635f78045ec0fcd1a89eb038)."""
    ns, name, replicas = cr["metadata"]["namespace"], cr["metadata"]["name"], cr["spec"].get("mpiReplicaSpecs") or {}

    def template(role: str, default_restart: str) -> dict[str, Any]:
        out = copy.deepcopy(replicas[role]["template"])
        labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": name}
        meta = out.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels, "training.kubeflow.org/job-role": role.lower()}
        out.setdefault("spec", {})["restartPolicy"] = replicas[role].get("restartPolicy") or default_restart
        return out

    if "Worker" in replicas:
        worker = template("Worker", "Never")
        for i in range(_replicas(replicas["Worker"].get("replicas", 1))):
            yield _pod(worker, f"{name}-worker-{i}", ns, cr)
    if "Launcher" in replicas:
        yield _child("batch/v1", "Job", f"{name}-launcher", cr, {"template": template("Launcher", "OnFailure")})


def _trainjob(cr: dict[str, Any], siblings: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Kubeflow Trainer v2: the JobSet `<trainjob>` built from its runtime's `spec.template.spec`; on each replicated
    Job of the trainer step (label trainer.kubeflow.org/trainjob-ancestor-step=trainer) one replica, numNodes
    pods (the TrainJob's, else the runtime's mlPolicy), and the TrainJob's image, command, args and
    resourcesPerNode on its `node` container (kubeflow/trainer pkg/runtime/framework/plugins/jobset/builder.go
    Trainer, jobset.go SyncParallelCount, pkg/runtime/core/trainingruntime.go; commit
    8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3). Without the runtime (not in the same file) nothing can be built, as
    the operator builds nothing when the runtime it names does not exist."""
    ref = cr["spec"].get("runtimeRef") or {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    runtime = next(
        (s for s in siblings if s.get("kind") == kind and s["metadata"].get("name") == ref.get("name")), None
    )
    if runtime is None:
        return
    trainer = cr["spec"].get("trainer") or {}
    jobset = copy.deepcopy((runtime["spec"].get("template") or {}).get("spec") or {})
    nodes = trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes") or 1
    for rjob in jobset.get("replicatedJobs") or []:
        template = rjob.get("template") or {}
        if (template.get("metadata") or {}).get("labels", {}).get(
            "trainer.kubeflow.org/trainjob-ancestor-step"
        ) != "trainer":
            continue
        rjob["replicas"] = 1
        job_spec = template.setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = nodes
        for container in (job_spec.get("template") or {}).get("spec", {}).get("containers") or []:
            if container.get("name") != "node":
                continue
            for field_name in ("image", "command", "args"):
                if trainer.get(field_name):
                    container[field_name] = trainer[field_name]
            resources = container.setdefault("resources", {})
            for part, values in (trainer.get("resourcesPerNode") or {}).items():
                resources[part] = {**(resources.get(part) or {}), **values}
    yield _child("jobset.x-k8s.io/v1alpha2", "JobSet", cr["metadata"]["name"], cr, jobset)


def _dynamo(cr: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """NVIDIA Dynamo: each service becomes a DynamoComponentDeployment `<graph>-<service>` (lower case) whose
    controller makes a Deployment (one node per service here: no multinode, no Grove); its pod is extraPodSpec
    with the main container last, named `main`, extraPodSpec.mainContainer merged into it, and resources from
    the service's when it sets any: limits.gpu as a limit on gpuType or nvidia.com/gpu, custom copied,
    requests.gpu unused
    (ai-dynamo/dynamo deploy/cloud/operator/internal/dynamo/graph.go GenerateDynamoComponentsDeployments,
    GetDynamoComponentName, GenerateBasePodSpec, commit 010c68fa39cf2e0820721849c47b19a5b4f0e393;
    controller_common/resource.go GetResourcesConfig, as webhook/pods/operated.py reads it). The
    DynamoComponentDeployment step is skipped (its CRD is not served here); the operator's probes, ports and
    environment are left out: they do not change placement."""
    graph = cr["metadata"]["name"]
    for service, shared in (cr["spec"].get("services") or {}).items():
        shared = shared or {}
        extra = copy.deepcopy(shared.get("extraPodSpec") or {})
        main = {**extra.pop("mainContainer", {}), "name": "main"}
        resources: dict[str, dict[str, Any]] = {}
        for part in ("limits", "requests"):
            item = (shared.get("resources") or {}).get(part) or {}
            values = {k: item[k] for k in ("cpu", "memory") if item.get(k)} | dict(item.get("custom") or {})
            if part == "limits" and item.get("gpu") not in (None, ""):
                values[item.get("gpuType") or "nvidia.com/gpu"] = item["gpu"]
            if values:
                resources[part] = values
        if shared.get("resources"):  # the service's resources replace the main container's own
            main["resources"] = resources
        extra["containers"] = [*(extra.get("containers") or []), main]
        component = f"{graph}-{service.lower()}"
        meta = shared.get("extraPodMetadata") or {}
        labels = {"nvidia.com/dynamo-component": service, "nvidia.com/dynamo-namespace": f"dynamo-{graph}"}
        pod = {
            "metadata": {
                "labels": {**(meta.get("labels") or {}), **labels},
                "annotations": meta.get("annotations") or {},
            },
            "spec": extra,
        }
        yield _deployment(component, cr, shared.get("replicas", 1), {"nvidia.com/selector": component}, pod)


#: The image KServe's well-known LLMInferenceServiceConfig presets give the main container when the resource
#: names none (kserve/kserve config/llmisvcconfig/config-llm-template.yaml, commit aaac4e29).
KSERVE_PRESET_IMAGE = "ghcr.io/llm-d/llm-d-cuda:v0.9.0"


def _llmisvc(cr: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """KServe LLMInferenceService: a Deployment `<name>-kserve` of spec.template, or with spec.worker a
    LeaderWorkerSet `<name>-kserve-mn` (leader spec.template, workers spec.worker, size from spec.parallelism:
    data/dataLocal, else pipeline); both bare PodSpecs, labelled with the workload selector (kserve/kserve
    pkg/controller/v1alpha2/llmisvc/workload_single_node.go, workload_multi_node.go, workload.go
    GetWorkloadLabelSelector; pkg/apis/serving/v1alpha2/llm_inference_service_types_func.go GetSize; commit
    aaac4e294dae2c7b1aa1886447793f3aa1c30912). The presets' merge is reduced to the image; the routing sidecar,
    scheduler and model download are left out: they do not change placement. Prefill workloads are not made."""
    name, spec = cr["metadata"]["name"], cr["spec"]
    labels = {
        "app.kubernetes.io/part-of": "llminferenceservice",
        "app.kubernetes.io/name": name,
        "kserve.io/component": "workload",
    }

    def pod_spec(bare: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(bare)
        for container in out.get("containers") or []:
            container.setdefault("image", KSERVE_PRESET_IMAGE)
        return out

    if not spec.get("worker"):
        pod = {"metadata": {}, "spec": pod_spec(spec.get("template") or {})}
        yield _deployment(f"{name}-kserve", cr, spec.get("replicas", 1), labels, pod)
        return
    parallelism = spec.get("parallelism") or {}
    if parallelism.get("data") or parallelism.get("dataLocal"):
        size = max(max(parallelism.get("data") or 1, 1) // max(parallelism.get("dataLocal") or 1, 1), 1)
    else:
        size = parallelism.get("pipeline") or 1
    lws = {
        "replicas": _replicas(spec.get("replicas", 1)),
        "leaderWorkerTemplate": {
            "size": size,
            "leaderTemplate": {"metadata": {"labels": labels}, "spec": pod_spec(spec.get("template") or {})},
            "workerTemplate": {"metadata": {"labels": labels}, "spec": pod_spec(spec["worker"])},
        },
    }
    yield _child("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", f"{name}-kserve-mn", cr, lws)


def _aibrix(cr: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """AIBrix orchestration (vllm-project/aibrix, commit e3e10f9e4aebe9aac5e7d992fb87d2648e01628b): a StormService
    makes RoleSets `<name>-roleset-*` of its template (pkg/controller/stormservice/rolesetoperations.go
    renderRoleSet); a RoleSet makes each role's pods `<roleset>-<role>-<i>` from the role's template, or a PodSet
    per replica when the role's podGroupSize is above 1 (pkg/controller/roleset/utils.go renderStormServicePod,
    podset_rollsyncer.go createPodSetForRole); a PodSet makes podGroupSize pods `<podset>-<i>`
    (pkg/controller/podset/podset_controller.go createPodFromTemplate); a RayClusterFleet makes
    RayClusterReplicaSets and those RayClusters `<name>-*` of the template (pkg/controller/rayclusterfleet,
    rayclusterreplicaset_utils.go constructRayCluster), whose pods KubeRay makes."""
    ns, name, kind, spec = cr["metadata"]["namespace"], cr["metadata"]["name"], cr["kind"], cr["spec"]
    template = spec.get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    if kind == "StormService":
        for _ in range(_replicas(spec.get("replicas", 1))):
            yield _child(
                cr["apiVersion"],
                "RoleSet",
                "",
                cr,
                copy.deepcopy(template.get("spec") or {}),
                generateName=f"{name}-roleset-",
                labels={**labels, "storm-service-name": name},
            )
    elif kind == "RoleSet":
        for role in spec.get("roles") or []:
            role_labels = {"roleset-name": name, "role-name": role["name"]}
            for i in range(_replicas(role.get("replicas", 1))):
                if (role.get("podGroupSize") or 1) > 1:
                    podset = {"podGroupSize": role["podGroupSize"], "template": copy.deepcopy(role["template"])}
                    yield _child(
                        cr["apiVersion"], "PodSet", f"{name}-{role['name']}-{i}", cr, podset, labels=role_labels
                    )
                else:
                    yield _pod(role["template"], f"{name}-{role['name']}-{i}", ns, cr, role_labels)
    elif kind == "PodSet":
        for i in range(_replicas(spec.get("podGroupSize", 1))):
            yield _pod(template, f"{name}-{i}", ns, cr, {"stormservice.orchestration.aibrix.ai/podset-name": name})
    else:  # RayClusterFleet, RayClusterReplicaSet
        child = "RayClusterReplicaSet" if kind == "RayClusterFleet" else "RayCluster"
        child_spec: dict[str, Any] = (
            {"replicas": 1, "selector": spec.get("selector"), "template": copy.deepcopy(template)}
            if child == "RayClusterReplicaSet"
            else copy.deepcopy(template.get("spec") or {})
        )
        api = cr["apiVersion"] if child == "RayClusterReplicaSet" else "ray.io/v1"
        for _ in range(_replicas(spec.get("replicas", 1))):
            yield _child(api, child, "", cr, child_spec, generateName=f"{name}-", labels=labels)


def job_from_cronjob(cronjob: dict[str, Any]) -> dict[str, Any]:
    """The Job `kubectl create job --from=cronjob/<name>` makes (kubectl's create_job.go: the jobTemplate's
    labels, annotations and spec, annotation cronjob.kubernetes.io/instantiate=manual, owned by the CronJob)."""
    template = cronjob["spec"]["jobTemplate"]
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{cronjob['metadata']['name']}-manual",
            "namespace": cronjob["metadata"]["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": {**(meta.get("annotations") or {}), "cronjob.kubernetes.io/instantiate": "manual"},
            "ownerReferences": [_owner(cronjob)],
        },
        "spec": copy.deepcopy(template["spec"]),
    }


# ---- running a case ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """One creation of a case's objects and what became of them."""

    case: Case
    namespaces: dict[str, str] = field(default_factory=dict)  # the file's namespace -> the one made for it
    refused: list[str] = field(default_factory=list)  # admission refusals of the case's own objects
    created_pods: int = 0  # pods created directly (Pods and operator pods)
    controlled: int = 0  # objects created whose pods a controller makes (Deployments, Jobs, ...)
    early: set[str] = field(default_factory=set)  # refusals at creation (the case's objects, operator pods)
    outcomes: set[str] = field(default_factory=set)

    @property
    def admitted(self) -> bool:
        return not self.refused


class Placer:
    """Creates cases on a FleetCluster and watches where their pods go."""

    def __init__(self, cluster: FleetCluster) -> None:
        self.cluster = cluster
        self.api: KubeAPI = cluster.api
        self.made = 0

    def namespace(self, run: Run, original: str, tag: str) -> str:
        """A fresh namespace for the file's `original` one, named so that the same policy matches it, with the
        file's namespace labels and its `default` ServiceAccount (made here, not left to the controller, so
        that the first pod does not race it)."""
        if original not in run.namespaces:
            labels = {k: str(v) for k, v in (run.case.namespace_labels.get(original) or {}).items()}
            self.made += 1
            name = f"{NAMESPACE_PREFIX.get(original, original)}-{tag}-{self.made}"
            self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
            self._create_quietly(
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
            )
            run.namespaces[original] = name
        return run.namespaces[original]

    def start(self, case: Case, tag: str) -> Run:
        """Create the case's objects (and its operator's pods); return before they settle."""
        run = Run(case)
        docs = case.documents()
        templates = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceClaimTemplate"}
        docs = [d for d in docs if d["kind"] not in FLEET_OBJECTS]
        for doc in docs:
            if not KubeAPI.namespaced(doc["kind"], doc.get("apiVersion")):
                doc["metadata"].pop("namespace", None)  # a ClusterTrainingRuntime
                continue
            if doc["kind"] == "Pod" and _written_for_hami(doc):
                # HAMi's mutating webhook gives every pod with its resources HAMi's scheduler (Project-HAMi/HAMi
                # pkg/scheduler/webhook.go Handle; charts/hami/values.yaml schedulerName: hami-scheduler). That
                # scheduler ignores nvidia.com/gpumem and gpucores in its fit (the chart's managedResources,
                # ignoredByScheduler: true) and reads them from the node annotation its device plugin registers:
                # no device plugin advertises them as node resources, so no Node of this fleet can either.
                doc["spec"].setdefault("schedulerName", HAMI_SCHEDULER)
            if doc["kind"] == "Pod" and doc["spec"].get("nodeName"):
                # A pod its operator pins to the node it checks (the GPU Operator's validators): pinned to a GPU
                # node of this fleet instead, so that it meets a node (no scheduler is involved either way).
                doc["spec"]["nodeName"] = PINNED_NODE
            ns = self.namespace(run, doc["metadata"].get("namespace", "default"), tag)
            doc["metadata"]["namespace"] = ns
            self._prerequisites(doc, ns, templates)
        for doc in sorted(docs, key=lambda d: d["kind"] != "ResourceClaimTemplate"):
            try:
                stored = self.api.create(doc)
            except ApiError as e:
                name = doc["metadata"].get("name") or doc["metadata"].get("generateName", "")
                run.refused.append(f"{doc['kind']} {name}: {e.message}")
                run.early.add(f"refused by {_refuser(e.message)}: {_short(e.message)}")
                continue
            if doc["kind"] == "Pod":
                run.created_pods += 1
            elif doc["kind"] in WORKLOAD_KINDS and doc["apiVersion"].startswith(("apps/", "batch/")):
                run.controlled += 1  # its pods come from a controller
                if doc["kind"] == "CronJob":
                    self.api.create(job_from_cronjob(stored))
            elif _operated(doc):
                self._operate(run, stored, docs)
        return run

    def _operate(self, run: Run, cr: dict[str, Any], siblings: list[dict[str, Any]]) -> None:
        """Create what the operator of `cr` would, and what the operators of those custom resources would."""
        for child in operator_children(cr, siblings):
            try:
                stored = self.api.create(child)
            except ApiError as e:
                run.early.add(f"pods refused: {_short(e.message)}")
                continue
            if child["kind"] == "Pod":
                run.created_pods += 1
            elif child["apiVersion"].startswith(("apps/", "batch/")):
                run.controlled += 1  # a Job or a Deployment: the real controllers make its pods
            elif _operated(child):
                self._operate(run, stored, siblings)

    def _prerequisites(self, doc: dict[str, Any], ns: str, templates: set[str]) -> None:
        """What the cluster must hold for the object to be valid: the ServiceAccounts its pods name (the
        ServiceAccount admission plugin refuses unknown ones) and the ResourceClaimTemplates its pods claim
        when the file does not define them (a claim on NVIDIA's `gpu.nvidia.com`)."""
        for spec in _pod_specs(doc):
            account = spec.get("serviceAccountName")
            if account and account != "default":
                self._create_quietly(
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}}
                )
            for claim in spec.get("resourceClaims") or []:
                name = claim.get("resourceClaimTemplateName")
                if name and name not in templates:
                    self._create_quietly(
                        {
                            "apiVersion": fleet.DRA_API,
                            "kind": "ResourceClaimTemplate",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {
                                "spec": {
                                    "devices": {
                                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                                    }
                                }
                            },
                        }
                    )

    def _create_quietly(self, obj: dict[str, Any]) -> None:
        try:
            self.api.create(obj)
        except ApiError as e:
            if e.status != 409:
                raise

    def settle(self, runs: Iterable[Run], timeout: float = SETTLE_TIMEOUT) -> None:
        """Wait until every pod of every admitted run is placed, unschedulable or waiting for a scheduler this
        fleet does not run, then record the outcomes."""
        runs = list(runs)
        by_ns = {ns: r for r in runs for ns in r.namespaces.values()}
        deadline = time.monotonic() + timeout
        while True:
            pods: dict[str, list[dict[str, Any]]] = {}
            for pod in self.api.list("Pod"):
                ns = pod["metadata"]["namespace"]
                if ns in by_ns:
                    pods.setdefault(ns, []).append(pod)
            unsettled = []
            for run in runs:
                mine = [p for ns in run.namespaces.values() for p in pods.get(ns, [])]
                states = [_state(p) for p in mine]
                refused = self._refusals(run) if len(mine) < self._wanted(run) else set()
                if None in states or (len(mine) < self._wanted(run) and not refused):
                    unsettled.append(run)
                    continue
                # no pods at all: an operator that makes none (a TrainJob whose runtime is not there)
                run.outcomes = run.early | refused | {s for s in states if s} or {"no pods created"}
            if not unsettled or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for run in unsettled:
            mine = [p for ns in run.namespaces.values() for p in pods.get(ns, [])]
            run.outcomes = (
                run.early | self._refusals(run) | {_state(p) or f"unsettled: {p['status'].get('phase')}" for p in mine}
            )
            run.outcomes = run.outcomes or {"no pods created"}

    def _wanted(self, run: Run) -> int:
        """Pods to wait for: those created directly, and at least one per object whose pods a controller makes
        (they arrive asynchronously)."""
        return run.created_pods + run.controlled

    def _refusals(self, run: Run) -> set[str]:
        """Why a controller could not create pods (its FailedCreate events)."""
        return {
            f"pods refused: {_short(event.get('message', ''))}"
            for ns in run.namespaces.values()
            for event in self.api.list("Event", ns)
            if event.get("reason") == "FailedCreate"
        }


#: What HAMi's chart names its scheduler, and what marks a pod as written for HAMi in this fleet: HAMi's own
#: resources (charts/hami/values.yaml resourceMem, resourceMemPercentage, resourceCores) or its NVIDIA
#: annotations (pkg/device/nvidia/device.go). In a HAMi cluster its webhook takes every nvidia.com/gpu pod;
#: this fleet's pools run NVIDIA's device plugin, so only pods written for HAMi are HAMi's here.
HAMI_SCHEDULER = "hami-scheduler"
HAMI_RESOURCES = frozenset({"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"})
HAMI_ANNOTATIONS = frozenset(
    {
        "nvidia.com/use-gputype",
        "nvidia.com/nouse-gputype",
        "nvidia.com/use-gpuuuid",
        "nvidia.com/nouse-gpuuuid",
        "nvidia.com/vgpu-mode",
    }
)


def _written_for_hami(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    asked = {
        name
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for part in ("limits", "requests")
        for name in ((c.get("resources") or {}).get(part) or {})
    }
    return bool(asked & HAMI_RESOURCES) or bool(set(pod["metadata"].get("annotations") or {}) & HAMI_ANNOTATIONS)


def _operated(doc: dict[str, Any]) -> bool:
    """Whether operator_children() plays the operator of `doc`."""
    return doc["kind"] in CR_KINDS or doc["apiVersion"].startswith("batch.volcano.sh/")


def _pod_specs(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Pod":
        yield spec
    for path in (("template",), ("jobTemplate", "spec", "template")):
        node: Any = spec
        for key in path:
            node = (node or {}).get(key)
        if isinstance(node, dict) and isinstance(node.get("spec"), dict):
            yield node["spec"]


def _state(pod: dict[str, Any]) -> str | None:
    """What became of one pod, or None while it is still on its way."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    node = spec.get("nodeName")
    phase = status.get("phase")
    if node and phase in ("Running", "Succeeded"):  # a Job's pod runs, then kwok completes it
        return f"Running on {fleet.pool_of(node)}"
    if node and phase == "Failed":
        return f"Failed on {fleet.pool_of(node)}"
    if node:
        return None
    scheduler = spec.get("schedulerName") or "default-scheduler"
    if scheduler != "default-scheduler":
        return f"not scheduled: schedulerName {scheduler}"
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return f"Pending: {_scheduler_reason(cond.get('message', ''))}"
    return None


def _scheduler_reason(message: str) -> str:
    """The scheduler's FitError, `0/N nodes are available: <reasons>.`, without what follows it (the
    preemption and claim-deallocation postscripts; kube-scheduler's framework/types.go)."""
    head, dot, _ = message.partition(". ")
    return (head + dot).strip()


def _refuser(message: str) -> str:
    """Who refused an object: gpugate's webhooks, gpugate's ValidatingAdmissionPolicy backstop, or the
    apiserver's own validation."""
    if "admission webhook" in message and "gpugate.io" in message:
        return "gpugate"
    if "ValidatingAdmissionPolicy 'gpugate-backstop'" in message:
        return "gpugate's backstop"
    return "the apiserver"


def _short(message: str) -> str:
    """A refusal's first sentence: which webhook or policy said no and the first reason; the same for every pod
    of a controller (pod names and the events' "combined from similar events" prefix dropped)."""
    message = " ".join(message.split()).removeprefix("(combined from similar events): ")
    message = re.sub(r'Pod "[^"]+"', "Pod", message)
    return message if len(message) <= 240 else message[:237] + "..."


# ---- expectations -----------------------------------------------------------------------------------------


def load_expected() -> dict[str, dict[str, Any]]:
    return {e["case"]: e for e in yaml.safe_load(EXPECTED.read_text())}


def matches(expected: str, observed: str) -> bool:
    """`Running on a|b` matches `Running on a`; `Pending: <text>` (and `refused by ...: <text>`, `pods refused:
    <text>`) matches such an outcome whose message contains the text; anything else matches itself."""
    head, _, tail = expected.partition(" on ")
    if tail and observed.startswith(f"{head} on "):
        return observed.removeprefix(f"{head} on ") in tail.split("|")
    what, sep, text = expected.partition(": ")
    if sep and observed.startswith(what + sep):  # Pending, refused by ..., pods refused: the text is in the message
        return _squash(text) in _squash(observed)
    return observed == expected


def _squash(text: str) -> str:
    return re.sub(r"\d+/\d+ nodes are available: ", "", " ".join(text.split()))


def mismatches(expected: Iterable[str], observed: set[str]) -> list[str]:
    expected = list(expected)
    out = [f"expected {e!r}, not seen" for e in expected if not any(matches(e, o) for o in observed)]
    out += [f"unexpected {o!r}" for o in sorted(observed) if not any(matches(e, o) for e in expected)]
    return out


def displayed(expected: Iterable[str], observed: set[str]) -> str:
    """The table's cell: observed outcomes, where an expectation with alternatives shows the alternatives (the
    scheduler's choice among equal nodes is its own)."""
    cells = []
    for e in expected:
        head, _, tail = e.partition(" on ")
        if "|" in tail and any(matches(e, o) for o in observed):
            cells.append(f"{head} on any of {', '.join(tail.split('|'))}")
    for o in sorted(observed):
        if not any("|" in e and matches(e, o) for e in expected):
            cells.append(o)
    return "; ".join(cells)


# ---- the whole scenario -----------------------------------------------------------------------------------


@dataclass
class Results:
    admitted: dict[str, Run]  # with gpugate registered
    without: dict[str, Run]  # gpugate's refusals, created again with gpugate not registered


def run_all(cluster: FleetCluster, gate: GPUGate, selected: list[Case] | None = None) -> Results:
    """Every case with gpugate registered (from deploy/ + components/workload-crds, pointed at `gate`), then
    gpugate unregistered (its webhooks and its ValidatingAdmissionPolicy backstop deleted) and every case it
    refused created again."""
    chosen = cases() if selected is None else selected
    placer = Placer(cluster)
    deploy = point_at(render_deploy(cluster.cp, "workload-crds"), gate)
    register(cluster.cp, deploy)
    with_gate = {c.name: placer.start(c, "gated") for c in chosen}
    placer.settle(with_gate.values())
    for obj in deploy:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration") or obj["kind"].startswith(
            "ValidatingAdmissionPolicy"
        ):
            cluster.api.delete(obj["kind"], obj["metadata"]["name"])
    _wait_until_unregistered(cluster)
    refused = [c for c in chosen if not with_gate[c.name].admitted]
    without = {c.name: placer.start(c, "open") for c in refused}
    placer.settle(without.values())
    return Results(with_gate, without)


def _wait_until_unregistered(cluster: FleetCluster) -> None:
    """The apiserver drops webhooks and policies through informers: wait until a pod gpugate and its backstop
    would refuse (a CPU pod tolerating the GPU taint) is accepted by a dry run."""
    ns = cluster.create_namespace("unregistered")
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }

    def accepted() -> bool:
        return bool(cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=probe, check=False).ok)

    if not eventually(accepted, timeout=60):
        raise RuntimeError("gpugate's webhooks or backstop still in force 60 s after they were deleted")


def start_fleet(workdir: Path) -> tuple[FleetCluster, GPUGate]:
    """The fleet with the workload CRDs, and gpugate serving the shipped policies (not yet registered)."""
    bins, kwok = find_scheduling_binaries()
    cluster = FleetCluster(bins, kwok, workdir / "cluster", COUNTS)
    try:
        cluster.start()
        crds = workdir / "crds"
        crds.mkdir()
        workload_crds.install(cluster, crds)
        policies = workdir / "policies"
        policies.mkdir()
        for shipped in sorted((REPO / "policies").glob("*.yaml")):
            shutil.copy(shipped, policies / shipped.name)
        gate = GPUGate(workdir / "gpugate", policies, kubeconfig=cluster.cp.kubeconfig)
        gate.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster, gate


# ---- the table --------------------------------------------------------------------------------------------


def table(results: Results, expected: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| case | gpugate | with gpugate | without gpugate | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, run in results.admitted.items():
        want = expected.get(name, {})
        verdict = (
            "admitted"
            if run.admitted
            else "; ".join(sorted(o.split(":")[0] for o in run.early if o.startswith("refused")))
        )
        where = displayed(want.get("with", []), run.outcomes) if run.admitted else "—"
        other = results.without.get(name)
        open_cell = displayed(want.get("without", []), other.outcomes) if other else "— (admitted: not run again)"
        rows.append(f"| `{name}` | {verdict} | {_cell(where)} | {_cell(open_cell)} | {_cell(want.get('why', ''))} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "—"


def check(results: Results, expected: dict[str, dict[str, Any]]) -> list[str]:
    """Every way the run differs from expected.yaml, as sentences; empty when it agrees."""
    problems = []
    for name, run in results.admitted.items():
        want = expected.get(name)
        if want is None:
            problems.append(f"{name}: no entry in {EXPECTED.name}")
            continue
        if run.admitted != (want["verdict"] == "admitted"):
            why = "; ".join(run.refused) or "admitted"
            problems.append(
                f"{name}: expected {want['verdict']}, was {'admitted' if run.admitted else 'refused'}: {why}"
            )
            continue
        if run.admitted:
            problems += [f"{name} with gpugate: {m}" for m in mismatches(want.get("with", []), run.outcomes)]
        else:
            other = results.without[name]
            problems += [f"{name} without gpugate: {m}" for m in mismatches(want.get("without", []), other.outcomes)]
    return problems


def write_table(rendered: str, doc: Path = DOC) -> None:
    text = doc.read_text()
    start, end = text.index(TABLE_BEGIN) + len(TABLE_BEGIN), text.index(TABLE_END)
    doc.write_text(text[:start] + "\n" + rendered + "\n" + text[end:])


def documented_table(doc: Path = DOC) -> str:
    text = doc.read_text()
    return text[text.index(TABLE_BEGIN) + len(TABLE_BEGIN) : text.index(TABLE_END)].strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scheduling.placements", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC.relative_to(REPO)}")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="gpugate-placements-"))
    cluster, gate = start_fleet(workdir)
    try:
        results = run_all(cluster, gate)
    finally:
        gate.stop()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    expected = load_expected()
    rendered = table(results, expected)
    print(rendered)
    problems = check(results, expected)
    for p in problems:
        print(f"MISMATCH {p}", file=sys.stderr)
    if args.write:
        write_table(rendered)
        print(f"wrote the table into {DOC.relative_to(REPO)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
