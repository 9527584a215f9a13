"""The native tier's compiler (webhook/native): the objects it prints for the shipped policies are valid Kubernetes
1.36 objects (kubernetes-validate, strict), few and deterministic; its globs mean what the policy model's do; the
CLI prints them, explains them, and prints nothing on a policy directory that does not load. What they decide is
tests/e2e/test_native.py's to prove, through the real apiserver."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support import REPO
from webhook.native.cel import any_glob, glob_pattern, literal, look_alike_pattern
from webhook.native.command import render
from webhook.native.compiler import NARROWING_ANNOTATION, compile_policies, decided_natively, webhook_patch
from webhook.policy.files import load_policies
from webhook.policy.labels import metric_label_name

SHIPPED = REPO / "policies"


def gpugate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return list(compile_policies(load_policies(SHIPPED)).objects)


def test_every_object_is_a_valid_kubernetes_1_36_object(compiled: list[dict]) -> None:
    for obj in compiled:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_few_objects_named_and_labelled_as_gpugate_s(compiled: list[dict]) -> None:
    kinds = [(o["kind"], o["metadata"]["name"]) for o in compiled]
    # The shipped policies are in enforce (default, serving) and warn (research) mode: no audit objects.
    assert kinds == [
        ("MutatingAdmissionPolicy", "gpugate-mutate"),
        ("MutatingAdmissionPolicyBinding", "gpugate-mutate"),
        ("ValidatingAdmissionPolicy", "gpugate-enforce"),
        ("ValidatingAdmissionPolicyBinding", "gpugate-enforce"),
        ("ValidatingAdmissionPolicy", "gpugate-warn"),
        ("ValidatingAdmissionPolicyBinding", "gpugate-warn"),
        ("ValidatingAdmissionPolicy", "gpugate-always"),
        ("ValidatingAdmissionPolicyBinding", "gpugate-always"),
    ]
    assert all(o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpugate" for o in compiled)
    actions = {
        o["metadata"]["name"]: o["spec"]["validationActions"] for o in compiled if "validationActions" in o["spec"]
    }
    assert actions == {"gpugate-enforce": ["Deny"], "gpugate-warn": ["Warn", "Audit"], "gpugate-always": ["Deny"]}
    # No param objects: the policy data is in the expressions (kubernetes#122658, #124237).
    assert not any("paramKind" in o["spec"] or "paramRef" in o["spec"] for o in compiled)
    mutations = compiled[0]["spec"]["mutations"]
    assert [m["patchType"] for m in mutations] == ["JSONPatch"]


def test_same_policies_same_bytes(tmp_path: Path) -> None:
    copy = tmp_path / "policies"
    shutil.copytree(SHIPPED, copy)
    first = render(compile_policies(load_policies(SHIPPED)))
    second = render(compile_policies(load_policies(copy)))
    assert first == second
    assert first == render(compile_policies(load_policies(SHIPPED)))


def test_a_policy_change_changes_the_objects(tmp_path: Path) -> None:
    copy = tmp_path / "policies"
    shutil.copytree(SHIPPED, copy)
    serving = copy / "10-serving.yaml"
    serving.write_text(serving.read_text().replace("maxPerContainer: 4", "maxPerContainer: 3"))
    objects = compile_policies(load_policies(copy)).objects
    enforce = next(o for o in objects if o["metadata"]["name"] == "gpugate-enforce")
    [per_container] = [v["expression"] for v in enforce["spec"]["variables"] if v["name"] == "maxPerContainer"]
    assert '{"default": 8, "serving": 3}' in per_container
    assert "variables.maxPerContainer" in enforce["spec"]["validations"][0]["expression"]
    assert render(compile_policies(load_policies(SHIPPED))) != render(compile_policies(load_policies(copy)))


@pytest.mark.parametrize("glob", ["nvidia.com/mig-*", "amd.com/[sdqc]px_nps*", "team-?", "[!a]*", "ml-serving"])
def test_a_glob_pattern_matches_what_fnmatch_matches(glob: str) -> None:
    names = [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpu",
        "amd.com/cpx_nps4",
        "amd.com/gpu",
        "team-a",
        "team-ab",
        "ml-serving",
        "ml-servingx",
        "a",
        "b",
        "nvidia.comXmig-1",
    ]
    for name in names:
        assert bool(re.search(glob_pattern(glob), name)) == fnmatch.fnmatchcase(name, glob), (glob, name)
    assert not re.search(any_glob([]), "anything")


def test_a_look_alike_pattern_catches_every_key_exported_under_the_same_name() -> None:
    pattern = look_alike_pattern("gpugate.io/team")
    for key in ("gpugate.io/team", "gpugate.io/TEAM", "gpugate-io/team", "gpugate.io/Team"):
        assert metric_label_name(key) == metric_label_name("gpugate.io/team")
        assert re.search(pattern, key.lower()), key
    assert not re.search(pattern, "gpugate.io/teams")


def test_literals_are_cel_and_sorted() -> None:
    assert literal({"b": [1, "x"], "a": True}) == '{"a": true, "b": [1, "x"]}'
    assert literal('quote " and \\') == '"quote \\" and \\\\"'


def test_compile_prints_yaml_the_apiserver_takes() -> None:
    done = gpugate("policy", "compile", str(SHIPPED))
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in docs][:2] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]


def test_explain_names_each_policy_and_where_each_rule_is_decided() -> None:
    done = gpugate("policy", "compile", "--explain", str(SHIPPED))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(
        line.startswith("serving: limits (maxPerContainer, maxPerPod): native : gpugate-enforce (Deny)")
        for line in lines
    ), done.stdout
    assert any(
        line.startswith("research: limits (maxPerContainer, maxPerPod): native : gpugate-warn (Warn)") for line in lines
    ), done.stdout
    assert any(line.startswith("*: DRA claims and DRA-backed extended resources: webhook:") for line in lines)
    assert any(line.startswith("default: plain GPU pods:") and "nvidia.com/gpu" in line for line in lines)


def test_validate_says_the_same(tmp_path: Path) -> None:
    plain = gpugate("policy", "validate", str(SHIPPED))
    assert plain.returncode == 0 and "native tier" not in plain.stdout, plain
    done = gpugate("policy", "validate", "--explain", str(SHIPPED))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(plain.stdout + "native tier (gpugate policy compile):\n")
    assert gpugate("policy", "compile", "--explain", str(SHIPPED)).stdout.strip() in done.stdout


def test_a_policy_directory_that_does_not_load_prints_no_objects(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(
        "apiVersion: gpugate.io/v2\nkind: GPUPolicy\nmetadata: {name: x}\nspec: {mode: loud}\n"
    )
    done = gpugate("policy", "compile", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout == ""
    assert "broken.yaml" in done.stderr and "mode" in done.stderr


def test_the_shipped_component_and_chart_hold_the_shipped_policies_compiled() -> None:
    objects = compile_policies(load_policies(REPO / "deploy" / "base" / "policies"))
    compiled = render(objects)
    assert (REPO / "deploy" / "components" / "native-tier" / "native.yaml").read_text() == compiled, "run make native"
    patch = yaml.safe_load((REPO / "deploy" / "components" / "native-tier" / "narrowing.yaml").read_text())
    assert patch == webhook_patch(objects), "run make native"
    assert (REPO / "charts" / "gpugate" / "files" / "native" / "native.yaml").read_text() == compiled, (
        "run make chart-sync"
    )


def test_the_webhooks_are_narrowed_by_the_condition_gpugate_always_enforces(compiled: list[dict]) -> None:
    """One rule judged in one place: the condition under which the narrowed webhooks skip a pod is the same text
    gpugate-always checks the pod's claim under, and the annotation carries it for whoever installs the objects."""
    always = next(
        o for o in compiled if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
    )
    condition = always["metadata"]["annotations"][NARROWING_ANNOTATION]
    skipped = decided_natively(load_policies(SHIPPED).policies)
    assert condition == f"!({skipped})"
    variables = {v["name"]: v["expression"] for v in always["spec"]["variables"]}
    assert variables["claimsFormed"] == skipped
    claims = [v for v in always["spec"]["validations"] if v["expression"].startswith("!variables.claimsFormed || ")]
    assert len(claims) == 4
    for claim in claims:
        assert "remove" in claim["messageExpression"] and "gpugate.io annotations" in claim["messageExpression"]
        # Every variable a claim reads is defined on the object (the mutating policy's, evaluated lazily).
        assert set(re.findall(r"variables\.(\w+)", claim["expression"] + claim["messageExpression"])) <= set(variables)
    # It reads nothing a webhook's matchCondition does not have.
    assert "namespaceObject" not in skipped and "variables." not in skipped and "params" not in skipped
    # A webhook takes at most 64 matchConditions; gpugate's have two.
    assert webhook_patch(compile_policies(load_policies(SHIPPED))) == [
        {
            "op": "add",
            "path": "/webhooks/0/matchConditions/-",
            "value": {"name": "not-decided-natively", "expression": condition},
        }
    ]


def test_compile_prints_the_webhook_patch() -> None:
    done = gpugate("policy", "compile", "--webhook-patch", str(SHIPPED))
    assert done.returncode == 0, done.stderr
    (op,) = yaml.safe_load(done.stdout)
    assert op["op"] == "add" and op["value"]["name"] == "not-decided-natively"
