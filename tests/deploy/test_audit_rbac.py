"""deploy/audit and deploy/audit/reports: schema-valid, read-only where they should be, and covering every kind
`gpugate audit` lists (the e2e suite proves them sufficient against the real apiserver's RBAC)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from webhook import cli
from webhook.audit import evaluation
from webhook.kube import inventory

from .test_manifests import DEPLOY, find, render

READ = ["get", "list"]


@pytest.fixture(scope="module")
def auditor() -> list[dict[str, Any]]:
    return render(DEPLOY / "audit")


@pytest.fixture(scope="module")
def reporter() -> list[dict[str, Any]]:
    return render(DEPLOY / "audit" / "reports")


def test_every_object_is_valid_kubernetes(auditor: list[dict[str, Any]], reporter: list[dict[str, Any]]) -> None:
    version = kubernetes_validate.latest_version()
    for obj in auditor + reporter:
        kubernetes_validate.validate(obj, version, strict=True)
    assert sorted(o["kind"] for o in auditor) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    assert sorted(o["kind"] for o in reporter) == ["ClusterRole", "ClusterRoleBinding"]


def test_the_auditor_only_reads(auditor: list[dict[str, Any]]) -> None:
    for role in (o for o in auditor if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= {"get", "list"}, rule
            assert "*" not in rule["resources"] and "secrets" not in rule["resources"], rule


def test_the_auditor_can_list_every_kind_audit_reads(auditor: list[dict[str, Any]]) -> None:
    role = find(auditor, "ClusterRole", "gpugate-auditor")
    granted = {
        (group, resource)
        for rule in role["rules"]
        if set(READ) <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    wanted = {(w.group, w.plural) for w in evaluation.audited_kinds()} | {("", "namespaces")}
    assert wanted <= granted, f"missing: {sorted(wanted - granted)}"


def test_the_auditor_can_list_the_fleet_the_drift_audit_reads_and_no_more(auditor: list[dict[str, Any]]) -> None:
    """`gpugate audit` reports fleet drift from Nodes, RuntimeClasses, DeviceClasses and ResourceSlices, which
    it lists (webhook/kube/inventory.py read_fleet): the auditor may list exactly those, not get or watch."""
    role = find(auditor, "ClusterRole", "gpugate-auditor")
    paths = [kind.paths[0].split("/") for kind in inventory.KINDS]
    fleet = {("" if path[1] == "api" else path[2], path[-1]) for path in paths}
    granted = {
        (group, resource): rule["verbs"]
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if (group, resource) in fleet
    }
    assert granted == {key: ["list"] for key in fleet}


def test_the_installed_policies_are_readable_in_gpugates_namespace_only(auditor: list[dict[str, Any]]) -> None:
    role = find(auditor, "Role", "gpugate-auditor")
    assert role["metadata"]["namespace"] == "gpugate"
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["gpugate"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    ]
    binding = find(auditor, "RoleBinding", "gpugate-auditor")
    assert binding["roleRef"]["kind"] == "Role" and binding["metadata"]["namespace"] == "gpugate"
    cluster_binding = find(auditor, "ClusterRoleBinding", "gpugate-auditor")
    assert (
        cluster_binding["subjects"]
        == binding["subjects"]
        == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpugate-auditors"}]
    )


def test_the_reporter_writes_policyreports_and_nothing_else(reporter: list[dict[str, Any]]) -> None:
    role = find(reporter, "ClusterRole", "gpugate-audit-reporter")
    assert role["rules"] == [
        {
            "apiGroups": ["wgpolicyk8s.io"],
            "resources": ["policyreports"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]
    binding = find(reporter, "ClusterRoleBinding", "gpugate-audit-reporter")
    assert binding["roleRef"]["name"] == "gpugate-audit-reporter"


@pytest.fixture(scope="module")
def cronjob() -> list[dict[str, Any]]:
    return render(DEPLOY / "audit-cronjob")


def test_the_cronjob_runs_the_audit_as_its_own_service_account(cronjob: list[dict[str, Any]]) -> None:
    version = kubernetes_validate.latest_version()
    for obj in cronjob:
        kubernetes_validate.validate(obj, version, strict=True)
    account = {"kind": "ServiceAccount", "name": "gpugate-audit", "namespace": "gpugate"}
    for kind, name in (
        ("ClusterRoleBinding", "gpugate-auditor"),
        ("RoleBinding", "gpugate-auditor"),
        ("ClusterRoleBinding", "gpugate-audit-reporter"),
    ):
        assert account in find(cronjob, kind, name)["subjects"], (kind, name)
    job = find(cronjob, "CronJob", "gpugate-audit")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpugate-audit" and pod["automountServiceAccountToken"] is True
    [container] = pod["containers"]
    assert container["image"] == "gpugate:0.1.0"
    assert container["args"] == ["audit", "--report", "policyreports", "--exit-zero", "-o", "none"]
    parsed = cli.parser().parse_args(container["args"])
    assert parsed.report == "policyreports" and parsed.exit_zero and parsed.output == "none"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}
