"""A worker's status (webhook/serve/status.py), without flask: the gauges it keeps, the fleet drift worked out
again only when the fleet or the policies changed, and the problems and notes /readyz reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from webhook.inventory.model import Inventory
from webhook.inventory.pools import drift
from webhook.inventory.snapshot import load_snapshot
from webhook.serve import metrics, status
from webhook.serve.policies import PolicyStore
from webhook.serve.status import Status

SNAPSHOT = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


class Fleet:
    """What Status reads of the fleet watcher (webhook/kube/inventory.py): the inventory once synced."""

    def __init__(self, inventory: Inventory | None) -> None:
        self.current = inventory

    def inventory(self) -> Inventory | None:
        return self.current

    def stats(self) -> dict[str, int]:
        return {"nodes": 12, "runtimeclasses": 2, "relists": 3}

    def synced(self) -> bool:
        return self.current is not None

    def unsynced(self) -> list[str]:
        return [] if self.current is not None else ["nodes"]


@pytest.fixture
def drifting(tmp_path: Path) -> Inventory:
    """The reference fleet with one L4 node relabelled, so that the shipped policies' L4 class has no node."""
    fleet = yaml.safe_load(SNAPSHOT.read_text())
    for item in fleet["items"]:
        if item["kind"] == "Node" and item["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-L4":
            item["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return load_snapshot(path)


def test_drift_is_worked_out_again_only_when_the_fleet_or_the_policies_change(
    drifting: Inventory, monkeypatch: Any
) -> None:
    calls = []
    real = drift

    def counted(inventory: Inventory, policies: Any) -> list[str]:
        calls.append(inventory)
        return real(inventory, policies)

    monkeypatch.setattr(status, "drift", counted)
    fleet = Fleet(drifting)
    worker = Status(PolicyStore(REPO / "policies", interval=0), fleet=fleet)
    worker.refresh()
    worker.refresh()
    assert len(calls) == 1 and worker.drifted()
    assert metrics.INVENTORY_DRIFT._value.get() == len(worker.drifted())
    assert metrics.INVENTORY_OBJECTS.labels("nodes")._value.get() == 12
    fleet.current = load_snapshot(SNAPSHOT)  # a new inventory: the watcher saw a change
    worker.refresh()
    assert len(calls) == 2 and worker.drifted() == []
    assert metrics.INVENTORY_DRIFT._value.get() == 0


def test_readiness_puts_the_certificate_first_and_says_what_is_not_synced(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text((REPO / "policies" / "00-default.yaml").read_text())
    worker = Status(PolicyStore(tmp_path, interval=0), fleet=Fleet(None), tls_ready=lambda: False)
    problems, notes = worker.readiness()
    assert problems == ["the serving certificate is outside its validity period or not loaded"]
    assert notes == ["GPU inventory not synced yet (nodes): no feasibility verdicts"]
    assert metrics.INVENTORY_SYNCED._value.get() == 0


def test_a_broken_edit_is_a_note_and_counted_once(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text((REPO / "policies" / "00-default.yaml").read_text())
    worker = Status(PolicyStore(tmp_path, interval=0))
    errors = metrics.POLICY_RELOAD_ERRORS._value.get()
    (tmp_path / "p.yaml").write_text("spec: [broken")
    for _ in range(3):
        problems, notes = worker.readiness()
    assert problems == [] and len(notes) == 1
    assert notes[0].startswith("policy edit ignored, the last good policies stay in force: invalid policy (1 error)")
    assert "p.yaml: is not valid YAML (line 1" in notes[0] and "\n" not in notes[0]
    assert metrics.POLICY_RELOAD_ERRORS._value.get() == errors + 1
    assert metrics.POLICY_VALID._value.get() == 0


def test_readiness_says_which_admission_tier_is_in_force_with_the_native_sync(tmp_path: Path) -> None:
    store = PolicyStore(REPO / "policies")

    class Sync:
        mode = "webhook only: the cluster does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"

    problems, notes = Status(store, native=Sync()).readiness()
    assert problems == []
    assert f"admission tier: {Sync.mode}" in notes
    assert not any(n.startswith("admission tier") for n in Status(store).readiness()[1])
