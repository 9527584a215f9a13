"""Scenario 6: attribution follows Namespace labels, which gpugate reads through its namespace
cache (a watch against this apiserver, `--kubeconfig`): labelling a namespace, and relabelling
it, changes the team label that the next GPU pod there receives."""

from __future__ import annotations

import pytest

from tests.harness.gpugate import Stack

from .objects import TEAM, gpu_pod, wait_for_team_label

pytestmark = pytest.mark.e2e


def test_namespace_label_drives_attribution(stack: Stack, namespace: str) -> None:
    first = stack.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("p", namespace))
    assert first.json()["metadata"]["labels"][TEAM] == "unassigned"

    stack.kubectl("label", "namespace", namespace, "team=vision")
    assert wait_for_team_label(stack, namespace, "vision") == "vision", (
        "gpugate did not pick up the namespace label team=vision within 15 s"
    )
    created = stack.kubectl("create", "-o", "json", "-f", "-", stdin=gpu_pod("detector", namespace))
    assert created.json()["metadata"]["labels"][TEAM] == "vision"
    stored = stack.kubectl("get", "pod", "detector", "-n", namespace, "-o", "json").json()
    assert stored["metadata"]["labels"][TEAM] == "vision"

    stack.kubectl("label", "namespace", namespace, "team=robotics", "--overwrite")
    assert wait_for_team_label(stack, namespace, "robotics") == "robotics", (
        "gpugate did not follow the relabelled namespace (team=robotics) within 15 s"
    )
    # The pod admitted earlier keeps the label it was admitted with.
    stored = stack.kubectl("get", "pod", "detector", "-n", namespace, "-o", "json").json()
    assert stored["metadata"]["labels"][TEAM] == "vision"
