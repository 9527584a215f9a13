"""NVIDIA_VISIBLE_DEVICES (webhook/rules/visible_devices.py): never set by a container itself, whatever the
policy; KAI's ConfigMap names for the containers it shares a GPU with."""

from __future__ import annotations

import copy

import pytest

from tests.rules.test_fleet import FLEET, NVIDIA_TOLERATION, admit
from tests.rules.test_gpu_limits import LIMITS
from tests.support import apply, container, env, gpu_pod, mutated, pod, request, standard, validated
from webhook.admission import mutate
from webhook.policy.model import PolicySet


@pytest.mark.parametrize(
    ("env", "allowed"),
    [
        ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, False),
        ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}, False),
        ({"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, False),
        ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}, True),
        ({"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, True),
    ],
)
@pytest.mark.parametrize("policies", [PolicySet(), LIMITS], ids=["no-policy", "policy"])
def test_nvidia_visible_devices_cannot_be_set(env, allowed, policies):
    obj = pod(container("a", env=[env]))
    verdict = validated(mutated(obj, policies)[0], policies)
    assert verdict.allowed is allowed
    if not allowed:
        assert 'spec.containers[0].env[0]: container "a": sets NVIDIA_VISIBLE_DEVICES' in verdict.message


def test_ephemeral_container_with_visible_devices_is_denied_on_update():
    created, _ = mutated(gpu_pod(1), LIMITS)
    debugged = {
        **created,
        "spec": {
            **created["spec"],
            "ephemeralContainers": [
                {"name": "debug", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
            ],
        },
    }
    verdict = validated(debugged, LIMITS, operation="UPDATE", old=created, sub_resource="ephemeralcontainers")
    assert not verdict.allowed and "spec.ephemeralContainers[0].env[0]" in verdict.message


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


def test_a_kai_shard_named_in_the_policy_sets_the_variable_from_its_configmap_too():
    shards = standard(gpuHolders={"annotationSchedulers": ["kai-shard-a"]})
    env_var = {
        "name": "NVIDIA_VISIBLE_DEVICES",
        "valueFrom": {"configMapKeyRef": {"name": "p-shared-gpu-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
    }
    obj = pod(container(env=[env_var]), schedulerName="kai-shard-a", runtimeClassName="nvidia")
    obj["metadata"]["annotations"] = {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": "p-shared-gpu"}
    result, _ = mutated(obj, shards, check_schema=False)
    assert validated(result, shards).allowed, validated(result, shards).message
    other = copy.deepcopy(obj)
    other["spec"]["schedulerName"] = "default-scheduler"
    verdict = validated(other, shards)
    assert not verdict.allowed and "sets NVIDIA_VISIBLE_DEVICES=<from a reference>" in verdict.message
