"""GPU limits (webhook/rules/gpu_limits.py), counted as the scheduler counts them, and how the policy's mode
(enforce, warn, audit) turns their findings into answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import container, mutated, pod, standard, validated

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


def test_warn_mode_allows_with_whole_warnings_within_the_apiservers_limit():
    policy = standard(mode="warn", limits={"maxPerContainer": 1})
    verdict = final(pod(container("a-container-with-a-rather-long-name", limits=gpus(3))), policy)
    assert verdict.allowed and verdict.warnings
    assert all(len(w) <= 256 and not w.endswith("…") for w in verdict.warnings)
    assert "requests 3 GPUs" in verdict.warnings[0]


def test_audit_mode_allows_and_records_audit_annotations():
    policy = standard(mode="audit", limits={"maxPerContainer": 1})
    verdict = final(pod(container("a", limits=gpus(3))), policy)
    assert verdict.allowed and not verdict.warnings
    assert verdict.audit_annotations["policy"] == "standard"
    assert "requests 3 GPUs" in verdict.audit_annotations["violations"]


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
