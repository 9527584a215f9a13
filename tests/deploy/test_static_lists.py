"""The names the static YAML must know, in step with what gpugate ships: the GPU runtime classes in the
webhooks' matchConditions and in the backstop (deploy/base and the chart's copies) are exactly the shipped
default ``gpuRuntimeClasses`` plus every name the shipped policies add (their lists, each device's
``runtimeClassName``); the backstop's schedulers of the fraction annotations are the shipped
``gpuHolders.annotationSchedulers``. matchConditions and ValidatingAdmissionPolicies cannot read gpugate's policies, so a
name a policy adds must be added here by hand (docs/operations.md, "When a policy adds a GPU name")."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from webhook.policy.files import load_policies
from webhook.policy.model import Policy
from webhook.policy.vendors import (
    DEFAULT_GPU_RUNTIME_CLASSES,
    DEFAULT_HOLDER_SCHEDULERS,
    GPU_RUNTIME_HANDLERS,
    NVIDIA_DEVICE_VARIABLES,
)

REPO = Path(__file__).resolve().parents[2]
COPIES = [REPO / "deploy" / "base", REPO / "charts" / "gpugate" / "files" / "base"]
POLICY_DIRS = [
    REPO / "policies",
    REPO / "deploy" / "base" / "policies",
    REPO / "charts" / "gpugate" / "files" / "policies",
]


def _cel_list(text: str) -> list[str]:
    """The string literals of one CEL list literal: "['a', 'b']" -> ["a", "b"]."""
    assert text.startswith("[") and text.endswith("]"), text
    return re.findall(r"'([^']*)'", text)


def _shipped(default: tuple[str, ...], of_policy: Callable[[Policy], tuple[str, ...]]) -> set[str]:
    """The default and every name a shipped policy adds, in each copy of the policy directory."""
    names = set(default)
    for directory in POLICY_DIRS:
        for policy in load_policies(directory).policies:
            names |= set(of_policy(policy))
    return names


def shipped_runtime_classes() -> set[str]:
    return _shipped(DEFAULT_GPU_RUNTIME_CLASSES, lambda p: p.gpu_runtime_classes)


def shipped_annotation_schedulers() -> set[str]:
    return _shipped(DEFAULT_HOLDER_SCHEDULERS, lambda p: p.holders.annotation_schedulers)


def backstop_variables(base: Path, name: str = "gpugate-backstop") -> dict[str, str]:
    [policy] = [
        d
        for d in yaml.safe_load_all((base / "admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == name
    ]
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]} | {
        f"validations[{i}]": v["expression"] for i, v in enumerate(policy["spec"]["validations"])
    }


def test_the_shipped_default_is_the_gpu_operators_and_k3s_s_runtime_classes():
    assert DEFAULT_GPU_RUNTIME_CLASSES == ("nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental")


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_match_conditions_route_every_gpu_runtime_class(base: Path):
    hooks = [h for doc in yaml.safe_load_all((base / "webhooks.yaml").read_text()) for h in doc["webhooks"]]
    assert len(hooks) == 4  # a pod's creation and every other request, in each configuration
    for hook in hooks:
        [condition] = hook["matchConditions"]
        found = re.findall(r"s\.runtimeClassName in (\[[^\]]*\])", condition["expression"])
        assert len(found) == 1, f"{hook['name']}: expected one runtimeClassName list, found {found}"
        assert set(_cel_list(found[0])) == shipped_runtime_classes(), hook["name"]


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_match_conditions_route_every_nvidia_device_variable(base: Path):
    hooks = [h for doc in yaml.safe_load_all((base / "webhooks.yaml").read_text()) for h in doc["webhooks"]]
    for hook in hooks:
        [condition] = hook["matchConditions"]
        found = re.findall(r"e\.name in (\[[^\]]*\])", condition["expression"])
        assert len(found) == 1, f"{hook['name']}: expected one list of env names, found {found}"
        assert set(_cel_list(" ".join(found[0].split()))) == {"NVIDIA_VISIBLE_DEVICES", *NVIDIA_DEVICE_VARIABLES}


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_the_backstop_knows_every_gpu_runtime_class(base: Path):
    variables = backstop_variables(base)
    assert set(_cel_list(variables["gpuRuntimeClasses"].strip())) == shipped_runtime_classes()
    # and a rule uses the variable, not a list of its own
    assert any("variables.gpuRuntimeClasses" in e for n, e in variables.items() if n.startswith("validations"))


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_the_backstop_knows_the_schedulers_of_the_fraction_annotations(base: Path):
    variables = backstop_variables(base)
    assert set(_cel_list(variables["annotationSchedulers"].strip())) == shipped_annotation_schedulers()
    assert "variables.annotationSchedulers" in variables["holdsGPU"]


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_the_runtime_handler_backstop_knows_the_gpu_handlers_and_holds_gpus_as_the_backstop(base: Path):
    """gpugate-runtime-handlers refuses by handler what gpugate-backstop does not name, with its test of what
    holds a GPU: the same lists, word for word."""
    handlers = backstop_variables(base, "gpugate-runtime-handlers")
    assert tuple(_cel_list(handlers["gpuRuntimeHandlers"].strip())) == GPU_RUNTIME_HANDLERS
    backstop = backstop_variables(base)
    for name in ("containers", "resourceMaps", "gpuResources", "auxiliaryResources", "namesGPU", "holdsGPU"):
        assert handlers[name] == backstop[name], name
    assert handlers["annotationSchedulers"] == backstop["annotationSchedulers"]
    [policy] = [
        d
        for d in yaml.safe_load_all((base / "admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "gpugate-runtime-handlers"
    ]
    [condition] = policy["spec"]["matchConditions"]
    found = re.findall(r"runtimeClassName in (\[[^\]]*\])", condition["expression"])
    assert [set(_cel_list(f)) for f in found] == [shipped_runtime_classes()]  # the backstop's names are its own


@pytest.mark.parametrize("base", COPIES, ids=["deploy", "chart"])
def test_the_backstop_s_creation_match_condition_holds_gpus_with_its_variables_lists(base: Path):
    """not-a-gpu-pod-creation-without-cdi-annotations writes out holdsGPU and cdiAnnotations (a match condition sees
    no variables): each list and each CDI key test of the variables, word for word, so a name added to one is added
    to the other (tests/deploy/test_manifests.py proves the condition skips only what every validation passes)."""
    [policy] = [
        d
        for d in yaml.safe_load_all((base / "admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "gpugate-backstop"
    ]
    [condition] = [
        c["expression"]
        for c in policy["spec"]["matchConditions"]
        if c["name"] == "not-a-gpu-pod-creation-without-cdi-annotations"
    ]
    written_out = " ".join(condition.split())
    variables = {n: " ".join(e.split()) for n, e in backstop_variables(base).items()}
    for name in ("gpuResources", "auxiliaryResources", "annotationSchedulers"):
        assert f"in {variables[name]}" in written_out, name
    for test in re.findall(r"k\.startsWith\('[^']*'\)|k == '[^']*'", variables["cdiAnnotations"]):
        assert test in written_out, test
    for test in ("r.startsWith('nvidia.com/mig-')", "r.startsWith('deviceclass.resource.kubernetes.io/')"):
        assert test in variables["namesGPU"] and test in written_out, test
    pattern = re.search(r"r\.matches\('[^']*'\)", variables["namesGPU"])
    assert pattern and pattern[0] in written_out
