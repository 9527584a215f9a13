"""Attribution nobody but gpugate can rewrite or dodge: labels added on UPDATE, status updates, label keys that
kube-state-metrics exports under an attribution label's name, and workloads that select on attribution labels.
Each is denied in every mode (a security violation)."""

from __future__ import annotations

import copy

import pytest

from tests.support import apply, container, env, gpu_pod, mutated, policy, request, standard, validated
from webhook.admission import mutate, validate
from webhook.policy.keys import API_VERSION
from webhook.policy.labels import metric_label_name
from webhook.policy.loader import parse_policy
from webhook.policy.reader import PolicyIssue

TEAM = {"default": {"team": "vision", "cost-center": "cc-7"}}
TWO = {
    "labels": {
        "gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"},
        "gpugate.io/cost-center": {"fromNamespaceLabel": "cost-center", "default": "none"},
    }
}
MODES = ["enforce", "warn", "audit"]


def governed(**spec):
    return standard(attribution=TWO, **spec)


# ------------------------------------------------------------------------- kube-state-metrics' label names


@pytest.mark.parametrize(
    ("key", "name"),
    [
        # Printed by kube-state-metrics' own regexps and strings.ToLower (internal/store/utils.go), run in Go.
        ("gpugate.io/team", "gpugate_io_team"),
        ("gpugate.io/TEAM", "gpugate_io_team"),
        ("gpugate-io/team", "gpugate_io_team"),
        ("gpugate.io/Team", "gpugate_io_team"),
        ("gpugate_io/team", "gpugate_io_team"),
        ("gpugate.io/costCenter", "gpugate_io_cost_center"),
        ("gpugate.io/teAM", "gpugate_io_te_am"),
        ("x.y/aBCdE", "x_y_a_bcd_e"),
        ("a1B2C", "a1_b2_c"),
        ("ABc", "abc"),
    ],
)
def test_metric_label_names_are_kube_state_metrics_own(key, name):
    assert metric_label_name(key) == name


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("key", "ours"),
    [
        ("gpugate.io/TEAM", "gpugate.io/team"),
        ("gpugate-io/team", "gpugate.io/team"),
        ("gpugate-io/cost-center", "gpugate.io/cost-center"),
        ("gpugate.io/costCenter", "gpugate.io/cost-center"),
        ("gpugate.io/Workload-Kind", "gpugate.io/workload-kind"),
    ],
)
def test_look_alike_keys_are_denied_in_every_mode(key, ours, mode):
    result, _ = mutated(gpu_pod(1, labels={key: "someone-else"}), governed(mode=mode), labels=TEAM)
    assert result["metadata"]["labels"][ours] != "someone-else"  # gpugate still writes its own key
    verdict = validated(result, governed(mode=mode), labels=TEAM)
    assert not verdict.allowed and verdict.code == 403
    name = metric_label_name(ours)
    assert (
        f"metadata.labels[{key}]: pod: label {key} is exported by kube-state-metrics as label_{name}, the name of "
        f"gpugate's attribution label {ours}" in verdict.message
    )
    assert f"remove or rename {key} (gpugate sets {ours})" in verdict.message


def test_look_alike_keys_in_a_workload_template_are_denied():
    obj = deployment(template_labels={"gpugate-io/team": "x"})
    verdict = validated(obj, governed(mode="warn"), labels=TEAM)
    assert not verdict.allowed
    assert "spec.template.metadata.labels[gpugate-io/team]" in verdict.message


@pytest.mark.parametrize(
    "key", ["gpugate.io/team", "team", "gpugate.io/teams", "example.com/team", "app.kubernetes.io/name"]
)
def test_keys_of_other_names_are_allowed(key):
    result, _ = mutated(gpu_pod(1, labels={key: "x"}), governed(), labels=TEAM)
    assert validated(result, governed(), labels=TEAM).allowed


def test_look_alikes_matter_only_where_gpugate_attributes():
    assert validated(gpu_pod(1, labels={"gpugate.io/TEAM": "x"}, runtimeClassName="nvidia"), policy()).allowed


def test_a_pod_that_had_a_look_alike_before_is_not_refused_for_it_on_update():
    old, _ = mutated(gpu_pod(1), governed(), labels=TEAM)
    old["metadata"]["labels"]["gpugate.io/TEAM"] = "x"  # stored before this check existed
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["app"] = "y"
    assert validated(new, governed(), labels=TEAM, operation="UPDATE", old=old).allowed


def test_a_policy_whose_attribution_keys_collide_is_refused():
    labels = {"gpugate.io/team": {"fromNamespaceLabel": "team"}, "gpugate-io/team": {"value": "x"}}
    document = {
        "apiVersion": API_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": "p"},
        "spec": {"attribution": {"labels": labels}},
    }
    issues: list[PolicyIssue] = []
    parse_policy(document, file="p.yaml", index=0, issues=issues)
    assert [str(i) for i in issues] == [
        "p.yaml: document 0: spec.attribution.labels[gpugate-io/team]: kube-state-metrics exports gpugate-io/team "
        "and gpugate.io/team under the same name, label_gpugate_io_team, and then neither under it; keep one of them"
    ]


# --------------------------------------------------------------------------------- labels added on UPDATE


@pytest.mark.parametrize("mode", MODES)
def test_attribution_labels_added_on_update_to_a_pod_that_had_none_are_denied(mode):
    old = gpu_pod(1, runtimeClassName="nvidia")  # created before the policy attributed anything
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"gpugate.io/team": "someone-else"}
    verdict = validated(new, governed(mode=mode), labels=TEAM, operation="UPDATE", old=old)
    assert not verdict.allowed
    assert (
        "metadata.labels[gpugate.io/team]: pod: attribution label gpugate.io/team=someone-else was added: gpugate "
        "sets attribution labels when it admits a pod" in verdict.message
    )


def test_the_value_gpugate_would_set_is_no_exception_on_a_pod():
    old = gpu_pod(1, runtimeClassName="nvidia")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"gpugate.io/team": "vision"}  # /mutate never labels a pod on UPDATE
    assert not validated(new, governed(), labels=TEAM, operation="UPDATE", old=old).allowed


def test_attribution_edits_allow_lets_the_platform_backfill():
    old = gpu_pod(1, runtimeClassName="nvidia")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"gpugate.io/team": "vision"}
    lenient = governed(security={"attributionEdits": "allow"})
    assert validated(new, lenient, labels=TEAM, operation="UPDATE", old=old).allowed


def test_gpugates_own_template_mutation_on_update_is_allowed():
    """mutateTemplates: /mutate labels a workload's template on UPDATE, also one stored without labels, and after
    the namespace was relabelled; the validating call must accept what /mutate wrote."""
    policy_set = governed(mutateTemplates=True)
    old = deployment()
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 3
    decision = mutate(request(new, operation="UPDATE", old=old), env(policy_set, TEAM))
    assert decision.patch
    final = apply(new, decision.patch)
    assert final["spec"]["template"]["metadata"]["labels"]["gpugate.io/team"] == "vision"
    assert validate(request(final, operation="UPDATE", old=old), env(policy_set, TEAM)).allowed
    relabelled = {"default": {**TEAM["default"], "team": "speech"}}
    again = apply(final, mutate(request(final, operation="UPDATE", old=final), env(policy_set, relabelled)).patch)
    assert again["spec"]["template"]["metadata"]["labels"]["gpugate.io/team"] == "speech"
    assert validate(request(again, operation="UPDATE", old=final), env(policy_set, relabelled)).allowed


def test_a_template_label_added_with_another_value_is_denied():
    policy_set = governed(mutateTemplates=True)
    old, _ = mutated(deployment(), policy_set, labels=TEAM)
    new = copy.deepcopy(old)
    new["spec"]["template"]["metadata"]["labels"]["gpugate.io/team"] = "someone-else"
    verdict = validate(request(new, operation="UPDATE", old=old), env(policy_set, TEAM))
    assert not verdict.allowed and "spec.template.metadata.labels[gpugate.io/team]" in verdict.message


# ------------------------------------------------------------------------------------------ pods/status


def status_update(edit, policy_set, *, labels=TEAM):
    created, _ = mutated(gpu_pod(1), policy_set, labels=labels)
    updated = copy.deepcopy(created)
    updated["status"] = {"phase": "Running"}
    edit(updated["metadata"])
    return validated(updated, policy_set, labels=labels, operation="UPDATE", old=created, sub_resource="status")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m["labels"].__setitem__("gpugate.io/team", "someone-else"), "label gpugate.io/team (set to"),
        (lambda m: m["labels"].pop("gpugate.io/workload-name"), "label gpugate.io/workload-name (removed)"),
        (lambda m: m["annotations"].__setitem__("gpugate.io/policy", "other"), "annotation gpugate.io/policy"),
    ],
)
def test_a_status_update_cannot_change_gpugates_labels_or_annotations(edit, words, mode):
    verdict = status_update(edit, governed(mode=mode))
    assert not verdict.allowed
    assert f"a status update cannot change gpugate's {words}" in verdict.message


def test_attribution_edits_allow_does_not_open_the_status_subresource():
    lenient = governed(security={"attributionEdits": "allow"})
    verdict = status_update(lambda m: m["labels"].__setitem__("gpugate.io/team", "x"), lenient)
    assert not verdict.allowed


def test_a_status_update_that_leaves_metadata_alone_is_allowed():
    assert status_update(lambda m: m["labels"].__setitem__("app", "x"), governed()).allowed
    assert status_update(lambda m: None, governed()).allowed


def test_a_status_update_of_a_pod_no_policy_governs_cannot_add_gpugate_labels():
    old = gpu_pod(1)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"gpugate.io/team": "x"}
    verdict = validated(new, policy(), operation="UPDATE", old=old, sub_resource="status")
    assert not verdict.allowed and "gpugate.io/team" in verdict.message


# ------------------------------------------------------------------------------ selectors on our labels


KINDS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_workload_selecting_on_an_attribution_label_is_denied_in_every_mode(kind, mode):
    obj = deployment(kind=kind, selector={"matchLabels": {"app": "w", "gpugate.io/team": "vision"}})
    verdict = validated(obj, governed(mode=mode), labels=TEAM)
    assert not verdict.allowed and verdict.code == 403
    where = {"CronJob": "spec.jobTemplate.spec.selector"}.get(kind, "spec.selector")
    assert f"{where}.matchLabels[gpugate.io/team]: workload: selects its pods by gpugate.io/team" in verdict.message
    assert "select on labels of your own (such as app) and leave gpugate.io/team out of the selector" in (
        verdict.message
    )


def test_match_expressions_on_workload_labels_are_denied_too():
    selector = {
        "matchLabels": {"app": "w"},
        "matchExpressions": [{"key": "gpugate.io/workload-name", "operator": "Exists"}],
    }
    verdict = validated(deployment(selector=selector), governed(), labels=TEAM)
    assert not verdict.allowed
    assert "spec.selector.matchExpressions[0].key: workload: selects its pods by gpugate.io/workload-name" in (
        verdict.message
    )


def test_a_replicated_job_of_a_jobset_selecting_on_attribution_is_denied():
    job = deployment(kind="Job", selector={"matchLabels": {"gpugate.io/team": "vision"}})["spec"]
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": job}}]},
    }
    verdict = validated(jobset, governed(), labels=TEAM)
    assert not verdict.allowed
    assert "spec.replicatedJobs[0].template.spec.selector.matchLabels[gpugate.io/team]" in verdict.message


def test_selectors_on_labels_of_ones_own_are_allowed():
    assert validated(deployment(), governed(), labels=TEAM).allowed


# ------------------------------------------------------------------------------------------------ helpers


def deployment(*, kind="Deployment", selector=None, template_labels=None):
    selector = selector or {"matchLabels": {"app": "w"}}
    labels = {"app": "w", **(template_labels or {})}
    labels.update({k: v for k, v in (selector.get("matchLabels") or {}).items()})
    pod_template = {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never" if kind in ("Job", "CronJob") else "Always",
            "containers": [container("worker", limits={"nvidia.com/gpu": 1})],
        },
    }
    meta = {"name": "w", "namespace": "default"}
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    spec = {"selector": selector, "template": pod_template}
    if kind == "StatefulSet":
        spec["serviceName"] = "w"
    if kind == "Job":
        spec["manualSelector"] = True
    if kind == "CronJob":
        spec = {"schedule": "0 * * * *", "jobTemplate": {"spec": {**spec, "manualSelector": True}}}
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": spec}


# ----------------------------------------------------------------------------------------------- Bindings


def binding(labels=None, annotations=None):
    meta = {"name": "p", "namespace": "default"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": "n1"}}


@pytest.mark.parametrize("sub_resource", [None, "binding"])  # POST .../bindings, POST .../pods/p/binding
def test_a_binding_carrying_gpugates_labels_or_annotations_is_denied(sub_resource):
    obj = binding(labels={"gpugate.io/team": "x", "app": "y"}, annotations={"gpugate.io/workload": "Pod/x"})
    req = request(obj, sub_resource=sub_resource)
    if sub_resource:
        req["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    verdict = validate(req, env(governed(mode="audit"), TEAM))
    assert not verdict.allowed and verdict.code == 403
    assert verdict.message.splitlines() == [
        'Binding of pod "p" in namespace "default" is refused by gpugate:',
        "- metadata.labels[gpugate.io/team]: a Binding cannot set gpugate's label gpugate.io/team on the pod it "
        "binds (the apiserver copies a Binding's labels and annotations onto the pod); bind without "
        "gpugate.io/team: gpugate sets its labels and annotations when it admits a pod",
        "- metadata.annotations[gpugate.io/workload]: a Binding cannot set gpugate's annotation gpugate.io/workload "
        "on the pod it binds (the apiserver copies a Binding's labels and annotations onto the pod); bind without "
        "gpugate.io/workload: gpugate sets its labels and annotations when it admits a pod",
    ]


def test_a_binding_with_a_policys_attribution_key_outside_gpugates_group_is_denied():
    own = standard(attribution={"labels": {"billing.example.com/team": {"value": "b"}}})
    assert not validate(request(binding(labels={"billing.example.com/team": "x"})), env(own)).allowed


def test_the_schedulers_bindings_are_allowed():
    topology = {"topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r"}
    assert validate(request(binding()), env(governed(), TEAM)).allowed
    assert validate(request(binding(labels=topology)), env(governed(), TEAM)).allowed
