"""Scenario 7: rewriting a policy file changes gpugate's verdicts without a restart."""

from __future__ import annotations

import pytest

from tests.harness.controlplane import ControlPlane
from tests.harness.gpugate import Stack
from tests.harness.polling import eventually
from tests.harness.processes import https_get

from .objects import H100_VALUES, gpu_pod, model_selection, reload_policy

pytestmark = pytest.mark.e2e


def test_policy_edit_takes_effect_without_restart(stack: Stack, cluster: ControlPlane) -> None:
    ns = cluster.create_namespace("reload")  # matched only by the e2e-reload policy (priority 100)
    policy_file = stack.policy_dir / "reload.yaml"
    pid = stack.gpugate.process.proc.pid if stack.gpugate.process.proc else None

    def selection() -> list[str] | None:
        dry = stack.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("p", ns))
        shown = dry.json()
        assert shown["metadata"].get("annotations", {}).get("gpugate.io/policy") == "e2e-reload"
        return model_selection(shown)

    assert selection() == sorted(H100_VALUES), "the reload policy starts with default class h100"
    try:
        policy_file.write_text(reload_policy("l4"))
        got = eventually(lambda: (s := selection()) == ["NVIDIA-L4"] and s, timeout=15)
        assert got == ["NVIDIA-L4"], f"after the edit gpugate still selects {selection()}"
        assert stack.gpugate.process.running and stack.gpugate.process.proc is not None
        assert stack.gpugate.process.proc.pid == pid, "gpugate was restarted"
    finally:
        policy_file.write_text(reload_policy("h100"))
    got = eventually(lambda: (s := selection()) == sorted(H100_VALUES) and s, timeout=15)
    assert got == sorted(H100_VALUES), "reverting the edit did not take effect"


# Invalid: an unknown mode, and a default class that is not among the classes.
BROKEN_RELOAD_POLICY = (
    reload_policy("l4").replace("mode: enforce", "mode: sometimes").replace("default: l4", "default: a100")
)


def metric(stack: Stack, name: str) -> float:
    total = 0.0
    for line in stack.gpugate.metrics().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_broken_policy_edit_keeps_the_last_good_set(stack: Stack, cluster: ControlPlane) -> None:
    ns = cluster.create_namespace("reload")
    policy_file = stack.policy_dir / "reload.yaml"
    errors_before = metric(stack, "gpugate_policy_reload_errors_total")

    def selection() -> list[str] | None:
        dry = stack.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("p", ns))
        return model_selection(dry.json())

    assert selection() == sorted(H100_VALUES)
    try:
        policy_file.write_text(BROKEN_RELOAD_POLICY)
        seen = eventually(lambda: metric(stack, "gpugate_policy_reload_errors_total") > errors_before, timeout=15)
        assert seen, "gpugate_policy_reload_errors_total did not move after a broken edit"
        status, _ = https_get(f"{stack.gpugate.url}/readyz", ca=stack.gpugate.ca)
        assert status == 200, "a broken edit must not make gpugate unready"
        assert selection() == sorted(H100_VALUES), "the last good policy set must stay in force"
    finally:
        policy_file.write_text(reload_policy("h100"))
    assert selection() == sorted(H100_VALUES)


def test_reload_status_metric_follows_the_policy_files(stack: Stack, cluster: ControlPlane) -> None:
    """gpugate_policy_last_reload_ok: 1 when the files on disk are in force, 0 while a broken
    edit is ignored, 1 again once it is fixed. (policies/README.md: reload errors are exposed in metrics.)"""
    ns = cluster.create_namespace("reload")
    policy_file = stack.policy_dir / "reload.yaml"

    def reload_ok() -> float:
        # Admission traffic as well as a scrape: gpugate checks the policy directory lazily.
        stack.kubectl("create", "--dry-run=server", "-f", "-", stdin=gpu_pod("p", ns))
        return metric(stack, "gpugate_policy_last_reload_ok")

    def policy_metrics() -> str:
        return "\n".join(line for line in stack.gpugate.metrics().splitlines() if "gpugate_policy" in line)

    assert eventually(lambda: reload_ok() == 1, timeout=15), (
        f"valid policies in force, yet gpugate_policy_last_reload_ok is not 1:\n{policy_metrics()}"
    )
    try:
        policy_file.write_text(BROKEN_RELOAD_POLICY)
        assert eventually(lambda: reload_ok() == 0, timeout=15), (
            f"a broken edit is being ignored, yet gpugate_policy_last_reload_ok is not 0:\n{policy_metrics()}"
        )
    finally:
        policy_file.write_text(reload_policy("h100"))
    assert eventually(lambda: reload_ok() == 1, timeout=15), (
        f"the edit was fixed, yet gpugate_policy_last_reload_ok is not 1:\n{policy_metrics()}"
    )
