"""`gpugate fleet` and `gpugate policy init --from-cluster` on the reference fleet snapshot."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.support import REPO

SNAPSHOT = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


def gpugate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_the_fleet_by_pool_as_a_table():
    proc = gpugate("fleet", "--fleet", str(SNAPSHOT))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [
        "VENDOR",
        "PRODUCT",
        "MEMORY",
        "SHARING",
        "MIG",
        "STACK",
        "NODES",
        "ALLOCATABLE",
        "PER",
        "NODE",
    ]
    rows = {line.split()[1]: line for line in lines[1:]}
    assert "time-sliced × 4" in rows["Tesla-T4-SHARED"] and "16 × nvidia.com/gpu" in rows["Tesla-T4-SHARED"]
    assert "mixed" in rows["NVIDIA-A100-SXM4-80GB"] and "14 × nvidia.com/mig-1g.10gb" in rows["NVIDIA-A100-SXM4-80GB"]
    assert "single" in rows["NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"]
    h200 = next(line for line in lines if "H200" in line)
    assert "dra" in h200 and "8 devices (gpu.nvidia.com)" in h200 and "143771Mi" in h200


def test_the_fleet_as_json_with_the_shipped_policies_has_no_drift():
    proc = gpugate("fleet", "--fleet", str(SNAPSHOT), "--policies", "policies", "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    assert found["drift"] == []
    stacks = {(p["product"], p["stack"]) for p in found["pools"]}
    assert ("NVIDIA H200", "dra") in stacks and ("AMD_Instinct_MI300X_OAM", "device-plugin") in stacks
    assert len(found["pools"]) == 9  # one per GPU pool; the CPU node is none


def test_drift_names_classes_no_node_carries_and_nodes_no_class_covers(tmp_path):
    fleet = yaml.safe_load(SNAPSHOT.read_text())
    for item in fleet["items"]:
        if item["metadata"]["name"] == "l4-0":
            item["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    proc = gpugate("fleet", "--fleet", str(path), "--policies", "policies")
    assert proc.returncode == 1
    assert 'drift: policy "default" class "l4": no node carries nvidia.com/gpu.product=NVIDIA-L4' in proc.stdout
    assert 'drift: 1 nvidia node(s) with NVIDIA-L40S (device-plugin) are in no class of policy "default"' in proc.stdout


def test_policy_init_writes_devices_and_classes_that_validate(tmp_path):
    proc = gpugate("policy", "init", "--from-cluster", "--fleet", str(SNAPSHOT))
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "00-fleet.yaml").write_text(proc.stdout)
    assert gpugate("policy", "validate", str(tmp_path)).returncode == 0
    doc = yaml.safe_load(proc.stdout)
    classes = doc["spec"]["models"]["classes"]
    assert classes["nvidia-l4"] == {"values": ["NVIDIA-L4"], "resources": ["nvidia.com/gpu"], "device": "nvidia"}
    assert classes["nvidia-h200"] == {"resources": ["nvidia.com/gpu"], "deviceClasses": ["gpu.nvidia.com"]}
    assert doc["spec"]["devices"]["nvidia"]["runtimeClassName"] == "nvidia"  # the fleet has that RuntimeClass
    # and it decides: its default is the first pool, whose nodes hold 4: 8 GPUs are refused, naming classes that hold 8
    check = gpugate(
        "check",
        "--policies",
        str(tmp_path),
        "-f",
        "policies/examples/pod-eight-gpus-no-class.yaml",
        "--fleet",
        str(SNAPSHOT),
        "-o",
        "none",
    )
    assert check.returncode == 1, check.stderr
    assert "largest: 4 × nvidia.com/gpu on NVIDIA-L4 nodes" in check.stderr
    assert "with a class whose nodes hold 8 (tesla-t4-shared, nvidia-h100-80gb-hbm3," in check.stderr


def test_snapshot_of_a_snapshot_keeps_what_the_inventory_reads(tmp_path):
    out = tmp_path / "again.yaml"
    proc = gpugate("fleet", "snapshot", "--fleet", str(SNAPSHOT), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    from webhook.inventory.snapshot import load_snapshot

    assert load_snapshot(out) == load_snapshot(SNAPSHOT)


def test_an_unreadable_fleet_is_bad_input(tmp_path):
    proc = gpugate("fleet", "--fleet", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "gpugate fleet:" in proc.stderr
