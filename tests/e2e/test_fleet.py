"""Scenario 10: the reference fleet through the real apiserver. gpugate serves the shipped policies/
and is registered from deploy/ plus components/workload-crds, with the workload CRDs installed. Every
example and real-world manifest with an expected verdict (policies/examples/expected.yaml,
tests/fixtures/real-manifests/expected.yaml) is sent with `kubectl create --dry-run=server`, and the
object the apiserver returns, or its refusal, must be what `gpugate check` promised offline. Then the
headline shapes once more with real objects: a DRA pod with its ResourceClaimTemplate
(resource.k8s.io/v1), RayClusters refused and allowed at apply time, and metadata-only updates of a
RayCluster that do not call gpugate at all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import ControlPlane, KubectlResult
from tests.harness.gpugate import Stack

from .objects import gpugate_denial, refusal

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "policies" / "examples"
REAL = REPO / "tests" / "fixtures" / "real-manifests"
# Kinds this control plane serves: built-in ones and the CRDs of tests/fixtures/crds. A "skipped" verdict
# is about kinds gpugate does not read (InferenceService): the CLI's business, nothing to register here.
SERVED_GROUPS = {
    "v1",
    "apps/v1",
    "batch/v1",
    "resource.k8s.io/v1",
    "ray.io/v1",
    "ray.io/v1alpha1",
    "kubeflow.org/v1",
    "jobset.x-k8s.io/v1alpha2",
    "leaderworkerset.x-k8s.io/v1",
    "batch.volcano.sh/v1alpha1",
    "kubeflow.org/v2beta1",
    "trainer.kubeflow.org/v1alpha1",
    "orchestration.aibrix.ai/v1alpha1",
    "serving.kserve.io/v1alpha2",
    "nvidia.com/v1alpha1",
}


def _cases() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for directory in (EXAMPLES, REAL):
        for case in yaml.safe_load((directory / "expected.yaml").read_text()):
            docs = [d for d in yaml.safe_load_all((directory / case["file"]).read_text()) if d]
            # A case with `fleet:` is decided against a fleet snapshot (`gpugate check --fleet`); this control
            # plane has no GPU nodes for a live inventory, so those cases run on the simulated fleet instead.
            if case.get("fleet"):
                continue
            # `offline: true`: objects only `gpugate check` judges together (a TrainJob beside its runtime); the
            # apiserver sends each alone, and the TrainJob alone is judged without its runtime's template.
            if case.get("offline"):
                continue
            if case["verdict"] != "skipped" and all(d.get("apiVersion") in SERVED_GROUPS for d in docs):
                out.append((directory / case["file"], case))
    return out


CASES = _cases()


def at(obj: Any, dotted: str) -> Any:
    """A dotted path into an object, `\\.` for a dot inside a key (as expected.yaml writes them)."""
    for key in re.split(r"(?<!\\)\.", dotted):
        key = key.replace("\\.", ".")
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


# Which policy governs a namespace depends on its name (serving: ml-serving, serving-*; research:
# research-*), so each example namespace becomes a fresh one whose name the same policy matches.
NAMESPACE_PREFIX = {"default": "fleet", "ml-serving": "serving", "research-nlp": "research-nlp"}


@pytest.fixture(scope="module")
def namespaces(fleet: Stack) -> dict[tuple[str, str], str]:
    """(example namespace, its labels) -> a namespace created for it once, shared by dry runs."""
    return {}


def namespace_for(fleet: Stack, made: dict[tuple[str, str], str], original: str, labels: dict[str, str] | None) -> str:
    key = (original, yaml.safe_dump(labels or {}))
    if key not in made:
        prefix = NAMESPACE_PREFIX.get(original, original)
        made[key] = fleet.cluster.create_namespace(prefix, {k: str(v) for k, v in (labels or {}).items()})
    return made[key]


def dry_run(fleet: Stack, docs: list[dict[str, Any]]) -> KubectlResult:
    stdin: dict[str, Any] | list[Any] = docs[0] if len(docs) == 1 else docs
    return fleet.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=stdin, check=False)


def returned(result: KubectlResult) -> Any:
    """What kubectl printed: one object, or a List (as `gpugate check` prints) when it printed several."""
    decoder, text, objects = json.JSONDecoder(), result.stdout.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        objects.append(obj)
        text = text[end:].strip()
    return objects[0] if len(objects) == 1 else {"kind": "List", "items": objects}


CLUSTER_SCOPED = {"DeviceClass", "ClusterTrainingRuntime"}
# Refused by the ValidatingAdmissionPolicy backstop, which runs before the validating webhooks, so its own
# message answers instead of gpugate's (deploy/base/admission-policy.yaml).
# The GPU Operator's CUDA validator also tolerates the GPU taint without holding a GPU; its namespace is
# meant to be excluded (components/exclude-gpu-operator), which this control plane does not do.
# So is a pod with a CDI device annotation.
BACKSTOP_FIRST = {
    "pod-cpu-tolerating-gpu-taint.yaml",
    "nvidia-gpu-operator-cuda-validator.yaml",
    "pod-cdi-annotation.yaml",
    "pod-cpu-nvidia-cdi.yaml",
}


@pytest.mark.parametrize(("source", "case"), CASES, ids=[f"{p.parent.name}/{p.name}" for p, _ in CASES])
def test_expected_verdict_through_the_apiserver(
    fleet: Stack, namespaces: dict[tuple[str, str], str], source: Path, case: dict[str, Any]
) -> None:
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    labels = case.get("namespaceLabels") or {}
    renamed = {}
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            continue
        original = doc["metadata"].get("namespace", "default")
        doc["metadata"]["namespace"] = renamed[original] = namespace_for(
            fleet, namespaces, original, labels.get(original)
        )
        if doc["kind"] == "Pod" and doc["spec"].get("serviceAccountName"):
            # The ServiceAccount admission plugin refuses pods naming one that does not exist.
            fleet.cluster.kubectl(
                "create",
                "serviceaccount",
                doc["spec"]["serviceAccountName"],
                "-n",
                doc["metadata"]["namespace"],
                check=False,
            )

    result = dry_run(fleet, docs)

    if case["verdict"] == "denied":
        assert not result.ok, f"{source.name} was admitted:\n{result}"
        if source.name in BACKSTOP_FIRST:
            assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
            return
        assert gpugate_denial(result.stderr) is not None, f"expected gpugate's refusal:\n{result}"
    else:
        assert result.ok, f"{source.name} was refused:\n{result}"
    for text in case.get("contains", []):
        if ": skipped" in text or ': allowed (policy "' in text:  # the CLI's account of each object; the
            continue  # apiserver has none
        for original, new in renamed.items():  # the CLI names the namespace of the file
            text = text.replace(f'in namespace "{original}"', f'in namespace "{new}"')
        assert _squashed(text) in _squashed(result.stderr), f"{text!r} missing:\n{result}"
    if not result.ok:
        return
    stored = _without_default_tolerations(returned(result))
    for path, value in (case.get("fields") or {}).items():
        assert at(stored, path) == value, f"{path}:\n{result}"
    for path in case.get("absent") or []:
        with pytest.raises((KeyError, IndexError)):
            at(stored, path)


# The DefaultTolerationSeconds admission plugin gives every pod these two (300 s); `gpugate check` knows
# nothing of them (kubernetes plugin/pkg/admission/defaulttolerationseconds/admission.go).
APISERVER_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def _without_default_tolerations(obj: Any) -> Any:
    for item in obj.get("items", [obj]) if obj.get("kind") == "List" else [obj]:
        if item.get("kind") == "Pod":
            spec = item["spec"]
            spec["tolerations"] = [t for t in spec.get("tolerations", []) if t not in APISERVER_TOLERATIONS]
            if not spec["tolerations"]:
                del spec["tolerations"]
    return obj


def _squashed(text: str) -> str:
    """Text without the line breaks and `Warning: ` prefixes kubectl adds."""
    return " ".join(line.removeprefix("Warning: ") for line in text.splitlines())


# ---- the headline shapes with real objects --------------------------------------------------------------


def create(cp: ControlPlane, obj: dict[str, Any], *, check: bool = True) -> KubectlResult:
    return cp.kubectl("create", "-o", "json", "-f", "-", stdin=obj, check=check)


def stored(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    got: dict[str, Any] = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json").json()
    return got


def test_dra_pod_with_its_claim_template_and_the_gpu_toleration(fleet: Stack) -> None:
    """DRA: a ResourceClaimTemplate in resource.k8s.io/v1 (served by default since Kubernetes 1.34) on
    NVIDIA's DeviceClass gpu.nvidia.com (installed by the fixture, as the DRA driver installs it), and a pod
    that claims a GPU through it and tolerates the GPU taint: stored with the claim, the toleration and the
    attribution labels, and no runtime class or model selector."""
    cp = fleet.cluster
    ns = cp.create_namespace("fleet-dra", {"team": "vision"})
    create(
        cp,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "single-gpu", "namespace": ns},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
            },
        },
    )
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    create(
        cp,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "dra-gpu", "namespace": ns},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
                "tolerations": [toleration],
                "containers": [{"name": "main", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        },
    )

    pod = stored(cp, "pod", "dra-gpu", ns)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    assert toleration in pod["spec"]["tolerations"]
    assert [t for t in pod["spec"]["tolerations"] if t.get("key", "").startswith("nvidia.com/")] == [toleration]
    assert "runtimeClassName" not in pod["spec"]
    assert "nodeSelector" not in pod["spec"] and "affinity" not in pod["spec"]
    assert pod["metadata"]["labels"]["gpugate.io/team"] == "vision"
    assert pod["metadata"]["annotations"]["gpugate.io/policy"] == "default"

    # The same toleration without the claim: a CPU pod squatting on GPU nodes.
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "squatter", "namespace": ns},
        "spec": {"tolerations": [toleration], "containers": [{"name": "main", "image": "ubuntu:22.04"}]},
    }
    refused = create(cp, squatter, check=False)
    assert not refused.ok and refusal(refused.stderr) is not None, refused


def raycluster(name: str, namespace: str, gpus: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "raycluster-gpu.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    [worker] = doc["spec"]["workerGroupSpecs"]
    [main] = worker["template"]["spec"]["containers"]
    main["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    return doc


def test_raycluster_with_half_a_gpu_is_refused_at_apply_time(fleet: Stack) -> None:
    ns = fleet.cluster.create_namespace("fleet-ray")
    sent = raycluster("half", ns, "0.5")

    result = fleet.kubectl("apply", "--dry-run=server", "-f", "-", stdin=sent, check=False)

    assert not result.ok, result
    message = gpugate_denial(result.stderr)
    assert message is not None, f"expected gpugate's denial:\n{result}"
    # A fractional GPU is what the apiserver would refuse in the pods: the mutating call refuses it first.
    assert 'admission webhook "mutate-workloads.gpugate.io" denied the request' in result.stderr, result
    assert "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]" in message
    assert "must be an integer" in message
    real = fleet.kubectl("apply", "-f", "-", stdin=sent, check=False)
    assert not real.ok, real
    gone = fleet.kubectl("get", "raycluster", "half", "-n", ns, check=False)
    assert "NotFound" in gone.stderr, gone


def test_raycluster_allowed_with_warnings_and_left_as_sent(fleet: Stack) -> None:
    ns = fleet.cluster.create_namespace("fleet-ray")
    sent = raycluster("whole", ns, "1")

    dry = fleet.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=sent)
    said = "\n".join(dry.warnings)
    assert 'RayCluster "whole" workerGroupSpecs[0]: pods will get runtimeClassName=nvidia' in said, dry
    assert "nvidia.com/gpu.product=NVIDIA-L4" in _squashed(dry.stderr), dry
    real = fleet.kubectl("apply", "-f", "-", stdin=sent)
    assert real.warnings, real
    kept = stored(fleet.cluster, "raycluster", "whole", ns)
    assert kept["spec"] == sent["spec"], "templates are not mutated without mutateTemplates"


def test_metadata_only_updates_of_a_raycluster_skip_gpugate(fleet: Stack) -> None:
    """matchCondition spec-changed: labels or finalizers on a stored RayCluster do not call gpugate (so
    an operator's bookkeeping does not depend on it); a spec change does."""
    ns = fleet.cluster.create_namespace("fleet-ray")
    fleet.kubectl("apply", "-f", "-", stdin=raycluster("kept", ns, "1"))

    before = fleet.gpugate.admission_requests()
    fleet.kubectl("label", "raycluster", "kept", "-n", ns, "example.com/owner=ops")
    fleet.kubectl(
        "patch",
        "raycluster",
        "kept",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"metadata": {"finalizers": ["example.com/cleanup"]}}',
    )
    assert fleet.gpugate.admission_requests() == before

    patched = fleet.kubectl(
        "patch",
        "raycluster",
        "kept",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 3}]',
    )
    assert patched.warnings, patched
    assert fleet.gpugate.admission_requests() > before
    fleet.kubectl("patch", "raycluster", "kept", "-n", ns, "--type=merge", "-p", '{"metadata": {"finalizers": null}}')


# ---- pods an operator builds from its own fields, with real objects (upstream TrainJob CRD) ---------------


def trainjob(name: str, namespace: str, gpus: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "trainjob-gpu.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}}
    return doc


def test_a_trainjob_is_stored_as_sent_and_a_fractional_resources_per_node_never_is(fleet: Stack) -> None:
    """A TrainJob whose runtime is not installed: stored unchanged, with the warnings naming where its template
    is and what its trainer pods will get; an UPDATE to half a GPU per node is refused by the mutating webhook
    naming spec.trainer.resourcesPerNode, and the stored object keeps its whole GPUs."""
    ns = fleet.cluster.create_namespace("fleet-trainer")
    sent = trainjob("train", ns, "2")

    made = fleet.kubectl("create", "-o", "json", "-f", "-", stdin=sent)
    said = _squashed(made.stderr)
    assert 'pod template in ClusterTrainingRuntime "torch-distributed", judged when that is applied' in said, made
    assert "trainer: pods will get runtimeClassName=nvidia" in said, made
    kept = stored(fleet.cluster, "trainjob", "train", ns)
    assert kept["spec"]["trainer"] == sent["spec"]["trainer"]
    assert "operated" not in kept

    half = fleet.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=trainjob("train", ns, "500m"), check=False
    )
    assert not half.ok, half
    assert 'admission webhook "mutate-workloads.gpugate.io" denied the request' in half.stderr, half
    assert 'spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: container "node": Invalid value: "500m"' in (
        _squashed(half.stderr)
    ), half
    assert stored(fleet.cluster, "trainjob", "train", ns)["spec"]["trainer"]["resourcesPerNode"] == {
        "limits": {"nvidia.com/gpu": "2"}
    }


def test_a_cluster_training_runtime_is_judged_without_a_namespace(fleet: Stack) -> None:
    """Cluster-scoped: the webhook rule with scope Cluster routes it, gpugate needs no namespace labels for it,
    and a fractional node container is refused before anything is stored."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "clustertrainingruntime-gpu.yaml").read_text())
    doc["metadata"]["name"] = "e2e-runtime-half"
    [job] = doc["spec"]["template"]["spec"]["replicatedJobs"]
    [node] = job["template"]["spec"]["template"]["spec"]["containers"]
    node["resources"] = {"limits": {"nvidia.com/gpu": "0.5"}}

    refused = fleet.kubectl("create", "-f", "-", stdin=doc, check=False)

    assert not refused.ok, refused
    message = gpugate_denial(refused.stderr)
    assert message is not None and 'ClusterTrainingRuntime "e2e-runtime-half" violates' in message, refused
    gone = fleet.kubectl("get", "clustertrainingruntime", "e2e-runtime-half", check=False)
    assert "NotFound" in gone.stderr, gone
