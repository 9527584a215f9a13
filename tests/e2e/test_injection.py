"""Scenario 1: a GPU pod is completed by gpugate — runtime class, GPU toleration, model selector,
attribution label — as `kubectl apply --dry-run=server` shows, and a real create stores exactly
what the dry run showed. With and without the built-in ExtendedResourceToleration plugin, which
adds the same toleration before the webhooks run (gpugate must not duplicate it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.harness.gpugate import Stack

from .objects import GPU_TOLERATION, H100_VALUES, NODE_LABEL, comparable, gpu_pod, model_selection

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[False, True], ids=["ert-off", "ert-on"])
def any_stack(request: pytest.FixtureRequest, stack_factory: Callable[[bool], Stack]) -> Stack:
    return stack_factory(request.param)


@pytest.mark.parametrize(
    ("model_label", "expected_values"),
    [(None, ["NVIDIA-L4"]), ("h100", sorted(H100_VALUES))],
    ids=["default-l4", "h100"],
)
def test_dry_run_shows_the_completed_pod_and_create_stores_it(
    any_stack: Stack, model_label: str | None, expected_values: list[str]
) -> None:
    cp = any_stack.cluster
    ns = cp.create_namespace("e2e-inject")
    labels = {"app": "trainer"}
    if model_label:
        labels["gpugate.io/model"] = model_label
    sent = gpu_pod("trainer", ns, gpus="2", labels=labels)

    dry = cp.kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", "-", stdin=sent)
    shown = dry.yaml()
    spec = shown["spec"]
    assert spec.get("runtimeClassName") == "nvidia", dry
    assert spec.get("tolerations", []).count(GPU_TOLERATION) == 1, (
        f"expected exactly one {GPU_TOLERATION} toleration, got {spec.get('tolerations')}"
    )
    assert model_selection(shown) == expected_values, (
        f"model selector: nodeSelector={spec.get('nodeSelector')} affinity={spec.get('affinity')}"
    )
    if len(expected_values) == 1:
        assert spec["nodeSelector"][NODE_LABEL] == expected_values[0]
    assert shown["metadata"]["labels"]["gpugate.io/team"] == "unassigned"
    for key, value in labels.items():
        assert shown["metadata"]["labels"][key] == value, "user labels must be kept"
    assert shown["metadata"].get("annotations", {}).get("gpugate.io/policy") == "e2e-fleet"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"

    # A dry run changes nothing observable.
    assert "NotFound" in cp.kubectl("get", "pod", "trainer", "-n", ns, check=False).stderr

    cp.kubectl("apply", "-f", "-", stdin=sent)
    stored = cp.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").json()
    assert comparable(stored) == comparable(shown)

    # Applying the same manifest again (an UPDATE gpugate validates) changes nothing and is allowed.
    again = cp.kubectl("apply", "-f", "-", stdin=sent)
    assert "unchanged" in again.stdout, again


@pytest.mark.parametrize("enabled", [False, True], ids=["ert-off", "ert-on"])
def test_extended_resource_toleration_setting_is_real(stack_factory: Callable[[bool], Stack], enabled: bool) -> None:
    """The ert-on case above only means something if the plugin really adds the toleration:
    check it on a GPU pod in kube-system, which gpugate never sees."""
    cp = stack_factory(enabled).cluster
    dry = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("ert", "kube-system"))
    tolerations = dry.json()["spec"].get("tolerations", [])
    assert (GPU_TOLERATION in tolerations) == enabled, tolerations
