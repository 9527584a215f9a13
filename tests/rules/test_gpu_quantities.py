"""GPU quantities (webhook/rules/gpu_quantities.py): the checks the apiserver runs only after the mutating
webhooks, in the apiserver's words, and in bounded work for hostile values."""

from __future__ import annotations

import sys

import pytest

from tests.budget import python_bounded, run_bounded
from tests.support import container, gpu_pod, mutated, pod, policy, standard
from webhook.policy.keys import LEGACY_API_VERSION
from webhook.policy.model import BUILTIN, PolicySet

NO_POLICY = PolicySet()


HOSTILE = {
    # quantity -> words of the denial
    "100e4998": 'Invalid value: "100e4998": must be less than or equal to 65536',
    "1e999999999": 'Invalid value: "1e999999999": must be less than or equal to 65536',
    "-1e999999999": 'Invalid value: "-1e999999999": must be greater than or equal to 0',
    "1e-999999999": 'Invalid value: "1e-999999999": must be an integer',
    "9" * 5000: "must be less than or equal to 65536",
    "0." + "0" * 5000 + "1": "must be an integer",
    "1e4294967296": 'Invalid value: "1e4294967296": is not a quantity',
    "70000": 'Invalid value: "70000": must be less than or equal to 65536',
}


def test_hostile_quantities_are_denied_in_bounded_cpu_time():
    """Each is a denial with the apiserver's words; the child gets 20 s of CPU for all of them together
    (old code spent it on the first astronomically large number and was killed)."""
    code = f"""
import json
from tests.support import gpu_pod, mutated, standard, validated
out = {{}}
for text in {list(HOSTILE)!r}:
    _, decision = mutated(gpu_pod(text), standard(), check_schema=False)
    out[text] = [decision.allowed, decision.message or ""]
print(json.dumps(out))
"""
    results = python_bounded(code, cpu_seconds=20)
    for text, words in HOSTILE.items():
        allowed, message = results[text]
        assert not allowed, text[:40]
        assert words in message, (text[:40], message)
        assert len(message) < 2000, "the quantity is not echoed back in full"


def test_check_denies_a_manifest_with_a_huge_exponent_in_bounded_cpu_time(tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: c\n    image: x\n"
        "    resources: {limits: {nvidia.com/gpu: '1e999999999'}}\n"
        "  - name: d\n    image: x\n    resources: {limits: {nvidia.com/gpu: '" + "9" * 5000 + "'}}\n"
    )
    proc = run_bounded(
        [sys.executable, "-m", "webhook.cli", "check", "--policies", "policies", "-f", str(manifest)], cpu_seconds=20
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert 'Invalid value: "1e999999999": must be less than or equal to 65536' in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


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
    own = policy("fpga", gpuResources=["example.com/*"], api_version=LEGACY_API_VERSION)  # the 0.1 form
    _, decision = mutated(pod(container(limits={"example.com/fpga": "500m"})), own)
    assert not decision.allowed and "example.com/fpga" in decision.message
