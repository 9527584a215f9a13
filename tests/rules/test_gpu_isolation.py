"""GPU isolation per container: a container of an NVIDIA GPU pod that requests no GPU (a sidecar, an init
container) gets NVIDIA_VISIBLE_DEVICES=void, so the pod-wide NVIDIA runtime and a CUDA image's own
NVIDIA_VISIBLE_DEVICES=all show it no GPU; a policy may name containers that share the pod's GPUs."""

from __future__ import annotations

from tests.support import container, gpu_pod, mutated, pod, standard, validated

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
TEAM = {"default": {"team": "vision"}}


def _env(obj, fld, index):
    return obj["spec"][fld][index].get("env") or []


def test_containers_without_gpus_in_a_gpu_pod_see_no_gpu():
    obj = pod(
        container("trainer", limits={"nvidia.com/gpu": 1}),
        container("log-shipper", env=[{"name": "A", "value": "b"}]),
        init=[container("fetch")],
    )
    result, decision = mutated(obj, standard(), labels=TEAM)
    assert decision.allowed
    assert VOID not in _env(result, "containers", 0)
    assert _env(result, "containers", 1) == [{"name": "A", "value": "b"}, VOID]
    assert _env(result, "initContainers", 0) == [VOID]
    assert validated(result, standard(), labels=TEAM).allowed


def test_a_policy_can_let_a_named_container_share_the_pods_gpus():
    policy = standard(security={"sharedGPUContainers": ["profiler"]})
    obj = pod(container("trainer", limits={"nvidia.com/gpu": 1}), container("profiler"), container("other"))
    result, _ = mutated(obj, policy, labels=TEAM)
    assert VOID not in _env(result, "containers", 1)
    assert _env(result, "containers", 2) == [VOID]


def test_a_container_that_already_chose_no_gpu_is_left_alone():
    none = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    obj = pod(container("trainer", limits={"nvidia.com/gpu": 1}), container("side", env=[none]))
    result, _ = mutated(obj, standard(), labels=TEAM)
    assert _env(result, "containers", 1) == [none]


def test_pods_without_gpus_and_single_container_gpu_pods_are_not_changed():
    result, _ = mutated(pod(container("web")), standard(), labels=TEAM)
    assert "env" not in result["spec"]["containers"][0]
    result, _ = mutated(gpu_pod(1), standard(), labels=TEAM)
    assert "env" not in result["spec"]["containers"][0]
