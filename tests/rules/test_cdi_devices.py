"""CDI device annotations (webhook/rules/cdi_devices.py): a pod never asks the container runtime for devices
by annotation, whatever its policy's mode, unless the policy's spec.security.cdiAnnotations allows it."""

from __future__ import annotations

import pytest

from tests.support import container, deployment, gpu_pod, mutated, pod, standard, validated
from webhook.policy.model import PolicySet
from webhook.rules.cdi_devices import requests_cdi_devices

TEAM = {"default": {"team": "vision"}}


def _annotated(obj, **annotations):
    obj["metadata"]["annotations"] = annotations
    return obj


@pytest.mark.parametrize(
    ("key", "read"),
    [
        ("cdi.k8s.io/x", True),
        ("cdi.k8s.io/nvidia.com_gpu-0", True),
        ("nvidia.cdi.k8s.io/pod", True),
        ("nvidia.cdi.k8s.io/container.main", True),
        ("nvidia.cdi.k8s.io", True),
        ("example.cdi.k8s.io/x", False),
        ("cdi.k8s.io.example.com/x", False),
        ("gpugate.io/team", False),
    ],
)
def test_which_annotation_keys_request_cdi_devices(key, read):
    assert requests_cdi_devices(key) is read


@pytest.mark.parametrize("policies", [PolicySet(), standard()], ids=["no-policy", "policy"])
def test_a_pod_with_only_a_cdi_annotation_is_refused(policies):
    obj = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all"})
    decision = validated(obj, policies, labels=TEAM)
    assert not decision.allowed and decision.code == 403
    assert (
        'metadata.annotations[cdi.k8s.io/x]: pod: asks the container runtime for the CDI devices "nvidia.com/gpu=all"'
        in decision.message
    )
    assert "spec.security.cdiAnnotations: allow" in decision.message


def test_a_gpu_pod_and_a_workload_template_are_refused_too():
    obj = _annotated(gpu_pod(1), **{"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"})
    result, _ = mutated(obj, standard(), labels=TEAM)
    assert "nvidia.cdi.k8s.io/container.main" in validated(result, standard(), labels=TEAM).message
    workload = deployment({"containers": [container("main")]}, annotations={"cdi.k8s.io/y": "nvidia.com/gpu=0"})
    decision = validated(workload, standard(), labels=TEAM)
    assert not decision.allowed
    assert "spec.template.metadata.annotations[cdi.k8s.io/y]" in decision.message


def test_an_annotation_the_pod_had_before_the_update_is_not_refused_again():
    created = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all"})
    updated = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all", "note": "x"})
    assert validated(updated, standard(), labels=TEAM, operation="UPDATE", old=created).allowed
    added = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all", "cdi.k8s.io/z": "a.b/c=d"})
    decision = validated(added, standard(), labels=TEAM, operation="UPDATE", old=created)
    assert not decision.allowed and "cdi.k8s.io/z" in decision.message and "cdi.k8s.io/x]" not in decision.message


def test_the_policy_field_allows_them():
    obj = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all"})
    assert validated(obj, standard(security={"cdiAnnotations": "allow"}), labels=TEAM).allowed


def test_an_annotation_added_through_pods_status_is_refused():
    """pods/status can change a pod's annotations (podStatusStrategy keeps them) before it is bound."""
    created = pod(container("main"))
    updated = _annotated(pod(container("main")), **{"cdi.k8s.io/x": "nvidia.com/gpu=all"})
    decision = validated(updated, standard(), labels=TEAM, operation="UPDATE", old=created, sub_resource="status")
    assert not decision.allowed and "metadata.annotations[cdi.k8s.io/x]" in decision.message
