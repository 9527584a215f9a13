"""deploy/components/workload-crds: rendered by a real kustomize on the base and the overlays, every object
schema-valid, the rules exactly the CRD kinds gpugate reads, the rest as the pod webhooks say."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from webhook.pods.objects import BUILTIN_WORKLOADS

from .test_manifests import DEPLOY, EXCLUDED, REPO, compile_cel, evaluate, find, render, webhooks

COMPONENT = DEPLOY / "components" / "workload-crds"
CRDS = REPO / "tests" / "fixtures" / "crds" / "workload-crds.yaml"
NATIVE_GROUPS = {"", "apps", "batch"}
POD_HOOKS = {"mutate-workloads.gpugate.io": "mutate.gpugate.io", "validate-workloads.gpugate.io": "validate.gpugate.io"}


def overlay(where: Path, resource: Path, *components: Path) -> list[dict[str, Any]]:
    """Render `resource` with `components` from an overlay in `where` (kustomize wants relative paths)."""
    where.mkdir(parents=True, exist_ok=True)
    text = {
        "resources": [os.path.relpath(resource, where)],
        "components": [os.path.relpath(c, where) for c in components],
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(text))
    return render(where)


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def with_crds(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return overlay(tmp_path_factory.mktemp("workload-crds"), DEPLOY, COMPONENT)


def hook(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [h for h in webhooks(objects) if h["name"] == name]
    return found


def crd_rules() -> list[tuple[str, str, str]]:
    """(group, version, plural) of every workload CRD kind gpugate reads."""
    return sorted(
        (w.group, version, w.plural)
        for w in BUILTIN_WORKLOADS
        if w.group not in NATIVE_GROUPS
        for version in w.versions
    )


def test_every_object_is_valid_kubernetes(with_crds: list[dict[str, Any]]) -> None:
    version = kubernetes_validate.latest_version()
    for obj in with_crds:
        kubernetes_validate.validate(obj, version, strict=True)


def test_component_adds_one_webhook_to_each_configuration(
    with_crds: list[dict[str, Any]], base: list[dict[str, Any]]
) -> None:
    assert [h["name"] for h in webhooks(with_crds)] == [
        "mutate.gpugate.io",
        "mutate-objects.gpugate.io",
        "mutate-workloads.gpugate.io",
        "validate.gpugate.io",
        "validate-objects.gpugate.io",
        "validate-workloads.gpugate.io",
    ]
    # The base's webhooks and every other object are untouched.
    for name in (*POD_HOOKS.values(), "mutate-objects.gpugate.io", "validate-objects.gpugate.io"):
        assert hook(with_crds, name) == hook(base, name)
    others = sorted(yaml.safe_dump(o) for o in with_crds if not o["kind"].endswith("WebhookConfiguration"))
    assert others == sorted(yaml.safe_dump(o) for o in base if not o["kind"].endswith("WebhookConfiguration"))


@pytest.mark.parametrize("name", list(POD_HOOKS))
def test_rules_are_exactly_the_crd_kinds_gpugate_reads(with_crds: list[dict[str, Any]], name: str) -> None:
    rules = hook(with_crds, name)["rules"]
    listed = sorted(
        (group, version, plural)
        for rule in rules
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for plural in rule["resources"]
    )
    assert listed == crd_rules()
    cluster_scoped = {w.plural for w in BUILTIN_WORKLOADS if w.cluster_scoped}
    for rule in rules:
        assert rule["operations"] == ["CREATE", "UPDATE"]
        expected = {"Cluster" if plural in cluster_scoped else "Namespaced" for plural in rule["resources"]}
        assert [rule["scope"]] == sorted(expected), rule


def test_rules_name_versions_the_test_crds_serve() -> None:
    served = {
        (doc["spec"]["group"], version["name"], doc["spec"]["names"]["plural"])
        for doc in yaml.safe_load_all(CRDS.read_text())
        if doc
        for version in doc["spec"]["versions"]
        if version["served"]
    }
    assert set(crd_rules()) <= served


@pytest.mark.parametrize(("name", "pod_hook"), list(POD_HOOKS.items()))
def test_settings_follow_the_pod_webhook(with_crds: list[dict[str, Any]], name: str, pod_hook: str) -> None:
    new, old = hook(with_crds, name), hook(with_crds, pod_hook)
    for key in (
        "clientConfig",
        "namespaceSelector",
        "failurePolicy",
        "admissionReviewVersions",
        "sideEffects",
        "timeoutSeconds",
        "matchPolicy",
    ):
        assert new[key] == old[key], key
    assert new.get("reinvocationPolicy") == old.get("reinvocationPolicy")
    assert new["matchPolicy"] == "Equivalent"
    assert "objectSelector" not in new


def test_overlays_and_the_exclusion_component_carry_over(tmp_path: Path) -> None:
    """After `gpugate certs` into a copy of deploy/: the static overlay's caBundle and the gpu-operator
    exclusion reach the new webhooks, as docs/operations.md says to list the components."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("*.crt", "*.key", "*.b64"))
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.certs",
            "--service",
            "gpugate",
            "--namespace",
            "gpugate",
            "--out",
            str(copy / "overlays" / "static" / "certs"),
            "--force",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert made.returncode == 0, made.stderr
    components = copy / "components"
    objects = overlay(
        tmp_path / "mine",
        copy / "overlays" / "static",
        components / "exclude-gpu-operator",
        components / "workload-crds",
    )
    for name, pod_hook in POD_HOOKS.items():
        new = hook(objects, name)
        assert new["clientConfig"]["caBundle"] and new["clientConfig"] == hook(objects, pod_hook)["clientConfig"]
        assert new["namespaceSelector"]["matchExpressions"][0]["values"] == [*EXCLUDED, "gpu-operator"]
    cert_manager = overlay(tmp_path / "cm", DEPLOY / "overlays" / "cert-manager", COMPONENT)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(cert_manager, kind, "gpugate")
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpugate/gpugate-tls"
        assert len(config["webhooks"]) == 3


RAY: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "r", "namespace": "ml"},
    "spec": {"workerGroupSpecs": [{"template": {"spec": {"containers": [{"name": "w"}]}}}]},
}
RELABELLED = {**RAY, "metadata": {**RAY["metadata"], "finalizers": ["ray.io/gcs-ft-redis-cleanup-finalizer"]}}
RESIZED = {**RAY, "spec": {"workerGroupSpecs": [{"replicas": 2, **RAY["spec"]["workerGroupSpecs"][0]}]}}
CONDITION_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, bool]] = [
    ("CREATE", "CREATE", RAY, None, True),
    ("UPDATE of the spec", "UPDATE", RESIZED, RAY, True),
    ("UPDATE of metadata only (an operator's finalizer)", "UPDATE", RELABELLED, RAY, False),
    ("UPDATE adding a spec", "UPDATE", RAY, {**RAY, "spec": {}}, True),
    ("UPDATE of an object without spec", "UPDATE", {"metadata": {}}, {"metadata": {}}, True),
]


@pytest.mark.parametrize(
    ("case", "operation", "new", "old", "expected"), CONDITION_CASES, ids=[c[0] for c in CONDITION_CASES]
)
def test_match_condition(
    with_crds: list[dict[str, Any]],
    case: str,
    operation: str,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    expected: bool,
) -> None:
    for name in POD_HOOKS:
        [condition] = hook(with_crds, name)["matchConditions"]
        program = compile_cel(condition["expression"])
        assert evaluate(program, object=new, oldObject=old, request={"operation": operation}) is expected
