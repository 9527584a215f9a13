"""Attribution: labels from namespace labels or the policy, forged values replaced, edits on UPDATE denied."""

from __future__ import annotations

import copy

import pytest

from tests.support import gpu_pod, mutated, pod, standard, validated
from webhook.policy.model import PolicySet

TEAM = {"default": {"team": "vision", "cost-center": "cc-7"}}
TWO = standard(
    attribution={
        "labels": {
            "gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"},
            "gpugate.io/cost-center": {"value": "cc-fixed"},
        }
    }
)


def test_labels_come_from_the_namespace_and_the_policy():
    result, decision = mutated(gpu_pod(1, labels={"app": "x"}), TWO, labels=TEAM)
    labels = result["metadata"]["labels"]
    assert labels["app"] == "x"
    assert labels["gpugate.io/team"] == "vision"
    assert labels["gpugate.io/cost-center"] == "cc-fixed"
    assert labels["gpugate.io/workload-kind"] == "Pod" and labels["gpugate.io/workload-name"] == "p"
    assert decision.warnings == []


def test_a_missing_namespace_label_falls_back_to_the_default():
    result, _ = mutated(gpu_pod(1), TWO, labels={"default": {}})
    assert result["metadata"]["labels"]["gpugate.io/team"] == "unassigned"


def test_forged_labels_are_replaced_on_create_with_a_warning():
    result, decision = mutated(gpu_pod(1, labels={"gpugate.io/team": "someone-else"}), TWO, labels=TEAM)
    assert result["metadata"]["labels"]["gpugate.io/team"] == "vision"
    assert decision.warnings == [
        "label gpugate.io/team=someone-else replaced with vision: gpugate sets attribution labels"
    ]


def test_forged_labels_that_skipped_mutation_are_denied_on_create():
    verdict = validated(
        gpu_pod(1, labels={"gpugate.io/team": "someone-else"}, runtimeClassName="nvidia"), TWO, labels=TEAM
    )
    assert not verdict.allowed and "lacks label gpugate.io/team=vision" in verdict.message


@pytest.mark.parametrize(
    "edit",
    [
        lambda labels: labels.__setitem__("gpugate.io/team", "someone-else"),
        lambda labels: labels.pop("gpugate.io/team"),
        lambda labels: labels.__setitem__("gpugate.io/workload-name", "other"),
    ],
)
def test_editing_attribution_labels_on_update_is_denied(edit):
    created, _ = mutated(gpu_pod(1), TWO, labels=TEAM)
    updated = copy.deepcopy(created)
    edit(updated["metadata"]["labels"])
    verdict = validated(updated, TWO, labels=TEAM, operation="UPDATE", old=created)
    assert not verdict.allowed
    assert "is set by gpugate and cannot be edited" in verdict.message


def test_other_label_edits_on_update_are_allowed():
    created, _ = mutated(gpu_pod(1), TWO, labels=TEAM)
    updated = copy.deepcopy(created)
    updated["metadata"]["labels"]["app"] = "renamed"
    assert validated(updated, TWO, labels=TEAM, operation="UPDATE", old=created).allowed


def test_update_of_a_pod_created_before_gpugate_is_judged_only_on_what_changed():
    old = gpu_pod(1)  # no runtime class, no labels: created before the policy existed
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"app": "x"}
    assert validated(new, TWO, labels=TEAM, operation="UPDATE", old=old).allowed


@pytest.mark.parametrize(
    ("meta", "kind", "name"),
    [
        (
            {
                "name": "web-7d9f8-abcde",
                "labels": {"pod-template-hash": "7d9f8"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8", "uid": "u", "controller": True}
                ],
            },
            "Deployment",
            "web",
        ),
        (
            {
                "name": "train-xyz",
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}
                ],
            },
            "Job",
            "train",
        ),
        (
            {
                "name": "nightly-29000000-x",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "nightly-29000000",
                        "uid": "u",
                        "controller": True,
                    }
                ],
            },
            "CronJob",
            "nightly",
        ),
        (
            {
                "name": "db-0",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": True}
                ],
            },
            "StatefulSet",
            "db",
        ),
        ({"generateName": "adhoc-"}, "Pod", "adhoc"),
    ],
)
def test_the_owning_workload_is_resolved(meta, kind, name):
    obj = gpu_pod(1)
    obj["metadata"] = {**meta, "namespace": "default"}
    result, _ = mutated(obj, TWO, labels=TEAM)
    assert result["metadata"]["labels"]["gpugate.io/workload-kind"] == kind
    assert result["metadata"]["labels"]["gpugate.io/workload-name"] == name
    assert result["metadata"]["annotations"]["gpugate.io/workload"] == f"{kind}/{name}"
    assert validated(result, TWO, labels=TEAM).allowed


def test_long_workload_names_are_cut_to_valid_label_values():
    obj = gpu_pod(1, name="x" * 100)
    result, _ = mutated(obj, TWO, labels=TEAM)
    value = result["metadata"]["labels"]["gpugate.io/workload-name"]
    assert len(value) <= 63 and value.startswith("x" * 40)


def test_no_attribution_without_a_policy_and_none_on_cpu_pods():
    assert mutated(gpu_pod(1), PolicySet())[1].patch is None
    assert mutated(pod(), TWO, labels=TEAM)[1].patch is None


def test_a_generated_name_does_not_change_the_workload_between_mutate_and_validate():
    obj = gpu_pod(1)
    obj["metadata"] = {"generateName": "adhoc-", "namespace": "default"}
    result, _ = mutated(obj, TWO, labels=TEAM)
    result["metadata"]["name"] = "adhoc-x7k2p"  # set by the apiserver between the two calls
    assert validated(result, TWO, labels=TEAM).allowed


def test_an_empty_namespace_label_falls_back_to_the_default_with_a_warning():
    result, decision = mutated(gpu_pod(1), TWO, labels={"default": {"team": ""}})
    assert result["metadata"]["labels"]["gpugate.io/team"] == "unassigned"
    assert decision.warnings == ['namespace label team="" is unusable, so gpugate.io/team=unassigned']


@pytest.mark.parametrize("kind", ["Foo Bar!", "x" * 100, "-lead", "Kind/With/Slashes"])
def test_a_forged_owner_kind_becomes_a_valid_label_value(kind):
    """An ownerReference is the tenant's to write; its kind must not become an invalid label value (which
    the apiserver would refuse after gpugate's patch, failing the create with gpugate's name on it)."""
    from webhook.policy.labels import is_label_value

    obj = gpu_pod(1)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "x/v1", "kind": kind, "name": "n", "uid": "u", "controller": True}
    ]
    result, decision = mutated(obj, TWO, labels=TEAM)
    assert decision.allowed
    assert is_label_value(result["metadata"]["labels"]["gpugate.io/workload-kind"])
