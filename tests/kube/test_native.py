"""webhook/kube/native.py against the fake admission API (tests/kube/fakeapi.py): discovery of the
MutatingAdmissionPolicy API, server-side apply as kube-apiserver takes it, and the Lease's one writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fakeapi import FakeAdmissionAPI, write_kubeconfig
from webhook.kube import native
from webhook.kube.client import configuration

LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpugate/leases/gpugate-native-sync"


@pytest.fixture
def api() -> Iterator[FakeAdmissionAPI]:
    fake = FakeAdmissionAPI()
    yield fake
    fake.close()


def _client(api: FakeAdmissionAPI, tmp_path: Path) -> Any:
    return native.api_client_for(configuration(write_kubeconfig(tmp_path / "kubeconfig", api.url)))


def test_discovery_says_whether_the_cluster_serves_mutating_admission_policies(tmp_path: Path) -> None:
    for served in (True, False):
        api = FakeAdmissionAPI(serves_mutating_policies=served)
        try:
            assert native.serves_mutating_policies(_client(api, tmp_path)) is served
        finally:
            api.close()


def test_apply_is_a_forced_server_side_apply_under_gpugate_s_field_manager(
    api: FakeAdmissionAPI, tmp_path: Path
) -> None:
    obj = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "gpugate-always"},
        "spec": {"failurePolicy": "Fail"},
    }
    native.apply(_client(api, tmp_path), obj)
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpugate-always"
    assert api.requests == [f"PATCH {path}"]  # the fake asserts the apply content type
    assert api.managers[path] == native.FIELD_MANAGER == "gpugate-serve"
    assert api.objects[path]["spec"] == {"failurePolicy": "Fail"}
    assert native.get(_client(api, tmp_path), "ValidatingAdmissionPolicy", "gpugate-always")["spec"] == obj["spec"]
    native.delete(_client(api, tmp_path), "ValidatingAdmissionPolicy", "gpugate-always")
    assert native.get(_client(api, tmp_path), "ValidatingAdmissionPolicy", "gpugate-always") is None


def test_a_kind_that_is_not_gpugate_s_is_never_written(api: FakeAdmissionAPI, tmp_path: Path) -> None:
    with pytest.raises(native.NativeError, match="ClusterRole is not one of gpugate's admission kinds"):
        native.apply(_client(api, tmp_path), {"kind": "ClusterRole", "metadata": {"name": "x"}})
    assert api.requests == []


def test_a_refusal_names_the_request_and_the_role_to_grant(api: FakeAdmissionAPI, tmp_path: Path) -> None:
    path = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/gpugate-mutate"
    api.forbidden.add(path)
    with pytest.raises(native.NativeError) as err:
        native.apply(
            _client(api, tmp_path), {"kind": "MutatingAdmissionPolicy", "metadata": {"name": "gpugate-mutate"}}
        )
    assert f"PATCH {path}: HTTP 403: forbidden" in str(err.value)
    assert "deploy/components/native-sync" in str(err.value)


def test_one_holder_of_the_lease_until_it_stops_renewing(api: FakeAdmissionAPI, tmp_path: Path) -> None:
    client = _client(api, tmp_path)

    def hold(who: str) -> bool:
        return native.hold_lease(client, namespace="gpugate", name="gpugate-native-sync", identity=who, duration=30)

    assert hold("a")
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "a"
    assert not hold("b")
    assert hold("a")  # renewed
    api.objects[LEASE]["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    assert hold("b")
    assert not hold("a")
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "b"


def test_of_two_racing_for_an_expired_lease_the_apiserver_lets_one_win(api: FakeAdmissionAPI, tmp_path: Path) -> None:
    client = _client(api, tmp_path)
    assert native.hold_lease(client, namespace="gpugate", name="gpugate-native-sync", identity="a", duration=30)
    api.objects[LEASE]["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    api.conflicts = 1  # the other candidate updates it between this one's read and its update
    assert not native.hold_lease(client, namespace="gpugate", name="gpugate-native-sync", identity="b", duration=30)
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "a"


def test_the_tier_in_force_as_gpugate_fleet_says_it(tmp_path: Path) -> None:
    old = FakeAdmissionAPI(serves_mutating_policies=False)
    try:
        assert native.tier_in_force(_client(old, tmp_path)).startswith("webhook only: the cluster does not serve")
    finally:
        old.close()
    api = FakeAdmissionAPI()
    try:
        client = _client(api, tmp_path)
        assert native.tier_in_force(client).startswith("webhook only: the native objects are not installed")
        for kind, name in (
            ("MutatingAdmissionPolicy", "gpugate-mutate"),
            ("ValidatingAdmissionPolicy", "gpugate-always"),
        ):
            native.apply(
                client, {"kind": kind, "metadata": {"name": name, "annotations": {"gpugate.io/policy-digest": "abc"}}}
            )
        assert native.tier_in_force(client) == "native + webhook: the native objects of policies abc are in force"
        api.forbidden.add("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpugate-always")
        assert native.tier_in_force(client).startswith("unknown: GET ")
    finally:
        api.close()
