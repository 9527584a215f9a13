"""GPU limits (counted as the scheduler does), wrong-but-accepted shapes, and NVIDIA_VISIBLE_DEVICES."""

from __future__ import annotations

import pytest

from tests.support import container, gpu_pod, mutated, pod, standard, validated
from webhook.policy.model import PolicySet

LIMITS = standard(limits={"maxPerContainer": 4, "maxPerPod": 6})


def gpus(n):
    return {"nvidia.com/gpu": str(n)}


def final(obj, policies=LIMITS):
    result, decision = mutated(obj, policies)
    assert decision.allowed, decision.message
    return validated(result, policies)


@pytest.mark.parametrize(
    ("obj", "allowed"),
    [
        (pod(container("a", limits=gpus(4))), True),
        (pod(container("a", limits=gpus(5))), False),
        (pod(container("a", limits=gpus(3)), container("b", limits=gpus(3))), True),
        (pod(container("a", limits=gpus(4)), container("b", limits=gpus(3))), False),
        # an init container runs before the app containers: the pod needs max(init, app), not the sum
        (pod(container("a", limits=gpus(4)), init=[container("i", limits=gpus(4))]), True),
        # a sidecar (restartPolicy Always) runs beside them: it adds up
        (pod(container("a", limits=gpus(4)), init=[container("s", limits=gpus(3), restartPolicy="Always")]), False),
        # an init container after a sidecar needs its own GPUs plus the sidecar's
        (
            pod(
                container("a", limits=gpus(1)),
                init=[container("s", limits=gpus(2), restartPolicy="Always"), container("i", limits=gpus(4))],
            ),
            True,
        ),
        (
            pod(
                container("a", limits=gpus(1)),
                init=[container("s", limits=gpus(3), restartPolicy="Always"), container("i", limits=gpus(4))],
            ),
            False,
        ),
        (pod(container("a", limits={"nvidia.com/gpu": "2", "nvidia.com/gpu.shared": "3"})), False),
    ],
)
def test_gpu_counts_follow_the_scheduler(obj, allowed):
    verdict = final(obj)
    assert verdict.allowed is allowed, verdict.message


def test_limit_messages_name_container_and_policy():
    verdict = final(pod(container("trainer", limits=gpus(5))))
    assert (
        'spec.containers[0].resources.limits: container "trainer": requests 5 GPUs, more than the 4 per '
        'container that policy "standard" allows'
    ) in verdict.message


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (pod(container("a", limits=gpus(0))), "requests 0 nvidia.com/gpu"),
        (
            pod(container("a", limits={"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"})),
            "mixes nvidia.com/gpu with MIG slices",
        ),
    ],
)
def test_shapes_the_apiserver_accepts_are_violations(obj, words):
    verdict = validated(mutated(obj, LIMITS)[0], LIMITS)
    assert not verdict.allowed and words in verdict.message


def test_init_only_gpus_are_a_policy_choice_warned_about_by_default():
    obj = pod(container("a"), init=[container("i", limits=gpus(1))], restartPolicy="Never")
    verdict = validated(mutated(obj, LIMITS)[0], LIMITS)
    assert verdict.allowed
    assert any(
        "only init containers request GPUs: they stay allocated until the pod ends" in w for w in verdict.warnings
    )
    strict = standard(limits={"maxPerContainer": 4, "maxPerPod": 8}, initOnlyGPUs="deny")
    verdict = validated(mutated(obj, strict)[0], strict)
    assert not verdict.allowed
    assert 'spec.initContainers: init container "i": only init containers request GPUs' in verdict.message
    lenient = standard(initOnlyGPUs="allow")
    assert validated(mutated(obj, lenient)[0], lenient).warnings == []


def test_long_running_pods_with_init_only_gpus_are_warned_about_even_when_allowed():
    lenient = standard(initOnlyGPUs="allow")
    obj = pod(container("a"), init=[container("i", limits=gpus(1))])  # restartPolicy Always: long-running
    verdict = validated(mutated(obj, lenient)[0], lenient)
    assert verdict.allowed and any(
        "only init containers request GPUs: they stay allocated and idle" in w for w in verdict.warnings
    )


def test_warn_mode_allows_with_short_warnings():
    policy = standard(mode="warn", limits={"maxPerContainer": 1})
    verdict = final(pod(container("a-container-with-a-rather-long-name", limits=gpus(3))), policy)
    assert verdict.allowed and verdict.warnings
    assert all(len(w) <= 120 for w in verdict.warnings)
    assert "requests 3 GPUs" in verdict.warnings[0]


def test_audit_mode_allows_and_records_audit_annotations():
    policy = standard(mode="audit", limits={"maxPerContainer": 1})
    verdict = final(pod(container("a", limits=gpus(3))), policy)
    assert verdict.allowed and not verdict.warnings
    assert verdict.audit_annotations["policy"] == "standard"
    assert "requests 3 GPUs" in verdict.audit_annotations["violations"]


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
