"""GPU quantities and placement: the checks the apiserver runs only after the mutating webhooks."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.support import container, gpu_pod, mutated, pod, policy, standard
from webhook.pods.quantity import QuantityError, parse_quantity
from webhook.policy.model import BUILTIN, PolicySet

NO_POLICY = PolicySet()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("1000m", 1),
        ("2e0", 2),
        ("0.5", 0.5),
        ("500m", 0.5),
        ("1Ki", 1024),
        ("+2", 2),
        ("-1", -1),
        ("1E3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("2k", 2000),
        ("1Mi", 1024**2),
        (".5", 0.5),
        (3, 3),
    ],
)
def test_quantities_parse_exactly_as_kubernetes_does(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", " 1", "1 ", "1\n", "e3", ".", "1KB", "1ki", True, None, [1]])
def test_non_quantities_are_refused(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


DENIED = [
    # (limits, requests, expected path, expected words)
    (
        {"nvidia.com/gpu": "500m"},
        None,
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        'Invalid value: "500m": must be an integer',
    ),
    ({"nvidia.com/gpu": "0.5"}, None, "spec.containers[0].resources.limits[nvidia.com/gpu]", "must be an integer"),
    ({"nvidia.com/gpu": "1500m"}, None, "spec.containers[0].resources.limits[nvidia.com/gpu]", "must be an integer"),
    (
        {"nvidia.com/gpu": "-1"},
        None,
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        "must be greater than or equal to 0",
    ),
    (
        {"nvidia.com/gpu": "2"},
        {"nvidia.com/gpu": "1"},
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "must be equal to nvidia.com/gpu limit of 2",
    ),
    (
        None,
        {"nvidia.com/gpu": "1"},
        "spec.containers[0].resources.limits",
        "Limit must be set for non overcommitable resources",
    ),
    ({"amd.com/gpu": "0.25"}, None, "spec.containers[0].resources.limits[amd.com/gpu]", "must be an integer"),
    (
        {"nvidia.com/mig-1g.10gb": "1.5"},
        None,
        "spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]",
        "must be an integer",
    ),
    (
        {"gpu.intel.com/i915": "1", "cpu": "1"},
        {"gpu.intel.com/i915": "2"},
        "spec.containers[0].resources.requests[gpu.intel.com/i915]",
        "must be equal to gpu.intel.com/i915 limit of 1",
    ),
    ({"nvidia.com/gpu": "lots"}, None, "spec.containers[0].resources.limits[nvidia.com/gpu]", "is not a quantity"),
]


@pytest.mark.parametrize(("limits", "requests", "path", "words"), DENIED)
@pytest.mark.parametrize("policies", [NO_POLICY, standard()], ids=["no-policy", "policy"])
def test_wrong_gpu_quantities_are_denied_by_mutate(limits, requests, path, words, policies):
    obj = pod(container("trainer", limits=limits, requests=requests))
    _, decision = mutated(obj, policies)
    assert not decision.allowed
    assert decision.code == 403
    assert f'{path}: container "trainer": ' in decision.message
    assert words in decision.message
    assert decision.patch is None


def test_fraction_message_says_how_to_use_part_of_a_gpu():
    _, decision = mutated(gpu_pod("500m"), standard())
    assert "nvidia.com/gpu.shared" in decision.message and "MIG" in decision.message
    assert 'policy "standard"' in decision.message


def test_built_in_checks_run_whatever_the_mode():
    _, decision = mutated(gpu_pod("0.5"), standard(mode="audit"))
    assert not decision.allowed and "must be an integer" in decision.message


def test_defaulted_request_is_not_reported_twice():
    _, decision = mutated(gpu_pod("500m"), NO_POLICY)
    assert decision.message.count("must be an integer") == 1
    assert f'policy "{BUILTIN.name}"' in decision.message


def test_init_container_quantities_are_checked():
    obj = pod(container(), init=[container("fetch", limits={"nvidia.com/gpu": "250m"})])
    _, decision = mutated(obj, NO_POLICY)
    assert 'spec.initContainers[0].resources.limits[nvidia.com/gpu]: init container "fetch"' in decision.message


@pytest.mark.parametrize(
    ("limits", "requests"),
    [
        ({"nvidia.com/gpu": "1"}, None),
        ({"nvidia.com/gpu": "1000m"}, None),
        ({"nvidia.com/gpu": "2e0"}, {"nvidia.com/gpu": "2"}),
        ({"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}),
        ({"cpu": "500m", "memory": "1.5Gi"}, {"cpu": "250m"}),
        ({"example.com/fpga": "500m"}, None),  # not a GPU under the default gpuResources: not gpugate's business
    ],
)
def test_whole_gpu_quantities_pass(limits, requests):
    _, decision = mutated(pod(container(limits=limits, requests=requests)), NO_POLICY)
    assert decision.allowed


def test_policy_gpu_resources_decide_what_is_checked():
    own = policy("fpga", gpuResources=["example.com/*"])
    _, decision = mutated(pod(container(limits={"example.com/fpga": "500m"})), own)
    assert not decision.allowed and "example.com/fpga" in decision.message


def test_gpus_in_pod_level_resources_are_refused():
    obj = gpu_pod(1, resources={"limits": {"nvidia.com/gpu": "1"}})
    _, decision = mutated(obj, NO_POLICY, check_schema=False)
    assert not decision.allowed
    assert "spec.resources.limits[nvidia.com/gpu]" in decision.message
    assert "extended resources are not allowed in pod-level resources" in decision.message


def test_gpus_in_ephemeral_containers_are_refused():
    obj = gpu_pod(
        1, ephemeralContainers=[{"name": "dbg", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    )
    _, decision = mutated(obj, NO_POLICY, check_schema=False)
    assert not decision.allowed
    assert 'spec.ephemeralContainers[0].resources: ephemeral container "dbg": Forbidden' in decision.message
