"""GPU isolation per container: a container of an NVIDIA GPU pod that requests no GPU (a sidecar, an init
container) gets NVIDIA_VISIBLE_DEVICES=void, so the pod-wide NVIDIA runtime and a CUDA image's own
NVIDIA_VISIBLE_DEVICES=all show it no GPU; a policy may name containers that share the pod's GPUs."""

from __future__ import annotations

import pytest

from tests.support import (
    apply,
    container,
    deployment,
    env,
    gpu_pod,
    mutated,
    pod,
    request,
    schema_check,
    standard,
    validated,
)
from webhook.admission import mutate

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


def _debugged(created, *names, env=None):
    added = [{"name": n, "image": "busybox", **({"env": env} if env else {})} for n in names]
    return {**created, "spec": {**created["spec"], "ephemeralContainers": added}}


def _debug(obj, old, policy_set):
    req = request(obj, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")
    decision = mutate(req, env(policy_set, TEAM))
    return apply(obj, decision.patch), decision


def test_an_ephemeral_container_added_to_a_gpu_pod_sees_no_gpu():
    created, _ = mutated(gpu_pod(1), standard(), labels=TEAM)
    debugged = _debugged(created, "debugger")
    result, decision = _debug(debugged, created, standard())
    assert decision.allowed
    assert _env(result, "ephemeralContainers", 0) == [VOID]
    # The apiserver keeps only spec.ephemeralContainers of this update: the patch changes nothing else.
    assert decision.patch and all(op["path"].startswith("/spec/ephemeralContainers/") for op in decision.patch)
    schema_check(result)
    verdict = validated(
        result, standard(), labels=TEAM, operation="UPDATE", old=created, sub_resource="ephemeralcontainers"
    )
    assert verdict.allowed, verdict.message


def test_only_the_ephemeral_containers_an_update_adds_get_void():
    """The apiserver refuses any change to an ephemeral container added before (ValidatePodEphemeralContainersUpdate)."""
    created, _ = mutated(gpu_pod(1), standard(), labels=TEAM)
    first = _debugged(created, "first")  # added while gpugate's mutating webhook did not see it
    second = _debugged(first, "first", "second")
    result, _ = _debug(second, first, standard())
    assert "env" not in result["spec"]["ephemeralContainers"][0]
    assert _env(result, "ephemeralContainers", 1) == [VOID]


def test_an_ephemeral_container_that_missed_the_mutation_is_refused():
    created, _ = mutated(gpu_pod(1), standard(), labels=TEAM)
    debugged = _debugged(created, "debugger")
    verdict = validated(
        debugged, standard(), labels=TEAM, operation="UPDATE", old=created, sub_resource="ephemeralcontainers"
    )
    assert not verdict.allowed
    assert 'lacks ephemeral container "debugger": NVIDIA_VISIBLE_DEVICES=void' in verdict.message


def test_a_shared_gpu_container_name_applies_to_ephemeral_containers_too():
    policy = standard(security={"sharedGPUContainers": ["gpu-debug"]})
    created, _ = mutated(gpu_pod(1), policy, labels=TEAM)
    result, decision = _debug(_debugged(created, "gpu-debug"), created, policy)
    assert decision.allowed and not decision.patch
    assert "env" not in result["spec"]["ephemeralContainers"][0]


def test_ephemeral_containers_of_pods_without_gpus_are_not_changed():
    created, _ = mutated(pod(container("web")), standard(), labels=TEAM)
    result, decision = _debug(_debugged(created, "debugger"), created, standard())
    assert decision.allowed and not decision.patch


# ---- envFrom that can set NVIDIA_VISIBLE_DEVICES ------------------------------------------------------------


def _env_from(prefix=None, kind="configMapRef"):
    source = {kind: {"name": "settings"}}
    if prefix is not None:
        source["prefix"] = prefix
    return [source]


@pytest.mark.parametrize(
    ("prefix", "refused"),
    [(None, True), ("", True), ("NV", True), ("NVIDIA_", True), ("NVIDIA_VISIBLE_", True), ("APP_", False)],
    ids=["none", "empty", "NV", "NVIDIA_", "NVIDIA_VISIBLE_", "APP_"],
)
@pytest.mark.parametrize("kind", ["configMapRef", "secretRef"])
def test_env_from_that_can_set_nvidia_variables_in_a_gpu_container_is_refused(prefix, refused, kind):
    obj = pod(container("trainer", limits={"nvidia.com/gpu": 1}, envFrom=_env_from(prefix, kind)))
    result, _ = mutated(obj, standard(), labels=TEAM)
    decision = validated(result, standard(), labels=TEAM)
    assert decision.allowed is not refused
    if refused:
        assert f'spec.containers[0].envFrom[0]: container "trainer": takes every key of {kind} "settings"' in (
            decision.message
        )
        assert "NVIDIA_VISIBLE_DEVICES" in decision.message and "visibleDevicesEnvFrom: allow" in decision.message
        assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in decision.message


def test_a_sidecar_given_void_still_meets_the_toolkit_s_other_device_variables():
    """The void gpugate gives a sidecar settles NVIDIA_VISIBLE_DEVICES (an env entry wins over envFrom), not the
    toolkit's other device variables: its envFrom can still set NVIDIA_IMEX_CHANNELS, which the toolkit reads
    whatever NVIDIA_VISIBLE_DEVICES says, in a pod that runs under the NVIDIA runtime. So it is refused, naming
    those variables (it was allowed before); a prefix that cannot make NVIDIA_ names is fine."""
    policy = standard(security={"sharedGPUContainers": ["profiler"]})
    obj = pod(
        container("trainer", limits={"nvidia.com/gpu": 1}),
        container("log-shipper", envFrom=_env_from()),
        container("profiler", envFrom=_env_from()),
        container("metrics", envFrom=_env_from("APP_")),
    )
    result, _ = mutated(obj, policy, labels=TEAM)
    assert VOID in _env(result, "containers", 1)
    decision = validated(result, policy, labels=TEAM)
    assert not decision.allowed
    assert 'container "profiler": takes every key' in decision.message
    assert "exposes GPUs the pod did not request" in decision.message
    shipper = 'spec.containers[1].envFrom[0]: container "log-shipper": takes every key of configMapRef "settings"'
    assert shipper in decision.message
    assert "NVIDIA_IMEX_CHANNELS" in decision.message and "NVIDIA_VISIBLE_DEVICES=void does not cover them" in (
        decision.message
    )
    assert 'container "metrics"' not in decision.message


def test_a_sidecar_whose_env_names_every_device_variable_or_whose_policy_allows_them_is_allowed():
    """env entries win over envFrom: a sidecar that sets each device variable itself (to nothing) leaves envFrom
    none to set; a policy that opts in to every one of them (spec.security.deviceVariables) has none to guard."""
    from webhook.policy.vendors import NVIDIA_DEVICE_VARIABLES

    quiet = [
        {"name": name, "value": "void" if trigger is None else ""} for name, trigger in NVIDIA_DEVICE_VARIABLES.items()
    ]
    obj = pod(
        container("trainer", limits={"nvidia.com/gpu": 1}), container("log-shipper", env=quiet, envFrom=_env_from())
    )
    result, _ = mutated(obj, standard(), labels=TEAM)
    decision = validated(result, standard(), labels=TEAM)
    assert decision.allowed, decision.message
    opted = standard(security={"deviceVariables": list(NVIDIA_DEVICE_VARIABLES)})
    obj = pod(container("trainer", limits={"nvidia.com/gpu": 1}), container("log-shipper", envFrom=_env_from()))
    result, _ = mutated(obj, opted, labels=TEAM)
    decision = validated(result, opted, labels=TEAM)
    assert decision.allowed, decision.message


def test_env_from_in_pods_without_gpus_or_nvidia_gpus_and_the_policy_exception_are_allowed():
    cpu = pod(container("web", envFrom=_env_from()))
    assert validated(mutated(cpu, standard(), labels=TEAM)[0], standard(), labels=TEAM).allowed
    amd = pod(container("rocm", limits={"amd.com/gpu": 1}, envFrom=_env_from()))
    decision = validated(mutated(amd, standard(), labels=TEAM)[0], standard(), labels=TEAM)
    assert "envFrom" not in decision.message, decision.message
    allowing = standard(security={"visibleDevicesEnvFrom": "allow"})
    gpu = pod(container("trainer", limits={"nvidia.com/gpu": 1}, envFrom=_env_from()))
    assert validated(mutated(gpu, allowing, labels=TEAM)[0], allowing, labels=TEAM).allowed


def test_env_from_in_a_debug_container_of_a_gpu_pod_is_refused_despite_its_void():
    created, _ = mutated(gpu_pod(1), standard(), labels=TEAM)
    debugged = {
        **created,
        "spec": {
            **created["spec"],
            "ephemeralContainers": [{"name": "dbg", "image": "busybox", "envFrom": _env_from()}],
        },
    }
    result, _ = _debug(debugged, created, standard())
    assert VOID in _env(result, "ephemeralContainers", 0)
    verdict = validated(
        result, standard(), labels=TEAM, operation="UPDATE", old=created, sub_resource="ephemeralcontainers"
    )
    assert not verdict.allowed
    assert 'spec.ephemeralContainers[0].envFrom[0]: ephemeral container "dbg": takes every key' in verdict.message
    assert "NVIDIA_IMEX_CHANNELS" in verdict.message


def test_a_workload_sidecar_with_env_from_is_refused_for_the_variables_its_void_will_not_cover():
    """Templates are checked as written (not mutated by default): the sidecar has no void yet, every pod made from
    it gets one at /mutate, which settles NVIDIA_VISIBLE_DEVICES but not the toolkit's other device variables."""
    spec = pod(
        container("trainer", limits={"nvidia.com/gpu": 1}, envFrom=_env_from()),
        container("log-shipper", envFrom=_env_from()),
    )["spec"]
    decision = validated(deployment(spec), standard(), labels=TEAM)
    assert 'spec.template.spec.containers[0].envFrom[0]: container "trainer"' in decision.message
    sidecar = decision.message.split('container "log-shipper": takes', 1)
    assert len(sidecar) == 2 and "NVIDIA_VISIBLE_DEVICES=void does not cover them" in sidecar[1]
