"""The native tier's compiler (webhook/native): the objects it prints for the shipped policies are valid Kubernetes
1.36 objects (kubernetes-validate, strict), few and deterministic; its globs mean what the policy model's do; the
CLI prints them, explains them, and prints nothing on a policy directory that does not load. What they decide is
tests/e2e/test_native.py's to prove, through the real apiserver."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cel_expr_python import cel

from tests.support import REPO
from webhook.native.cel import any_glob, glob_pattern, literal, look_alike_pattern
from webhook.native.command import render
from webhook.native.compiler import NARROWING_ANNOTATION, compile_policies, decided_natively, explain, webhook_patch
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
    # The shipped policies are in enforce (default, serving) and warn (research) mode: no audit objects, and the
    # enforce-mode rules share gpugate-always (Deny): an object fewer for the apiserver to evaluate per pod.
    assert kinds == [
        ("MutatingAdmissionPolicy", "gpugate-mutate"),
        ("MutatingAdmissionPolicyBinding", "gpugate-mutate"),
        ("ValidatingAdmissionPolicy", "gpugate-warn"),
        ("ValidatingAdmissionPolicyBinding", "gpugate-warn"),
        ("ValidatingAdmissionPolicy", "gpugate-always"),
        ("ValidatingAdmissionPolicyBinding", "gpugate-always"),
    ]
    assert all(o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpugate" for o in compiled)
    actions = {
        o["metadata"]["name"]: o["spec"]["validationActions"] for o in compiled if "validationActions" in o["spec"]
    }
    assert actions == {"gpugate-warn": ["Warn", "Audit"], "gpugate-always": ["Deny"]}
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
    deny = next(o for o in objects if o["metadata"]["name"] == "gpugate-always")
    [per_container] = [v["expression"] for v in deny["spec"]["variables"] if v["name"] == "maxPerContainer"]
    assert '{"default": 8, "serving": 3}' in per_container
    assert any("variables.maxPerContainer" in v["expression"] for v in deny["spec"]["validations"])
    assert render(compile_policies(load_policies(SHIPPED))) != render(compile_policies(load_policies(copy)))


def _gpu_pod(**meta: Any) -> dict[str, Any]:
    spec = meta.pop("spec", {})
    container = {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    container.update(meta.pop("container", {}))
    return {"metadata": {"name": "p", **meta}, "spec": {"containers": [container], **spec}}


def _matches(
    conditions: list[dict[str, str]],
    pod: dict[str, Any],
    namespace: str = "default",
    request: dict[str, Any] | None = None,
) -> bool:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "request")})
    request = {"namespace": namespace, **(request or {})}
    results = [env.compile(c["expression"]).eval(data={"object": pod, "request": request}) for c in conditions]
    for r in results:
        assert r.type() != cel.Type.ERROR, r.value()
    return all(r.plain_value() for r in results)


def test_the_mutating_policy_matches_pods_it_could_form_and_formed_pods_a_later_webhook_gave_a_container(
    compiled: list[dict],
) -> None:
    """A matched MutatingAdmissionPolicy costs the apiserver a patch round trip and a second pass of the mutating
    chain even when it adds nothing: the match condition turns away what could never be plain, and on the
    reinvocation pass (IfNeeded) every formed pod but one a later webhook gave a container without GPUs."""
    spec = compiled[0]["spec"]
    assert spec["reinvocationPolicy"] == "IfNeeded"
    conditions = spec["matchConditions"]
    # One condition: the apiserver evaluates every match condition before it reads any, CEL's && stops at the first
    # false part, and || at the first true one.
    assert [c["name"] for c in conditions] == ["gpu-pod-to-form"]
    assert conditions[0]["expression"].startswith('(((!has(object.metadata.annotations) || !("gpugate.io/policy" in ')
    assert _matches(conditions, _gpu_pod())
    assert _matches(conditions, _gpu_pod(annotations={"example.com/x": "y"}, labels={"app": "a"}))
    assert not _matches(conditions, _gpu_pod(spec={"nodeName": "n1"}))
    assert not _matches(conditions, _gpu_pod(spec={"resourceClaims": [{"name": "gpu"}]}))
    assert not _matches(conditions, _gpu_pod(annotations={"cdi.k8s.io/x": "y"}))
    assert not _matches(conditions, _gpu_pod(container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]}))
    assert not _matches(conditions, _gpu_pod(container={"envFrom": [{"configMapRef": {"name": "c"}}]}))
    many = _gpu_pod()
    many["spec"]["containers"] *= 17
    assert not _matches(conditions, many)
    cpu = _gpu_pod(container={"resources": {}})
    assert not _matches(conditions, cpu)

    # What the reinvocation pass sees: a formed pod stops there, unless a container without GPUs and without
    # NVIDIA_VISIBLE_DEVICES was added after the first pass (a sidecar injector's), in spec or as an init container.
    bookkeeping = {"gpugate.io/policy": "default", "gpugate.io/mutated": "labels,runtimeClassName,tolerations"}
    formed = _gpu_pod(annotations=dict(bookkeeping))
    assert not _matches(conditions, formed)
    assert not _matches(conditions, _gpu_pod(annotations={"gpugate.io/policy": "default"}))
    proxy = {"name": "proxy", "image": "envoy"}
    sidecar = _gpu_pod(annotations=dict(bookkeeping))
    sidecar["spec"]["containers"].append(dict(proxy))
    assert _matches(conditions, sidecar)
    init = _gpu_pod(annotations=dict(bookkeeping))
    init["spec"]["initContainers"] = [{"name": "istio-init", "image": "proxyv2"}]
    assert _matches(conditions, init)
    voided = _gpu_pod(annotations=dict(bookkeeping))
    voided["spec"]["containers"].append({**proxy, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]})
    assert not _matches(conditions, voided)
    # Only where a class voids: an AMD pod's second container is no reason to run again.
    amd = _gpu_pod(annotations=dict(bookkeeping), container={"resources": {"limits": {"amd.com/gpu": "1"}}})
    amd["spec"]["containers"].append(dict(proxy))
    assert not _matches(conditions, amd)
    # A GPU container added later is not one to void (the webhook judges that pod).
    second = _gpu_pod(annotations=dict(bookkeeping))
    second["spec"]["containers"].append({**proxy, "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    assert not _matches(conditions, second)


def test_the_native_tier_marks_what_it_formed_and_unmarks_what_it_did_not(compiled: list[dict]) -> None:
    """The pod-create webhooks skip a pod that carries gpugate.io/formed-by (their objectSelector, no CEL): gpugate-mutate
    gives the label to every pod it forms, and removes it from a pod that carries it and is not formed as it forms
    one (a later webhook changed it, or its author wrote it), so that the webhooks judge that pod; gpugate-always,
    which sees every pod that carries it, refuses one that still does and is not so formed."""
    mutate, always = compiled[0], next(o for o in compiled if o["metadata"]["name"] == "gpugate-always")
    patch = mutate["spec"]["mutations"][0]["jsonPatch"]["expression"]
    plain = patch[patch.index("!variables.plain || size(variables.touched) == 0 ? [] : ") :]
    assert 'jsonpatch.escapeKey("gpugate.io/formed-by"), value: "native-tier"}' in plain
    assert patch.endswith(
        "(variables.unform ? [JSONPatch{op: 'remove', path: '/metadata/labels/' + "
        'jsonpatch.escapeKey("gpugate.io/formed-by")}] : [])'
    )
    variables = {v["name"]: v["expression"] for v in mutate["spec"]["variables"]}
    assert variables["unform"].startswith('!variables.plain && "gpugate.io/formed-by" in variables.labels && !(')
    # Its match condition lets through a pod that carries the label and is not formed: one that only names a policy,
    # and one without GPUs at all (nothing else of gpugate-mutate's would match it).
    request = {"operation": "CREATE", "resource": {"resource": "pods"}}
    marked = {"gpugate.io/formed-by": "native-tier"}
    conditions = mutate["spec"]["matchConditions"]
    assert _matches(conditions, _gpu_pod(labels=marked, annotations={"gpugate.io/policy": "default"}), request=request)
    assert _matches(conditions, _gpu_pod(labels=marked, container={"resources": {}}), request=request)
    assert not _matches(conditions, _gpu_pod(container={"resources": {}}), request=request)
    # gpugate-always sees every pod that carries the label, and says which label and what to do.
    assert _matches(always["spec"]["matchConditions"], _gpu_pod(labels=marked, container={"resources": {}}))
    assert not _matches(always["spec"]["matchConditions"], _gpu_pod(container={"resources": {}}))
    (check,) = [v for v in always["spec"]["validations"] if "gpugate.io/formed-by" in v["expression"]]
    assert check["expression"] == '!("gpugate.io/formed-by" in variables.labels) || variables.claimsFormed'
    assert "gpugate.io/formed-by" in check["message"] and "remove the label" in check["message"]
    assert "messageExpression" not in check  # a static message: no activation of its own
    selector = {"matchExpressions": [{"key": "gpugate.io/formed-by", "operator": "DoesNotExist"}]}
    assert always["metadata"]["annotations"]["gpugate.io/webhook-object-selector"] == json.dumps(
        selector, separators=(",", ":")
    )


def test_a_warn_object_is_evaluated_only_where_a_warn_policy_can_govern(compiled: list[dict]) -> None:
    """The shipped research policy (warn) matches research-*: a GPU pod anywhere else never reaches gpugate-warn,
    and gpugate-always (every mode's security rules) is not narrowed."""
    objects = {o["metadata"]["name"]: o for o in compiled if o["kind"] == "ValidatingAdmissionPolicy"}
    warn = objects["gpugate-warn"]["spec"]["matchConditions"]
    assert _matches(warn, _gpu_pod(), namespace="research-vision")
    assert not _matches(warn, _gpu_pod(), namespace="ml-serving")
    assert not _matches(warn, _gpu_pod(), namespace="default")
    assert _matches(objects["gpugate-always"]["spec"]["matchConditions"], _gpu_pod(), namespace="default")


def test_no_message_works_out_its_validation_again(compiled: list[dict]) -> None:
    """The apiserver evaluates every messageExpression of a ValidatingAdmissionPolicy for every request it matches,
    admitted or not, in an activation of its own where every variable is evaluated again: a message guarded by its
    validation (``valid ? '' : message``) paid the validation twice for every admitted pod, the checks of a formed
    pod's claim among them. No message repeats its validation, and none reads the claim check."""
    validations = [v for o in compiled for v in o["spec"].get("validations", [])]
    assert validations
    for v in validations:
        assert v["expression"] not in v.get("messageExpression", ""), v["message"]
        assert "variables.claimsFormed" not in v.get("messageExpression", ""), v["message"]


def test_a_formed_pod_s_claim_is_checked_on_the_object_not_by_forming_it_again(compiled: list[dict]) -> None:
    """The checks of a natively formed pod's claim were most of gpugate-always's cost for such a pod: they built
    the whole mutation's label list (``labelPairs``) and decided the runtime class again, and their messages, which
    the apiserver evaluates for every pod in an activation of its own, built it once more. Now each reads the final
    object against what it must hold: the claim condition reads the containers and resource maps the object's
    variables hold (once per activation, not six times), labels are compared with the namespace's values and the
    owner directly, the look-alikes with the policy's keys, and no message derives the workload or the label list."""
    always = next(
        o for o in compiled if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
    )
    variables = {v["name"]: v["expression"] for v in always["spec"]["variables"]}
    claims = [v for v in always["spec"]["validations"] if v["expression"].startswith("!variables.claimsFormed || ")]
    read = " ".join(v["expression"] + v["messageExpression"] for v in claims)
    for formed_again in ("variables.labelPairs", "variables.touched", "variables.addRuntimeClass", "variables.plain"):
        assert formed_again not in read, formed_again
    assert "(object.spec.containers + " not in variables["claimsFormed"]
    assert variables["claimsFormed"].count("variables.maps") == 2
    for claim in claims:
        message = claim["messageExpression"]
        assert "variables.workload" not in message and "variables.missingTolerations" not in message, message
    # The tolerations and void as booleans in one pass, not the mutating policy's index lists (its patch needs them).
    for index_list in ("variables.missingTolerations", "variables.voidContainers", "variables.voidInit"):
        assert index_list not in read, index_list
    # What the mutating policy gives: the labels it writes, and the class a pod names, are the look-alike check's
    # owned keys.
    assert (
        '["gpugate.io/team", "gpugate.io/cost-center", "gpugate.io/workload-kind", "gpugate.io/workload-name", '
        '"gpugate.io/model"]' in read
    )


def test_gpu_counts_are_read_from_the_limits_alone(compiled: list[dict]) -> None:
    """Validating admission runs after the apiserver validated the pod, which holds a GPU count (an extended
    resource) to a whole limit that its request, if any, equals: the counts are read from the limits, with one
    quantity parse each, and a pod without init containers skips their arithmetic."""
    always = next(
        o for o in compiled if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
    )
    variables = {v["name"]: v["expression"] for v in always["spec"]["variables"]}
    for name in ("appGPUs", "initGPUs"):
        assert "requests" not in variables[name] and variables[name].count("quantity(") == 1, variables[name]
    assert variables["podGPUs"].startswith("size(variables.init) == 0 ? variables.appGPUs.sum() : ")


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
        line.startswith("serving: limits (maxPerContainer, maxPerPod): native : gpugate-always (Deny)")
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
    # The same text, but for the containers and resource maps read from the object's variables: bound from those
    # variables' own expressions after the cheap tests (cs and ms), it is the webhooks' condition.
    everyone = "(" + variables["all"].replace("variables.init", f"({variables['init']})") + ")"
    maps = "(" + variables["maps"].replace("variables.all", "cs") + ")"
    claim = variables["claimsFormed"]
    first = claim.index("variables.all.all(c, (!has(c.envFrom)")
    reading = claim[first:].replace("variables.maps", "ms").replace("variables.all", "cs")
    assert "variables." not in claim[:first]
    assert f"{claim[:first]}[{everyone}].all(cs, [{maps}].all(ms, {reading}))" == skipped
    claims = [v for v in always["spec"]["validations"] if v["expression"].startswith("!variables.claimsFormed || ")]
    assert len(claims) == 5
    for claim in claims:
        assert "remove" in claim["messageExpression"] and "gpugate.io annotations" in claim["messageExpression"]
        # Every variable a claim reads is defined on the object (the mutating policy's, evaluated lazily).
        assert set(re.findall(r"variables\.(\w+)", claim["expression"] + claim["messageExpression"])) <= set(variables)
    # It reads nothing a webhook's matchCondition does not have.
    assert "namespaceObject" not in skipped and "variables." not in skipped and "params" not in skipped
    # A webhook takes at most 64 matchConditions; gpugate's have two. The first webhook of each configuration is the
    # one that routes a pod's creation alone (deploy/base/webhooks.yaml), and only it gets the objectSelector.
    assert webhook_patch(compile_policies(load_policies(SHIPPED))) == [
        {
            "op": "add",
            "path": "/webhooks/0/objectSelector",
            "value": {"matchExpressions": [{"key": "gpugate.io/formed-by", "operator": "DoesNotExist"}]},
        },
        {
            "op": "add",
            "path": "/webhooks/0/matchConditions/-",
            "value": {"name": "not-decided-natively", "expression": condition},
        },
    ]


def test_compile_prints_the_webhook_patch() -> None:
    done = gpugate("policy", "compile", "--webhook-patch", str(SHIPPED))
    assert done.returncode == 0, done.stderr
    selector, condition = yaml.safe_load(done.stdout)
    assert selector["path"] == "/webhooks/0/objectSelector"
    assert condition["op"] == "add" and condition["value"]["name"] == "not-decided-natively"


def _returning(value: dict[str, str]) -> Callable[[], dict[str, str]]:
    return lambda: value


@pytest.mark.parametrize("count", [3, 200])
def test_the_governing_policy_of_many_team_policies_nests_no_deeper_than_of_three(tmp_path: Path, count: int) -> None:
    """The apiserver refuses an object whose expression nests past CEL's recursion limit (cel-go: 250; this
    evaluator: 32), and a chain of one ternary per policy nested 1,000 deep: ``gpugate-mutate`` of bench/scale.py's
    1,000 team policies was refused when written. The governing policy is found in a flat list instead, and it
    is the policy the webhook's engine picks. 200 policies nest past this evaluator's limit as 1,000 do past
    cel-go's (the 1,000 themselves go through the apiserver in bench/apiserver.py --native-policies 1000); they
    keep the test's time small."""
    from bench.scale import write_policies

    write_policies(tmp_path, count)
    policies = load_policies(tmp_path)
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("request", "variables")})
    cases = [
        ("team-0003-a", {}, {}),
        ("project-0001", {}, {}),
        ("elsewhere", {"team": "team-0002"}, {}),
        ("team-0000-a", {}, {"app": "app-0000"}),
        ("team-0000-a", {}, {}),
        ("default", {}, {}),
    ]
    # Deeper in the priority order, in later groups of the two-level pick: a glob, an exact name, a namespace label,
    # a group whose cheap check holds (team-0000-*) and none of whose policies match (no app label).
    cases += [
        (f"team-{count - 3 - count % 3:04d}-x", {}, {}),
        (f"project-{count - 2 - (count - 1) % 3:04d}", {}, {}),
        ("elsewhere", {"team": f"team-{count - 1 - count % 3:04d}"}, {}),
        ("elsewhere", {"team": "nobody"}, {"app": "app-0000"}),
    ]
    for obj in compile_policies(policies).objects:
        variables = {v["name"]: v["expression"] for v in obj["spec"].get("variables", [])}
        if "policy" not in variables:
            continue
        # Compiled once per object (compiling the 1,000-policy list per case took most of this test's time).
        matching = {name: env.compile(e) for name, e in variables.items() if name.startswith("policyGroups")}
        governing = env.compile(variables["policy"])
        for namespace, ns_labels, labels in cases:
            data: dict[str, Any] = {
                "request": {"namespace": namespace},
                "variables": {"nsLabels": ns_labels, "labels": labels},
            }
            for name, groups in matching.items():
                matches = groups.eval(data=data)
                assert matches.type() != cel.Type.ERROR, matches.value()
                data["variables"][name] = matches.plain_value()
            result = governing.eval(data=data)
            assert result.type() != cel.Type.ERROR, result.value()
            expected = policies.governing(
                namespace=namespace, pod_labels=labels, namespace_labels=_returning(ns_labels)
            )
            assert result.plain_value() == expected.name, (obj["metadata"]["name"], namespace, labels)


def test_the_governing_policy_of_many_policies_is_picked_in_two_levels(tmp_path: Path) -> None:
    """With 1,000 team policies every GPU pod paid all 1,000 conditions (a flat list, built whole) in every
    activation that read the governing policy. Now a pod pays one cheap condition per group of 16 (the group's
    namespace names as one list and one pattern, its label-matched policies as one lookup per key) and the
    conditions of the groups that pass; which policy it picks is the test above's."""
    from bench.scale import write_policies

    write_policies(tmp_path, 200)
    policies = load_policies(tmp_path)
    for obj in compile_policies(policies).objects:
        variables = {v["name"]: v["expression"] for v in obj["spec"].get("variables", [])}
        if "policy" not in variables:
            continue
        assert "policyMatches" not in variables
        env = cel.NewEnv(variables={"request": cel.Type.DYN, "variables": cel.Type.DYN})
        groups = env.compile(variables["policyGroups0"])

        def answers(namespace: str, ns_labels: dict[str, str], groups: Any = groups) -> list[str]:
            data = {"request": {"namespace": namespace}, "variables": {"nsLabels": ns_labels, "labels": {}}}
            result = groups.eval(data=data)
            assert result.type() != cel.Type.ERROR, result.value()
            return list(result.plain_value())

        # 200 policies above the fallback, highest priority (team-0199) first: 13 groups of 16, none of which holds
        # a match in the fallback's namespace, and the one that holds team-0150's (the 50th) answers it.
        assert answers("default", {}) == ["/"] * 13
        assert answers("team-0150-x", {}) == ["/"] * 3 + ["team-0150"] + ["/"] * 9
        assert answers("elsewhere", {"team": "team-0002"}) == ["/"] * 12 + ["team-0002"]


def test_a_pod_carrying_claims_pending_is_left_to_the_webhook() -> None:
    """``gpugate.io/claims-pending`` is /mutate's (a pod naming claims is never plain): a pod that carries it is not
    one the narrowed webhooks skip, however formed it looks, so /mutate removes it and /validate judges it."""
    from tests.support import container, mutated, pod

    policies = load_policies(SHIPPED)
    program = cel.NewEnv(variables={n: cel.Type.DYN for n in ("object", "request")}).compile(
        decided_natively(policies.policies)
    )

    def skipped(obj: dict[str, Any]) -> bool:
        request = {"operation": "CREATE", "resource": {"resource": "pods"}, "namespace": "default"}
        result = program.eval(data={"object": obj, "request": request})
        assert result.type() != cel.Type.ERROR, result.value()
        return bool(result.plain_value())

    formed, _ = mutated(pod(container(limits={"nvidia.com/gpu": 1})), policies)
    assert skipped(formed)  # formed exactly as gpugate-mutate forms it
    formed["metadata"]["labels"]["gpugate.io/claims-pending"] = "train"
    assert not skipped(formed)


def test_the_workload_is_two_variables(compiled: list[dict]) -> None:
    """Every variable costs each activation of its object an entry in the lazy variable map and, once read, an
    evaluation of its own: the workload (its owner, the pod's own name, the Deployment and CronJob derivations)
    is two variables, its kind and its name, in the mutating policy and in gpugate-always's claim check."""
    for name in ("gpugate-mutate", "gpugate-always"):
        obj = next(o for o in compiled if o["metadata"]["name"] == name and "variables" in o["spec"])
        variables = {v["name"]: v["expression"] for v in obj["spec"]["variables"]}
        reading = {n for n, e in variables.items() if "ownerReferences" in e or "generateName" in e}
        assert reading == {"workloadKind", "workloadName"}, (name, reading)
        assert not {"owner", "ownName", "kind0", "name0", "fromReplicaSet", "fromCronJob"} & set(variables), name


def test_no_object_carries_a_variable_it_does_not_read(compiled: list[dict]) -> None:
    """Every activation of an object (match conditions, validations, messages, audit annotations, the patch) adds an
    entry for each of its variables to a lazy map of its own, read or not: gpugate-always carried all of
    gpugate-mutate's, the patch's among them. Each object keeps what its expressions read (gpugate-always also
    what gpugate-pools reads of it)."""
    pools = {"claimsFormed", "resource", "policy", "init", "key", "model", "holdsGPU"}
    for obj in compiled:
        if "variables" not in obj["spec"]:
            continue
        expressions = {v["name"]: v["expression"] for v in obj["spec"]["variables"]}
        rest = yaml.safe_dump({k: v for k, v in obj["spec"].items() if k != "variables"}, width=1 << 20)
        read = set(re.findall(r"variables\.(\w+)", rest)) | (
            pools if obj["metadata"]["name"] == "gpugate-always" else set()
        )
        for _ in expressions:
            read |= {m for n in read & set(expressions) for m in re.findall(r"variables\.(\w+)", expressions[n])}
        assert set(expressions) <= read, (obj["metadata"]["name"], sorted(set(expressions) - read))


def test_the_limits_messages_are_built_only_for_a_pod_over_a_limit(compiled: list[dict]) -> None:
    """The apiserver evaluates every message of every pod in an activation of its own: the limits' messages read
    the pod's GPU count (podGPUs, which no container exceeds) and stop there for a pod within the limits, without
    the containers' counts, their list and filter, or the text."""
    always = next(
        o for o in compiled if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
    )
    # indexOf (the Kubernetes list library) declared for the type check: no pod within the limits reaches it.
    index_of = cel.FunctionDecl("indexOf", [cel.Overload("list_index_of", cel.Type.INT, [cel.Type.DYN] * 2, True)])
    env = cel.NewEnv(
        variables={"variables": cel.Type.DYN},
        functions=[index_of],
        function_impls={"list_index_of": lambda items, item: list(items).index(item)},
    )
    limits = {"maxPerContainer": 4, "maxPerPod": 8, "policy": "serving"}
    messages = {
        v["message"]: env.compile(v["messageExpression"])
        for v in always["spec"]["validations"]
        if "variables.maxPerContainer" in v["expression"] or "variables.maxPerPod" in v["expression"]
    }
    assert len(messages) == 2
    for gpus in (0, 1, 4):  # within both limits: no container's counts are read (none are given)
        for message in messages.values():
            result = message.eval(data={"variables": {**limits, "podGPUs": gpus}})
            assert result.type() != cel.Type.ERROR, result.value()
            assert result.plain_value() == ""
    per_pod = messages["gpugate: the pod requests more GPUs than its policy allows per pod"]
    result = per_pod.eval(data={"variables": {**limits, "podGPUs": 9}})
    assert result.plain_value() == (
        'spec.containers: pod: requests 9 GPUs in all, more than the 8 per pod that policy "serving" allows; '
        "request at most 8 GPUs per pod (gpugate)"
    )
    no_limit = {"maxPerContainer": -1, "maxPerPod": -1, "policy": ""}  # no podGPUs either: not read
    for message in messages.values():
        assert message.eval(data={"variables": no_limit}).plain_value() == ""


def test_a_pod_naming_a_class_that_serves_it_is_decided_natively_and_one_the_webhook_must_judge_is_not() -> None:
    """A pod whose ``gpugate.io/model`` label names a class of its policy that offers what it requests is formed by
    gpugate-mutate as /mutate forms it (the class's selector or affinity term, the device's tolerations and runtime
    class, a DRA-only class without one), so the narrowed webhooks skip it once formed; a class the policy does not
    have or one that does not offer the resource stays the webhook's, which names the classes that would serve it."""
    from tests.support import container, mutated, pod

    policies = load_policies(SHIPPED)
    program = cel.NewEnv(variables={n: cel.Type.DYN for n in ("object", "request")}).compile(
        decided_natively(policies.policies)
    )

    def skipped(obj: dict[str, Any]) -> bool:
        request = {"operation": "CREATE", "resource": {"resource": "pods"}, "namespace": "default"}
        result = program.eval(data={"object": obj, "request": request})
        assert result.type() != cel.Type.ERROR, result.value()
        return bool(result.plain_value())

    def named(model: str, resource: str) -> dict[str, Any]:
        p = pod(container(limits={resource: 1}))
        p["metadata"].setdefault("labels", {})["gpugate.io/model"] = model
        formed, _ = mutated(p, policies)
        return formed

    for model, resource, selector in [
        ("t4", "nvidia.com/gpu", {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
        ("h100-mig", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}),
        ("a100", "nvidia.com/mig-1g.10gb", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
        ("mi300x", "amd.com/gpu", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
        ("h200", "nvidia.com/gpu", {"node.kubernetes.io/instance-type": "p5en.48xlarge"}),  # DRA-only: no class
        ("l40s", "nvidia.com/gpu", {"karpenter.k8s.aws/instance-gpu-name": "l40s"}),  # pool labels, no product
    ]:
        formed = named(model, resource)
        assert formed["spec"]["nodeSelector"] == selector, model
        assert skipped(formed), model
    assert "runtimeClassName" not in named("h200", "nvidia.com/gpu")["spec"]
    # Not served (l4 offers plain nvidia.com/gpu only), not a class: the webhook's. (A look-alike of the label is
    # gpugate-always's to refuse, with the look-alikes of the attribution labels.)
    for model, resource in [("l4", "nvidia.com/gpu.shared"), ("nope", "nvidia.com/gpu")]:
        assert not skipped(named(model, resource)), (model, resource)
    # Formed for one class, claiming another: the entry of the named class does not hold.
    forged = named("t4", "nvidia.com/gpu")
    forged["metadata"]["labels"]["gpugate.io/model"] = "h100"
    assert not skipped(forged)


def test_explain_says_a_named_class_is_decided_natively() -> None:
    outcomes = {(o.policy, o.rule): o for o in explain(load_policies(SHIPPED))}
    named = outcomes[
        ("default", "a class named by gpugate.io/model: its selector or affinity term, tolerations, runtime class")
    ]
    assert named.native and "h100-mig" in named.reason and "l40s" in named.reason
    assert not outcomes[("default", "own model choice (selectors, aliases, annotations, nodeName)")].native
