"""Policy loading (every error with file, document, field), selection by priority, and hot reload."""

from __future__ import annotations

import pytest

from tests.support import env, gpu_pod, policies, request
from webhook.admission import mutate
from webhook.policy.loader import PolicyError, load_policies
from webhook.policy.model import BUILTIN, NamespaceLabelsUnavailable
from webhook.policy.store import PolicyStore

HEAD = "apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {name: p}\n"


@pytest.mark.parametrize(("spec", "error"), [
    ("spec: {mode: strict}", "spec.mode: 'strict' is not one of enforce, warn, audit"),
    ("spec: {priority: high}", "spec.priority: must be a whole number, got 'high'"),
    ("spec: {limits: {maxPerPod: 0}}", "spec.limits.maxPerPod: must be a whole number of at least 1"),
    ("spec: {runtimeClassName: NVIDIA}", "spec.runtimeClassName: 'NVIDIA' is not a valid RuntimeClass name"),
    ("spec: {tolerations: [{key: nvidia.com/gpu, operator: Exists, value: x}]}", "spec.tolerations[0].value: must be empty when operator is Exists"),
    ("spec: {tolerations: [{key: a, effect: NoSchedule, tolerationSeconds: 5}]}", "spec.tolerations[0].tolerationSeconds: is only allowed with effect NoExecute"),
    ("spec: {tolerations: [{operator: Equal}]}", "spec.tolerations[0].key: is required unless operator is Exists"),
    ("spec: {models: {nodeLabel: nvidia.com/gpu.product, default: a100, classes: {l4: [NVIDIA-L4]}}}", "spec.models.default: 'a100' is not one of the classes (l4)"),
    ("spec: {models: {nodeLabel: nvidia.com/gpu.product, classes: {}}}", "spec.models.classes: must map at least one class name"),
    ("spec: {models: {classes: {l4: [NVIDIA-L4]}}}", "spec.models.classes.l4: give the class as {values: [...], resources: [...]}"),
    ("spec: {attribution: {labels: {gpugate.io/team: {value: 'has space'}}}}", "spec.attribution.labels[gpugate.io/team].value: 'has space' is not a valid label value"),
    ("spec: {attribution: {labels: {'bad key!': {value: x}}}}", "spec.attribution.labels[bad key!]: 'bad key!' is not a valid label key"),
    ("spec: {attribution: {labels: {gpugate.io/team: {value: x, fromNamespaceLabel: team}}}}", "spec.attribution.labels[gpugate.io/team]: give exactly one of fromNamespaceLabel or value"),
    ("spec: {match: {podSelector: {matchExpressions: [{key: app, operator: In}]}}}", "spec.match.podSelector.matchExpressions[0].values: must be non-empty for operator In"),
    ("spec: {nonGPUPods: {gpuTolerations: maybe}}", "spec.nonGPUPods.gpuTolerations: 'maybe' is not one of deny, strip, allow"),
    ("spec: {gpuResources: []}", "spec.gpuResources: must not be empty"),
    ("spec: {runtimeClass: nvidia}", "spec.runtimeClass: unknown field"),
    ("spec: {mutateTemplates: yes-please}", "spec.mutateTemplates: must be true or false"),
])
def test_each_invalid_field_is_reported_with_file_document_and_path(tmp_path, spec, error):
    (tmp_path / "a.yaml").write_text("---\n" + HEAD.replace("name: p", "name: ok") + "---\n" + HEAD + spec + "\n")
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    assert f"a.yaml: document 1: {error}" in str(err.value)


def test_all_errors_are_reported_at_once(tmp_path):
    (tmp_path / "a.yaml").write_text(HEAD + "spec: {mode: x, priority: y}\n")
    (tmp_path / "b.yml").write_text("kind: [")
    (tmp_path / "c.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(PolicyError) as err:
        load_policies(tmp_path)
    text = str(err.value)
    assert "spec.mode" in text and "spec.priority" in text
    assert "b.yml: is not valid YAML (line 1" in text
    assert "c.yaml: document 0: apiVersion: must be gpugate.io/v1" in text
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
    assert policies({"name": "only", "match": {"namespaces": ["x"]}}).governing(
        namespace="y", pod_labels={}, namespace_labels=dict) is BUILTIN


def test_namespace_selectors_need_labels_and_say_so_when_they_are_unknown():
    ps = policies({"name": "tier", "match": {"namespaceSelector": {"matchLabels": {"gpu-tier": "serving"}}}})
    assert ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: {"gpu-tier": "serving"}).name == "tier"
    assert ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: {}) is BUILTIN
    with pytest.raises(NamespaceLabelsUnavailable):
        ps.governing(namespace="a", pod_labels={}, namespace_labels=lambda: None)
    decision = mutate(request(gpu_pod(1)), type(env(ps))(policies=ps, namespace_labels=lambda ns: None))
    assert not decision.allowed and decision.code == 503 and 'labels of namespace "default"' in decision.message


def test_store_reloads_on_change_and_keeps_the_last_good_set(tmp_path):
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 1}\n")
    now = [0.0]
    store = PolicyStore(tmp_path, interval=1.0, clock=lambda: now[0])
    assert store.current().policies[0].priority == 1 and store.generation == 1
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 2}\n")
    assert store.current().policies[0].priority == 1  # not yet: checked at most once a second
    now[0] = 1.5
    assert store.current().policies[0].priority == 2 and store.generation == 2
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: [}\n")
    now[0] = 3.0
    assert store.current().policies[0].priority == 2
    assert store.reload_errors == 1 and "p.yaml" in (store.last_error or "")
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 3}\n")
    now[0] = 4.5
    assert store.current().policies[0].priority == 3 and store.last_error is None and store.generation == 3


def test_store_follows_configmap_symlink_swaps(tmp_path):
    """A ConfigMap volume: p.yaml -> ..data/p.yaml, ..data -> ..<timestamp>; an update swaps ..data."""
    root = tmp_path / "mount"
    root.mkdir()
    (root / "..v1").mkdir()
    (root / "..v1" / "p.yaml").write_text(HEAD + "spec: {priority: 1}\n")
    (root / "..data").symlink_to("..v1")
    (root / "p.yaml").symlink_to("..data/p.yaml")
    now = [0.0]
    store = PolicyStore(root, clock=lambda: now[0])
    (root / "..v2").mkdir()
    (root / "..v2" / "p.yaml").write_text(HEAD + "spec: {priority: 7}\n")
    (root / "..data_tmp").symlink_to("..v2")
    (root / "..data_tmp").rename(root / "..data")
    now[0] = 2.0
    assert store.current().policies[0].priority == 7
