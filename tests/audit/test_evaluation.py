"""webhook.audit (evaluation, tally, render, policyreports) with plain dicts: verdicts, what /mutate would add, summaries, the policy-change preview,
and PolicyReports valid against the vendored upstream CRD schema."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import pytest
import yaml

from tests.support import STANDARD, policy_yaml
from webhook.admission import Environment, mutate
from webhook.audit import evaluation, policyreports, render, tally
from webhook.pods.gpus import scheduled_gpus
from webhook.policy.files import load_policies
from webhook.policy.model import PolicySet, WorkloadKind

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "tests" / "fixtures" / "wg-policy-prototypes" / "wgpolicyk8s.io_policyreports.yaml"

LABELS = {"ml": {"team": "vision"}, "research": {"team": "nlp"}}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def fleet_policy(*, max_per_pod: int = 8, mode: str = "enforce") -> str:
    """The standard test policy governing every namespace."""
    limits = {"maxPerContainer": 4, "maxPerPod": max_per_pod}
    return policy_yaml(
        "fleet", priority=10, mode=mode, **{**STANDARD, "limits": limits}, nonGPUPods={"gpuTolerations": "deny"}
    )


def policies(tmp_path: Path, *, max_per_pod: int = 8, name: str = "p") -> PolicySet:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "fleet.yaml").write_text(fleet_policy(max_per_pod=max_per_pod))
    return load_policies(directory)


def pod(
    name: str,
    namespace: str = "ml",
    *,
    gpus: str | None = "1",
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    owner: tuple[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "pause"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": dict(labels or {"app": name}),
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "o", "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container], **spec},
        "status": {"phase": phase},
    }


def formed(obj: dict[str, Any], pols: PolicySet) -> dict[str, Any]:
    """The pod as it is stored when gpugate's mutating webhook did see it."""
    env = Environment(policies=pols, namespace_labels=lambda ns: LABELS.get(ns, {}))
    request = {
        "uid": "u",
        "operation": "CREATE",
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "object": obj,
        "oldObject": None,
    }
    decision = mutate(request, env)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch or [])


def deployment(
    name: str, namespace: str = "ml", *, gpus: str = "1", owner: tuple[str, str] | None = None, kind: str = "Deployment"
) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "o", "controller": True}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta,
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def run(pols: PolicySet, objects: list[dict[str, Any]], **kwargs: Any) -> tuple[tally.Audit, dict[str, Any]]:
    a = tally.Audit(pols, namespace_labels=LABELS, **kwargs)
    for obj in objects:
        a.add(obj)
    return a, a.report(policies_source="test")


def finding(report: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [f for f in report["findings"] if f["name"] == name]
    return found


# ---- one object --------------------------------------------------------------------------------


def test_a_pod_the_mutating_webhook_never_saw_lacks_what_it_would_add(tmp_path: Path) -> None:
    a, report = run(policies(tmp_path), [pod("bare")])
    f = finding(report, "bare")
    assert f["verdict"] == "changed"
    assert f["policy"] == "fleet"
    assert [c["change"] for c in f["wouldAdd"]] == [
        "runtimeClassName: nvidia",
        "toleration nvidia.com/gpu Exists:NoSchedule",
        "nodeSelector nvidia.com/gpu.product=NVIDIA-L4",
        "label gpugate.io/team=vision",
        "label gpugate.io/workload-kind=Pod",
        "label gpugate.io/workload-name=bare",
    ]
    assert f["missingAttributionLabels"] == ["gpugate.io/team", "gpugate.io/workload-kind", "gpugate.io/workload-name"]
    assert "mutating webhook never saw this pod" in f["note"]
    assert (
        "runtimeClassName, nodeSelector, affinity, containers, initContainers and ephemeralContainers cannot change"
        in (f["note"])
    )
    assert "delete and re-create it" in f["note"]
    assert a.found


def test_a_pod_missing_only_labels_can_be_labelled_in_place(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    stored = formed(pod("unlabelled", owner=("ReplicaSet", "web-5d4f"), labels={"pod-template-hash": "5d4f"}), pols)
    for key in ("gpugate.io/team", "gpugate.io/workload-kind", "gpugate.io/workload-name"):
        del stored["metadata"]["labels"][key]
    f = finding(run(pols, [stored])[1], "unlabelled")
    assert f["verdict"] == "changed"
    assert {c["field"] for c in f["wouldAdd"]} == {"labels"}
    assert "labels can be added in place (kubectl label)" in f["note"]
    assert f["note"].endswith("or re-create it: kubectl rollout restart deployment/web")


def test_a_pod_formed_by_gpugate_is_fine(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    a, report = run(pols, [formed(pod("good"), pols)])
    assert report["findings"] == []
    assert report["totals"]["fine"] == 1
    assert not a.found


def test_a_relabelled_namespace_shows_the_old_team(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    stored = formed(pod("moved"), pols)
    stored["metadata"]["labels"]["gpugate.io/team"] = "old-team"
    f = finding(run(pols, [stored])[1], "moved")
    assert [c["change"] for c in f["wouldAdd"]] == ["label gpugate.io/team=vision (was old-team)"]
    assert "missingAttributionLabels" not in f


@pytest.mark.parametrize(
    ("obj", "rule", "text"),
    [
        (pod("h200", labels={"gpugate.io/model": "h200"}), "model", "h200"),
        (pod("greedy", gpus="9"), "gpu-limit", "9"),
        (pod("squatter", gpus=None, tolerations=[GPU_TAINT]), "toleration", "nvidia.com/gpu"),
    ],
)
def test_refused_shapes_name_their_rule(tmp_path: Path, obj: dict[str, Any], rule: str, text: str) -> None:
    f = finding(run(policies(tmp_path), [obj])[1], obj["metadata"]["name"])
    assert f["verdict"] == "refused"
    assert any(v["enforced"] and text in v["message"] for v in f["violations"]), f["violations"]
    assert any(rule in v["rule"] for v in f["violations"]), [v["rule"] for v in f["violations"]]


def test_a_warn_policy_makes_violations_warned(tmp_path: Path) -> None:
    directory = tmp_path / "warn"
    directory.mkdir()
    (directory / "fleet.yaml").write_text(fleet_policy(mode="warn"))
    pols = load_policies(directory)
    a, report = run(pols, [formed(pod("h200", labels={"gpugate.io/model": "h200"}), pols)])
    f = finding(report, "h200")
    assert f["verdict"] == "warned" and f["mode"] == "warn"
    assert [v["enforced"] for v in f["violations"]] == [False]
    assert a.found
    [polr] = policyreports.policy_reports(report, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))
    assert polr["summary"]["warn"] == 1 and polr["summary"]["fail"] == 0


def test_a_gpu_deployment_is_fine_and_says_what_its_pods_will_get(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    ev = evaluation.evaluate(deployment("web"), Environment(policies=pols, namespace_labels=lambda ns: LABELS[ns]))
    assert ev is not None and ev.verdict == "fine"
    assert [c.text for c in ev.changes] == [
        "runtimeClassName: nvidia",
        "toleration nvidia.com/gpu Exists:NoSchedule",
        "nodeSelector nvidia.com/gpu.product=NVIDIA-L4",
        "label gpugate.io/team=vision",
        "label gpugate.io/workload-kind=Deployment",
        "label gpugate.io/workload-name=web",
    ]
    assert run(pols, [deployment("web")])[1]["findings"] == []


def test_a_deployment_over_the_limit_is_refused_with_what_its_pods_will_get(tmp_path: Path) -> None:
    f = finding(run(policies(tmp_path), [deployment("big", gpus="9")])[1], "big")
    assert f["verdict"] == "refused" and f["kind"] == "Deployment"
    assert f["podsWillGet"] and "wouldAdd" not in f and "note" not in f


def test_owned_workloads_and_finished_pods_are_skipped(tmp_path: Path) -> None:
    objects = [
        deployment("rs", kind="ReplicaSet", owner=("Deployment", "web"), gpus="9"),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
    ]
    a, report = run(policies(tmp_path), objects)
    assert report["findings"] == []
    assert report["totals"]["skippedOwned"] == 1 and report["totals"]["skippedFinished"] == 2
    assert report["totals"]["audited"] == 0


def test_kinds_gpugate_does_not_read_are_ignored(tmp_path: Path) -> None:
    a, report = run(policies(tmp_path), [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}])
    assert report["totals"]["listed"] == {}


# ---- summaries ---------------------------------------------------------------------------------


def test_summaries_per_namespace_and_team(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    objects = [
        pod("a", gpus="2"),
        formed(pod("b"), pols),
        pod("cpu", gpus=None),
        pod("r", "research", gpus="1", labels={"gpugate.io/team": "nlp"}),
        pod(
            "mig",
            "research",
            gpus=None,
            containers=[{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}],
        ),
    ]
    report = run(pols, objects)[1]
    ml, research = report["namespaces"]["ml"], report["namespaces"]["research"]
    assert ml["gpuPods"] == 2 and ml["gpus"] == {"nvidia.com/gpu": "3"}
    assert ml["missingAttributionLabels"] == 1  # "a" only: "b" was formed, "cpu" gets no labels
    assert (ml["changed"], ml["fine"]) == (1, 2)
    assert research["gpus"] == {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2"}
    assert report["teams"]["vision"]["gpuPods"] == 2
    assert report["teams"]["nlp"] == {**report["teams"]["nlp"], "gpuPods": 2, "missingAttributionLabels": 2}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {
                "containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                ]
            },
            {"nvidia.com/gpu": 3},
        ),
        # an init container runs alone: it counts only when it asks for more than the app containers
        (
            {
                "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            {"nvidia.com/gpu": 4},
        ),
        # a sidecar runs beside everything after it
        (
            {
                "initContainers": [
                    {"restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                ],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            {"nvidia.com/gpu": 3},
        ),
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0", "cpu": "1"}}}]}, {}),
    ],
)
def test_pod_gpus_counts_as_the_scheduler(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert scheduled_gpus(spec, lambda r: r.startswith("nvidia.com/")) == expected


def test_pod_changes_reads_whole_map_adds_and_affinity() -> None:
    before_spec = {"tolerations": [{"key": "a", "operator": "Equal", "value": "b"}]}
    after_spec = {
        "tolerations": [GPU_TAINT],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A", "B"]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    changes = evaluation.pod_changes(
        {"spec": before_spec}, {"metadata": {"annotations": {"gpugate.io/policy": "p", "x": "y"}}, "spec": after_spec}
    )
    assert [c.text for c in changes] == [
        "toleration nvidia.com/gpu Exists:NoSchedule",
        "toleration a=b removed",
        "required node affinity nvidia.com/gpu.product In [A, B]",
        "annotation x=y",
    ]
    assert [c.action for c in changes] == ["add", "remove", "add", "add"]


# ---- the policy-change preview -----------------------------------------------------------------


def test_compare_to_shows_exactly_the_objects_a_tighter_limit_refuses(tmp_path: Path) -> None:
    current, tighter = policies(tmp_path, name="now"), policies(tmp_path, max_per_pod=2, name="next")
    objects = [
        formed(pod("one"), current),
        formed(pod("four", gpus="4"), current),
        pod("bare-three", gpus="3"),
        deployment("web", gpus="2"),
        deployment("big", gpus="3"),
        pod("cpu", gpus=None),
    ]
    a, report = run(current, objects, compare_to=tighter)
    report = a.report(policies_source="now", proposed_source="next")
    changed = {(d["kind"], d["name"]): d for d in report["differences"]}
    assert set(changed) == {("Pod", "four"), ("Pod", "bare-three"), ("Deployment", "big")}
    assert changed[("Pod", "four")]["verdict"] == {"from": "fine", "to": "refused"}
    assert changed[("Pod", "bare-three")]["verdict"] == {"from": "changed", "to": "refused"}
    assert any("2" in v for v in changed[("Deployment", "big")]["newViolations"])
    assert a.found
    table = render.render_table(report)
    assert "Policy change preview: now -> next" in table
    assert "Pod ml/four: fine -> refused" in table


def test_compare_to_the_same_policies_finds_nothing(tmp_path: Path) -> None:
    current = policies(tmp_path)
    a, _ = run(current, [pod("bare"), deployment("big", gpus="9")], compare_to=policies(tmp_path, name="same"))
    assert a.differences == [] and not a.found


# ---- output ------------------------------------------------------------------------------------


def test_table_lists_findings_and_summaries(tmp_path: Path) -> None:
    report = run(policies(tmp_path), [pod("bare"), pod("greedy", gpus="9")])[1]
    table = render.render_table(report)
    assert "ml         Pod   greedy  REFUSED  fleet" in table
    assert "    lacks: runtimeClassName: nvidia" in table
    assert "NAMESPACE  GPU PODS  GPUS                MISSING LABELS  REFUSED  WARNED  CHANGED  FINE" in table
    assert "ml         2         nvidia.com/gpu: 10  2               1        0       1        0" in table
    assert "TEAM    GPU PODS" in table
    assert "audited 2: 1 refused, 0 warned, 1 changed, 0 fine" in table


def test_policy_reports_are_valid_v1alpha2_and_count_every_object(tmp_path: Path) -> None:
    pols = policies(tmp_path)
    objects = [pod("bare"), pod("greedy", gpus="9"), formed(pod("good"), pols), pod("r", "research")]
    report = run(pols, objects)[1]
    reports = policyreports.policy_reports(report, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    for r in reports:
        jsonschema.validate(r, version["schema"]["openAPIV3Schema"])
    by_ns = {r["metadata"]["namespace"]: r for r in reports}
    ml = by_ns["ml"]
    assert ml["metadata"]["name"] == "gpugate-audit"
    assert ml["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpugate-audit"}
    # bare: not mutated; greedy: over the per-container and the per-pod limit, and not mutated
    assert ml["summary"] == {"pass": 1, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    assert ml["summary"]["fail"] == sum(r["result"] == "fail" for r in ml["results"])
    results = {(r["resources"][0]["name"], r["rule"]) for r in ml["results"]}
    assert ("bare", "not-mutated") in results
    assert any(name == "greedy" for name, _ in results)
    assert by_ns["research"]["summary"]["fail"] == 1
    assert ml["results"][0]["timestamp"] == {"seconds": 1767312000, "nanos": 0}


def test_a_policy_report_stays_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policyreports, "MAX_RESULTS", 5)
    report = run(policies(tmp_path), [pod(f"bare-{i}") for i in range(8)])[1]
    [polr] = policyreports.policy_reports(report, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))
    assert len(polr["results"]) == 5
    assert polr["summary"]["fail"] == 8
    assert polr["results"][-1]["rule"] == "truncated" and polr["results"][-1]["message"].startswith("4 more results")
    [version] = [v for v in yaml.safe_load(CRD.read_text())["spec"]["versions"] if v["name"] == "v1alpha2"]
    jsonschema.validate(polr, version["schema"]["openAPIV3Schema"])


def test_audited_kinds_come_from_the_pods_registry_and_the_policies(tmp_path: Path) -> None:
    kinds = [(w.group, w.kind) for w in evaluation.audited_kinds()]
    assert kinds[0] == ("", "Pod")
    assert {("apps", "Deployment"), ("batch", "CronJob"), ("", "PodTemplate"), ("ray.io", "RayCluster")} <= set(kinds)
    pols = policies(tmp_path)
    trainer = WorkloadKind("example.com", "Trainer", ("spec.template",), "trainers", ("v1",), source="test")
    added = PolicySet.of(pols.policies, workloads=[trainer])
    assert ("example.com", "Trainer") in [(w.group, w.kind) for w in evaluation.audited_kinds(pols, added)]
    obj = {**deployment("t", gpus="9"), "apiVersion": "example.com/v1", "kind": "Trainer"}
    assert run(pols, [obj])[1]["totals"]["listed"] == {}  # a kind nobody registered is not read
    f = finding(run(added, [obj])[1], "t")
    assert f["kind"] == "Trainer" and f["verdict"] == "refused"


def test_a_raycluster_says_which_template_gets_what(tmp_path: Path) -> None:
    worker = {
        "metadata": {},
        "spec": {"containers": [{"name": "w", "image": "ray", "resources": {"limits": {"nvidia.com/gpu": "9"}}}]},
    }
    head = {"metadata": {}, "spec": {"containers": [{"name": "h", "image": "ray"}]}}
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ml"},
        "spec": {"headGroupSpec": {"template": head}, "workerGroupSpecs": [{"template": worker}]},
    }
    f = finding(run(policies(tmp_path), [ray])[1], "rc")
    assert f["verdict"] == "refused"
    assert any("spec.workerGroupSpecs[0].template.spec.containers" in v["path"] for v in f["violations"])
    assert "spec.workerGroupSpecs[0].template: runtimeClassName: nvidia" in [c["change"] for c in f["podsWillGet"]]
    assert not any(
        c["change"].startswith("spec.headGroupSpec") and "runtimeClassName" in c["change"] for c in f["podsWillGet"]
    )


def test_the_report_is_plain_data(tmp_path: Path) -> None:
    report = run(policies(tmp_path), [pod("bare"), deployment("web")])[1]
    assert yaml.safe_load(yaml.safe_dump(report)) == copy.deepcopy(report)
