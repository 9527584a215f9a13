"""Scenario 7: rewriting a policy file changes gpugate's verdicts without a restart."""

from __future__ import annotations

import pytest

from .cluster import ControlPlane, Stack, eventually
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
