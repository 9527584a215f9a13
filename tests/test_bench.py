"""The benchmark commands' own logic (bench/): the HTTP client's parsing, the checks of each answer, the
report's arithmetic, and the decision and scale benchmarks on a small scale. No timing is asserted."""

from __future__ import annotations

import argparse
import json
import socket
import threading
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from bench import apiserver, decisions, scale
from tests.harness.gpugate import WEBHOOK_KINDS
from tests.support import REPO


def connection_over(data: bytes) -> tuple[apiserver.Connection, socket.socket]:
    """A Connection whose peer has already sent ``data`` (a socketpair stands in for TLS)."""
    ours, theirs = socket.socketpair()
    conn = object.__new__(apiserver.Connection)
    conn.sock, conn.buf = ours, bytearray()  # type: ignore[assignment]
    threading.Thread(target=theirs.sendall, args=(data,), daemon=True).start()
    return conn, theirs


def test_the_client_reads_length_and_chunked_responses_back_to_back() -> None:
    first = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    second = b'HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"b"\r\n3\r\n:2}\r\n0\r\n\r\n'
    conn, peer = connection_over(first + second)
    try:
        assert conn.roundtrip(b"") == (201, b'{"a":1}')
        assert conn.roundtrip(b"") == (403, b'{"b":2}')
        assert conn.buf == b""
    finally:
        conn.close()
        peer.close()


def test_each_registration_expects_its_own_injections() -> None:
    injected = {
        "metadata": {"labels": {"gpugate.io/team": "ml"}, "annotations": {"gpugate.io/policy": "default"}},
        "spec": {"runtimeClassName": "nvidia"},
    }
    by_cel = {"metadata": {"labels": {"gpugate.io/team": "ml"}}, "spec": {"runtimeClassName": "nvidia"}}
    plain: dict[str, Any] = {"metadata": {}, "spec": {}}
    assert apiserver.expectation("gpugate", "GPU")(201, injected) is None
    assert apiserver.expectation("CEL", "GPU")(201, by_cel) is None
    assert apiserver.expectation("CEL", "GPU")(201, injected) is not None
    assert apiserver.expectation("no-op", "GPU")(201, plain) is None
    assert apiserver.expectation("no-op + patch", "GPU")(201, injected) is None
    assert apiserver.expectation("gpugate", "GPU")(201, plain) is not None
    assert apiserver.expectation("gpugate", "CPU")(201, plain) is None
    assert apiserver.expectation("nothing", "GPU")(500, plain) is not None
    # The native tier forms the pod as gpugate does, annotations included, with or without the webhook.
    for native in apiserver.NATIVE:
        assert apiserver.expectation(native, "GPU")(201, injected) is None
        assert apiserver.expectation(native, "GPU")(201, by_cel) is not None
        assert apiserver.expectation(native, "CPU")(201, plain) is None
    # The in-process floor only labels a GPU pod; nothing else labels it so.
    floored = {"metadata": {"labels": {"gpugate.io/formed-by": "floor"}}, "spec": {}}
    assert apiserver.expectation(apiserver.FLOOR, "GPU")(201, floored) is None
    assert apiserver.expectation(apiserver.FLOOR, "GPU")(201, plain) is not None
    assert apiserver.expectation(apiserver.FLOOR, "CPU")(201, plain) is None
    assert apiserver.expectation("nothing", "GPU")(201, floored) is not None


class _Answers:
    """Stands in for bench/apiserver.py's API and gpugate server in Registrar.observe: answers each probe as the
    registration in force would (the native tier's objects alone, or the in-process floor)."""

    def __init__(self, registration: str) -> None:
        self.registration = registration

    def create(self, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        meta, container = obj["metadata"], obj["spec"]["containers"][0]
        gpus = int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0"))
        if self.registration == "native":
            if gpus > 8:
                return 422, {"message": "ValidatingAdmissionPolicy 'gpugate-always' with binding ... denied request"}
            return 201, {**obj, "metadata": {**meta, "annotations": {"gpugate.io/policy": "default"}}}
        if apiserver.FLOOR_REFUSE in meta.get("labels", {}):
            return 422, {"message": "ValidatingAdmissionPolicy 'bench-floor-check' with binding ... denied request"}
        labels = {**meta.get("labels", {}), "gpugate.io/formed-by": "floor"} if gpus else meta.get("labels", {})
        return 201, {**obj, "metadata": {**meta, "labels": labels}}

    def metrics(self) -> str:
        return ""


@pytest.mark.parametrize("registration", ["native", apiserver.FLOOR])
def test_the_registrar_s_probes_see_exactly_what_each_registration_answers(registration: str) -> None:
    """Each probe's answer is read for what it tells (a probe's answer read for another's would leave a switch
    waiting for a registration that is in force)."""
    answers = _Answers(registration)
    registrar = object.__new__(apiserver.Registrar)
    registrar.api, registrar.gate = answers, answers  # type: ignore[assignment]
    assert registrar.observe() == apiserver.Registrar.EXPECTED[registration]


def test_the_cel_equivalent_is_two_policies_and_their_bindings() -> None:
    docs = list(yaml.safe_load_all(apiserver.CEL_FILE.read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert all(d["apiVersion"] == "admissionregistration.k8s.io/v1" for d in docs)
    # The probe that confirms the ValidatingAdmissionPolicy is in force looks for its name.
    assert docs[2]["metadata"]["name"] == "bench-whole-gpus"


def test_the_report_computes_the_targets_from_the_medians() -> None:
    run = apiserver.Run(args=argparse.Namespace(rounds=3, requests=10), machine={})
    p50 = {"nothing": 1.0e-3, "no-op": 3.0e-3, "no-op + patch": 4.0e-3, "gpugate": 5.0e-3, "CEL": 2.0e-3}
    rate = {"nothing": 1000.0, "no-op": 400.0, "no-op + patch": 350.0, "gpugate": 300.0, "CEL": 800.0}
    for registration in apiserver.REGISTRATIONS:
        for kind in apiserver.PODS:
            for clients in apiserver.CLIENTS:
                # Three rounds; the middle one is the median, the others are outliers either way.
                run.cells[(registration, kind, clients)] = [
                    apiserver.Cell(
                        p50=p50[registration] * f,
                        p99=0.01,
                        rate=rate[registration] / f,
                        requests=10,
                        cpu={"apiserver": 1e-3},
                    )
                    for f in (0.5, 1.0, 9.0)
                ]
    text = apiserver.report(run)
    assert "| 2.00× (4.00 ms ÷ 2.00 ms) | ≤ 1.3× **not met** |" in text  # (5 - 1) / (3 - 1)
    assert "| gpugate's GPU pods/s ÷ the no-op's (8 clients) | 0.75× | ≥ 0.85× **not met** |" in text
    assert "| 1.33× and 0.86× |" in text  # against the patching no-op: (5 - 1) / (4 - 1), 300 / 350
    doc = apiserver.document(run, text, decisions=None, scale=None)
    # CPU pods: 5x nothing, but nothing itself spreads 18x over the rounds: within the noise, and said so.
    assert "**CPU pods with gpugate registered are slower**" not in doc
    assert "not measurably slower" in doc and doc.startswith("# Performance")
    # --write replaces docs/development/performance.md: the hand-written native tier's section is carried over from it
    # whole, and nothing else of the old file survives.
    current = (REPO / "docs" / "development" / "performance.md").read_text()
    section = current[current.index(apiserver.NATIVE_BEGIN) : current.index(apiserver.NATIVE_END)]
    assert "### The floor, and where the expressions spend" in section
    rewritten = apiserver.document(run, text, decisions=None, scale=None, current=current)
    assert section in rewritten and rewritten.count(apiserver.NATIVE_BEGIN) == 1
    assert rewritten.replace(section, "") == doc.replace(
        doc[doc.index(apiserver.NATIVE_BEGIN) : doc.index(apiserver.NATIVE_END)], ""
    )


@pytest.mark.fuzzer_fixture  # the every-field pod's placeholder values satisfy no schema
def test_the_decision_and_scale_benchmarks_run() -> None:
    measured = decisions.measure(calls=14)
    assert set(measured) == {"small GPU pod", "every-field pod"}
    result = scale.measure(24, seconds=0.01, rss=False)
    assert result.governing == {"fallback (every policy passed over)": "default", "policy 12 of 24": "team-0012"}
    assert "1 policy" in scale.report(result)


def test_fleet_scale_narrows_both_webhooks_as_the_native_tier_component_does() -> None:
    """The fleet run's native mode registers the webhooks with the compile's narrowing condition, as
    deploy/components/native-tier patches them: without it every plain pod pays a webhook call as well."""
    from bench import fleet_scale
    from tests.harness.gpugate import WEBHOOK_KINDS, gpugate_executable

    # As kustomize renders them: the two webhooks of a configuration share their conditions as one YAML alias.
    text = (REPO / "deploy" / "base" / "webhooks.yaml").read_text()
    objects = [json.loads(json.dumps(d)) for d in yaml.safe_load_all(text) if d]
    out = fleet_scale.narrowed(objects, gpugate_executable(), REPO / "policies")
    configs = [(before, after) for before, after in zip(objects, out, strict=True) if before["kind"] in WEBHOOK_KINDS]
    assert len(configs) == 2
    for before, after in configs:
        added = after["webhooks"][0]["matchConditions"][len(before["webhooks"][0]["matchConditions"]) :]
        assert [c["name"] for c in added] == ["not-decided-natively"], added
        assert "gpugate.io/policy" in added[0]["expression"]
        selector = {"matchExpressions": [{"key": "gpugate.io/formed-by", "operator": "DoesNotExist"}]}
        assert after["webhooks"][0]["objectSelector"] == selector
        assert after["webhooks"][1:] == before["webhooks"][1:]


def test_native_cost_measures_the_apiserver_s_bench_pod_first_and_the_pool_digest_inside_gpugate_always() -> None:
    """bench/native_cost.py: the pod measured is the one the apiserver admits (defaulted, with managed fields and
    the service account's volume), every case is named once, and --pools adds no object of its own."""
    from bench import native_cost

    cases = native_cost.cases()
    bench = cases[0]["pod"]
    assert cases[0]["name"] == "bench" and bench["metadata"]["managedFields"]
    assert bench["spec"]["volumes"][0]["projected"] and len(bench["spec"]["tolerations"]) == 2
    assert len({c["name"] for c in cases}) == len(cases) == 281
    assert sum("tamper" in c for c in cases) == 4 * 3 * len(native_cost.FORGERIES)
    assert sum(bool(c.get("sidecar")) for c in cases) == 4 * 3
    plain, pooled = native_cost.compiled_objects(False), native_cost.compiled_objects(True)
    assert [o["metadata"]["name"] for o in plain] == [o["metadata"]["name"] for o in pooled]
    always = next(o for o in pooled if o["metadata"]["name"] == "gpugate-always" and "validations" in o["spec"])
    assert "gpugate.io/pool-digest" in always["metadata"]["annotations"]


def test_native_cost_anatomy_probes_every_variable_on_the_pod_each_object_sees_and_floors_each_kind() -> None:
    """--anatomy: the floor is one object of each kind that decides nothing, valid against kube-apiserver
    1.36's schemas; the mutating policy's variables are probed on the pod as sent (no mutating policy before them), the
    validating policies' on the pod it formed (it runs first); one probe per variable reads that variable alone."""
    from bench import native_cost

    objects = native_cost.compiled_objects(False)
    floor, mutating, validating = native_cost.anatomy_runs(objects)
    for obj in [*floor, *mutating[:4], *validating[-4:]]:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    assert {o["kind"] for o in floor} == {
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration",
    }  # fmt: skip
    assert not any(o["kind"] == "MutatingAdmissionPolicy" for o in mutating)
    assert validating[0]["metadata"]["name"] == "gpugate-mutate"
    mutate = next(o for o in objects if o["kind"] == "MutatingAdmissionPolicy")
    probes = [o for o in mutating if o["kind"] == "ValidatingAdmissionPolicy"]
    assert [o["metadata"]["name"] for o in probes] == ["probe: gpugate-mutate"] + [
        f"probe: gpugate-mutate {v['name']}" for v in mutate["spec"]["variables"]
    ]
    assert (
        probes[3]["spec"]["validations"][0]["expression"]
        == f"size([variables.{mutate['spec']['variables'][2]['name']}]) == 1"
    )
    assert {o["metadata"]["name"].split(" ")[1] for o in validating[2:]} == {"gpugate-always", "gpugate-warn"}
    costs = [
        {
            "object": "floor: validating policy, one validation",
            "allocations": 1000,
            "bytes": 127_400,
            "cpu_us": [250.0],
        },
        {"object": "probe: gpugate-warn", "allocations": 1100, "bytes": 130_000, "cpu_us": [1.0]},
        {"object": "probe: gpugate-warn podGPUs", "allocations": 1304, "bytes": 140_000, "cpu_us": [1.0]},
    ]
    table = native_cost.anatomy({"costs": costs})
    assert "| validating policy, one validation | 1,000 | 127 | 250 |" in table
    assert "| podGPUs | 204 |" in table.split("| gpugate-warn: variable")[1]


def test_native_cost_cuts_take_from_gpugate_always_only_the_part_each_names() -> None:
    """--cuts: each variant differs from the compilation in gpugate-always's validations (and variables) alone; the
    claim checks are the validations that read claimsFormed, the mode's checks the others."""
    from bench import native_cost

    objects = native_cost.compiled_objects(False, True)
    runs = dict(native_cost.cut_runs(objects))
    assert list(runs) == [label for label, _, _ in native_cost.CUTS]

    def always(objs: list[dict[str, Any]]) -> dict[str, Any]:
        return next(
            o for o in objs if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
        )

    whole = always(objects)["spec"]
    claims = [v for v in whole["validations"] if "variables.claimsFormed" in v["expression"]]
    assert 0 < len(claims) < len(whole["validations"])
    for label, variant in runs.items():
        assert [o for o in variant if o is not always(variant)] == [o for o in objects if o is not always(objects)]
        spec = always(variant)["spec"]
        assert (spec.get("variables") is None) == (label == "one validation `true`, no variables")
        if label.startswith("without the claim checks"):
            assert spec["validations"] == [v for v in whole["validations"] if v not in claims]
        elif label.startswith("without the mode's checks"):
            assert spec["validations"] == claims
        elif label.startswith("one validation"):
            assert spec["validations"] == [{"expression": "true", "message": "cut"}]
        else:
            assert spec == whole


@pytest.mark.parametrize("parts", [["claim-checks"], ["messages"], ["warn"], ["claim-checks", "messages", "warn"]])
def test_native_cost_without_takes_out_only_the_parts_it_names(parts: list[str]) -> None:
    """--without: the what-if differs from the compilation in the parts named alone (the claim checks: gpugate-always's
    validations that read claimsFormed; the messages: every messageExpression, each static message kept; warn: the
    gpugate-warn policy and its binding), the compilation itself is left as it was, and 1.36's schemas accept it."""
    from bench import native_cost

    objects = native_cost.compiled_objects(False)
    before = json.dumps(objects, sort_keys=True)
    variant = native_cost.without_parts(objects, parts)
    assert json.dumps(objects, sort_keys=True) == before

    def named(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(o["kind"], o["metadata"]["name"]): o for o in objs}

    whole, cut = named(objects), named(variant)
    warn = {k for k in whole if k[1] == "gpugate-warn"}
    assert len(warn) == 2  # the policy and its binding
    assert set(cut) == (set(whole) - warn if "warn" in parts else set(whole))
    for key, obj in cut.items():
        expected = json.loads(json.dumps(whole[key]))
        if key[0] == "ValidatingAdmissionPolicy":
            validations = expected["spec"]["validations"]
            if "claim-checks" in parts and key[1] == "gpugate-always":
                validations = [v for v in validations if "variables.claimsFormed" not in v["expression"]]
                assert 0 < len(validations) < len(expected["spec"]["validations"])
            if "messages" in parts:
                assert any("messageExpression" in v for v in validations)
                validations = [{k: x for k, x in v.items() if k != "messageExpression"} for v in validations]
                assert all(v.get("message") for v in validations)
            expected["spec"]["validations"] = validations
        assert obj == expected, key
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    with pytest.raises(argparse.ArgumentTypeError, match="not a part of WITHOUT: mesages"):
        native_cost.parts_of("claim-checks,mesages")
    assert native_cost.parts_of(" warn , messages") == ["warn", "messages"]


def test_native_cost_counts_how_a_what_if_differs_formed_decided_or_in_a_message() -> None:
    """--without's line: a pod formed otherwise counts there alone; one refused or admitted otherwise (by another
    object or action) as decided otherwise; one refused alike with another text as a message only."""
    from bench import native_cost

    def diff(formed: tuple[str, str], mine: list[str], theirs: list[str]) -> str:
        return json.dumps({
            "case": "c",
            "measured": {"formed": formed[0], "decisions": mine},
            "other": {"formed": formed[1], "decisions": theirs},
        })  # fmt: skip

    deny = "gpugate-always: deny deny: pod: requests 9 GPUs in all, more than the 8 per pod (gpugate)"
    compared = {
        "differs": [
            diff(("{}", '{"a": 1}'), [deny], [deny]),
            diff(("{}", "{}"), [], [deny]),
            diff(("{}", "{}"), ["gpugate-warn: warn warn: x"], ["gpugate-always: deny deny: x"]),
            diff(("{}", "{}"), [deny], ["gpugate-always: deny deny: gpugate: the pod requests more GPUs"]),
        ]
    }
    assert native_cost.differences(compared) == ("1 formed otherwise, 2 decided otherwise, 1 with another message only")
    assert native_cost.differences({"differs": None}) == (
        "0 formed otherwise, 0 decided otherwise, 0 with another message only"
    )


def test_native_cost_sets_the_cel_equivalent_beside_gpugate_s_objects_each_in_its_own_column() -> None:
    """--cel-equivalent: bench/cel-equivalent.yaml is measured as a column of its own; an object one side lacks is a
    dash there, and each side's total counts its own objects only (a reinvocation pass is an object of its own)."""
    from bench import native_cost

    equivalent = [d for d in yaml.safe_load_all(native_cost.CEL_EQUIVALENT.read_text()) if d]
    mutating = next(o for o in equivalent if o["kind"] == "MutatingAdmissionPolicy")
    assert {m["patchType"] for m in mutating["spec"]["mutations"]} == {"ApplyConfiguration", "JSONPatch"}
    results = {
        "this tree": {
            "costs": [
                {"object": "gpugate-mutate", "allocations": 4000, "bytes": 257_750, "cpu_us": [900.0, 1100.0, 1000.0]}
            ]
        },
        "CEL equivalent": {
            "costs": [
                {"object": "bench-gpu-defaults", "allocations": 2900, "bytes": 211_304, "cpu_us": [700.0]},
                {"object": "bench-gpu-defaults (reinvocation pass)", "allocations": 2800, "bytes": 204_911,
                 "cpu_us": [650.0]},
            ]
        },
    }  # fmt: skip
    rows = native_cost.table(results).splitlines()
    assert rows[0] == (
        "| object | this tree: allocations | this tree: KB | this tree: CPU µs | CEL equivalent: allocations | "
        "CEL equivalent: KB | CEL equivalent: CPU µs |"
    )
    assert "| gpugate-mutate | 4,000 | 258 | 1,000 | — | — | — |" in rows
    assert "| bench-gpu-defaults (reinvocation pass) | — | — | — | 2,800 | 205 | 650 |" in rows
    assert rows[-1] == "| **per GPU pod** | **4,000** | **258** | **1,000** | **5,700** | **416** | **1,350** |"


@pytest.mark.parametrize("name", ["cel-equivalent.yaml", "in-process-floor.yaml"])
def test_the_in_process_yardsticks_are_valid_1_36_objects_of_one_policy_each_kind(name: str) -> None:
    """bench/cel-equivalent.yaml and bench/in-process-floor.yaml are what bench/fleet_scale.py applies: Kubernetes
    1.36's schemas accept them, and each is one mutating and one validating policy, each bound once."""
    docs = [d for d in yaml.safe_load_all((REPO / "bench" / name).read_text()) if d]
    for obj in docs:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(f"{k}AdmissionPolicy{b}" for k in ("Mutating", "Validating") for b in ("", "Binding")), kinds
    # Two names: bench/native_cost.py's table and the probes' messages tell the policies apart by name.
    policies = {d["metadata"]["name"] for d in docs if d["kind"].endswith("Policy")}
    assert len(policies) == 2, policies
    assert {d["spec"]["policyName"] for d in docs if d["kind"].endswith("Binding")} == policies


def test_the_in_process_floor_is_as_cheap_as_the_apiserver_allows() -> None:
    """The floor's two policies evaluate the least a tier can on a GPU pod's creation: no match condition, no
    variables, one validation, one patch expression, and a mutating policy that is not reinvoked for its own change."""
    from bench import fleet_scale

    docs = {d["kind"]: d for d in yaml.safe_load_all(fleet_scale.FLOOR.read_text()) if d}
    mutating, validating = docs["MutatingAdmissionPolicy"]["spec"], docs["ValidatingAdmissionPolicy"]["spec"]
    assert mutating["reinvocationPolicy"] == "Never"
    assert [m["patchType"] for m in mutating["mutations"]] == ["JSONPatch"]
    assert len(validating["validations"]) == 1
    for spec in (mutating, validating):
        assert "matchConditions" not in spec and "variables" not in spec


def test_apiserver_s_native_with_webhook_narrows_the_webhooks_as_the_native_tier_component_does() -> None:
    """bench/apiserver.py's "native + webhook" is what deploy/components/native-tier installs: both webhook
    configurations with the condition of the same compilation added to their first webhook."""
    native = [d for d in yaml.safe_load_all((REPO / "deploy/components/native-tier/native.yaml").read_text()) if d]
    base = [
        json.loads(json.dumps(d)) for d in yaml.safe_load_all((REPO / "deploy/base/webhooks.yaml").read_text()) if d
    ]
    patch = yaml.safe_load((REPO / "deploy/components/native-tier/narrowing.yaml").read_text())
    webhooks = [o for o in base if o.get("kind") in WEBHOOK_KINDS]
    assert len(webhooks) == 2
    assert apiserver.narrowed(webhooks, native) == [jsonpatch.apply_patch(o, patch) for o in webhooks]
    assert apiserver.narrowed(webhooks, []) == webhooks


def test_native_cost_backstop_runs_the_shipped_backstop_and_the_same_without_its_creation_match_condition() -> None:
    """--backstop: the shipped gpugate-backstop, and a copy whose only difference is BACKSTOP_SKIP taken out of its
    match conditions (the backstop before round 11), valid against kube-apiserver 1.36's schemas; the CPU pod's
    table measures the case list with the CPU pod first."""
    from bench import native_cost

    objects = native_cost.compiled_objects(False, True)
    (shipped_label, shipped_run), (without_label, without_run) = native_cost.backstop_runs(objects)
    assert shipped_label == "as shipped" and native_cost.BACKSTOP_SKIP in without_label
    # Each run is the compilation followed by the backstop, so the backstop sees the pod the native tier formed.
    assert shipped_run[: len(objects)] == without_run[: len(objects)] == objects
    shipped, without = shipped_run[len(objects) :], without_run[len(objects) :]
    assert [o["metadata"]["name"] for o in shipped] == [o["metadata"]["name"] for o in without] == ["gpugate-backstop"]
    kubernetes_validate.validate(without[0], "1.36.0", strict=True)
    names = [c["name"] for c in shipped[0]["spec"]["matchConditions"]]
    assert native_cost.BACKSTOP_SKIP in names
    assert [c["name"] for c in without[0]["spec"]["matchConditions"]] == [
        n for n in names if n != native_cost.BACKSTOP_SKIP
    ]
    assert {k: v for k, v in without[0]["spec"].items() if k != "matchConditions"} == {
        k: v for k, v in shipped[0]["spec"].items() if k != "matchConditions"
    }
    cases = native_cost.cases()
    reordered = native_cost.cpu_first(cases)
    assert reordered[0]["name"] == native_cost.CPU_CASE and "nvidia.com/gpu" not in json.dumps(reordered[0]["pod"])
    assert sorted(c["name"] for c in reordered) == sorted(c["name"] for c in cases)
