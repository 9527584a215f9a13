"""The control plane itself: apiserver up, kubectl authenticated as system:masters."""

import pytest

from tests.harness.controlplane import ControlPlane

pytestmark = pytest.mark.e2e


def test_apiserver_serves_kubectl(cluster: ControlPlane) -> None:
    name = cluster.create_namespace("e2e-smoke")
    got = cluster.kubectl("get", "namespace", name, "-o", "json").json()
    assert got["metadata"]["name"] == name
    assert got["status"]["phase"] == "Active"
    listed = cluster.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert f"namespace/{name}" in listed
    assert "namespace/kube-system" in listed
    assert cluster.kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"
