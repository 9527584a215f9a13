"""Security checks are not demoted by a policy's mode: ``warn`` and ``audit`` govern placement and limits,
while attribution edits, NVIDIA_VISIBLE_DEVICES overrides, the GPU runtime class and GPU tolerations on
pods without GPUs stay denied unless the policy names the exception in a field of its own."""

from __future__ import annotations

import copy

import pytest

from tests.support import container, gpu_pod, mutated, pod, standard, validated

TEAM = {"default": {"team": "vision"}}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _visible_devices(policy):
    obj = pod(container(limits={"nvidia.com/gpu": 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    result, _ = mutated(obj, policy, labels=TEAM, check_schema=False)
    return validated(result, policy, labels=TEAM)


def _attribution_edit(policy):
    created, _ = mutated(gpu_pod(1), policy, labels=TEAM)
    updated = copy.deepcopy(created)
    updated["metadata"]["labels"]["gpugate.io/team"] = "someone-else"
    return validated(updated, policy, labels=TEAM, operation="UPDATE", old=created)


def _runtime_without_gpu(policy):
    return validated(pod(container(), runtimeClassName="nvidia"), policy, labels=TEAM)


def _toleration_without_gpu(policy):
    return validated(pod(container(), tolerations=[GPU_TOLERATION]), policy, labels=TEAM)


def _cdi_annotation(policy):
    obj = pod(container())
    obj["metadata"]["annotations"] = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    return validated(obj, policy, labels=TEAM)


def _env_from_in_a_gpu_container(policy):
    obj = pod(container(limits={"nvidia.com/gpu": 1}, envFrom=[{"configMapRef": {"name": "settings"}}]))
    result, _ = mutated(obj, policy, labels=TEAM)
    return validated(result, policy, labels=TEAM)


def _privileged_gpu_container(policy):
    obj = gpu_pod(1)
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    result, _ = mutated(obj, policy, labels=TEAM)
    return validated(result, policy, labels=TEAM)


CASES = {
    "visible-devices override": (_visible_devices, {"security": {"visibleDevicesOverride": "allow"}}),
    "attribution edit": (_attribution_edit, {"security": {"attributionEdits": "allow"}}),
    "GPU runtime without a GPU": (_runtime_without_gpu, {"nonGPUPods": {"gpuRuntimeClass": "allow"}}),
    "GPU toleration without a GPU": (_toleration_without_gpu, {"nonGPUPods": {"gpuTolerations": "allow"}}),
    "CDI device annotation": (_cdi_annotation, {"security": {"cdiAnnotations": "allow"}}),
    "envFrom that can set NVIDIA_*": (_env_from_in_a_gpu_container, {"security": {"visibleDevicesEnvFrom": "allow"}}),
    "privileged GPU container": (_privileged_gpu_container, {"security": {"privilegedGPUContainers": "allow"}}),
}


@pytest.mark.parametrize("mode", ["enforce", "warn", "audit"])
@pytest.mark.parametrize("case", list(CASES))
def test_security_checks_deny_in_every_mode(case, mode):
    decide, _ = CASES[case]
    decision = decide(standard(mode=mode))
    assert not decision.allowed, (case, mode, decision.warnings)
    assert decision.code == 403


@pytest.mark.parametrize("mode", ["enforce", "warn"])
@pytest.mark.parametrize("case", list(CASES))
def test_only_the_checks_own_field_makes_an_exception(case, mode):
    decide, exception = CASES[case]
    assert decide(standard(mode=mode, **exception)).allowed


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_mode_still_governs_limits(mode):
    result, _ = mutated(gpu_pod(5), standard(mode=mode), labels=TEAM)
    decision = validated(result, standard(mode=mode), labels=TEAM)
    assert decision.allowed
    if mode == "warn":
        assert any("more than the 4 per container" in w for w in decision.warnings)
    else:
        assert "more than the 4 per container" in decision.audit_annotations["violations"]


def _forged_team_without_mutate(policy):
    """/mutate fails open: a GPU pod that missed it reaches /validate with the tenant's own team label."""
    return validated(gpu_pod(1, labels={"gpugate.io/team": "someone-else"}), policy, labels=TEAM)


def _sidecar_without_void(policy):
    return validated(pod(container(limits={"nvidia.com/gpu": 1}), container("sidecar")), policy, labels=TEAM)


def _update_that_makes_a_gpu_holder(policy):
    stored = pod(container(), schedulerName="kai-scheduler")
    updated = copy.deepcopy(stored)
    updated["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    return validated(updated, policy, labels=TEAM, operation="UPDATE", old=stored)


@pytest.mark.parametrize("mode", ["enforce", "warn", "audit"])
@pytest.mark.parametrize(
    ("decide", "text"),
    [
        (_forged_team_without_mutate, 'lacks label gpugate.io/team=vision that policy "standard" requires'),
        (_sidecar_without_void, "NVIDIA_VISIBLE_DEVICES=void"),
        (_update_that_makes_a_gpu_holder, "an update cannot add the annotation gpu-fraction"),
    ],
    ids=["forged-team", "sidecar-without-void", "update-makes-a-gpu-holder"],
)
def test_what_mutate_would_have_written_and_new_gpu_holders_are_security_violations(mode, decide, text):
    decision = decide(standard(mode=mode))
    assert not decision.allowed and decision.code == 403, (mode, decision.warnings, decision.audit_annotations)
    assert text in decision.message


def test_a_pod_holding_its_fraction_before_the_update_is_not_refused():
    stored = pod(container(), schedulerName="kai-scheduler")
    stored["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    created, _ = mutated(stored, standard(), labels=TEAM)
    updated = copy.deepcopy(created)
    updated["metadata"]["annotations"]["gpu-fraction"] = "0.25"
    assert validated(updated, standard(), labels=TEAM, operation="UPDATE", old=created).allowed
