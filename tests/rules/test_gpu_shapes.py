"""GPU shapes the apiserver accepts but that are wrong (webhook/rules/gpu_shapes.py): zero GPUs, GPUs only in
init containers (initOnlyGPUs, and long-running workloads warned about), whole GPUs mixed with MIG slices."""

from __future__ import annotations

import pytest

from tests.rules.test_gpu_limits import LIMITS, gpus
from tests.support import container, mutated, pod, standard, validated


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
