"""Property tests over generated pods: round-trip, idempotence, no patch without GPUs, validate(mutate(p))."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
from hypothesis import given
from hypothesis import strategies as st

from tests.support import apply, container, env, pod, request, schema_check, standard
from webhook.admission import mutate, validate
from webhook.admission.patch import canonical, make_patch

POLICY = standard(limits={"maxPerContainer": 4, "maxPerPod": 16})
NAMESPACES = {"default": {"team": "vision"}, "other": {}}

names = st.sampled_from(["a", "b", "c", "trainer", "x-1"])
label_keys = st.sampled_from(["app", "tier", "example.com/owner", "gpugate.io/team", "gpugate.io/model"])
label_values = st.sampled_from(["", "x", "h100", "l4", "someone-else", "v1.2"])
tolerations: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    ]
)
gpu_amounts = st.sampled_from(["1", "2", "1000m", "2e0", 3, "4"])
other_resources = st.fixed_dictionaries(
    {}, optional={"cpu": st.sampled_from(["100m", "1"]), "memory": st.sampled_from(["1Gi", "512Mi"])}
)


@st.composite
def containers(draw, gpu: bool):
    limits = dict(draw(other_resources))
    if gpu:
        limits[draw(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared"]))] = draw(gpu_amounts)
    return container(draw(names), limits=limits or None)


@st.composite
def pods(draw, gpu: bool | None = None):
    with_gpu = draw(st.booleans()) if gpu is None else gpu
    count = draw(st.integers(1, 3))
    cs = [draw(containers(with_gpu and i == 0)) for i in range(count)]
    for i, c in enumerate(cs):
        c["name"] = f"{c['name']}-{i}"
    labels: dict[str, str] = draw(st.dictionaries(label_keys, label_values, max_size=3))
    if labels.get("gpugate.io/model") not in (None, "l4", "h100"):
        labels.pop("gpugate.io/model")
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(tolerations, max_size=3, unique_by=lambda t: t["key"]))
    if draw(st.booleans()):
        spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}
                            ]
                        }
                        for _ in range(draw(st.integers(1, 2)))
                    ]
                }
            }
        }
    return pod(*cs, namespace=draw(st.sampled_from(list(NAMESPACES))), labels=labels, **spec)


def run(obj):
    return mutate(request(obj), env(POLICY, NAMESPACES))


@given(pods())
def test_the_patch_round_trips_and_the_result_is_a_valid_pod(obj):
    original = copy.deepcopy(obj)
    decision = run(obj)
    assert obj == original, "mutate must not touch the object it was given"
    if not decision.allowed:
        return
    result = apply(obj, decision.patch)
    schema_check(result)
    assert canonical(jsonpatch.apply_patch(obj, make_patch(obj, result))) == canonical(result)


@given(pods())
def test_mutation_is_idempotent(obj):
    decision = run(obj)
    if decision.allowed:
        assert run(apply(obj, decision.patch)).patch is None


@given(pods(gpu=False))
def test_pods_without_gpu_resources_get_no_patch(obj):
    assert run(obj).patch is None


@given(pods(gpu=True))
def test_validate_of_mutate_finds_nothing_for_a_conforming_pod(obj):
    obj["spec"].pop("tolerations", None)  # GPU tolerations on a GPU pod are fine; keep the pod plain
    decision = run(obj)
    assert decision.allowed, decision.message
    verdict = validate(request(apply(obj, decision.patch)), env(POLICY, NAMESPACES))
    assert verdict.allowed and verdict.violations == [], verdict.message


json_keys = st.sampled_from(["a", "b", "a/b", "~x", "nvidia.com/gpu", "0", ""])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([1.0, 0.5]) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_keys, inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(json_keys, json_values, max_size=4), st.dictionaries(json_keys, json_values, max_size=4))
def test_make_patch_turns_any_object_into_any_other(a, b):
    ops = make_patch(a, b)
    assert canonical(jsonpatch.apply_patch(a, ops)) == canonical(b)
    assert (ops == []) == (canonical(a) == canonical(b))


def test_a_patch_that_does_not_reproduce_the_object_is_never_sent(monkeypatch):
    import pytest

    from webhook.admission import patch

    real = patch._diff

    def lossy(a, b, path, ops):
        real(a, b, path, ops)
        if ops and path == []:
            ops.pop()  # a differ bug: one change gets lost

    monkeypatch.setattr(patch, "_diff", lossy)
    with pytest.raises(patch.PatchError):
        make_patch({"a": {"x": 1}}, {"a": {"x": 1, "y": 2}, "b": True})


# ------------------------------------------------------------------ the rule registry's invariants
from tests.support import REPO  # noqa: E402
from webhook.policy.files import load_policies  # noqa: E402
from webhook.policy.model import PolicySet  # noqa: E402
from webhook.rules import registry  # noqa: E402

FLEET = load_policies(REPO / "policies")
BUILTIN_RULES = {c.name for c in registry.checks("validate") if not c.needs_policy}
any_resources = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-2g.20gb",
            "amd.com/gpu",
            "gpu.intel.com/i915",
            "gpu.intel.com/millicores",
            "nvidia.com/gpumem",
            "example.com/fpga",
            "cpu",
        ]
    ),
    st.sampled_from(["1", "2", "0", "500m", "-1", "100", "x"]),
    max_size=3,
)
any_tolerations = st.lists(
    st.sampled_from(
        [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        ]
    ),
    max_size=2,
)


@st.composite
def any_pods(draw):
    """Pods of every shape gpugate has a rule for: any vendor's resources in any quantity, init-only GPUs,
    GPU tolerations, NVIDIA_VISIBLE_DEVICES, runtime classes, DRA claims, fractional-GPU annotations,
    model labels and selectors."""
    cs = []
    for i in range(draw(st.integers(1, 2))):
        c = container(f"c{i}", limits=draw(any_resources) or None)
        if draw(st.booleans()):
            c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": draw(st.sampled_from(["all", "0", "void"]))}]
        cs.append(c)
    init: list[Mapping[str, Any]] | None = (
        [container("i", limits=draw(any_resources) or None)] if draw(st.booleans()) else None
    )
    spec: dict = {}
    if draw(st.booleans()):
        spec["tolerations"] = draw(any_tolerations)
    if draw(st.booleans()):
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "kata"]))
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.sampled_from(
                [
                    {"nvidia.com/gpu.product": "NVIDIA-L4"},
                    {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                    {"nvidia.com/gpu.product": "Unknown-GPU"},
                ]
            )
        )
    labels = (
        {"gpugate.io/model": draw(st.sampled_from(["l4", "a100", "h100-mig", "nope"]))} if draw(st.booleans()) else None
    )
    obj = pod(
        *cs, init=init, labels=labels, namespace=draw(st.sampled_from(["default", "ml-serving", "research-x"])), **spec
    )
    if draw(st.booleans()):
        obj["metadata"]["annotations"] = {draw(st.sampled_from(["gpu-fraction", "nvidia.com/use-gputype"])): "0.5"}
    return obj


@given(any_pods())
def test_without_a_governing_policy_only_built_in_rules_speak_and_nothing_is_injected(obj):
    nothing = env(PolicySet(), NAMESPACES)
    mutation = mutate(request(obj), nothing)
    assert mutation.patch is None
    assert {v.rule for v in mutation.violations} <= BUILTIN_RULES
    if mutation.allowed:
        verdict = validate(request(obj), nothing)
        assert {v.rule for v in verdict.violations} <= BUILTIN_RULES, [v.message() for v in verdict.violations]


@given(any_pods())
def test_under_the_fleet_policies_every_patch_applies_validates_and_is_idempotent(obj):
    fleet = env(FLEET, NAMESPACES)
    decision = mutate(request(obj), fleet)
    if not decision.allowed:
        return
    result = apply(obj, decision.patch)
    schema_check(result)
    again = mutate(request(result), fleet)
    assert again.patch is None, again.patch
    verdict = validate(request(result), fleet)
    assert not any(v.rule == "not-mutated" for v in verdict.violations), [v.message() for v in verdict.violations]
