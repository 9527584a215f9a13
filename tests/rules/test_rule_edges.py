"""Edges of the rules that mutation testing (`make mutation`, docs/reliability.md) found no test pinned: a
policy's own taint keys and effects, which workloads count as long-running, the exact words of the
init-only finding, KAI's init-container ConfigMap names, pod-level GPU resources, and a violation's short
form without a subject."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.test_fleet import FLEET, NVIDIA_TOLERATION, admit
from tests.support import apply, container, env, gpu_pod, mutated, nvidia, pod, policy, request, standard, validated
from webhook.admission import mutate
from webhook.rules.base import Violation

POOL = "example.com/gpu-pool"


@pytest.mark.parametrize(
    ("policy_toleration", "pod_toleration", "refused"),
    [
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": POOL, "operator": "Exists", "effect": "NoExecute"},
            False,
        ),
        (
            {"key": POOL, "operator": "Exists"},  # no effect: the taint is kept off GPU nodes whatever its effect
            {"key": POOL, "operator": "Exists", "effect": "NoExecute"},
            True,
        ),
        (
            {"key": POOL, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "example.com/other", "operator": "Exists", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_a_policys_own_taint_keeps_cpu_pods_off_gpu_nodes(policy_toleration, pod_toleration, refused):
    policy = standard(devices=nvidia(tolerations=[policy_toleration]))
    verdict = validated(pod(container("web"), tolerations=[pod_toleration]), policy)
    assert verdict.allowed is not refused, verdict.message
    if refused:
        assert f"tolerates the GPU node taint ({POOL}" in verdict.message


def init_only(kind: str) -> dict:
    spec = {
        "containers": [container("app")],
        "initContainers": [container("warmup", limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": 1})],
    }
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    if kind == "PodTemplate":
        return {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "template": template,
        }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template},
    }


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "PodTemplate"])
def test_long_running_workloads_with_init_only_gpus_are_warned_about_even_when_allowed(kind):
    lenient = standard(initOnlyGPUs="allow")
    verdict = validated(init_only(kind), lenient)
    assert verdict.allowed
    assert any("only init containers request GPUs: they stay allocated and idle" in w for w in verdict.warnings), (
        verdict.warnings
    )


def test_the_init_only_finding_names_its_rule_and_the_fix():
    strict = standard(initOnlyGPUs="deny")
    obj = pod(container("a"), init=[container("i", limits={"nvidia.com/gpu": 1})], restartPolicy="Never")
    verdict = validated(obj, strict)
    assert not verdict.allowed
    found = [v for v in verdict.violations if "only init containers request GPUs" in v.text]
    assert [v.rule for v in found] == ["gpu-shape"]
    assert found[0].fix == "request the GPUs in the container that uses them, or run the GPU step as its own Job"
    assert "(the GPU validation-step pattern of the GPU Operator)" in found[0].text


def test_kai_names_the_configmap_of_an_init_container_with_an_i():
    def kai_pod(configmap):
        env_var = {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
        obj = pod(
            container(),
            init=[container("prep", env=[env_var])],
            schedulerName="kai-scheduler",
            runtimeClassName="nvidia",
            tolerations=[NVIDIA_TOLERATION],
        )
        obj["metadata"]["annotations"] = {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": "p-shared-gpu"}
        return obj

    assert admit(kai_pod("p-shared-gpu-i0"))[1].violations == []
    wrong = kai_pod("p-shared-gpu-0")
    verdict = validated(apply(wrong, mutate(request(wrong), env(FLEET)).patch), FLEET)
    assert not verdict.allowed and "NVIDIA_VISIBLE_DEVICES" in verdict.message


@pytest.mark.parametrize("resource", ["example.com/fpga", "nvidia.com/gpu"])
def test_pod_level_gpu_resources_are_refused_whether_the_policy_or_kubernetes_counts_them(resource):
    """Pod-level resources cannot carry extended resources; a GPU there is refused whether it is a GPU by
    this policy's devices or by the built-in list."""
    fpga_only = policy("fpga-only", gpuResources=["example.com/fpga"])  # the 0.1 form: exactly these count as GPUs
    obj = pod(container("a"), resources={"limits": {resource: "1"}})
    verdict = validated(obj, fpga_only)
    assert not verdict.allowed and f"spec.resources.limits[{resource}]" in verdict.message


def test_the_short_form_of_a_violation_without_a_subject_names_the_field():
    assert Violation("r", "spec.x", "", "is wrong").short() == "spec.x: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong").short() == "pod: is wrong"


def test_a_violation_message_without_a_subject_or_a_fix_has_no_empty_parts():
    assert Violation("r", "spec.x", "", "is wrong").message() == "spec.x: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong").message() == "spec.x: pod: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong", "fix it").message() == "spec.x: pod: is wrong; fix it"


def test_gpus_of_every_sidecar_add_up_in_the_pod_total():
    policy = standard(limits={"maxPerContainer": 4, "maxPerPod": 2})
    sidecar: dict[str, Any] = {"restartPolicy": "Always"}
    obj = pod(
        container("app", limits={"nvidia.com/gpu": 1}),
        init=[
            container("s1", limits={"nvidia.com/gpu": 1}, **sidecar),
            container("s2", limits={"nvidia.com/gpu": 1}, **sidecar),
        ],
    )
    verdict = validated(obj, policy)
    assert not verdict.allowed and "3" in verdict.message


MODEL = "nvidia.com/gpu.product"
AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def test_a_selection_outside_its_class_is_one_violation_with_every_part():
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}),
        labels={"gpugate.io/model": "h100"},
        nodeSelector={MODEL: "NVIDIA-L4"},
        runtimeClassName="nvidia",
        tolerations=[NVIDIA_TOLERATION],
    )
    found = [v for v in validated(obj, standard()).violations if v.rule == "model-selection"]
    assert len(found) == 1
    assert (found[0].path, found[0].subject) == (f"spec.nodeSelector[{MODEL}]", "pod")
    assert found[0].text == (
        'selects nvidia.com/gpu.product=NVIDIA-L4, outside class "h100" (NVIDIA-H100-80GB-HBM3, NVIDIA-H100-SXM5-80GB)'
    )
    assert found[0].fix == "remove the selector (gpugate adds it) or choose the class with label gpugate.io/model"


def affinity_on(values):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]},
                            {"key": MODEL, "operator": "In", "values": values},
                        ]
                    }
                ]
            }
        }
    }


def test_a_pod_choosing_its_model_by_affinity_gets_that_class():
    result, verdict = admit(
        pod(
            container(limits={"nvidia.com/gpu": 1}),
            affinity=affinity_on(["NVIDIA-H100-80GB-HBM3"]),
            tolerations=[NVIDIA_TOLERATION],
        )
    )
    assert verdict.allowed and verdict.violations == []
    assert MODEL not in (result["spec"].get("nodeSelector") or {})  # no L4 default beside its own choice


def test_a_choice_outside_every_class_names_the_expression():
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}),
        affinity=affinity_on(["NVIDIA-Unknown"]),
        tolerations=[NVIDIA_TOLERATION],
    )
    verdict = validated(apply(obj, mutate(request(obj), env(FLEET)).patch), FLEET)
    assert not verdict.allowed
    assert f"spec.{AFFINITY}.nodeSelectorTerms[0].matchExpressions[1]" in verdict.message


def test_a_hami_annotation_is_the_pods_own_choice_left_as_chosen():
    obj = pod(container(limits={"nvidia.com/gpu": 1}), tolerations=[NVIDIA_TOLERATION])
    obj["metadata"]["annotations"] = {"nvidia.com/use-gputype": "NVIDIA-H100-80GB-HBM3"}
    result, verdict = admit(obj)
    assert verdict.allowed and "nodeSelector" not in result["spec"] and "affinity" not in result["spec"]
    assert [v.text for v in verdict.violations] == [
        'nvidia.com/use-gputype=NVIDIA-H100-80GB-HBM3 left as chosen: no class of policy "default" names it'
    ]


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "near_miss",
    [
        {**GPU_TAINT, "key": "nvidia.com/gpu.shared"},
        {**GPU_TAINT, "operator": "Equal"},
        {**GPU_TAINT, "operator": "Equal", "value": "present"},
        {**GPU_TAINT, "effect": "NoExecute"},
        {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 60},
    ],
)
def test_a_toleration_that_differs_in_one_field_is_not_taken_for_the_policys(near_miss):
    result, _ = mutated(gpu_pod(1, tolerations=[near_miss]), standard())
    assert result["spec"]["tolerations"] == [near_miss, GPU_TAINT]


def test_tolerations_that_differ_only_in_value_are_different():
    policy = standard(devices=nvidia(tolerations=[{**GPU_TAINT, "operator": "Equal", "value": "present"}]))
    mine = {**GPU_TAINT, "operator": "Equal", "value": "absent"}
    result, _ = mutated(gpu_pod(1, tolerations=[mine]), policy)
    assert result["spec"]["tolerations"] == [mine, {**GPU_TAINT, "operator": "Equal", "value": "present"}]


def test_tolerations_that_differ_only_in_toleration_seconds_are_different():
    policy = standard(devices=nvidia(tolerations=[{**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 300}]))
    mine = {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 60}
    result, _ = mutated(gpu_pod(1, tolerations=[mine]), policy)
    assert result["spec"]["tolerations"] == [mine, {**GPU_TAINT, "effect": "NoExecute", "tolerationSeconds": 300}]


@pytest.mark.parametrize(
    ("toleration", "shown"),
    [
        (
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
            "(nvidia.com/gpu=present:NoSchedule)",
        ),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, "(nvidia.com/gpu:*)"),
        ({"operator": "Exists"}, "(*:*)"),
    ],
)
def test_a_refused_toleration_is_shown_as_key_value_effect(toleration, shown):
    verdict = validated(pod(tolerations=[toleration]), standard())
    assert f"tolerates the GPU node taint {shown}" in verdict.message


def model_findings(verdict):
    return [(v.rule, v.path, v.subject, v.text, v.fix) for v in verdict.violations if v.rule == "model-selection"]


AMD_TOLERATION = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("limits", "model", "toleration", "text", "fix"),
    [
        (
            {"nvidia.com/gpu.shared": 1},
            "l4",
            NVIDIA_TOLERATION,
            'GPU model class "l4" cannot serve nvidia.com/gpu.shared: its nodes offer nvidia.com/gpu',
            "use one of: a10g",
        ),
        (
            {"nvidia.com/mig-1g.10gb": 1},
            "h100",
            NVIDIA_TOLERATION,
            'GPU model class "h100" cannot serve nvidia.com/mig-1g.10gb: its nodes offer nvidia.com/gpu',
            "use one of: a100",
        ),
        (
            {"amd.com/gpu": 1},
            "l4",
            AMD_TOLERATION,
            'GPU model class "l4" is not allowed by policy "default"',
            "use one of: mi300x",
        ),
    ],
)
def test_a_named_class_that_cannot_serve_the_request_is_one_finding_on_the_label(limits, model, toleration, text, fix):
    obj = pod(container(limits=limits), labels={"gpugate.io/model": model}, tolerations=[toleration])
    assert model_findings(admit(obj)[1]) == [("model-selection", "metadata.labels[gpugate.io/model]", "pod", text, fix)]


def test_an_unknown_class_is_one_finding_on_the_label():
    verdict = validated(gpu_pod(1, labels={"gpugate.io/model": "a100"}), standard())
    assert model_findings(verdict) == [
        (
            "model-selection",
            "metadata.labels[gpugate.io/model]",
            "pod",
            'GPU model class "a100" is not allowed by policy "standard"',
            "use one of: l4, h100",
        )
    ]


def test_an_annotation_choice_no_class_names_is_reported_on_the_annotation():
    obj = pod(container(limits={"nvidia.com/gpu": 1}), tolerations=[NVIDIA_TOLERATION])
    obj["metadata"]["annotations"] = {"nvidia.com/use-gputype": "X"}
    assert model_findings(admit(obj)[1]) == [
        (
            "model-selection",
            "metadata.annotations[nvidia.com/use-gputype]",
            "pod",
            'nvidia.com/use-gputype=X left as chosen: no class of policy "default" names it',
            "or name a class with label gpugate.io/model (l4, t4, h100, h100-mig, h200)",
        )
    ]


def test_a_pod_bound_to_a_node_gets_no_model_selector():
    result, decision = mutated(gpu_pod(1, nodeName="node-1"), standard())
    assert decision.allowed and "nodeSelector" not in result["spec"] and "affinity" not in result["spec"]
    assert validated(result, standard()).allowed
