"""NVIDIA device variables besides NVIDIA_VISIBLE_DEVICES (webhook/rules/device_variables.py): IMEX channels, MIG
config/monitor, NVSwitch/MOFED/GDRCOPY/GDS, refused in env of every pod in every mode, one opt-in per feature; and
envFrom with an NVIDIA_ prefix in pods without GPUs (webhook/rules/visible_devices.py)."""

from __future__ import annotations

import pytest

from tests.support import container, gpu_pod, mutated, pod, standard, validated
from webhook.policy.model import PolicySet
from webhook.policy.vendors import NVIDIA_DEVICE_VARIABLES

HOSTILE = [
    ("NVIDIA_IMEX_CHANNELS", "0"),
    ("NVIDIA_IMEX_CHANNELS", "all"),
    ("NVIDIA_MIG_CONFIG_DEVICES", "all"),
    ("NVIDIA_MIG_MONITOR_DEVICES", "0"),
    ("NVIDIA_GDS", "enabled"),
    ("NVIDIA_MOFED", "enabled"),
    ("NVIDIA_GDRCOPY", "enabled"),
    ("NVIDIA_NVSWITCH", "enabled"),
]
HARMLESS = [
    ("NVIDIA_IMEX_CHANNELS", "void"),
    ("NVIDIA_IMEX_CHANNELS", "none"),
    ("NVIDIA_MIG_CONFIG_DEVICES", ""),
    ("NVIDIA_GDS", "disabled"),  # the toolkit acts on "enabled" only (internal/modifier/cdi.go)
    ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
]


def with_env(obj, name, value=None, **extra):
    entry = {"name": name, **({"value": value} if value is not None else {}), **extra}
    obj["spec"]["containers"][0]["env"] = [entry]
    return obj


def test_every_variable_the_toolkit_reads_for_devices_is_covered():
    assert {name for name, _ in HOSTILE} == set(NVIDIA_DEVICE_VARIABLES)


@pytest.mark.parametrize(("name", "value"), HOSTILE)
@pytest.mark.parametrize("gpus", [True, False], ids=["gpu-pod", "cpu-pod"])
@pytest.mark.parametrize("mode", ["enforce", "warn", "audit", None])
def test_a_device_variable_is_refused_in_every_pod_and_mode(name, value, gpus, mode):
    policies = standard(mode=mode) if mode else PolicySet()
    obj = with_env(gpu_pod(1) if gpus else pod(container("a")), name, value)
    verdict = validated(mutated(obj, policies)[0], policies)
    assert not verdict.allowed
    who = 'container "main"' if gpus else 'container "a"'
    assert f"spec.containers[0].env[0]: {who}: sets {name}={value}, which makes the NVIDIA Container Toolkit" in (
        verdict.message
    )
    assert f"spec.security.deviceVariables: [{name}]" in verdict.message


@pytest.mark.parametrize(("name", "value"), HARMLESS)
def test_values_that_hand_over_nothing_pass(name, value):
    policies = standard()
    obj = with_env(gpu_pod(1), name, value)
    assert validated(mutated(obj, policies)[0], policies).allowed


def test_a_value_from_a_reference_counts_as_set():
    obj = with_env(pod(container("a")), "NVIDIA_GDS", valueFrom={"configMapKeyRef": {"name": "c", "key": "gds"}})
    verdict = validated(obj, PolicySet())
    assert not verdict.allowed and "sets NVIDIA_GDS=<from a reference>" in verdict.message


def test_each_feature_has_its_own_opt_in():
    gds = standard(security={"deviceVariables": ["NVIDIA_GDS"]})
    assert validated(mutated(with_env(gpu_pod(1), "NVIDIA_GDS", "enabled"), gds)[0], gds).allowed
    verdict = validated(mutated(with_env(gpu_pod(1), "NVIDIA_MOFED", "enabled"), gds)[0], gds)
    assert not verdict.allowed and "NVIDIA_MOFED" in verdict.message


def test_a_policy_naming_an_unknown_variable_does_not_load():
    with pytest.raises(AssertionError, match=r"spec\.security\.deviceVariables: unknown variable\(s\) NVIDIA_GPU"):
        standard(security={"deviceVariables": ["NVIDIA_GPU"]})


@pytest.mark.parametrize("prefix", ["NVIDIA_", "NVIDIA_VISIBLE_", "NV"])
@pytest.mark.parametrize("policies", [PolicySet(), standard(mode="audit")], ids=["no-policy", "audit"])
def test_env_from_with_an_nvidia_prefix_is_refused_in_a_pod_without_gpus(prefix, policies):
    obj = pod(container("a", envFrom=[{"prefix": prefix, "configMapRef": {"name": "devices"}}]))
    verdict = validated(obj, policies)
    assert not verdict.allowed
    assert (
        f'spec.containers[0].envFrom[0]: container "a": takes keys of a ConfigMap or Secret as variables with the '
        f'prefix "{prefix}"'
    ) in verdict.message


@pytest.mark.parametrize("source", [{"configMapRef": {"name": "app"}}, {"prefix": "APP_", "secretRef": {"name": "s"}}])
def test_env_from_of_a_cpu_pod_without_an_nvidia_prefix_passes(source):
    assert validated(pod(container("a", envFrom=[source])), PolicySet()).allowed


def test_env_from_with_an_nvidia_prefix_is_allowed_where_the_policy_says_so():
    trusted = standard(security={"visibleDevicesEnvFrom": "allow"})
    obj = pod(container("a", envFrom=[{"prefix": "NVIDIA_", "configMapRef": {"name": "devices"}}]))
    assert validated(obj, trusted).allowed
