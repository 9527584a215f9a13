"""Privileged containers of GPU pods: judged at /validate on the final object, refused in every mode unless
the policy's spec.security.privilegedGPUContainers allows them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import container, deployment, gpu_pod, mutated, pod, standard, validated
from webhook.policy.model import PolicySet

PRIVILEGED = {"privileged": True}


def privileged(obj: dict[str, Any], fld: str = "containers", index: int = 0) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"][fld][index]["securityContext"] = dict(PRIVILEGED)
    return out


def deployment_of(p: dict[str, Any]) -> dict[str, Any]:
    return deployment(p["spec"], name="w")


def final(obj: dict[str, Any], policy: PolicySet) -> dict[str, Any]:
    """The object as /mutate leaves it: what the validating call sees when no other webhook changes it."""
    result, decision = mutated(obj, policy)
    assert decision.allowed, decision.message
    return result


def test_a_privileged_container_of_a_gpu_pod_is_refused_naming_it_and_the_fix():
    policy = standard()
    verdict = validated(final(privileged(gpu_pod(1)), policy), policy)
    assert not verdict.allowed and verdict.code == 403
    assert (
        'spec.containers[0].securityContext.privileged: container "main": is privileged in a GPU pod, so it sees '
        "every GPU of its node, not only the ones the pod requested; remove securityContext.privileged"
    ) in verdict.message
    assert "spec.security.privilegedGPUContainers: allow" in verdict.message


def test_every_kind_of_container_counts_and_each_is_named():
    policy = standard()
    obj = pod(
        container("train", limits={"nvidia.com/gpu": 1}),
        container("sidecar"),
        init=[container("setup")],
    )
    obj["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    for fld, index in (("containers", 1), ("initContainers", 0), ("ephemeralContainers", 0)):
        obj = privileged(obj, fld, index)
    verdict = validated(obj, policy)
    assert not verdict.allowed
    for where, who in (
        ("spec.containers[1]", 'container "sidecar"'),
        ("spec.initContainers[0]", 'init container "setup"'),
        ("spec.ephemeralContainers[0]", 'ephemeral container "debugger"'),
    ):
        assert f"{where}.securityContext.privileged: {who}: is privileged in a GPU pod" in verdict.message
    assert "spec.containers[0].securityContext" not in verdict.message


def test_unprivileged_and_explicitly_unprivileged_gpu_containers_pass():
    policy = standard()
    assert validated(final(gpu_pod(1), policy), policy).allowed
    obj = gpu_pod(1)
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": False, "capabilities": {"add": ["SYS_PTRACE"]}}
    assert validated(final(obj, policy), policy).allowed


def test_pods_without_gpus_are_left_to_pod_security_admission():
    policy = standard()
    assert validated(privileged(pod(container())), policy).allowed


@pytest.mark.parametrize("mode", ["enforce", "warn", "audit"])
def test_refused_in_every_mode_unless_the_policy_allows_it(mode):
    obj = privileged(gpu_pod(1))
    assert not validated(final(obj, standard(mode=mode)), standard(mode=mode)).allowed
    allowing = standard(mode=mode, security={"privilegedGPUContainers": "allow"})
    assert validated(final(obj, allowing), allowing).allowed


def test_without_a_governing_policy_it_is_refused_too():
    verdict = validated(privileged(gpu_pod(1)), PolicySet())
    assert not verdict.allowed
    assert "is privileged in a GPU pod" in verdict.message


def test_the_final_object_is_judged_not_what_mutate_saw():
    """Another mutating webhook that runs after gpugate's makes the container privileged: /mutate saw nothing
    wrong (it leaves the verdict to /validate), /validate refuses the final object."""
    policy = standard()
    result, decision = mutated(gpu_pod(1), policy)
    assert decision.allowed
    assert not validated(privileged(result), policy).allowed


def test_on_update_a_change_that_makes_a_template_privileged_is_refused():
    policy = standard(mutateTemplates=True)
    before = final(deployment_of(gpu_pod(1)), policy)
    after = copy.deepcopy(before)
    after["spec"]["template"]["spec"]["containers"][0]["securityContext"] = dict(PRIVILEGED)
    verdict = validated(after, policy, operation="UPDATE", old=before)
    assert not verdict.allowed
    assert 'spec.template.spec.containers[0].securityContext.privileged: container "main"' in verdict.message


def test_on_update_a_pod_that_was_privileged_before_is_not_refused_again():
    """A pod stored before this rule (or under an allowing policy) can still shed a finalizer or a label."""
    policy = standard()
    stored = final(privileged(gpu_pod(1)), standard(security={"privilegedGPUContainers": "allow"}))
    updated = copy.deepcopy(stored)
    updated["metadata"].setdefault("labels", {})["app"] = "relabelled"
    assert validated(updated, policy, operation="UPDATE", old=stored).allowed


@pytest.mark.parametrize("cap", ["SYS_ADMIN", "CAP_SYS_ADMIN", "sys_admin", "Cap_Sys_Admin", "ALL", "all"])
@pytest.mark.parametrize("mode", ["enforce", "audit"])
def test_sys_admin_or_all_in_any_spelling_counts_as_privileged(cap, mode):
    policy = standard(mode=mode)
    obj = gpu_pod(1)
    obj["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_ADMIN", cap]}}
    verdict = validated(final(obj, policy), policy)
    assert not verdict.allowed
    assert (
        f'spec.containers[0].securityContext.capabilities.add[1]: container "main": adds the capability {cap} in a '
        "GPU pod: with CAP_SYS_ADMIN the NVIDIA Container Toolkit treats it as privileged"
    ) in verdict.message
    allowing = standard(mode=mode, security={"privilegedGPUContainers": "allow"})
    assert validated(final(obj, allowing), allowing).allowed


def test_capabilities_of_a_pod_without_gpus_are_left_to_pod_security_admission():
    obj = pod(container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}))
    assert validated(obj, standard()).allowed
