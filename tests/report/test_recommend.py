"""``gpugate report --recommend`` on a backfilled day, and ``gpugate audit --compare-to`` previewing
the GPUPolicy it emits: in-process (the real policy loader and the audit's engine), and through the real CLIs,
``gpugate report --recommend --policies-out`` then ``gpugate audit --compare-to`` against a real kube-apiserver
holding the workloads' Deployments and pods.

The day: node-a holds two whole A100s, one per Deployment: ``inference`` keeps its GPU 6% busy in 5 GB of
memory (it fits a 1g.10gb slice), ``trainer`` 85% busy in 60 GB (it fits nothing smaller). node-m is an A100
cut into MIG instances under the mixed strategy (a 1g.10gb and a 3g.40gb, both unused): the fleet has those
classes, and no other.
"""

from __future__ import annotations

import copy
import datetime
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries
from tests.harness.gpugate import gpugate_executable
from webhook.admission.offline import check_objects
from webhook.audit import tally
from webhook.policy.files import load_policies
from webhook.policy.keys import API_VERSION
from webhook.policy.model import PolicySet

from .conftest import RunningPrometheus, missing_tool, serving
from .schema import checked
from .synthetic import A100, HOUR, START, Fleet, dcgm_labels
from .test_report import ROOT, gpugate

DAY = 24 * HOUR
END = str(START + DAY)
END_ISO = "2026-11-03T00:00:00Z"  # the same, as docs/report.md writes it
SLICE = "nvidia.com/mig-1g.10gb"
ML_POLICY = Path(__file__).with_name("ml-policy.yaml")
NAMESPACE_LABELS = {"ml": {"team": "vision", "cost-center": "cc-100"}}


def rightsizing_day() -> Fleet:
    fleet = Fleet(length=DAY)
    for name, gpu, util, memory in (("inference", 0, 6.0, 5000.0), ("trainer", 1, 85.0, 60000.0)):
        attribution = {"team": "vision", "cost_center": "cc-100", "workload_kind": "Deployment", "workload_name": name}
        pod = f"{name}-7d9f-x2k4p"
        fleet.pod("ml", pod, node="node-a", resources={"nvidia.com/gpu": 1}, attribution=attribution, end=DAY)
        labels = dcgm_labels(gpu=gpu, uuid=f"GPU-a-{gpu}", model=A100, host="node-a", pod=("ml", pod))
        fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, util / 100, end=DAY)
        fleet.add("DCGM_FI_DEV_FB_USED", labels, memory, end=DAY)
    for profile, instance in (("1g.10gb", 7), ("3g.40gb", 1)):
        labels = dcgm_labels(gpu=0, uuid="GPU-m-0", model=A100, host="node-m", mig=(profile, instance))
        fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.0, end=DAY)
    return fleet


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    with serving(rightsizing_day(), tmp_path_factory.mktemp("report-rightsizing")) as running:
        yield running


@pytest.fixture(scope="module")
def recommendations(day: RunningPrometheus) -> dict[str, dict[str, Any]]:
    result = gpugate(
        "report",
        "--prometheus",
        day.url,
        "--end",
        END,
        "--window",
        "1d",
        "--recommend",
        "-o",
        "json",
        "--prices",
        str(Path(__file__).with_name("prices.yaml")),
    )
    assert result.returncode == 0, result.stderr
    return {r["name"]: r for r in checked(result.stdout)["recommendations"]}


def test_a_lightly_used_whole_gpu_is_recommended_the_fleet_s_1g_slice(recommendations: dict[str, Any]) -> None:
    inference = recommendations["inference"]
    assert inference["current"] == {"model": A100, "class": "whole"}
    assert inference["recommended"]["class"] == "1g.10gb" and inference["recommended"]["model"] == A100
    assert inference["recommended"]["resource"] == "nvidia.com/mig-1g.10gb"
    # 24 GPU-hours held; 1/7 of them would have done: 24 - 24/7 saved, at 3.00 an A100-hour.
    assert inference["gpu_hours_saved"] == pytest.approx(24 - 24 / 7, abs=0.2)
    assert inference["cost_saved"] == pytest.approx((24 - 24 / 7) * 3.0, abs=0.5)
    assert inference["p95_utilisation"] == pytest.approx(0.06)
    assert inference["peak_memory_mib"] == 5000
    assert inference["confidence"]["level"] == "high" and inference["confidence"]["coverage"] == pytest.approx(1.0)


def test_a_busy_workload_fits_nothing_smaller_and_gets_no_policy(recommendations: dict[str, Any]) -> None:
    trainer = recommendations["trainer"]
    assert trainer["recommended"] is None and trainer["policy"] is None
    assert trainer["gpu_hours_saved"] == 0
    assert "fit no smaller class" in trainer["reason"]


def test_never_a_class_the_fleet_does_not_have(recommendations: dict[str, Any]) -> None:
    have = {("whole", A100), ("1g.10gb", A100), ("3g.40gb", A100)}
    for r in recommendations.values():
        if r["recommended"]:
            assert (r["recommended"]["class"], r["recommended"]["model"]) in have


def deployment(name: str, resource: str) -> dict[str, Any]:
    """The Deployment as it runs: its template carries gpugate's workload labels (the report's selector)."""
    labels = {"app": name, "gpugate.io/workload-kind": "Deployment", "gpugate.io/workload-name": name}
    limits = {resource: "1"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "serve:1", "resources": {"limits": limits}}]},
            },
        },
    }


def test_the_emitted_policy_loads_and_audit_compare_to_previews_it(
    recommendations: dict[str, Any], tmp_path: Path
) -> None:
    current, proposed = tmp_path / "current", tmp_path / "proposed"
    shutil.copytree(ROOT / "policies", current, ignore=shutil.ignore_patterns("examples", "*.json", "*.md"))
    shutil.copytree(current, proposed)
    policy = recommendations["inference"]["policy"]
    (proposed / "90-rightsize-inference.yaml").write_text(policy)
    assert yaml.safe_load(policy)["apiVersion"] == API_VERSION  # the current format, not the deprecated one
    before, after = load_policies(current), load_policies(proposed)  # the real loader accepts it
    assert not [note for note in after.notes if "90-rightsize" in note]  # and has nothing to say against it
    audit = tally.Audit(before, namespace_labels=NAMESPACE_LABELS, compare_to=after)
    for obj in (
        deployment("inference", "nvidia.com/gpu"),  # as it runs today
        deployment("trainer", "nvidia.com/gpu"),
    ):
        audit.add(obj)
    differences = {d["name"]: d for d in audit.report(policies_source="current")["differences"]}
    # Only the recommended workload is touched: now governed by the new policy, which wants the slice.
    assert set(differences) == {"inference"}
    change = differences["inference"]
    assert change["policy"]["to"] == "rightsize-ml-deployment-inference"
    assert change["verdict"]["to"] == "refused", change
    assert any("nvidia.com/mig-1g.10gb" in m for m in change["newViolations"])
    # Applied: the workload asks for the slice; the new policy lets its template in, and a pod of it that the
    # webhook never saw would be steered to the A100 MIG pool (the nodeSelector gpugate would add).
    applied = tally.Audit(after, namespace_labels=NAMESPACE_LABELS)
    applied.add(deployment("inference", "nvidia.com/mig-1g.10gb"))
    applied.add(replica_pod("inference", "nvidia.com/mig-1g.10gb"))
    findings = applied.report(policies_source="proposed")["findings"]
    assert not [f for f in findings if f["verdict"] == "refused"], findings
    [pod] = [f for f in findings if f["kind"] == "Pod"]
    assert pod["policy"] == "rightsize-ml-deployment-inference"
    assert "nodeSelector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in [c["change"] for c in pod["wouldAdd"]], pod


def replica_pod(name: str, resource: str, *, pod_hash: str = "7d9f") -> dict[str, Any]:
    template = deployment(name, resource)["spec"]["template"]
    meta = {
        "name": f"{name}-{pod_hash}-x2k4p",
        "namespace": "ml",
        "uid": f"uid-{name}-pod",
        "labels": {**template["metadata"]["labels"], "pod-template-hash": pod_hash},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{name}-{pod_hash}",
                "uid": "rs",
                "controller": True,
            }
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template["spec"],
        "status": {"phase": "Running"},
    }


# ---- the loop through the real CLIs: report --recommend --policies-out, then audit --compare-to on a cluster -----


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real kube-apiserver + etcd holding namespace ``ml`` with both Deployments and their pods, stored as
    gpugate admitted them under the shipped policies (no webhook is registered: the audit reads what is there)."""
    try:
        binaries = find_binaries()
    except BinariesMissing as err:
        missing_tool(f"KUBE-APISERVER NOT FOUND: {err}; run tests/e2e/build.sh (or `make tools`)")
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("recommend-cluster"))
    try:
        plane.start()
        plane.ensure_runtime_class("nvidia")
        labels = NAMESPACE_LABELS["ml"]
        plane.kubectl(
            "create",
            "-f",
            "-",
            stdin={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": labels}},
        )
        plane.ensure_default_service_account("ml")
        current = load_policies(policies_in_force(tmp_path_factory.mktemp("recommend-current")))
        stored = [
            admitted(obj, current)
            for name in ("inference", "trainer")
            for obj in (deployment(name, "nvidia.com/gpu"), replica_pod(name, "nvidia.com/gpu"))
        ]
        plane.kubectl("create", "-f", "-", stdin=stored)
        yield plane
    finally:
        plane.stop()


def policies_in_force(directory: Path) -> Path:
    """The shipped policies and namespace ml's own (whole A100s), as the cluster's gpugate has them."""
    shutil.copytree(
        ROOT / "policies", directory, ignore=shutil.ignore_patterns("examples", "*.json", "*.md"), dirs_exist_ok=True
    )
    shutil.copy(ML_POLICY, directory / "50-ml.yaml")
    return directory


def admitted(obj: dict[str, Any], policies: PolicySet) -> dict[str, Any]:
    """``obj`` as the apiserver stores it once gpugate's mutating webhook admitted it (``gpugate check``'s path)."""
    [result] = check_objects([obj], policies=policies, namespace_labels=NAMESPACE_LABELS)
    assert result.allowed, result.decision.message
    stored = copy.deepcopy(dict(result.mutated))
    stored["metadata"].pop("uid", None)  # the apiserver assigns it
    stored.pop("status", None)
    return stored


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed ``gpugate`` entry point, as an operator runs it."""
    return subprocess.run(
        [str(gpugate_executable()), *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT
    )


@pytest.mark.e2e
def test_report_recommend_then_audit_compare_to_previews_it_on_a_cluster(
    day: RunningPrometheus, cluster: ControlPlane, tmp_path: Path
) -> None:
    assert datetime.datetime.fromisoformat(END_ISO).timestamp() == int(END)
    current, proposed = policies_in_force(tmp_path / "current"), tmp_path / "proposed"
    shutil.copytree(current, proposed)
    prices = str(Path(__file__).with_name("prices.yaml"))
    # 1. report -> recommend, the policies written beside a copy of those in force
    made = cli(
        "report",
        "--prometheus",
        day.url,
        "--end",
        END_ISO,
        "--window",
        "1d",
        "--recommend",
        "--prices",
        prices,
        "--policies-out",
        str(proposed),
    )
    assert made.returncode == 0, made.stderr
    written = proposed / "rightsize-ml-deployment-inference.yaml"
    assert made.stderr.splitlines() == [f"gpugate report: wrote {written}"], made.stderr
    assert sorted(p.name for p in proposed.iterdir()) == sorted([*(p.name for p in current.iterdir()), written.name])
    lines = made.stdout.splitlines()
    assert any(line.startswith("ml/Deployment/inference") and "1g.10gb NVIDIA A100-SXM4-80GB" in line for line in lines)
    assert any(line.startswith("ml/Deployment/trainer") and " -  " in line for line in lines), made.stdout
    assert written.read_text() in made.stdout  # the table prints the policy it wrote
    # 2. preview: the audit of what the cluster runs, under the policies in force and under the proposed ones
    kubeconfig = str(cluster.kubeconfig)
    preview = cli(
        "audit", "--kubeconfig", kubeconfig, "--policies", str(current), "--compare-to", str(proposed), "-o", "json"
    )
    assert preview.returncode == 1, preview.stdout + preview.stderr
    differences = {(d["kind"], d["name"]): d for d in json.loads(preview.stdout)["differences"]}
    # Only the recommended workload moves: its Deployment and its running pod, now governed by the new policy,
    # which wants the slice; the trainer, and everything else, is left alone.
    assert set(differences) == {("Deployment", "inference"), ("Pod", "inference-7d9f-x2k4p")}, differences
    for change in differences.values():
        assert change["namespace"] == "ml"
        assert change["policy"] == {"from": "ml", "to": "rightsize-ml-deployment-inference"}, change
        assert change["verdict"]["to"] == "refused", change
        assert any("nvidia.com/mig-1g.10gb" in m for m in change["newViolations"]), change
    table = cli("audit", "--kubeconfig", kubeconfig, "--policies", str(current), "--compare-to", str(proposed))
    assert table.returncode == 1, table.stderr
    assert "Deployment ml/inference:" in table.stdout and "Pod ml/inference-7d9f-x2k4p:" in table.stdout
    assert "trainer" not in table.stdout, table.stdout
    # 3. apply: the workload asks for the slice and the proposed policies are in force; its new pod, admitted
    # by them, is steered to the A100 MIG pool, and the audit under those policies finds nothing to refuse.
    proposed_set = load_policies(proposed)
    slice_deployment, slice_pod = (
        admitted(obj, proposed_set)
        for obj in (deployment("inference", SLICE), replica_pod("inference", SLICE, pod_hash="5c8b"))
    )
    assert slice_pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, slice_pod
    cluster.kubectl("replace", "-f", "-", stdin=slice_deployment)
    cluster.kubectl("delete", "pod", "-n", "ml", "inference-7d9f-x2k4p")
    cluster.kubectl("create", "-f", "-", stdin=slice_pod)
    applied = cli("audit", "--kubeconfig", kubeconfig, "--policies", str(proposed), "-o", "json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert json.loads(applied.stdout)["findings"] == []
