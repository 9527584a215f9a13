"""``gpugate serve --native-sync`` (webhook/serve/native.py) against the fake admission API
(tests/kube/fakeapi.py): what it applies, in which order and under which field manager; that it writes again
only when the policies change (or at the resync); that a broken edit, a cluster without the
MutatingAdmissionPolicy API and a replica without the Lease write nothing; and what its mode says. Through the
real apiserver: tests/e2e/test_native_sync.py."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.fakeapi import FakeAdmissionAPI, write_kubeconfig
from tests.support import REPO
from webhook.inventory.model import Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.kube.client import configuration
from webhook.kube.native import FIELD_MANAGER, api_client_for
from webhook.native.compiler import NARROWING, compile_policies
from webhook.serve import native
from webhook.serve.native import NativeSync
from webhook.serve.policies import PolicyStore

SHIPPED = REPO / "policies"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpugate"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpugate"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _webhooks(api: FakeAdmissionAPI) -> None:
    for path, kind, hook in (
        (MUTATING, "MutatingWebhookConfiguration", "mutate.gpugate.io"),
        (VALIDATING, "ValidatingWebhookConfiguration", "validate.gpugate.io"),
    ):
        api.objects[path] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "gpugate", "resourceVersion": "1"},
            # The pod-create webhook and the one of every other request, as deploy/base/webhooks.yaml has them.
            "webhooks": [
                {"name": name, "matchConditions": [{"name": "involves-gpus", "expression": "true"}]}
                for name in (hook, hook.replace(".gpugate.io", "-objects.gpugate.io"))
            ],
        }


@pytest.fixture
def api() -> Iterator[FakeAdmissionAPI]:
    fake = FakeAdmissionAPI()
    _webhooks(fake)
    yield fake
    fake.close()


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    for f in SHIPPED.glob("*.yaml"):
        shutil.copy(f, directory / f.name)
    return directory


def _sync(api: FakeAdmissionAPI, tmp_path: Path, store: PolicyStore, identity: str = "a", **kw: Any) -> NativeSync:
    client = api_client_for(configuration(write_kubeconfig(tmp_path / f"kubeconfig-{identity}", api.url)))
    return NativeSync(client, store.current, namespace="gpugate", identity=identity, **kw)


def test_applies_every_compiled_object_checks_first_and_narrows_both_webhooks_last(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    store = PolicyStore(policies)
    mode = _sync(api, tmp_path, store).step()
    assert mode.startswith("native + webhook: the native objects of policies ")
    assert "kept by this replica" in mode
    compiled = compile_policies(store.current())
    for obj in compiled.objects:
        plural = obj["kind"].lower() + "s" if not obj["kind"].endswith("Policy") else obj["kind"].lower()[:-1] + "ies"
        stored = api.named(plural, obj["metadata"]["name"])
        assert stored is not None, obj["metadata"]["name"]
        stored = {k: v for k, v in stored.items()}
        stored["metadata"] = {k: v for k, v in stored["metadata"].items() if k != "resourceVersion"}
        assert stored == obj
    patches = [r.split(" ", 1)[1] for r in api.writes()]
    kinds = [p.split("/")[4] for p in patches if "/leases" not in p]
    assert kinds.index("validatingadmissionpolicies") < kinds.index("mutatingadmissionpolicies")
    assert kinds[-2:] == ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]
    assert {api.managers[p] for p in patches if p in api.managers} == {FIELD_MANAGER}
    always = api.named("validatingadmissionpolicies", "gpugate-always")
    assert always is not None
    expression = always["metadata"]["annotations"]["gpugate.io/webhook-match-condition"]
    for path in (MUTATING, VALIDATING):
        conditions = api.objects[path]["webhooks"][0]["matchConditions"]
        # The install's own condition stays; the sync owns only its entry.
        assert conditions == [
            {"name": "involves-gpus", "expression": "true"},
            {"name": NARROWING, "expression": expression},
        ]


def test_writes_again_only_when_the_policies_change_or_at_the_resync(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    clock, store_clock = Clock(), Clock()
    store = PolicyStore(policies, interval=0, clock=store_clock)
    sync = _sync(api, tmp_path, store, clock=clock)
    sync.step()
    written = len(api.writes())
    sync.step()
    applies = [w for w in api.writes()[written:] if w.startswith("PATCH")]
    assert applies == [], "the same policies were applied again"
    clock.now += native.RESYNC_SECONDS
    sync.step()
    assert len([w for w in api.writes()[written:] if w.startswith("PATCH")]) >= 8

    before = api.named("validatingadmissionpolicies", "gpugate-always")
    assert before is not None
    serving = policies / "10-serving.yaml"
    serving.write_text(serving.read_text().replace("maxPerContainer: 4", "maxPerContainer: 2"))
    store_clock.now += 5
    sync.step()
    after = api.named("validatingadmissionpolicies", "gpugate-always")
    assert after is not None
    assert (
        after["metadata"]["annotations"]["gpugate.io/policy-digest"]
        != before["metadata"]["annotations"]["gpugate.io/policy-digest"]
    )
    # The enforce-mode limits live in gpugate-always (one Deny object: webhook/native/compiler.py).
    assert '"serving": 2' in yaml.safe_dump(after)


def test_a_policy_edit_that_does_not_load_leaves_the_objects_in_force(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    clock, store_clock = Clock(), Clock()
    store = PolicyStore(policies, interval=0, clock=store_clock)
    sync = _sync(api, tmp_path, store, clock=clock)
    sync.step()
    in_force = {p: o for p, o in api.objects.items() if "/leases/" not in p}
    written = len(api.writes())
    (policies / "10-serving.yaml").write_text(
        "apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {name: x}\nspec: ["
    )
    store_clock.now += 5
    mode = sync.step()
    assert store.last_error is not None
    assert [w for w in api.writes()[written:] if not w.startswith("PUT /apis/coordination")] == []
    assert {p: o for p, o in api.objects.items() if "/leases/" not in p} == in_force
    assert mode.startswith("native + webhook")


def test_without_the_mutating_admission_policy_api_nothing_is_written_and_the_mode_says_webhook_only(
    tmp_path: Path, policies: Path
) -> None:
    api = FakeAdmissionAPI(serves_mutating_policies=False)
    _webhooks(api)
    try:
        mode = _sync(api, tmp_path, PolicyStore(policies)).step()
        assert mode == native.NO_API
        assert "webhook only" in mode and "MutatingAdmissionPolicy" in mode
        assert api.writes() == []
        assert all(
            "matchConditions" in o["webhooks"][0] and len(o["webhooks"][0]["matchConditions"]) == 1
            for p, o in api.objects.items()
        )
    finally:
        api.close()


def test_one_writer_at_a_time_and_another_takes_over_when_the_lease_runs_out(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    store = PolicyStore(policies)
    first, second = _sync(api, tmp_path, store, "first"), _sync(api, tmp_path, store, "second")
    assert "kept by this replica" in first.step()
    written = len(api.writes())
    mode = second.step()
    assert "kept by another gpugate worker (the Lease holder)" in mode and mode.startswith("native + webhook")
    assert api.writes()[written:] == [], "the replica without the Lease wrote"
    lease = api.objects["/apis/coordination.k8s.io/v1/namespaces/gpugate/leases/gpugate-native-sync"]
    assert lease["spec"]["holderIdentity"] == "first"
    lease["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"  # the first stopped renewing long ago
    assert "kept by this replica" in second.step()
    assert (
        api.objects["/apis/coordination.k8s.io/v1/namespaces/gpugate/leases/gpugate-native-sync"]["spec"][
            "holderIdentity"
        ]
        == "second"
    )


def test_a_mode_left_without_policies_loses_its_objects_binding_first(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    store_clock = Clock()
    store = PolicyStore(policies, interval=0, clock=store_clock)
    sync = _sync(api, tmp_path, store)
    sync.step()
    assert api.named("validatingadmissionpolicies", "gpugate-warn") is not None
    (policies / "20-research.yaml").unlink()  # the only policy in warn mode
    store_clock.now += 5
    written = len(api.writes())
    sync.step()
    deletes = [w for w in api.writes()[written:] if w.startswith("DELETE")]
    assert deletes == [
        "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/gpugate-warn",
        "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpugate-warn",
    ]
    assert api.named("validatingadmissionpolicies", "gpugate-always") is not None


def test_a_refused_write_is_reported_and_retried_the_objects_in_force_stay(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    api.forbidden.add("/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/gpugate-mutate")
    sync = _sync(api, tmp_path, PolicyStore(policies))
    mode = sync.step()
    assert mode.startswith("native sync failing, the objects in force stay")
    assert "HTTP 403" in mode and "gpugate-mutate" in mode and "deploy/components/native-sync" in mode
    # The webhooks were not narrowed: nothing skips them while the native objects are not all in force.
    assert len(api.objects[MUTATING]["webhooks"][0]["matchConditions"]) == 1
    assert "objectSelector" not in api.objects[MUTATING]["webhooks"][0]
    api.forbidden.clear()
    assert "kept by this replica" in sync.step()
    assert len(api.objects[MUTATING]["webhooks"][0]["matchConditions"]) == 2
    # Once they are, the pod-create webhooks skip what gpugate-mutate formed (and gpugate-always judges it).
    selector = {"matchExpressions": [{"key": "gpugate.io/formed-by", "operator": "DoesNotExist"}]}
    for path in (MUTATING, VALIDATING):
        assert api.objects[path]["webhooks"][0]["objectSelector"] == selector
        assert all("objectSelector" not in hook for hook in api.objects[path]["webhooks"][1:])


def test_the_pool_digest_joins_gpugate_always_once_the_inventory_syncs_and_again_only_when_the_pools_change(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    """The digest is written into gpugate-always (one policy: the apiserver converts the pod four times per policy),
    re-applied when the pools change and not otherwise; an earlier gpugate's gpugate-pools goes, binding first."""
    legacy = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpugate-pools"
    legacy_binding = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/gpugate-pools"
    api.objects[legacy] = {"metadata": {"name": "gpugate-pools"}}
    api.objects[legacy_binding] = {"metadata": {"name": "gpugate-pools"}}
    fleet: list[Inventory | None] = [None]
    store_clock = Clock()
    sync = _sync(api, tmp_path, PolicyStore(policies, interval=0, clock=store_clock), inventory=lambda: fleet[0])
    assert sync.step().endswith("; pool digest: waiting for the GPU inventory")
    always = api.named("validatingadmissionpolicies", "gpugate-always")
    assert always is not None and "gpugate.io/pool-digest" not in always["metadata"]["annotations"]
    assert legacy in api.objects, "removed before a digest is in force"
    fleet[0] = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
    written = len(api.writes())
    assert "; pool digest " in sync.step()
    first = api.named("validatingadmissionpolicies", "gpugate-always")
    assert first is not None
    assert any("gpugate pool digest" in v.get("messageExpression", "") for v in first["spec"]["validations"])
    assert [w for w in api.writes()[written:] if w.startswith("DELETE")] == [
        f"DELETE {legacy_binding}",
        f"DELETE {legacy}",
    ]
    written = len(api.writes())
    sync.step()
    assert [w for w in api.writes()[written:] if "gpugate-always" in w] == [], "the same pools were applied again"
    inventory = fleet[0]
    assert inventory is not None
    fleet[0] = dataclasses.replace(
        inventory, nodes=tuple(n for n in inventory.nodes if "amd.com/gpu" not in n.allocatable)
    )
    written = len(api.writes())
    sync.step()
    assert [w.split()[0] for w in api.writes()[written:] if "gpugate-always" in w] == ["PATCH"]
    second = api.named("validatingadmissionpolicies", "gpugate-always")
    assert second is not None
    assert (
        second["metadata"]["annotations"]["gpugate.io/pool-digest"]
        != first["metadata"]["annotations"]["gpugate.io/pool-digest"]
    )
    # A policy edit while the watcher resyncs (no inventory for now): the digest applied last stays in force.
    fleet[0] = None
    (policies / "20-research.yaml").unlink()
    store_clock.now += 5
    sync.step()
    third = api.named("validatingadmissionpolicies", "gpugate-always")
    assert (
        third is not None
        and third["metadata"]["annotations"]["gpugate.io/policy-digest"]
        != (second["metadata"]["annotations"]["gpugate.io/policy-digest"])
    )
    assert (
        third["metadata"]["annotations"]["gpugate.io/pool-digest"]
        == (second["metadata"]["annotations"]["gpugate.io/pool-digest"])
    )


def test_after_a_restart_the_gpugate_always_in_force_keeps_its_pool_digest_until_the_inventory_syncs(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    fleet = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
    _sync(api, tmp_path, PolicyStore(policies), inventory=lambda: fleet).step()
    in_force = api.named("validatingadmissionpolicies", "gpugate-always")
    assert in_force is not None and "gpugate.io/pool-digest" in in_force["metadata"]["annotations"]
    synced: list[Inventory | None] = [None]
    restarted = _sync(api, tmp_path, PolicyStore(policies), identity="b", inventory=lambda: synced[0])
    api.objects.pop("/apis/coordination.k8s.io/v1/namespaces/gpugate/leases/gpugate-native-sync", None)
    written = len(api.writes())
    assert restarted.step().endswith("; pool digest: waiting for the GPU inventory")
    writes = api.writes()[written:]
    assert any("gpugate-mutate" in w for w in writes), "the other objects are applied as usual"
    assert not any(w.endswith("/validatingadmissionpolicies/gpugate-always") for w in writes), writes
    synced[0] = fleet
    written = len(api.writes())
    restarted.step()
    assert [w for w in api.writes()[written:] if w.endswith("/validatingadmissionpolicies/gpugate-always")] == [
        "PATCH /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpugate-always"
    ]


def test_the_claim_route_is_narrowed_once_the_inventory_syncs_on_the_validating_webhook_only(
    api: FakeAdmissionAPI, tmp_path: Path, policies: Path
) -> None:
    """``gpu-device-classes`` (webhook/native/claims.py) joins the narrowing entry in the same apply once the
    inventory has a DeviceClass that serves no GPU, and leaves when none is left; the install's entries stay."""
    fleet: list[Inventory | None] = [None]
    sync = _sync(api, tmp_path, PolicyStore(policies), inventory=lambda: fleet[0])
    sync.step()

    def names(path: str, hook: int = 0) -> list[str]:
        return [c["name"] for c in api.objects[path]["webhooks"][hook]["matchConditions"]]

    # The claims are routed by the webhook of every other request (the second), the narrowing is the first's.
    assert names(VALIDATING) == ["involves-gpus", NARROWING]
    assert names(VALIDATING, 1) == ["involves-gpus"]  # no inventory yet: every claim routed
    reference = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
    fleet[0] = reference
    sync.step()
    assert names(VALIDATING, 1) == ["involves-gpus", "gpu-device-classes"]
    assert names(VALIDATING) == ["involves-gpus", NARROWING]
    assert names(MUTATING) == ["involves-gpus", NARROWING]  # the mutating webhook routes no claims
    assert names(MUTATING, 1) == ["involves-gpus"]
    [claim] = [
        c for c in api.objects[VALIDATING]["webhooks"][1]["matchConditions"] if c["name"] == "gpu-device-classes"
    ]
    assert '["dra.cpu"]' in claim["expression"]
    written = len(api.writes())
    sync.step()
    assert [w for w in api.writes()[written:] if "webhookconfigurations" in w] == [], "narrowed again for nothing"
    fleet[0] = dataclasses.replace(
        reference, device_classes={n: c for n, c in reference.device_classes.items() if n != "dra.cpu"}, _cache={}
    )
    sync.step()
    assert names(VALIDATING, 1) == ["involves-gpus"]
    assert names(VALIDATING) == ["involves-gpus", NARROWING]
