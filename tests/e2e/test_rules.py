"""Scenario 5: what the apiserver accepts but a GPU fleet must not — CPU pods squatting on GPU
nodes by tolerating the GPU taint, forged or edited attribution labels, and containers that ask
the NVIDIA runtime for every GPU through NVIDIA_VISIBLE_DEVICES."""

from __future__ import annotations

import pytest

from tests.harness.controlplane import ControlPlane
from tests.harness.gpugate import Stack

from .objects import (
    GPU,
    GPU_TOLERATION,
    TEAM,
    container,
    deployment,
    gpu_pod,
    gpugate_denial,
    pod,
    refusal,
    wait_for_team_label,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def ml_namespace(stack: Stack, cluster: ControlPlane) -> str:
    ns = cluster.create_namespace("e2e-ml", labels={"team": "ml"})
    assert wait_for_team_label(stack, ns, "ml") == "ml", "gpugate never attributed a pod to team ml"
    return ns


def test_cpu_pod_tolerating_the_gpu_taint_is_refused(stack: Stack, namespace: str) -> None:
    sent = pod("squatter", namespace, container("app"), tolerations=[GPU_TOLERATION])

    result = stack.kubectl("create", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"a CPU pod tolerating {GPU} was admitted:\n{result}"
    message = refusal(result.stderr)
    assert message is not None, result
    assert GPU in message, message


def test_cpu_workload_tolerating_the_gpu_taint_is_refused_by_gpugate(stack: Stack, namespace: str) -> None:
    """The backstop only covers pods; for templates the verdict is gpugate's own."""
    template = pod("x", namespace, container("app"), tolerations=[GPU_TOLERATION])
    sent = deployment("squatters", namespace, template)

    result = stack.kubectl("apply", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"a Deployment of CPU pods tolerating {GPU} was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None and GPU in message, result


def test_cpu_pod_under_the_nvidia_runtime_class_is_refused(stack: Stack, namespace: str) -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all: a GPU-less pod under the NVIDIA runtime would see every GPU.
    The backstop runs before the validating webhooks and refuses it first; gpugate's own message for the same
    pod is tested offline (tests/rules/test_runtime_class.py)."""
    sent = pod("runtime-squatter", namespace, container("app"), runtimeClassName="nvidia")

    result = stack.kubectl("create", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"a CPU pod under runtimeClassName nvidia was admitted:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and 'GPU runtime class "nvidia"' in message, result.stderr


def test_forged_attribution_label_is_replaced_with_a_warning(stack: Stack, ml_namespace: str) -> None:
    sent = gpu_pod("forger", ml_namespace, labels={"app": "forger", TEAM: "someone-else"})

    created = stack.kubectl("create", "-f", "-", "-o", "json", stdin=sent)

    assert created.json()["metadata"]["labels"][TEAM] == "ml"
    assert any(TEAM in w for w in created.warnings), f"expected a warning about {TEAM}:\n{created}"
    stored = stack.kubectl("get", "pod", "forger", "-n", ml_namespace, "-o", "json").json()
    assert stored["metadata"]["labels"][TEAM] == "ml"


def test_editing_attribution_labels_on_update_is_refused(stack: Stack, ml_namespace: str) -> None:
    stack.kubectl("create", "-f", "-", stdin=gpu_pod("worker", ml_namespace))

    result = stack.kubectl(
        "label", "pod", "worker", "-n", ml_namespace, f"{TEAM}=someone-else", "--overwrite", check=False
    )

    assert not result.ok, f"the attribution label was edited:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and TEAM in message, result
    stored = stack.kubectl("get", "pod", "worker", "-n", ml_namespace, "-o", "json").json()
    assert stored["metadata"]["labels"][TEAM] == "ml"

    removed = stack.kubectl("label", "pod", "worker", "-n", ml_namespace, f"{TEAM}-", check=False)
    assert not removed.ok, f"the attribution label was removed:\n{removed}"

    # Other labels stay the user's to edit: the refusal is about gpugate's labels only.
    stack.kubectl("label", "pod", "worker", "-n", ml_namespace, "stage=canary")
    stored = stack.kubectl("get", "pod", "worker", "-n", ml_namespace, "-o", "json").json()
    assert stored["metadata"]["labels"]["stage"] == "canary"
    assert stored["metadata"]["labels"][TEAM] == "ml"


@pytest.mark.parametrize("gpus", [None, "1"], ids=["cpu-pod", "gpu-pod"])
def test_nvidia_visible_devices_override_is_refused(stack: Stack, namespace: str, gpus: str | None) -> None:
    sent = pod("peeker", namespace, container("peeker-main", gpus=gpus, env={"NVIDIA_VISIBLE_DEVICES": "all"}))

    result = stack.kubectl("create", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"NVIDIA_VISIBLE_DEVICES=all was admitted:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and "NVIDIA_VISIBLE_DEVICES" in message, result
    assert "peeker-main" in message, message


@pytest.mark.parametrize("gpus", [None, "1"], ids=["cpu-pod", "gpu-pod"])
@pytest.mark.parametrize(("variable", "value"), [("NVIDIA_GDS", "enabled"), ("NVIDIA_IMEX_CHANNELS", "0")])
def test_other_nvidia_device_variables_are_refused(
    stack: Stack, namespace: str, gpus: str | None, variable: str, value: str
) -> None:
    """The matchConditions route a pod without GPUs that sets one, and gpugate refuses it (as both webhooks
    saw nothing of the kind before)."""
    sent = pod("doors", namespace, container("doors-main", gpus=gpus, env={variable: value}))

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"{variable}={value} was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None and f"sets {variable}={value}" in message and "doors-main" in message, result


def test_env_from_with_an_nvidia_prefix_in_a_pod_without_gpus_is_refused(stack: Stack, namespace: str) -> None:
    app = container("app")
    app["envFrom"] = [{"prefix": "NVIDIA_", "configMapRef": {"name": "devices"}}]

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod("prefixed", namespace, app), check=False)

    assert not result.ok, f"envFrom with the prefix NVIDIA_ was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None and 'with the prefix "NVIDIA_"' in message, result


@pytest.mark.parametrize("capability", ["SYS_ADMIN", "all"])
def test_sys_admin_or_all_in_a_gpu_container_is_refused(stack: Stack, namespace: str, capability: str) -> None:
    main = container("main", gpus="1")
    main["securityContext"] = {"capabilities": {"add": [capability]}}

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod("admin", namespace, main), check=False)

    assert not result.ok, f"capabilities.add [{capability}] in a GPU container was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None and f"adds the capability {capability} in a GPU pod" in message, result


def test_ephemeral_debug_container_cannot_override_visible_devices(stack: Stack, namespace: str) -> None:
    """`kubectl debug` adds an ephemeral container through pods/ephemeralcontainers: the same rule."""
    stack.kubectl("create", "-f", "-", stdin=gpu_pod("trainer", namespace))

    result = stack.kubectl(
        "debug",
        "trainer",
        "-n",
        namespace,
        "--image=registry.k8s.io/pause:3.10",
        "--container=peek",
        "--env=NVIDIA_VISIBLE_DEVICES=all",
        "--profile=general",
        check=False,
    )

    assert not result.ok, f"a debug container with NVIDIA_VISIBLE_DEVICES=all was added:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and "NVIDIA_VISIBLE_DEVICES" in message, result
    stored = stack.kubectl("get", "pod", "trainer", "-n", namespace, "-o", "json").json()
    assert not stored["spec"].get("ephemeralContainers"), stored["spec"].get("ephemeralContainers")

    # The same debug container without the override is fine: the refusal was about the variable.
    stack.kubectl(
        "debug",
        "trainer",
        "-n",
        namespace,
        "--image=registry.k8s.io/pause:3.10",
        "--container=peek",
        "--profile=general",
    )
    stored = stack.kubectl("get", "pod", "trainer", "-n", namespace, "-o", "json").json()
    assert [c["name"] for c in stored["spec"].get("ephemeralContainers", [])] == ["peek"]


CDI = {"cdi.k8s.io/debug": "nvidia.com/gpu=all"}


def test_a_pod_with_only_a_cdi_device_annotation_is_refused(stack: Stack, namespace: str) -> None:
    """Nothing else about the pod involves GPUs; the annotation alone would have the runtime inject every GPU."""
    sent = pod("cdi", namespace, container("app"))
    sent["metadata"]["annotations"] = CDI

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"a pod with a CDI device annotation was admitted:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and "CDI device" in message, result


def test_a_workload_with_only_a_cdi_device_annotation_is_refused_by_gpugate(stack: Stack, namespace: str) -> None:
    """The backstop covers pods only: this refusal shows the webhooks' matchConditions route the annotation."""
    template = pod("x", namespace, container("app"))
    template["metadata"]["annotations"] = CDI
    sent = deployment("cdi", namespace, template)

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"a Deployment with a CDI device annotation was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    assert "spec.template.metadata.annotations[cdi.k8s.io/debug]" in message, message
    assert "spec.security.cdiAnnotations: allow" in message, message


def test_a_cdi_device_annotation_added_through_pods_status_is_refused(stack: Stack, namespace: str) -> None:
    """pods/status keeps the annotations an update changes; the pod is still Pending, so its sandbox would be made
    with the annotation."""
    stack.kubectl("create", "-f", "-", stdin=pod("cdi-later", namespace, container("app")))

    patch = '{"metadata":{"annotations":{"cdi.k8s.io/debug":"nvidia.com/gpu=all"}}}'
    result = stack.kubectl(
        "patch", "pod", "cdi-later", "-n", namespace, "--subresource=status", "--type=merge", "-p", patch, check=False
    )

    assert not result.ok, f"a CDI device annotation was added through pods/status:\n{result}"
    message = refusal(result.stderr)
    assert message is not None and "CDI device" in message, result
    stored = stack.kubectl("get", "pod", "cdi-later", "-n", namespace, "-o", "json").json()
    assert "cdi.k8s.io/debug" not in (stored["metadata"].get("annotations") or {})


def test_a_gpu_pod_naming_thousands_of_claim_templates_is_refused_at_once(stack: Stack, namespace: str) -> None:
    """Before the cap each named template was a read of the apiserver in the request's thread (3,000: 14 s, past
    the webhook timeout, so the dry-run failed on the timeout instead of a verdict)."""
    main = container("main", gpus="1")
    sent = pod("claims", namespace, main)
    sent["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimTemplateName": f"t{i}"} for i in range(3000)]

    result = stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)

    assert not result.ok, result
    message = gpugate_denial(result.stderr)
    assert message is not None, result
    assert "spec.resourceClaims: Too many: 3000: must have at most 32 items" in message, message
