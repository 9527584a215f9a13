"""Scenario 9: the every-field upstream Pod (kubernetes/api testdata v1.36.0), made acceptable to
the apiserver and given a GPU limit, goes through gpugate and keeps every field it was sent with:
gpugate may add (labels, annotations, tolerations, node selector), never drop or rewrite."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.gpugate import Stack

from .every_field import FIXTURE, PRIORITY_CLASS, REMOVED_SPEC_FIELDS, every_field_pod, load_fixture
from .objects import GPU_TOLERATION, NODE_LABEL

pytestmark = pytest.mark.e2e


def differences(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Where `stored` lost or changed something of `sent`. Maps may gain keys; lists may gain
    items at the end (the ServiceAccount plugin's token volume and mounts, added tolerations)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path}: {type(stored).__name__} instead of a map"]
        out = []
        for key, value in sent.items():
            if key not in stored:
                out.append(f"{path}.{key}: dropped")
            else:
                out += differences(value, stored[key], f"{path}.{key}")
        return out
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) < len(sent):
            return [f"{path}: list {sent!r:.200} became {stored!r:.200}"]
        out = []
        for i, (a, b) in enumerate(zip(sent, stored, strict=False)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if sent == stored else [f"{path}: {sent!r} became {stored!r}"]


def test_every_field_pod_keeps_its_fields(stack: Stack, namespace: str) -> None:
    assert FIXTURE.is_file(), f"missing upstream fixture {FIXTURE}"
    stack.kubectl("apply", "-f", "-", stdin=PRIORITY_CLASS)
    sent = every_field_pod(namespace)
    fixture = load_fixture()
    # The comparison is only as good as what was kept: nothing beyond the documented removals.
    assert set(fixture["spec"]) - set(sent["spec"]) == REMOVED_SPEC_FIELDS
    for kind in ("containers", "initContainers"):
        assert set(fixture["spec"][kind][0]) == set(sent["spec"][kind][0]), kind

    created = stack.kubectl("create", "-o", "json", "-f", "-", stdin=sent)
    stored = stack.kubectl("get", "pod", "every-field", "-n", namespace, "-o", "json").json()

    assert created.json()["metadata"]["uid"] == stored["metadata"]["uid"]
    lost = differences(sent, stored)
    assert not lost, "fields lost or rewritten on the way through admission:\n" + "\n".join(lost)
    # ...and gpugate did govern it (otherwise the comparison above proves nothing about gpugate).
    assert stored["metadata"]["annotations"].get("gpugate.io/policy") == "e2e-fleet"
    assert stored["metadata"]["labels"]["gpugate.io/team"] == "unassigned"
    assert GPU_TOLERATION in stored["spec"]["tolerations"]
    assert stored["spec"]["nodeSelector"][NODE_LABEL] == "NVIDIA-L4"
    assert stored["spec"]["runtimeClassName"] == "nvidia"
