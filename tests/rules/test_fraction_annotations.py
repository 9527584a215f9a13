"""Fraction annotations hold a GPU only for the scheduler that implements them (gpuHolders.annotationSchedulers,
default kai-scheduler): on a pod another scheduler places they earn no GPU injections, and a pod whose only claim
to a GPU is such an annotation is a violation naming the annotation, the schedulerName and the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import container, mutated, pod, standard, validated

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def fraction_pod(**spec: Any) -> dict[str, Any]:
    obj = pod(container(), **spec)
    obj["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    return obj


def test_kai_scheduled_fraction_pods_still_get_the_nvidia_profile():
    result, decision = mutated(fraction_pod(schedulerName="kai-scheduler"), standard())
    assert decision.allowed
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert GPU_TOLERATION in result["spec"]["tolerations"]
    assert validated(result, standard()).allowed


@pytest.mark.parametrize(("spec", "scheduler"), [({}, "default-scheduler"), ({"schedulerName": "volcano"}, "volcano")])
def test_another_scheduler_earns_no_runtime_class_and_no_toleration(spec, scheduler):
    obj = fraction_pod(**spec)
    result, decision = mutated(obj, standard())
    assert decision.allowed and decision.patch is None  # nothing injected: the pod holds no GPU
    verdict = validated(result, standard())
    assert not verdict.allowed and verdict.code == 403
    assert (
        f"metadata.annotations[gpu-fraction]: pod: asks for part of a GPU with the annotation gpu-fraction, but its "
        f'schedulerName "{scheduler}" does not implement it (policy "standard" counts it for kai-scheduler), so the '
        "pod would get no GPU; set spec.schedulerName: kai-scheduler, or request whole GPUs in resources.limits"
    ) in verdict.message


def test_such_a_pod_may_not_tolerate_the_gpu_taint_in_any_mode():
    for mode in ("enforce", "warn", "audit"):
        policy = standard(mode=mode)
        verdict = validated(fraction_pod(tolerations=[GPU_TOLERATION]), policy)
        assert not verdict.allowed, mode
        assert "requests no GPU but tolerates the GPU node taint" in verdict.message


def test_such_a_pod_may_not_run_under_the_gpu_runtime_class():
    verdict = validated(fraction_pod(runtimeClassName="nvidia"), standard())
    assert not verdict.allowed
    assert 'runs under the GPU runtime class "nvidia"' in verdict.message


def test_the_mode_governs_the_missing_scheduler_violation():
    verdict = validated(fraction_pod(), standard(mode="warn"))
    assert verdict.allowed
    assert any("annotation gpu-fraction" in w for w in verdict.warnings), verdict.warnings


def test_a_pod_holding_a_gpu_otherwise_is_not_told_about_the_annotation():
    obj = pod(container(limits={"nvidia.com/gpu": 1}))
    obj["metadata"]["annotations"] = {"gpu-memory": "2000"}
    result, _ = mutated(obj, standard())
    assert validated(result, standard()).allowed


def test_the_schedulers_are_a_policy_list():
    shards = standard(gpuHolders={"annotationSchedulers": ["kai-shard-a", "kai-shard-b"]})
    result, _ = mutated(fraction_pod(schedulerName="kai-shard-b"), shards)
    assert result["spec"]["runtimeClassName"] == "nvidia"
    verdict = validated(fraction_pod(schedulerName="kai-scheduler"), shards)
    assert not verdict.allowed  # the list replaces the default
    assert "counts it for kai-shard-a, kai-shard-b" in verdict.message
    assert "set spec.schedulerName: kai-shard-a" in verdict.message


def _template(kind: str, api_version: str, path: list[str], template: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "default"}}
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = template
    return obj


def _fraction_template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": {"gpu-fraction": "0.5"}}, "spec": {"containers": [container()], **spec}}


def test_a_deployment_template_is_judged_as_the_apiserver_defaults_it():
    """The apiserver fills schedulerName: default-scheduler into a built-in workload's template."""
    deployment = _template("Deployment", "apps/v1", ["spec", "template"], _fraction_template())
    deployment["spec"]["selector"] = {"matchLabels": {"app": "w"}}
    verdict = validated(deployment, standard())
    assert not verdict.allowed
    assert "spec.template.metadata.annotations[gpu-fraction]: pod: asks for part of a GPU" in verdict.message


def test_a_workload_crd_template_without_a_scheduler_is_left_to_its_pods():
    """KubeRay's KAI plugin sets schedulerName on the pods it creates (ray-project/kuberay
    ray-operator/controllers/ray/batchscheduler/kai-scheduler/kai_scheduler.go); those pods are judged then."""
    group = {"groupName": "g", "replicas": 1, "template": _fraction_template()}
    ray = _template("RayCluster", "ray.io/v1", ["spec", "workerGroupSpecs"], [group])
    verdict = validated(ray, standard())
    assert verdict.allowed, verdict.message
    assert any(
        "pods will get runtimeClassName=nvidia, toleration nvidia.com/gpu:NoSchedule" in w for w in verdict.warnings
    )
    named = copy.deepcopy(ray)
    named["spec"]["workerGroupSpecs"][0]["template"]["spec"]["schedulerName"] = "default-scheduler"
    refused = validated(named, standard())
    assert not refused.allowed
    assert "spec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]" in refused.message


def test_the_workload_crd_template_says_which_scheduler_its_pods_need():
    group = {"groupName": "g", "replicas": 1, "template": _fraction_template()}
    verdict = validated(_template("RayCluster", "ray.io/v1", ["spec", "workerGroupSpecs"], [group]), standard())
    # the first warning names the RayCluster; this one, after it, only the template
    assert (
        "workerGroupSpecs[0]: gpu-fraction holds a GPU only if the operator gives the pods schedulerName "
        "kai-scheduler (KubeRay's batchScheduler option); pods of another scheduler are refused when created"
    ) in verdict.warnings
    assert verdict.warnings[0].startswith('RayCluster "w" workerGroupSpecs[0]: pods will get ')
    assert all(len(w) <= 256 for w in verdict.warnings)


def _volcano_job(**spec: Any) -> dict[str, Any]:
    task = {"name": "w", "replicas": 1, "template": _fraction_template()}
    job = _template("Job", "batch.volcano.sh/v1alpha1", ["spec", "tasks"], [task])
    job["spec"].update(spec)
    return job


def test_a_volcano_job_s_pods_get_the_job_s_scheduler():
    # volcano-sh/volcano pkg/controllers/job/job_controller_util.go createJobPod: a task's pod that names no
    # scheduler takes spec.schedulerName, which Volcano's admission webhook defaults to volcano.
    refused = validated(_volcano_job(), standard())
    assert not refused.allowed
    assert (
        "spec.tasks[0].template.metadata.annotations[gpu-fraction]: pod: asks for part of a GPU with the annotation "
        in refused.message
    )
    assert 'but its schedulerName "volcano" does not implement it' in refused.message
    assert not validated(_volcano_job(schedulerName="volcano"), standard()).allowed
    kai = validated(_volcano_job(schedulerName="kai-scheduler"), standard())
    assert kai.allowed, kai.message
    assert not any("holds a GPU only if the operator" in w for w in kai.warnings)  # the scheduler is known


def test_a_kai_fraction_pod_created_bound_by_node_name_holds_no_gpu():
    """Created with spec.nodeName, the pod is stored bound: no scheduler places it, so kai-scheduler never
    allocates the fraction; it gets no runtime class, no toleration, and a violation saying why."""
    obj = fraction_pod(schedulerName="kai-scheduler", nodeName="gpu-node-1")
    result, decision = mutated(obj, standard())
    assert decision.allowed and decision.patch is None
    verdict = validated(result, standard())
    assert not verdict.allowed
    assert (
        "metadata.annotations[gpu-fraction]: pod: asks for part of a GPU with the annotation gpu-fraction, but it is "
        'created bound to the node "gpu-node-1" (spec.nodeName), so no scheduler places it'
    ) in verdict.message
    assert "remove spec.nodeName and let kai-scheduler place the pod" in verdict.message


@pytest.mark.parametrize("mode", ["enforce", "warn", "audit"])
def test_a_bound_fraction_pod_under_the_gpu_runtime_class_or_toleration_is_refused_in_every_mode(mode):
    policy = standard(mode=mode)
    for extra in ({"runtimeClassName": "nvidia"}, {"tolerations": [GPU_TOLERATION]}):
        obj = fraction_pod(schedulerName="kai-scheduler", nodeName="gpu-node-1", **extra)
        assert not validated(obj, policy).allowed, (mode, extra)


def test_a_template_with_node_name_makes_bound_pods_too():
    from tests.support import deployment

    template = fraction_pod(schedulerName="kai-scheduler", nodeName="gpu-node-1")
    obj = deployment(template["spec"], name="w")
    obj["spec"]["template"]["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    verdict = validated(obj, standard())
    assert not verdict.allowed and "created bound to the node" in verdict.message


def test_on_update_a_pod_kai_bound_still_holds_its_fraction():
    """kai-scheduler's own bind sets spec.nodeName on the stored pod: a later UPDATE is no creation."""
    policy = standard()
    created, decision = mutated(fraction_pod(schedulerName="kai-scheduler"), policy)
    assert decision.allowed
    bound = copy.deepcopy(created)
    bound["spec"]["nodeName"] = "gpu-node-1"
    updated = copy.deepcopy(bound)
    updated["metadata"].setdefault("labels", {})["stage"] = "b"
    assert validated(updated, policy, operation="UPDATE", old=bound).allowed
