"""The decision (webhook/admission/engine.py) over workload templates: the same rules as pods, template paths in
messages, warnings, mutateTemplates; and what an UPDATE is refused for."""

from __future__ import annotations

import copy

import pytest

from tests.support import (
    STANDARD,
    apply,
    container,
    env,
    gpu_pod,
    mutated,
    policies,
    request,
    schema_check,
    standard,
    validated,
)
from webhook.admission import mutate, validate


def template(kind, gpus="1", *, labels=None, name="w"):
    pod_template = {
        "metadata": {"labels": {"app": "w", **(labels or {})}},
        "spec": {
            "restartPolicy": "Never" if kind in ("Job", "CronJob") else "Always",
            "containers": [container("worker", limits={"nvidia.com/gpu": gpus})],
        },
    }
    selector = {"matchLabels": {"app": "w"}}
    meta = {"name": name, "namespace": "default"}
    if kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": selector, "template": pod_template},
        }
    if kind == "StatefulSet":
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": selector, "serviceName": "w", "template": pod_template},
        }
    if kind in ("DaemonSet", "ReplicaSet"):
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": selector, "template": pod_template},
        }
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": pod_template}}
    if kind == "CronJob":
        return {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": pod_template}}},
        }
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": pod_template}


PREFIX = {
    "Deployment": "spec.template.spec",
    "StatefulSet": "spec.template.spec",
    "DaemonSet": "spec.template.spec",
    "ReplicaSet": "spec.template.spec",
    "Job": "spec.template.spec",
    "CronJob": "spec.jobTemplate.spec.template.spec",
    "PodTemplate": "template.spec",
}
KINDS = list(PREFIX)


@pytest.mark.parametrize("kind", KINDS)
def test_fractional_gpus_in_templates_are_denied_at_mutate_with_the_template_path(kind):
    obj = template(kind, "500m")
    decision = mutate(request(obj), env(standard()))
    assert not decision.allowed
    assert f'{kind} "w" in namespace "default" violates GPU policy "standard"' in decision.message
    assert f'{PREFIX[kind]}.containers[0].resources.limits[nvidia.com/gpu]: container "worker"' in decision.message
    assert "must be an integer" in decision.message


@pytest.mark.parametrize("kind", KINDS)
def test_disallowed_model_class_in_templates_is_denied_at_validate(kind):
    obj = template(kind, labels={"gpugate.io/model": "a100"})
    assert mutate(request(obj), env(standard())).allowed
    verdict = validate(request(obj), env(standard()))
    assert not verdict.allowed
    assert f"{PREFIX[kind].removesuffix('.spec')}.metadata.labels[gpugate.io/model]" in verdict.message
    assert 'GPU model class "a100" is not allowed' in verdict.message


@pytest.mark.parametrize("kind", KINDS)
def test_allowed_templates_are_not_mutated_but_warned_about(kind):
    obj = template(kind)
    assert mutate(request(obj), env(standard())).patch is None
    verdict = validate(request(obj), env(standard(), {"default": {"team": "ml"}}))
    assert verdict.allowed
    text = " | ".join(verdict.warnings)
    assert f'{kind} "w": pods will get runtimeClassName=nvidia' in text
    assert "toleration nvidia.com/gpu:NoSchedule" in text and "nodeSelector nvidia.com/gpu.product=NVIDIA-L4" in text
    assert "label gpugate.io/team=ml" in text
    assert all(len(w) <= 120 for w in verdict.warnings)


@pytest.mark.parametrize("kind", KINDS)
def test_mutate_templates_patches_the_template_idempotently(kind):
    policy = standard(mutateTemplates=True)
    obj = template(kind)
    result, decision = mutated(obj, policy, labels={"default": {"team": "ml"}})
    spec = result
    for key in PREFIX[kind].split("."):
        spec = spec[key]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    again = mutate(request(result), env(policy, {"default": {"team": "ml"}}))
    assert again.patch is None
    assert validate(request(result), env(policy, {"default": {"team": "ml"}})).allowed


def test_workload_labels_in_templates_name_the_workload():
    policy = standard(mutateTemplates=True)
    result, _ = mutated(template("CronJob", name="nightly"), policy)
    labels = result["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert labels["gpugate.io/workload-kind"] == "CronJob" and labels["gpugate.io/workload-name"] == "nightly"


def test_forged_template_attribution_is_replaced_and_edits_on_update_denied():
    policy = standard(mutateTemplates=True)
    labels = {"default": {"team": "ml"}}
    obj = template("Deployment", labels={"gpugate.io/team": "forged"})
    result, decision = mutated(obj, policy, labels=labels)
    assert result["spec"]["template"]["metadata"]["labels"]["gpugate.io/team"] == "ml"
    assert any("replaced" in w for w in decision.warnings)
    edited = copy.deepcopy(result)
    edited["spec"]["template"]["metadata"]["labels"]["gpugate.io/team"] = "forged"
    verdict = validate(request(edited, operation="UPDATE", old=result), env(policy, labels))
    assert not verdict.allowed and "spec.template.metadata.labels[gpugate.io/team]" in verdict.message


def test_templates_without_gpus_get_no_warnings():
    obj = template("Deployment")
    obj["spec"]["template"]["spec"]["containers"][0].pop("resources")
    verdict = validate(request(obj), env(standard()))
    assert verdict.allowed and verdict.warnings == []


def test_template_patch_validates_against_the_schema():
    result = apply(
        template("Deployment"), mutate(request(template("Deployment")), env(standard(mutateTemplates=True))).patch
    )
    schema_check(result)


def test_other_kinds_and_subresources_are_allowed_untouched():
    scale = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"replicas": 3},
    }
    assert mutate(request(scale), env(standard())).allowed
    assert validated(scale, standard()).allowed


TEAM = {"default": {"team": "vision"}}
ATTRIBUTION = {"labels": {"gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"}}}
# Two policies that differ only in attribution; the pod's `tier` label picks between them.
PLAIN_AND_ATTRIBUTED = policies(
    {
        "name": "plain",
        "priority": 200,
        "match": {"podSelector": {"matchLabels": {"tier": "plain"}}},
        **{k: v for k, v in STANDARD.items() if k != "attribution"},
    },
    {"name": "attributed", "priority": 100, **STANDARD, "attribution": ATTRIBUTION},
)


def test_an_update_is_not_refused_for_labels_only_a_create_could_have_injected():
    """A pod created under a policy without attribution, relabelled so that one with attribution now governs
    it: gpugate mutates pods on CREATE only, so the UPDATE cannot receive the team label. Refusing it would
    make the pod impossible to relabel; the attribution is checked on the next CREATE."""
    created, decision = mutated(gpu_pod(1, labels={"tier": "plain", "app": "x"}), PLAIN_AND_ATTRIBUTED, labels=TEAM)
    assert decision.allowed and decision.policy == "plain"
    assert "gpugate.io/team" not in created["metadata"]["labels"]
    relabelled = copy.deepcopy(created)
    del relabelled["metadata"]["labels"]["tier"]
    verdict = validated(relabelled, PLAIN_AND_ATTRIBUTED, labels=TEAM, operation="UPDATE", old=created)
    assert verdict.policy == "attributed"
    assert verdict.allowed, verdict.message


def test_the_same_pod_on_create_is_refused_without_its_team_label():
    """The other side of the filter: on CREATE a pod lacking the injected team label is refused."""
    created, _ = mutated(gpu_pod(1, labels={"tier": "plain", "app": "x"}), PLAIN_AND_ATTRIBUTED, labels=TEAM)
    relabelled = copy.deepcopy(created)
    del relabelled["metadata"]["labels"]["tier"]
    verdict = validated(relabelled, PLAIN_AND_ATTRIBUTED, labels=TEAM)
    assert not verdict.allowed and "lacks label gpugate.io/team=vision" in verdict.message


def test_the_object_is_named_once_and_every_value_is_whole():
    """A LeaderWorkerSet with two GPU templates: the first warning names the object, the rest only their template,
    and every injection of both templates is said whole, each warning within the apiserver's 256."""
    gpu = {"spec": {"containers": [container("vllm", limits={"nvidia.com/gpu": 1})]}}
    obj = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "default"},
        "spec": {"leaderWorkerTemplate": {"leaderTemplate": gpu, "workerTemplate": copy.deepcopy(gpu)}},
    }
    warnings = validate(request(obj), env(standard())).warnings
    named = [w for w in warnings if 'LeaderWorkerSet "vllm"' in w]
    assert named == [warnings[0]]
    assert warnings[0].startswith('LeaderWorkerSet "vllm" leaderWorkerTemplate.leaderTemplate: pods will get ')
    for where in ("leaderWorkerTemplate.leaderTemplate", "leaderWorkerTemplate.workerTemplate"):
        said = ", ".join(
            w.split(": pods will get ", 1)[1]
            for w in warnings
            if w.removeprefix('LeaderWorkerSet "vllm" ').startswith(f"{where}:")
        )
        for item in (
            "runtimeClassName=nvidia",
            "toleration nvidia.com/gpu:NoSchedule",
            "nodeSelector nvidia.com/gpu.product=NVIDIA-L4",
            "label gpugate.io/team=unassigned",
        ):
            assert item in said, (where, warnings)
    assert all(len(w) <= 256 and "…" not in w for w in warnings)
