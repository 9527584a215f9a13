"""What each native object costs kube-apiserver per GPU pod, without a server: heap allocations and CPU.

bench/apiserver.py measures pods per second through a real apiserver, where two compilations a few percent apart
disappear in the machine's noise. This runs the apiserver's own admission evaluators (bench/celcost, Go, built
against k8s.io/apiserver v0.36.3, the version the end-to-end suite runs) on one pod, object by object, the way the
apiserver calls them: the MutatingAdmissionPolicy's match conditions and JSON patch (the pod encoded, patched and
decoded), then each ValidatingAdmissionPolicy's match conditions, validations, messageExpressions and audit
annotations on the formed pod. Allocations (their count, and the kilobytes they take: the garbage collector's work
grows with both) are exact and repeatable; CPU is the median of rounds, GC included.

The pod is bench/apiserver.py's GPU pod as kube-apiserver v1.36.3 holds it when admission runs
(bench/celcost/bench-pod.json: the response of a dry-run create with nothing registered, so defaulted, with the
service account's projected volume, the not-ready/unreachable tolerations and the managed fields), in a namespace
labelled team=ml that the shipped policies give to "default".

With --webhooks it also runs deploy/base/webhooks.yaml's two pod-create webhooks narrowed by the same compilation
(`gpugate policy compile --webhook-patch`, as deploy/components/native-tier installs them) on the formed pod: what
"native + webhook" costs beside the policies for a pod the webhooks skip. A webhook whose objectSelector does not
select the pod costs that test alone (a row "objectSelector: not sent"); one that does converts the pod and evaluates
its match conditions (the mutating one again on the reinvocation pass). A --before file may hold webhook
configurations too; with it, each pod formed otherwise is printed with the JSON patch from the one to the other.

With --pools the compilation carries the reference fleet's pool digest, as `gpugate serve --native-sync` writes it
(webhook/native/pools.py). With --before FILE (another compilation: `git show main:deploy/components/native-tier/
native.yaml`) both are measured, and both are run on 281 pods (workloads, limits, shapes, forged claims, and pods a
later mutating webhook gives a sidecar between the chain's two passes, in four namespaces): every pod whose formed
object or decisions differ is printed, so a cut that changes a decision shows. The mutating policies run as the
apiserver's chain runs them, a second time on the reinvocation pass their change brings, and that pass's cost is a
row of its own.

With --anatomy it also prints what the objects cost before any expression of theirs and where their expressions
spend. The floor: the same evaluators on objects that do nothing (a MutatingAdmissionPolicy with one JSON patch
operation, a ValidatingAdmissionPolicy with one validation, one whose match condition is false, a webhook with one
match condition), each evaluation of theirs converting the pod afresh. The variables: for each variable of each
native object, the allocations of evaluating it with the variables it reads, on the pod that object sees
(gpugate-mutate's on the pod as sent, the validating objects' on the pod it formed): a probe
ValidatingAdmissionPolicy per variable, less one that reads none.

With --cel-equivalent it also measures bench/cel-equivalent.yaml, the CEL a platform team could register instead
(one mutating policy with an apply configuration and a JSON patch, one validating policy), on the same pod: what
bench/apiserver.py's "CEL" row costs, object by object. With --floor, bench/in-process-floor.yaml, the least an
in-process tier that forms GPU pods costs (bench/fleet_scale.py's floor mode), on the same pod.

With --cuts it also measures gpugate-always with part of what it checks on the same pod (CUTS: without the claim
checks, without the mode's checks, one trivial validation with and without its variables): what each part costs.

With --backstop it also measures deploy/base/admission-policy.yaml's gpugate-backstop, which every installation of
gpugate carries beside either tier (bench/apiserver.py registers neither it nor gpugate-runtime-handlers, whose match
condition the apiserver evaluates once per RuntimeClass, and which this does not measure: bench/celcost binds no
params), as shipped and without its match condition BACKSTOP_SKIP (the backstop before round 11, which judged every
creation), on the pod the native tier formed and on a CPU pod's creation, and compares the two's decisions on every
case: what the match condition saves a GPU pod, what it costs a CPU pod, and that it changes no verdict.

With --without PARTS it also measures a what-if: the compilation without some of what the issue asks of it (WITHOUT:
the claim checks, the messageExpressions, gpugate-warn), and counts the pods of the 281 it decides or forms otherwise
(what the parts are for). With --write-without FILE it writes that what-if's policies and bindings to FILE, which
`bench/apiserver.py --registrations "...,native (before)" --native-before FILE` measures through the apiserver.

Run: .venv/bin/python bench/native_cost.py [--pools] [--webhooks] [--anatomy] [--cel-equivalent] [--floor] [--cuts]
[--backstop] [--before FILE] [--without PARTS [--write-without FILE]] [--rounds 5]   (needs go)
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webhook.inventory.snapshot import load_snapshot  # noqa: E402
from webhook.native.compiler import compile_policies, webhook_patch  # noqa: E402
from webhook.native.pools import digest_of, with_pools  # noqa: E402
from webhook.policy.files import load_policies  # noqa: E402

TOOL = REPO / "bench" / "celcost"
FLEET = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


def _pod(
    name: str | None = "bench-gpu",
    gpus: str = "1",
    *,
    key: str = "nvidia.com/gpu",
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    owner: list[dict[str, Any]] | None = None,
    generate: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {"app": "bench"} if labels is None else labels}
    if name is not None:
        meta["name"] = name
    if generate is not None:
        meta["generateName"] = generate
    if owner:
        meta["ownerReferences"] = owner
    spec: dict[str, Any] = {
        "containers": containers or [{"name": "main", "image": "pause", "resources": {"limits": {key: gpus}}}]
    }
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _ref(kind: str, name: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u-" + name}
    if controller is not None:
        ref["controller"] = controller
    return ref


def _container(name: str, gpus: str | None = None, key: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "pause", **extra}
    if gpus is not None:
        c["resources"] = {"limits": {key: gpus, "cpu": "1"}}
    return c


WORKLOADS: dict[str, dict[str, Any]] = {
    "deployment": {"owner": [_ref("ReplicaSet", "web-5d8f7c9b6")], "labels": {"pod-template-hash": "5d8f7c9b6"},
                   "name": None, "generate": "web-5d8f7c9b6-"},
    "replicaset-hash-mismatch": {"owner": [_ref("ReplicaSet", "web-abc")], "labels": {"pod-template-hash": "xyz"}},
    "replicaset-empty-hash": {"owner": [_ref("ReplicaSet", "web-")], "labels": {"pod-template-hash": ""}},
    "replicaset-no-hash": {"owner": [_ref("ReplicaSet", "web-5d8f7c9b6")]},
    "cronjob": {"owner": [_ref("Job", "nightly-29000000")], "name": None, "generate": "nightly-29000000-"},
    "cronjob-short-digits": {"owner": [_ref("Job", "nightly-2900000")]},
    "job": {"owner": [_ref("Job", "train")]},
    "statefulset": {"owner": [_ref("StatefulSet", "db")], "name": "db-0"},
    "deployment-direct": {"owner": [_ref("Deployment", "d-5d8")], "labels": {"pod-template-hash": "5d8"}},
    "non-controller": {"owner": [_ref("ReplicaSet", "web-5d8f7c9b6", controller=False)],
                       "labels": {"pod-template-hash": "5d8f7c9b6"}},
    "controller-false-then-true": {"owner": [_ref("Job", "a", controller=False), _ref("ReplicaSet", "b-h")],
                                   "labels": {"pod-template-hash": "h"}},
    "no-controller-field": {"owner": [_ref("Job", "x-12345678", controller=None)]},
    "generate-dash": {"name": "given", "generate": "-"},
    "generate-dash-noname": {"name": None, "generate": "-"},
    "generate-plain": {"name": None, "generate": "abc"},
    "generate-double-dash": {"name": None, "generate": "abc--"},
    "generate-empty": {"name": "n", "generate": ""},
    "long-name": {"name": "x" * 70},
    "name-ends-dash": {"name": None, "generate": "bad--"},
    "rs-name-to-empty": {"owner": [_ref("ReplicaSet", "-h")], "labels": {"pod-template-hash": "h"}},
    "job-upper": {"owner": [_ref("Job", "Night-12345678")]},
}  # fmt: skip
SHAPES: dict[str, dict[str, Any]] = {
    "one-over": {"gpus": "9"},
    "serving-5": {"gpus": "5"},
    "two-containers": {"containers": [_container("a", "3"), _container("b", "6")]},
    "three-containers": {"containers": [_container("a", "2"), _container("b", "5"), _container("c", "5")]},
    "init-over": {"containers": [_container("a", "1")], "init": [_container("i", "9")]},
    "sidecars": {"containers": [_container("a", "4")], "init": [_container("s", "3", restartPolicy="Always"),
                 _container("i", "2"), _container("s2", "2", restartPolicy="Always")]},
    "init-peak": {"containers": [_container("a", "1")], "init": [_container("s", "4", restartPolicy="Always"),
                  _container("i", "5")]},
    "zero": {"gpus": "0"},
    "quantity-k": {"gpus": "1k"},
    "quantity-milli": {"gpus": "2000m"},
    "mig-mix": {"containers": [_container("a", "1"), _container("b", "1", key="nvidia.com/mig-1g.10gb")]},
    "mig": {"gpus": "2", "key": "nvidia.com/mig-1g.10gb"},
    "amd": {"gpus": "2", "key": "amd.com/gpu"},
    "privileged": {"containers": [_container("a", "1", securityContext={"privileged": True})]},
    "visible": {"containers": [_container("a", "1"),
                               _container("b", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]},
    "cpu": {"containers": [_container("a")]},
}  # fmt: skip
# A pod formed by the objects measured, then changed so: a claim the narrowed webhooks would skip.
FORGERIES: dict[str, dict[str, Any]] = {
    "wrong-workload-name": {"labels": {"gpugate.io/workload-name": "other"}},
    "wrong-workload-kind": {"labels": {"gpugate.io/workload-kind": "Job"}},
    "wrong-workload-annotation": {"annotations": {"gpugate.io/workload": "Pod/other"}},
    "no-workload-annotation": {"annotations": {"gpugate.io/workload": None}},
    "other-owner": {"ownerReferences": [_ref("ReplicaSet", "x-h")], "labels": {"pod-template-hash": "h"}},
    "owner-added-same": {"ownerReferences": [_ref("StatefulSet", "bench-gpu")]},
    "wrong-team": {"labels": {"gpugate.io/team": "other"}},
    "look-alike": {"labels": {"gpugate.io/TEAM": "x"}},
    "other-policy": {"annotations": {"gpugate.io/policy": "serving"}},
    "untouched": {},
}
NAMESPACES: tuple[tuple[str, dict[str, str]], ...] = (
    ("bench", {"team": "ml"}),
    ("ml-serving", {}),
    ("research-x", {"team": "r"}),
    ("default", {}),
)


def cases() -> list[dict[str, Any]]:
    """The measured pod first, then workloads, shapes and forged claims in four namespaces of the shipped policies."""
    bench = json.loads((TOOL / "bench-pod.json").read_text())
    out = [{"name": "bench", "namespace": "bench", "nsLabels": {"team": "ml"}, "pod": bench}]
    for ns, labels in NAMESPACES:
        for name, kw in {**WORKLOADS, **SHAPES}.items():
            out.append({"name": f"{name}@{ns}", "namespace": ns, "nsLabels": labels, "pod": _pod(**copy.deepcopy(kw))})
        for base in ("bench", "deployment", "cronjob"):
            for name, tamper in FORGERIES.items():
                kw = {} if base == "bench" else copy.deepcopy(WORKLOADS[base])
                case = {"name": f"forged-{name}-{base}@{ns}", "namespace": ns, "nsLabels": labels, "pod": _pod(**kw)}
                out.append({**case, "tamper": tamper})
        # A later mutating webhook (a sidecar injector's) adds a container without GPUs between the two passes.
        for name in ("bench", "deployment", "two-containers"):
            kw = {} if name == "bench" else copy.deepcopy({**WORKLOADS, **SHAPES}[name])
            case = {"name": f"sidecar-{name}@{ns}", "namespace": ns, "nsLabels": labels, "pod": _pod(**kw)}
            out.append({**case, "sidecar": True})
    return out


WEBHOOKS = REPO / "deploy" / "base" / "webhooks.yaml"
CEL_EQUIVALENT = REPO / "bench" / "cel-equivalent.yaml"
IN_PROCESS_FLOOR = REPO / "bench" / "in-process-floor.yaml"


def compiled_objects(pools: bool, webhooks: bool = False) -> list[dict[str, Any]]:
    policies = load_policies(REPO / "policies")
    compiled = compile_policies(policies)
    objects = list(compiled.objects)
    if pools:
        objects = list(with_pools(compiled, policies, digest_of(load_snapshot(FLEET), policies)).objects)
    if webhooks:
        narrowing = webhook_patch(compiled)
        # As kustomize renders them (the two webhooks of a configuration share their conditions as one YAML alias).
        configurations = [json.loads(json.dumps(d)) for d in yaml.safe_load_all(WEBHOOKS.read_text()) if d]
        objects += [
            jsonpatch.apply_patch(c, narrowing) for c in configurations if c["kind"].endswith("WebhookConfiguration")
        ]
    return objects


_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
FLOOR = "floor: "
PROBE = "probe: "


def _vap(
    name: str, validation: str, variables: list[dict[str, str]] | None = None, matched: str | None = None
) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [_PODS]}}
    if matched is not None:
        spec["matchConditions"] = [{"name": "floor", "expression": matched}]
    if variables:
        spec["variables"] = variables
    spec["validations"] = [{"expression": validation, "message": "floor"}]
    meta = {"name": name}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": meta,
         "spec": spec},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": meta,
         "spec": {"policyName": name, "validationActions": ["Audit"]}},
    ]  # fmt: skip


def floor_objects() -> list[dict[str, Any]]:
    """Objects that decide nothing, each evaluated as the apiserver evaluates gpugate's: what an object of each
    kind costs a pod before any expression of its own."""
    api = "admissionregistration.k8s.io/v1"
    patch = "[JSONPatch{op: 'add', path: '/metadata/labels/floor', value: 'x'}]"
    mutating = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "matchConstraints": {"resourceRules": [_PODS]},
        "matchConditions": [{"name": "floor", "expression": "true"}],
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
    }
    hook = {
        "name": "floor.webhook.gpugate.io",
        "matchConditions": [{"name": "floor", "expression": "true"}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://floor.invalid/"},
    }
    meta = {"name": f"{FLOOR}mutating policy, one JSON patch operation"}
    return [
        {"apiVersion": api, "kind": "MutatingAdmissionPolicy", "metadata": meta, "spec": mutating},
        {"apiVersion": api, "kind": "MutatingAdmissionPolicyBinding", "metadata": meta,
         "spec": {"policyName": meta["name"]}},
        *_vap(f"{FLOOR}validating policy, one validation, a match condition", "true", matched="true"),
        *_vap(f"{FLOOR}validating policy, one validation", "true"),
        *_vap(f"{FLOOR}validating policy, its match condition false", "true", matched="false"),
        {"apiVersion": api, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "floor"},
         "webhooks": [hook]},
    ]  # fmt: skip


def variable_probes(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Per variable of ``obj``, a ValidatingAdmissionPolicy with the object's variables whose one validation reads
    that variable (into a one-element list: no comparison of its value), and one that reads none: the difference is
    what the variable costs with the variables it reads."""
    name, declared = obj["metadata"]["name"], obj["spec"].get("variables") or []
    out = _vap(f"{PROBE}{name}", "true", declared)
    for v in declared:
        out += _vap(f"{PROBE}{name} {v['name']}", f"size([variables.{v['name']}]) == 1", declared)
    return out


def anatomy_runs(objects: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """What to run for --anatomy, each list on its own: the floor; the mutating policy's variables on the pod as
    sent; the validating policies' variables on the pod the mutating policy formed (it runs first in that list,
    as in the apiserver, and its own row is not read)."""
    mutating = [o for o in objects if o["kind"].startswith("MutatingAdmissionPolicy")]
    validating = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["spec"].get("variables")]
    return [
        floor_objects(),
        [p for o in mutating if o["kind"] == "MutatingAdmissionPolicy" for p in variable_probes(o)],
        [*mutating, *(p for o in validating for p in variable_probes(o))],
    ]


def anatomy(results: dict[str, Any]) -> str:
    """The floor's rows and, per object, its variables' costs, from the costs of the runs of anatomy_runs."""
    costs = {c["object"]: c for c in results["costs"]}
    lines = [
        "| before any expression: an object that does nothing | allocations | KB | CPU µs |",
        "| --- | --- | --- | --- |",
    ]
    for name, c in costs.items():
        if name.startswith(FLOOR) or name.startswith("floor.webhook"):
            label = name.removeprefix(FLOOR).replace("floor.webhook.gpugate.io", "webhook, one match condition")
            cells = f"{c['allocations']:,} | {c['bytes'] / 1000:,.0f} | {statistics.median(c['cpu_us']):,.0f}"
            lines.append(f"| {label} | {cells} |")
    for obj in sorted({n.removeprefix(PROBE).split(" ")[0] for n in costs if n.startswith(PROBE)}):
        none = costs[f"{PROBE}{obj}"]["allocations"]
        lines += ["", f"| {obj}: variable | allocations, with the variables it reads |", "| --- | --- |"]
        for name, c in costs.items():
            if name.startswith(f"{PROBE}{obj} "):
                lines.append(f"| {name.split(' ', 2)[2]} | {c['allocations'] - none:,} |")
    return "\n".join(lines)


#: --cuts: gpugate-always with part of what it checks, on the same pod (its name kept, so its row is read off).
CUTS = (
    ("as compiled", lambda v: True, True),
    ("without the claim checks (claimsFormed and what reads it)", lambda v: "variables.claimsFormed" not in v, True),
    ("without the mode's checks (all but the claim checks)", lambda v: "variables.claimsFormed" in v, True),
    ("one validation `true`, its variables declared", lambda v: False, True),
    ("one validation `true`, no variables", lambda v: False, False),
)


def cut_runs(objects: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The compilation once per cut of CUTS: gpugate-always keeps the validations the cut keeps (one that is always
    true when it keeps none) and its variables or none."""
    runs = []
    for label, keep, variables in CUTS:
        variant = copy.deepcopy(objects)
        always = next(
            o for o in variant if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
        )
        spec = always["spec"]
        spec["validations"] = [v for v in spec["validations"] if keep(v["expression"])] or [
            {"expression": "true", "message": "cut"}
        ]
        if not variables:
            spec.pop("variables", None)
        runs.append((label, variant))
    return runs


def _drop_claim_checks(objects: list[dict[str, Any]]) -> None:
    always = _named(objects, "ValidatingAdmissionPolicy", "gpugate-always")
    always["spec"]["validations"] = [
        v for v in always["spec"]["validations"] if "variables.claimsFormed" not in v["expression"]
    ]


def _drop_messages(objects: list[dict[str, Any]]) -> None:
    for o in objects:
        if o["kind"] == "ValidatingAdmissionPolicy":
            for v in o["spec"]["validations"]:
                v.pop("messageExpression", None)


def _drop_warn(objects: list[dict[str, Any]]) -> None:
    objects[:] = [o for o in objects if o["metadata"]["name"] != "gpugate-warn"]


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


#: --without: what-ifs, not installations. Each part is something an earlier round found the native objects pay for
#: and kept, because the issue asks for it: the claim checks (gpugate-always's validations that read claimsFormed,
#: which make the narrowed webhooks' skip sound: a pod that carries gpugate's label or annotations without having
#: been formed by gpugate is refused), the messageExpressions (the messages that name the container, the policy and
#: the fix; each validation keeps its static message), and gpugate-warn (warn mode's policy).
WITHOUT = {"claim-checks": _drop_claim_checks, "messages": _drop_messages, "warn": _drop_warn}


def without_parts(objects: list[dict[str, Any]], parts: list[str]) -> list[dict[str, Any]]:
    """A copy of ``objects`` without each part of :data:`WITHOUT` that ``parts`` names."""
    out = copy.deepcopy(objects)
    for part in parts:
        WITHOUT[part](out)
    return out


def _verdicts(decisions: list[str] | None) -> set[str]:
    """Each decision's object and actions ("gpugate-always: deny deny"), without its message."""
    return {":".join(d.split(":", 2)[:2]) for d in decisions or []}


def differences(compared: dict[str, Any]) -> str:
    """How the pods of a -compare run differ: formed otherwise, refused or admitted otherwise, or only in a message."""
    formed = verdict = message = 0
    for line in compared.get("differs") or []:
        diff = json.loads(line)
        mine, theirs = diff["measured"], diff["other"]
        if mine["formed"] != theirs["formed"]:
            formed += 1
        elif _verdicts(mine["decisions"]) != _verdicts(theirs["decisions"]):
            verdict += 1
        else:
            message += 1
    return f"{formed} formed otherwise, {verdict} decided otherwise, {message} with another message only"


def parts_of(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(WITHOUT))
    if unknown or not parts:
        named = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"not a part of WITHOUT: {named} (parts: {', '.join(WITHOUT)})")
    return parts


BACKSTOP = REPO / "deploy" / "base" / "admission-policy.yaml"
#: --backstop: the backstop's match condition that leaves out a creation every validation passes (a pod that holds a
#: GPU and carries no CDI annotation); measured against the backstop without it.
BACKSTOP_SKIP = "not-a-gpu-pod-creation-without-cdi-annotations"
#: --backstop: the case measured as a CPU pod's creation (cases(): the shape "cpu" in the namespace "bench").
CPU_CASE = "cpu@bench"


def backstop_runs(objects: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``objects`` followed by gpugate-backstop as shipped, and by the backstop without :data:`BACKSTOP_SKIP`: the
    backstop sees the pod gpugate-mutate formed, as in the apiserver (validating policies run after the mutating
    ones), and its row is read off by its name."""
    shipped = [
        d
        for d in yaml.safe_load_all(BACKSTOP.read_text())
        if d and d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "gpugate-backstop"
    ]
    without = copy.deepcopy(shipped)
    conditions = without[0]["spec"]["matchConditions"]
    without[0]["spec"]["matchConditions"] = [c for c in conditions if c["name"] != BACKSTOP_SKIP]
    return [
        ("as shipped", [*objects, *shipped]),
        (f"without its match condition `{BACKSTOP_SKIP}`", [*objects, *without]),
    ]


def cpu_first(all_cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``all_cases`` with :data:`CPU_CASE` first: the pod bench/celcost measures."""
    [cpu] = [c for c in all_cases if c["name"] == CPU_CASE]
    return [cpu, *(c for c in all_cases if c is not cpu)]


def variant_table(
    binary: Path,
    work: Path,
    case_file: Path,
    rounds: int,
    name: str,
    runs: list[tuple[str, list[dict[str, Any]]]],
    title: str | None = None,
) -> list[str]:
    """A table (headed ``title``, or ``name``) of one object's cost in each variant of ``runs``, on the first pod of
    ``case_file`` (its row read off by ``name``)."""
    lines = [f"| {title or name} | allocations | KB | CPU µs |", "| --- | --- | --- | --- |"]
    for i, (label, variant) in enumerate(runs):
        path = work / f"{name}-variant-{i}.yaml"
        path.write_text(yaml.safe_dump_all(variant, sort_keys=False, width=1 << 20))
        row = next(c for c in measure(binary, path, case_file, rounds, None)["costs"] if c["object"] == name)
        cpu = statistics.median(row["cpu_us"])
        lines.append(f"| {label} | {row['allocations']:,} | {row['bytes'] / 1000:,.0f} | {cpu:,.0f} |")
    return lines


def measure(binary: Path, objects: Path, case_file: Path, rounds: int, compare: Path | None) -> dict[str, Any]:
    argv = [str(binary), "-cases", str(case_file), "-rounds", str(rounds)]
    if compare is not None:
        argv += ["-compare", str(compare)]
    done = subprocess.run([*argv, str(objects)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"bench/celcost failed ({done.returncode}): {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    objects: list[str] = []
    for r in results.values():
        objects += [c["object"] for c in r["costs"] if c["object"] not in objects and not c["object"].startswith("(")]
    head = "| object | " + " | ".join(f"{n}: allocations | {n}: KB | {n}: CPU µs" for n in names) + " |"
    lines = [head, "| --- |" + " --- | --- | --- |" * len(names)]
    totals = {n: [0, 0, 0.0] for n in names}
    for obj in objects:
        cells = []
        for n in names:
            cost = next((c for c in results[n]["costs"] if c["object"] == obj), None)
            if cost is None:
                cells += ["—", "—", "—"]
                continue
            cpu = statistics.median(cost["cpu_us"])
            totals[n][0] += cost["allocations"]
            totals[n][1] += cost["bytes"]
            totals[n][2] += cpu
            cells += [f"{cost['allocations']:,}", f"{cost['bytes'] / 1000:,.0f}", f"{cpu:,.0f}"]
        lines.append(f"| {obj} | " + " | ".join(cells) + " |")
    lines.append(
        "| **per GPU pod** | "
        + " | ".join(f"**{totals[n][0]:,}** | **{totals[n][1] / 1000:,.0f}** | **{totals[n][2]:,.0f}**" for n in names)
        + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", action="store_true", help="with the reference fleet's pool digest (--native-sync)")
    parser.add_argument("--webhooks", action="store_true", help="with the narrowed webhooks' match conditions")
    parser.add_argument("--anatomy", action="store_true", help="also the floor and each variable's cost")
    parser.add_argument("--cel-equivalent", action="store_true", help="also bench/cel-equivalent.yaml, measured alike")
    parser.add_argument("--floor", action="store_true", help="also bench/in-process-floor.yaml, measured alike")
    parser.add_argument(
        "--cuts", action="store_true", help="also gpugate-always with part of what it checks, cut by cut (CUTS)"
    )
    parser.add_argument(
        "--backstop", action="store_true", help="also the base gpugate-backstop, with and without BACKSTOP_SKIP"
    )
    parser.add_argument("--before", help="another compilation (YAML) to measure beside it and compare decisions with")
    parser.add_argument(
        "--without",
        type=parts_of,
        metavar="PARTS",
        help=f"also the compilation without these parts, a what-if (comma-separated: {', '.join(WITHOUT)})",
    )
    parser.add_argument(
        "--write-without",
        metavar="FILE",
        help="write the --without compilation (its policies and bindings) to FILE, for bench/apiserver.py "
        "--native-before",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the CPU measurement (default 5)")
    args = parser.parse_args(argv)
    if args.write_without and not args.without:
        parser.error("--write-without needs --without PARTS")
    if args.write_without:
        Path(args.write_without).write_text(
            yaml.safe_dump_all(
                without_parts(compiled_objects(args.pools), args.without), sort_keys=False, width=1 << 20
            )
        )
    with tempfile.TemporaryDirectory(prefix="gpugate-celcost-") as tmp:
        work = Path(tmp)
        binary = work / "celcost"
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=TOOL, check=True, timeout=1800)
        after = work / "after.yaml"
        after.write_text(
            yaml.safe_dump_all(compiled_objects(args.pools, args.webhooks), sort_keys=False, width=1 << 20)
        )
        case_file = work / "cases.json"
        case_file.write_text(json.dumps(cases()))
        before = Path(args.before) if args.before else None
        results = {"this tree": measure(binary, after, case_file, args.rounds, before)}
        if before is not None:
            results = {"before": measure(binary, before, case_file, args.rounds, None), **results}
        if args.cel_equivalent:
            results["CEL equivalent"] = measure(binary, CEL_EQUIVALENT, case_file, args.rounds, None)
        if args.floor:
            results["in-process floor"] = measure(binary, IN_PROCESS_FLOOR, case_file, args.rounds, None)
        if args.without:
            what_if = work / "without.yaml"
            compiled_now = [d for d in yaml.safe_load_all(after.read_text()) if d]
            what_if.write_text(
                yaml.safe_dump_all(without_parts(compiled_now, args.without), sort_keys=False, width=1 << 20)
            )
            label = "without " + ", ".join(args.without)
            results[label] = measure(binary, what_if, case_file, args.rounds, after)
            without_line = f"{results[label]['cases']} pods run under both, {label}: " + differences(results[label])
        if args.anatomy:
            costs: list[dict[str, Any]] = []
            for i, run in enumerate(anatomy_runs([d for d in yaml.safe_load_all(after.read_text()) if d])):
                probes = work / f"anatomy-{i}.yaml"
                probes.write_text(yaml.safe_dump_all(run, sort_keys=False, width=1 << 20))
                costs += measure(binary, probes, case_file, args.rounds, None)["costs"]
            parts = anatomy({"costs": costs})
        compiled = [d for d in yaml.safe_load_all(after.read_text()) if d]
        if args.cuts:
            cut_lines = variant_table(binary, work, case_file, args.rounds, "gpugate-always", cut_runs(compiled))
        if args.backstop:
            runs = backstop_runs(compiled)
            backstop_lines = variant_table(binary, work, case_file, args.rounds, "gpugate-backstop", runs)
            cpu_file = work / "cases-cpu-first.json"
            cpu_file.write_text(json.dumps(cpu_first(cases())))
            title = "gpugate-backstop on a CPU pod"
            cpu_lines = variant_table(binary, work, cpu_file, args.rounds, "gpugate-backstop", runs, title)
            backstop_lines += ["", *cpu_lines]
            shipped, without = work / "backstop-shipped.yaml", work / "backstop-without.yaml"
            for path, (_, run) in zip((shipped, without), runs, strict=True):
                path.write_text(yaml.safe_dump_all(run, sort_keys=False, width=1 << 20))
            compared = measure(binary, shipped, case_file, 1, without)
            changed = len(compared.get("differs") or [])
            backstop_lines.append(f"\n{compared['cases']} pods under both backstops: {changed} differ")
    print(table(results))
    if args.without:
        print("\n" + without_line)
    if args.backstop:
        print("\n" + "\n".join(backstop_lines))
    if args.anatomy:
        print("\n" + parts)
    if args.cuts:
        print("\n" + "\n".join(cut_lines))
    measured = results["this tree"]
    if before is not None:
        differs = measured.get("differs") or []
        print(f"\n{measured['cases']} pods run under both compilations: {len(differs)} differ")
        for line in differs:
            diff = json.loads(line)
            mine, theirs = diff["measured"], diff["other"]
            print(f"- {diff['case']}" + (": the formed pod differs" if mine["formed"] != theirs["formed"] else ""))
            if mine["formed"] != theirs["formed"]:
                was, now = (json.loads(d["formed"] or "{}") for d in (theirs, mine))
                change = jsonpatch.make_patch(was, now).patch
                print(f"    before -> this tree: {json.dumps(change)[:400]}")
            for decision in sorted(set(theirs["decisions"] or []) - set(mine["decisions"] or [])):
                print(f"    before:    {decision}")
            for decision in sorted(set(mine["decisions"] or []) - set(theirs["decisions"] or [])):
                print(f"    this tree: {decision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
