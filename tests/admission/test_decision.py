"""The decision's wording (webhook/admission/decision.py): warning packing at its limit, the denial message's
parts, the defaults of denied/errored, and how a warning names one pod template of a workload with several."""

from __future__ import annotations

import pytest

from tests.support import container, gpu_pod, request, standard, validated
from webhook.admission import Environment, denied, errored, fit, mutate, pack
from webhook.admission.decision import CONTINUED, WARNING_MAX


def test_fit_keeps_a_warning_whole_up_to_the_apiservers_limit():
    assert fit("x" * 256) == ["x" * 256]
    assert fit("w " * 60) == ["w " * 60]


def test_fit_splits_past_the_limit_at_spaces_and_drops_nothing():
    text = " ".join(f"word{i:03d}" for i in range(60))  # 479 characters
    parts = fit(text)
    assert len(parts) == 2 and all(len(p) <= WARNING_MAX for p in parts)
    assert parts[0] + " " + parts[1].removeprefix(CONTINUED) == text
    assert not any(p.endswith("…") for p in parts)


def test_fit_splits_a_single_word_longer_than_a_warning():
    parts = fit("p: " + "c" * 600)
    assert all(len(p) <= WARNING_MAX for p in parts)
    assert parts[0] == "p:" and "".join(p.removeprefix(CONTINUED) for p in parts[1:]) == "c" * 600


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # 3 + 50 + 2 + 65 == 120: exactly at the limit, still one warning
        (["a" * 50, "b" * 65], ["p: " + "a" * 50 + ", " + "b" * 65]),
        # 3 + 50 + 2 + 66 == 121: one over, two warnings, the second starting afresh
        (["a" * 50, "b" * 66], ["p: " + "a" * 50, "p: " + "b" * 66]),
        # a single item longer than the limit: one warning holding it whole, no empty one before it
        (["c" * 130], ["p: " + "c" * 130]),
        ([], []),
    ],
)
def test_pack_fills_each_warning_up_to_the_limit(items, expected):
    assert pack("p: ", items) == expected


def test_pack_groups_to_the_limit_it_is_given_and_never_cuts_an_item():
    assert pack("p: ", ["d" * 40], limit=20) == ["p: " + "d" * 40]
    assert pack("p: ", ["a" * 10, "d" * 40], limit=20) == ["p: " + "a" * 10, "p: " + "d" * 40]


def test_denied_and_errored_defaults():
    refusal = denied("no", warnings=["careful"])
    assert (refusal.allowed, refusal.code, refusal.reason, refusal.message) == (False, 403, "Forbidden", "no")
    assert refusal.warnings == ["careful"]
    failure = errored("broke")
    assert (failure.allowed, failure.code, failure.reason, failure.message) == (False, 500, "InternalError", "broke")


def test_a_denial_names_the_pod_namespace_policy_and_file_one_violation_a_line():
    policy = standard(limits={"maxPerContainer": 1})
    verdict = validated(gpu_pod(3, runtimeClassName="other"), policy)
    lines = verdict.message.split("\n")
    assert lines[0].startswith('Pod "p" in namespace "default" violates GPU policy "standard" (test.yaml')
    assert len(lines) >= 3 and all(line.startswith("- ") for line in lines[1:])


def test_a_denial_without_a_namespace_does_not_invent_one():
    policy = standard(limits={"maxPerContainer": 1})
    obj = gpu_pod(3, namespace="")
    verdict = validated(obj, policy)
    assert not verdict.allowed and " in namespace" not in verdict.message.split("\n")[0]


def test_unavailable_namespace_labels_say_to_retry():
    policy = standard()
    decision = mutate(request(gpu_pod(1)), Environment(policies=policy, namespace_labels=lambda ns: None))
    assert decision.code == 503
    assert decision.message.endswith(
        "policy selects or attributes by them; retry in a few seconds (see gpugate's logs)"
    )


def crd(kind: str, api_version: str, spec: dict) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "default"}, "spec": spec}


def gpu_template() -> dict:
    return {"spec": {"containers": [container("w", limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": 1})]}}


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        (
            crd(
                "RayCluster",
                "ray.io/v1",
                {
                    "headGroupSpec": {"template": {"spec": {"containers": [container("h")]}}},
                    "workerGroupSpecs": [{"template": gpu_template()}],
                },
            ),
            'RayCluster "w" workerGroupSpecs[0]: pods will get ',
        ),
        (
            crd(
                "JobSet",
                "jobset.x-k8s.io/v1alpha2",
                {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": gpu_template()}}}]},
            ),
            'JobSet "w" replicatedJobs[0]: pods will get ',
        ),
        (crd("Deployment", "apps/v1", {"selector": {}, "template": gpu_template()}), 'Deployment "w": pods will get '),
        (
            crd(
                "StormService",
                "orchestration.aibrix.ai/v1alpha1",
                {"template": {"spec": {"roles": [{"name": "decode", "template": gpu_template()}]}}},
            ),
            'StormService "w" roles[0]: pods will get ',
        ),
    ],
)
def test_a_warning_names_the_template_of_a_workload_with_several(obj, named):
    verdict = validated(obj, standard())
    assert any(w.startswith(named) for w in verdict.warnings), verdict.warnings


def test_a_cluster_scoped_workload_needs_no_namespace_labels():
    """A ClusterTrainingRuntime is in no namespace: there are no labels to read, so no 503 while the namespace
    cache is unreachable, and its templates are judged with none."""
    runtime = crd(
        "ClusterTrainingRuntime",
        "trainer.kubeflow.org/v1alpha1",
        {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": gpu_template()}}}]}
            }
        },
    )
    del runtime["metadata"]["namespace"]
    unreachable = Environment(policies=standard(), namespace_labels=lambda ns: None)
    review = request(runtime)
    review.pop("namespace", None)  # kube-apiserver sends none for a cluster-scoped object
    decision = mutate(review, unreachable)
    assert decision.allowed and decision.code == 200, decision.message
