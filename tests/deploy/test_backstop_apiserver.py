"""The ValidatingAdmissionPolicy backstop inside a real kube-apiserver, with no webhook registered:
the verdicts tests/deploy/test_manifests.py computes with cel-cpp, as the apiserver gives them.

Uses the pinned kube-apiserver/etcd/kubectl of the end-to-end suite (tests/e2e/build.sh); skips
locally without them and fails in CI, like that suite."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries
from tests.harness.polling import eventually

from .test_manifests import BACKSTOP_CASES, DEPLOY, GPU_TOLERATION, container, kustomize_command, pod, pod_spec

pytestmark = pytest.mark.e2e

NAMESPACE = "ml"
#: RuntimeClasses of other names: two aliases of GPU runtimes, one of another runtime.
ALIASES = {"my-gpu": "nvidia", "k3s-gpu": "nvidia-experimental", "sandboxed": "runsc"}


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        bin_dir = find_binaries()
    except BinariesMissing as err:
        if os.environ.get("CI"):
            pytest.fail(f"kube-apiserver not built: {err}", pytrace=False)
        pytest.skip(f"kube-apiserver not built (scripts/install-tools): {err}")
    plane = ControlPlane(bin_dir, tmp_path_factory.mktemp("backstop-apiserver"))
    try:
        plane.start()
        text = _render()
        for obj in yaml.safe_load_all(text):
            if obj and obj["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
                plane.kubectl("apply", "-f", "-", stdin=obj)
        for runtime in ("nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental", "runc"):
            plane.ensure_runtime_class(runtime)  # pods may only name ones that exist
        for alias, handler in ALIASES.items():
            plane.ensure_runtime_class(alias, handler)
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.ensure_default_service_account(NAMESPACE)
        plane.ensure_default_service_account("kube-system")
        # The apiserver enforces a new policy a moment after it is stored.
        squatter = pod(pod_spec(tolerations=[GPU_TOLERATION]))
        deadline = time.monotonic() + 30
        while create(plane, squatter).ok and time.monotonic() < deadline:
            time.sleep(0.2)
        yield plane
    finally:
        plane.stop()


def _render() -> str:
    return subprocess.run([*kustomize_command(), str(DEPLOY)], capture_output=True, text=True, check=True).stdout


def create(plane: ControlPlane, obj: dict[str, Any], namespace: str = NAMESPACE) -> Any:
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    return plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=obj, check=False)


CREATE_CASES = [case for case in BACKSTOP_CASES if case[2] is None]


@pytest.mark.parametrize(("case", "new", "old", "expected"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES])
def test_backstop_in_the_apiserver(
    apiserver: ControlPlane, case: str, new: dict[str, Any], old: None, expected: list[str]
) -> None:
    result = create(apiserver, new)
    if not expected:
        assert result.ok, result
        return
    assert not result.ok, f"{case}: admitted"
    assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
    for fragment in expected:
        assert fragment in result.stderr, result


def test_excluded_namespaces_are_left_alone(apiserver: ControlPlane) -> None:
    squatter = pod(pod_spec(tolerations=[GPU_TOLERATION]))
    assert not create(apiserver, squatter).ok
    gpu_without_runtime = pod(pod_spec(container(limits={"nvidia.com/gpu": "1"})))
    for obj in (squatter, gpu_without_runtime):
        result = create(apiserver, obj, "kube-system")
        assert result.ok, result


def test_a_status_update_rewriting_gpugate_labels_is_refused(apiserver: ControlPlane) -> None:
    """pods/status can write labels and annotations; the backstop keeps every gpugate.io one as it was."""
    stored = pod(pod_spec(container(limits={"nvidia.com/gpu": "1"})))
    stored["metadata"] = {"name": "status", "namespace": NAMESPACE, "labels": {"gpugate.io/team": "vision"}}
    apiserver.kubectl("create", "-f", "-", stdin=stored)

    def status(patch: dict[str, Any]) -> Any:
        return apiserver.kubectl(
            "patch",
            "pod",
            "status",
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(patch),
            check=False,
        )

    for metadata in (
        {"labels": {"gpugate.io/team": "x"}},
        {"labels": {"gpugate.io/team": None}},
        {"annotations": {"gpugate.io/workload": "Pod/x"}},
    ):
        result = status({"metadata": metadata})
        assert not result.ok, f"{metadata}: admitted"
        assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
        assert "a status update must not add, change or remove a gpugate.io label or annotation" in result.stderr
    assert status({"status": {"conditions": [{"type": "example.com/Ready", "status": "True"}]}}).ok
    assert status({"metadata": {"labels": {"app": "renamed"}}}).ok
    # The same edit through the pod itself is gpugate's to judge (spec.security.attributionEdits).
    assert apiserver.kubectl("label", "pod", "status", "-n", NAMESPACE, "gpugate.io/team=x", "--overwrite").ok


def test_an_update_adding_a_gpu_toleration_to_a_cpu_pod_is_refused_past_the_match_condition(
    apiserver: ControlPlane,
) -> None:
    """The backstop's match condition lets through, unevaluated, an UPDATE that keeps the labels, annotations and
    tolerations; one that adds a toleration (labels and annotations kept: the condition's last comparison, of two
    lists of tolerations, decides) is judged and refused: had the comparison failed to evaluate, the policy's
    failurePolicy Ignore would have admitted it."""
    stored = pod(pod_spec(container(), tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x"}]))
    stored["metadata"] = {"name": "tolerations", "namespace": NAMESPACE, "labels": {"app": "cpu"}}
    apiserver.kubectl("create", "-f", "-", stdin=stored)
    added = [*stored["spec"]["tolerations"], GPU_TOLERATION]
    result = apiserver.kubectl(
        "patch", "pod", "tolerations", "-n", NAMESPACE, "--type=merge",
        "-p", json.dumps({"spec": {"tolerations": added}}), check=False,
    )  # fmt: skip
    assert not result.ok, "a GPU toleration added to a CPU pod was admitted"
    assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr and "GPU node taint" in result.stderr
    assert apiserver.kubectl("annotate", "pod", "tolerations", "-n", NAMESPACE, "example.com/note=x").ok


def test_a_pod_without_gpus_under_an_alias_of_a_gpu_runtime_is_refused_by_its_handler(apiserver: ControlPlane) -> None:
    """gpugate-runtime-handlers reads the RuntimeClasses as its parameters: ``my-gpu`` (handler nvidia) and
    ``k3s-gpu`` (handler nvidia-experimental) are GPU runtime classes no list names; ``sandboxed`` is not."""

    def refused(runtime: str) -> Any:
        result = create(apiserver, pod(pod_spec(runtimeClassName=runtime)))
        return None if result.ok else result

    for alias, handler in (("my-gpu", "nvidia"), ("k3s-gpu", "nvidia-experimental")):
        # The apiserver reads a new parameter from its informer a moment after it is stored.
        result = eventually(lambda alias=alias: refused(alias), timeout=30)
        assert result, f"a pod without GPUs under {alias} (handler {handler}) was admitted"
        assert "ValidatingAdmissionPolicy 'gpugate-runtime-handlers'" in result.stderr, result
        assert (
            f'must not run under the GPU runtime class "{alias}" (RuntimeClass "{alias}" has handler "{handler}", a '
            "GPU runtime's), which can expose every GPU of its node; remove runtimeClassName or request a GPU"
        ) in result.stderr, result
    assert create(apiserver, pod(pod_spec(runtimeClassName="sandboxed"))).ok
    gpu = pod(pod_spec(container(limits={"nvidia.com/gpu": "1"}), runtimeClassName="my-gpu"))
    assert create(apiserver, gpu).ok, "a GPU pod under an alias of nvidia was refused"
    # gpugate-backstop answers for the classes it names, once: the handler policy leaves them to it.
    named = create(apiserver, pod(pod_spec(runtimeClassName="nvidia")))
    assert "ValidatingAdmissionPolicy 'gpugate-backstop'" in named.stderr, named
    assert "gpugate-runtime-handlers" not in named.stderr, named
    assert create(apiserver, pod(pod_spec(runtimeClassName="my-gpu")), "kube-system").ok  # excluded namespace


def test_a_pod_carrying_the_formed_by_label_skips_the_handler_policy_and_meets_the_backstop(
    apiserver: ControlPlane,
) -> None:
    """gpugate-runtime-handlers' binding skips a pod that carries gpugate.io/formed-by (objectSelector: the pods the
    native tier formed, which hold GPUs, are not evaluated once per RuntimeClass): shown with gpugate-backstop's
    binding taken away for a moment, when a CPU pod carrying the label under an alias of nvidia is admitted and the
    same pod without it is refused by the handler policy. With the backstop bound, the labelled pod is refused by the
    backstop's formed-by rule, so the skip lets nothing through."""
    formed = {"gpugate.io/formed-by": "native-tier"}
    unlabelled = pod(pod_spec(runtimeClassName="my-gpu"))
    labelled = {**unlabelled, "metadata": {**unlabelled["metadata"], "labels": formed}}
    result = create(apiserver, labelled)
    assert not result.ok and "ValidatingAdmissionPolicy 'gpugate-backstop'" in result.stderr, result
    assert "must not carry the label gpugate.io/formed-by" in result.stderr, result
    assert 'under the runtime class "my-gpu"; remove the label' in result.stderr, result
    binding = json.loads(
        apiserver.kubectl("get", "validatingadmissionpolicybinding", "gpugate-backstop", "-o", "json").stdout
    )
    apiserver.kubectl("delete", "validatingadmissionpolicybinding", "gpugate-backstop")
    try:
        assert eventually(lambda: create(apiserver, labelled).ok, timeout=30), "the handler policy judged the label"
        refused = create(apiserver, unlabelled)
        assert not refused.ok and "ValidatingAdmissionPolicy 'gpugate-runtime-handlers'" in refused.stderr, refused
    finally:
        for field in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            binding["metadata"].pop(field, None)
        apiserver.kubectl("create", "-f", "-", stdin=binding)
        assert eventually(lambda: not create(apiserver, labelled).ok, timeout=30), "the backstop did not come back"
