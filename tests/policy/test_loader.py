"""Policy loading (webhook/policy/loader.py and files.py: every error with file, document, field; the 0.1 format),
selection by priority and the JSON Schema (hot reload: tests/serve/test_policies.py)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from tests.support import STANDARD, env, gpu_pod, policies, request
from webhook.admission import mutate
from webhook.policy.files import load_policies
from webhook.policy.keys import LEGACY_API_VERSION
from webhook.policy.loader import PolicyError
from webhook.policy.model import BUILTIN, NamespaceLabelsUnavailable, Policy

HEAD = "apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {name: p}\n"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("spec: {mode: strict}", "spec.mode: 'strict' is not one of enforce, warn, audit"),
        ("spec: {priority: high}", "spec.priority: must be a whole number, got 'high'"),
        ("spec: {limits: {maxPerPod: 0}}", "spec.limits.maxPerPod: must be a whole number of at least 1"),
        ("spec: {runtimeClassName: NVIDIA}", "spec.runtimeClassName: 'NVIDIA' is not a valid RuntimeClass name"),
        (
            "spec: {tolerations: [{key: nvidia.com/gpu, operator: Exists, value: x}]}",
            "spec.tolerations[0].value: must be empty when operator is Exists",
        ),
        (
            "spec: {tolerations: [{key: a, effect: NoSchedule, tolerationSeconds: 5}]}",
            "spec.tolerations[0].tolerationSeconds: is only allowed with effect NoExecute",
        ),
        ("spec: {tolerations: [{operator: Equal}]}", "spec.tolerations[0].key: is required unless operator is Exists"),
        (
            "spec: {models: {nodeLabel: nvidia.com/gpu.product, default: a100, classes: {l4: [NVIDIA-L4]}}}",
            "spec.models.default: 'a100' is not one of the classes (l4)",
        ),
        (
            "spec: {models: {nodeLabel: nvidia.com/gpu.product, classes: {}}}",
            "spec.models.classes: must map at least one class name",
        ),
        (
            "spec: {models: {classes: {l4: [NVIDIA-L4]}}}",
            "spec.models.classes.l4: give the class as {values: [...], resources: [...]}",
        ),
        (
            "spec: {attribution: {labels: {gpugate.io/team: {value: 'has space'}}}}",
            "spec.attribution.labels[gpugate.io/team].value: 'has space' is not a valid label value",
        ),
        (
            "spec: {attribution: {labels: {'bad key!': {value: x}}}}",
            "spec.attribution.labels[bad key!]: 'bad key!' is not a valid label key",
        ),
        (
            "spec: {attribution: {labels: {gpugate.io/team: {value: x, fromNamespaceLabel: team}}}}",
            "spec.attribution.labels[gpugate.io/team]: give exactly one of fromNamespaceLabel or value",
        ),
        (
            "spec: {match: {podSelector: {matchExpressions: [{key: app, operator: In}]}}}",
            "spec.match.podSelector.matchExpressions[0].values: must be non-empty for operator In",
        ),
        (
            "spec: {nonGPUPods: {gpuTolerations: maybe}}",
            "spec.nonGPUPods.gpuTolerations: 'maybe' is not one of deny, strip, allow",
        ),
        ("spec: {gpuResources: []}", "spec.gpuResources: must not be empty"),
        ("spec: {runtimeClass: nvidia}", "spec.runtimeClass: unknown field"),
        ("spec: {mutateTemplates: yes-please}", "spec.mutateTemplates: must be true or false"),
        (
            "spec: {devices: {tpu: {runtimeClassName: x}}}",
            "spec.devices.tpu.resources: must list the resources that count as this vendor's GPUs",
        ),
        (
            "spec: {devices: {nvidia: {modelLabel: 'bad label!'}}}",
            "spec.devices.nvidia.modelLabel: 'bad label!' is not a valid node label key",
        ),
        (
            "spec: {devices: {nvidia: {tolerations: [{operator: Equal}]}}}",
            "spec.devices.nvidia.tolerations[0].key: is required unless operator is Exists",
        ),
        ("spec: {devices: {nvidia: {gpus: 1}}}", "spec.devices.nvidia.gpus: unknown field"),
        (
            "spec: {devices: {nvidia: {modelLabel: nvidia.com/gpu.product}}, runtimeClassName: nvidia}",
            "spec.runtimeClassName: cannot be combined with spec.devices: move it into spec.devices.<vendor>",
        ),
        (
            "spec: {devices: {nvidia: {modelLabel: nvidia.com/gpu.product}}, models: {classes: {l4: {values: [NVIDIA-L4]}}}}",
            "spec.models.classes.l4.resources: must list the GPU resources this class's nodes offer",
        ),
        (
            "spec: {devices: {nvidia: {modelLabel: nvidia.com/gpu.product}}, models: {classes: {x: {values: [A], resources: [example.com/fpga]}}}}",
            "spec.models.classes.x.resources: example.com/fpga must all be GPU resources of exactly one device (found none)",
        ),
        (
            "spec: {models: {classes: {mi: {values: [A], resources: [amd.com/gpu]}}}}",
            "spec.models.classes.mi: device 'amd' has no modelLabel to select class 'mi' by",
        ),
        (
            "spec: {devices: {nvidia: {modelLabel: nvidia.com/gpu.product}}, models: {classes: {x: {values: [A], resources: [nvidia.com/gpu], device: tpu}}}}",
            "spec.models.classes.x.device: 'tpu' is not a device of this policy",
        ),
        ("spec: {initOnlyGPUs: sometimes}", "spec.initOnlyGPUs: 'sometimes' is not one of deny, warn, allow"),
        ("spec: {gpuHolders: {resourceClaims: maybe}}", "spec.gpuHolders.resourceClaims: must be true or false"),
    ],
)
def test_each_invalid_field_is_reported_with_file_document_and_path(tmp_path, spec, error):
    (tmp_path / "a.yaml").write_text("---\n" + HEAD.replace("name: p", "name: ok") + "---\n" + HEAD + spec + "\n")
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    assert f"a.yaml: document 1: {error}" in str(err.value)


def test_a_gpu_workload_kind_document_is_validated(tmp_path):
    (tmp_path / "a.yaml").write_text(
        HEAD + "spec: {}\n---\napiVersion: gpugate.io/v1\nkind: GPUWorkloadKind\n"
        "metadata: {name: x}\nspec: {group: example.com, podTemplates: ['spec..template']}\n"
    )
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    assert "a.yaml: document 1: spec.podTemplates[0]: 'spec..template' is not a template path" in str(err.value)
    assert "a.yaml: document 1: spec.kind: is required" in str(err.value)


def test_a_0_1_policy_file_still_loads_as_one_nvidia_device():
    legacy = policies(
        {
            "name": "old",
            "runtimeClassName": "nvidia",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "models": {"nodeLabel": "nvidia.com/gpu.product", "default": "l4", "classes": {"l4": ["NVIDIA-L4"]}},
        },
        api_version=LEGACY_API_VERSION,
    ).policies[0]
    nvidia = legacy.devices["nvidia"]
    assert nvidia.runtime_class_name == "nvidia" and nvidia.model_label == "nvidia.com/gpu.product"
    assert legacy.models is not None and legacy.models.classes["l4"].resources == nvidia.resources
    assert legacy.devices["amd"].runtime_class_name is None  # other vendors get nothing NVIDIA-specific
    assert legacy.counts_as_gpu("amd.com/gpu") and not legacy.counts_as_gpu("gpu.intel.com/millicores")


STANDARD_0_1 = {
    "runtimeClassName": "nvidia",
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "limits": {"maxPerContainer": 4, "maxPerPod": 8},
    "models": {
        "nodeLabel": "nvidia.com/gpu.product",
        "default": "l4",
        "classes": {"l4": ["NVIDIA-L4"], "h100": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"]},
    },
    "attribution": {"labels": {"gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"}}},
}


def test_the_0_1_spelling_of_the_standard_test_policy_loads_to_the_same_policy():
    """The tests write their policies in the current format (tests/support.py STANDARD); this pins that the
    0.1 spelling they were first written in means exactly the same."""
    old = policies({"name": "standard", **STANDARD_0_1}, api_version=LEGACY_API_VERSION).policies[0]
    new = policies({"name": "standard", **STANDARD}).policies[0]
    fields = [f.name for f in dataclasses.fields(Policy) if f.compare]
    assert fields and {f: getattr(old, f) for f in fields} == {f: getattr(new, f) for f in fields}


def test_an_empty_policy_directory_is_an_error(tmp_path):
    with pytest.raises(PolicyError, match="holds no policy files"):
        load_policies(tmp_path)


def test_a_yaml_error_names_the_lines_around_the_mistake(tmp_path):
    # The unclosed bracket is on line 2; PyYAML notices it only at line 3.
    (tmp_path / "a.yaml").write_text("apiVersion: gpugate.io/v1\nkind: [GPUPolicy\nmetadata: {name: p}\n")
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    assert "a.yaml: is not valid YAML (line 2 to 3)" in str(err.value)


def test_all_errors_are_reported_at_once(tmp_path):
    (tmp_path / "a.yaml").write_text(HEAD + "spec: {mode: x, priority: y}\n")
    (tmp_path / "b.yml").write_text("kind: [")
    (tmp_path / "c.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    text = str(err.value)
    assert "spec.mode" in text and "spec.priority" in text
    assert "b.yml: is not valid YAML (line 1" in text
    assert "c.yaml: document 0: apiVersion: must be gpugate.io/v2 (or the deprecated gpugate.io/v1)" in text
    assert text.startswith("invalid policy (5 errors):")


def test_only_yaml_files_at_the_top_level_are_loaded(tmp_path):
    (tmp_path / "README.md").write_text("not a policy")
    (tmp_path / ".hidden.yaml").write_text("broken: [")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "pod.yaml").write_text("kind: Pod")
    (tmp_path / "p.yaml").write_text(HEAD)
    assert [p.name for p in load_policies(tmp_path).policies] == ["p"]


def test_a_missing_directory_is_an_error(tmp_path):
    with pytest.raises(PolicyError, match="nope: does not exist"):
        load_policies(tmp_path / "nope")


def test_the_highest_priority_matching_policy_governs():
    ps = policies(
        {"name": "low", "priority": 1},
        {"name": "high", "priority": 10, "match": {"namespaces": ["team-*"]}},
        {"name": "pods", "priority": 20, "match": {"podSelector": {"matchLabels": {"app": "vllm"}}}},
    )
    pick = lambda ns, labels=None: ps.governing(namespace=ns, pod_labels=labels or {}, namespace_labels=dict)
    assert pick("team-a").name == "high"
    assert pick("default").name == "low"
    assert pick("team-a", {"app": "vllm"}).name == "pods"
    assert (
        policies({"name": "only", "match": {"namespaces": ["x"]}}).governing(
            namespace="y", pod_labels={}, namespace_labels=dict
        )
        is BUILTIN
    )


def test_namespace_selectors_need_labels_and_say_so_when_they_are_unknown():
    ps = policies({"name": "tier", "match": {"namespaceSelector": {"matchLabels": {"gpu-tier": "serving"}}}})
    assert ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: {"gpu-tier": "serving"}).name == "tier"
    assert ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: {}) is BUILTIN
    with pytest.raises(NamespaceLabelsUnavailable):
        ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: None)
    decision = mutate(request(gpu_pod(1)), type(env(ps))(policies=ps, namespace_labels=lambda ns: None))
    assert not decision.allowed and decision.code == 503 and 'labels of namespace "default"' in decision.message


# ----------------------------------------------------------------------------- the JSON Schema
import json  # noqa: E402

import jsonschema  # noqa: E402
import yaml  # noqa: E402

from tests.support import REPO  # noqa: E402
from webhook.policy.schema import policy_schema  # noqa: E402


def test_the_shipped_schema_is_the_generated_one_in_both_policy_directories():
    generated = policy_schema()
    for directory in (REPO / "policies", REPO / "deploy" / "base" / "policies"):
        shipped = json.loads((directory / "gpugate-policy.schema.json").read_text())
        assert shipped == generated, f"run: gpugate policy schema > {directory}/gpugate-policy.schema.json"


def test_every_shipped_policy_points_at_the_schema_and_passes_it():
    validator = jsonschema.Draft202012Validator(policy_schema())
    for path in sorted((REPO / "policies").glob("*.yaml")):
        assert path.read_text().startswith("# yaml-language-server: $schema=gpugate-policy.schema.json\n"), path
        for document in yaml.safe_load_all(path.read_text()):
            assert not list(validator.iter_errors(document)), path


@pytest.mark.parametrize(
    "spec",
    [
        "spec: {mode: strict}",
        "spec: {limits: {maxPerPod: 0}}",
        "spec: {runtimeClass: nvidia}",
        "spec: {devices: {nvidia: {gpus: 1}}}",
        "spec: {initOnlyGPUs: sometimes}",
        "spec: {mutateTemplates: yes-please}",
        "spec: {models: {classes: {l4: {values: [NVIDIA-L4]}}}}",
        "spec: {gpuHolders: {resourceClaims: maybe}}",
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(tmp_path, spec):
    document = yaml.safe_load(HEAD + spec)
    assert list(jsonschema.Draft202012Validator(policy_schema()).iter_errors(document))
    (tmp_path / "a.yaml").write_text(HEAD + spec + "\n")
    with pytest.raises(PolicyError):
        load_policies(tmp_path)


# ---- GPUNodePool: pools that scale up, declared ------------------------------------------------------------


def _pool_dir(tmp_path, text: str):
    (tmp_path / "05-pools.yaml").write_text(text)
    return tmp_path


def test_a_declared_node_pool_loads_with_its_labels_taints_and_gpus(tmp_path):
    loaded = load_policies(
        _pool_dir(
            tmp_path,
            """
apiVersion: gpugate.io/v2
kind: GPUNodePool
metadata: {name: a100-gke}
spec:
  labels: {cloud.google.com/gke-accelerator: nvidia-tesla-a100}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  allocatable: {nvidia.com/gpu: 1}
  maxNodes: 4
""",
        )
    )
    [pool] = loaded.pools
    assert pool.name == "a100-gke" and pool.max_nodes == 4
    assert pool.labels == (("cloud.google.com/gke-accelerator", "nvidia-tesla-a100"),)
    assert pool.taints == (("nvidia.com/gpu", "present", "NoSchedule"),)
    assert pool.allocatable == (("nvidia.com/gpu", 1),)
    assert pool.source == "05-pools.yaml#0"


def test_every_wrong_field_of_a_node_pool_is_named(tmp_path):
    text = """
apiVersion: gpugate.io/v2
kind: GPUNodePool
metadata: {name: Bad_Name}
spec:
  labels: {"not a key": x}
  taints: [{key: nvidia.com/gpu, effect: Sometimes}, {value: x, effect: NoSchedule}]
  allocatable: {gpu: 1, nvidia.com/gpu: 0.5}
  maxNodes: 0
  nodes: 3
"""
    with pytest.raises(PolicyError) as err:
        load_policies(_pool_dir(tmp_path, text))
    found = {(i.path, i.message) for i in err.value.issues}
    paths = {p for p, _ in found}
    assert {
        "metadata.name",
        "spec.labels",
        "spec.taints[0].effect",
        "spec.taints[1].key",
        "spec.allocatable",
        "spec.allocatable[nvidia.com/gpu]",
        "spec.maxNodes",
        "spec.nodes",
    } <= paths
    assert ("spec.taints[0].effect", "'Sometimes' is not one of NoSchedule, PreferNoSchedule, NoExecute") in found
    assert ("spec.allocatable", "'gpu' is not an extended resource name (nvidia.com/gpu)") in found


def test_a_node_pool_declared_twice_is_an_error(tmp_path):
    doc = (
        "apiVersion: gpugate.io/v2\nkind: GPUNodePool\nmetadata: {name: p}\nspec: {allocatable: {nvidia.com/gpu: 1}}\n"
    )
    with pytest.raises(PolicyError) as err:
        load_policies(_pool_dir(tmp_path, doc + "---\n" + doc))
    assert [i.message for i in err.value.issues] == ["node pool 'p' is declared twice"]


def test_the_shipped_declared_pool_validates_and_is_printed():
    proc = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "policy", "validate", "policies"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "node pool 'a100-gke' scales up: 1 × nvidia.com/gpu a node, at most 4 nodes (05-node-pools.yaml#0)"
        in proc.stdout
    )
