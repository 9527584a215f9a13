"""The inventory's reducers: only the fields a decision needs, from each kind, in every API shape."""

from __future__ import annotations

import pytest

from tests.support import REPO
from webhook.inventory.model import (
    LABEL_LIMIT,
    Inventory,
    Taint,
    claim_of,
    device_class_of,
    node_of,
    slice_of,
)
from webhook.inventory.snapshot import SnapshotError, load_snapshot, trimmed

REFERENCE = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


def test_a_node_keeps_labels_taints_and_only_extended_allocatable():
    node = node_of(
        {
            "kind": "Node",
            "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True},
            "status": {
                "allocatable": {
                    "cpu": "48",
                    "memory": "190Gi",
                    "hugepages-2Mi": "0",
                    "nvidia.com/gpu": "4",
                    "example.com/bad": "not-a-quantity",
                }
            },
        }
    )
    assert node.labels == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert node.allocatable == {"nvidia.com/gpu": "4", "example.com/bad": "not-a-quantity"}  # parsed by readers
    assert node.taints == (Taint("nvidia.com/gpu", "", "NoSchedule"),)
    assert node.unschedulable and not node.truncated


def test_a_node_with_too_many_labels_is_truncated_not_refused():
    labels = {f"example.com/l{i}": "x" for i in range(LABEL_LIMIT + 5)}
    node = node_of({"kind": "Node", "metadata": {"name": "n", "labels": labels}})
    assert len(node.labels) == LABEL_LIMIT and node.truncated


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "value": "present"}, True),
        ({"key": "nvidia.com/gpu", "value": "other"}, False),
        ({"operator": "Exists"}, True),
        ({"key": "amd.com/gpu", "operator": "Exists"}, False),
    ],
)
def test_taint_toleration(toleration, tolerated):
    assert Taint("nvidia.com/gpu", "present", "NoSchedule").tolerated_by([toleration]) is tolerated


def test_device_class_driver_from_its_cel_selector_and_its_extended_resource():
    found = device_class_of(
        {
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {
                "extendedResourceName": "nvidia.com/gpu",
                "selectors": [
                    {"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['x'].type == 'gpu'"}}
                ],
            },
        }
    )
    assert found.drivers == ("gpu.nvidia.com",) and found.extended_resource_name == "nvidia.com/gpu"
    bare = device_class_of({"kind": "DeviceClass", "metadata": {"name": "x"}, "spec": {}})
    assert bare.drivers == () and bare.extended_resource_name is None


@pytest.mark.parametrize("wrapped", [False, True], ids=["v1", "v1beta1 basic"])
def test_a_resource_slice_keeps_counts_products_and_memory(wrapped):
    device = {"attributes": {"productName": {"string": "NVIDIA H200"}}, "capacity": {"memory": {"value": "141Gi"}}}
    devices = [{"name": f"gpu-{i}", **({"basic": device} if wrapped else device)} for i in range(3)]
    found = slice_of(
        {
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "h200-0", "pool": {"name": "p"}, "devices": devices},
        }
    )
    assert (found.driver, found.node, found.pool, found.devices) == ("gpu.nvidia.com", "h200-0", "p", 3)
    assert found.products == ("NVIDIA H200",) and found.memory == "141Gi"


@pytest.mark.parametrize(
    ("request_", "classes", "count", "admin"),
    [
        ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}, ("gpu.nvidia.com",), 2, False),
        (
            {
                "name": "g",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True},
            },
            ("gpu.nvidia.com",),
            None,
            True,
        ),
        (
            {
                "name": "g",
                "firstAvailable": [{"deviceClassName": "a", "count": 1}, {"deviceClassName": "b", "count": 4}],
            },
            ("a", "b"),
            4,
            False,
        ),
        ({"name": "g", "deviceClassName": "gpu.nvidia.com"}, ("gpu.nvidia.com",), 1, False),  # v1beta1
    ],
)
def test_claim_requests_in_every_api_shape(request_, classes, count, admin):
    claim = claim_of(
        {
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [request_]}}},
        }
    )
    [got] = claim.requests
    assert (got.device_classes, got.count, got.admin_access) == (classes, count, admin)


def test_the_reference_snapshot_and_what_it_serves():
    fleet = load_snapshot(REFERENCE)
    assert len(fleet.nodes) == 10 and fleet.runtime_classes == {"nvidia"}
    assert fleet.runtime_handlers == {"nvidia": "nvidia"}
    gpu, cpu = (
        fleet.class_for_resource("nvidia.com/gpu"),
        fleet.class_for_resource("deviceclass.resource.kubernetes.io/dra.cpu"),
    )
    assert gpu is not None and gpu.name == "gpu.nvidia.com"
    assert cpu is not None and cpu.name == "dra.cpu"
    assert fleet.devices_on("h200-0", ["gpu.nvidia.com"]) == 8
    assert fleet.products_on("h200-0", ["gpu.nvidia.com"]) == ("NVIDIA H200",)
    assert ("ResourceClaimTemplate", "default", "exclusive-cpus") in fleet.claims


def test_a_trimmed_object_rebuilds_the_same_inventory():
    import yaml

    objects = yaml.safe_load(REFERENCE.read_text())["items"]
    for obj in objects:
        obj.setdefault("metadata", {})["managedFields"] = [{"manager": "kubelet"}]
    assert Inventory.of(trimmed(o) for o in objects) == Inventory.of(objects)
    assert all("managedFields" not in trimmed(o)["metadata"] for o in objects)


def test_a_file_without_inventory_objects_is_an_error(tmp_path):
    path = tmp_path / "pods.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    with pytest.raises(SnapshotError, match="no Node, RuntimeClass, DeviceClass, ResourceSlice objects"):
        load_snapshot(path)
    with pytest.raises(SnapshotError):
        load_snapshot(tmp_path / "missing.yaml")


def test_runtime_classes_are_kept_with_their_handler():
    """An alias is a RuntimeClass of another name with a GPU runtime's handler; one without a handler keeps ''."""
    fleet = Inventory.of(
        [
            {"kind": "RuntimeClass", "metadata": {"name": "nvidia-experimental"}, "handler": "nvidia-experimental"},
            {"kind": "RuntimeClass", "metadata": {"name": "my-gpu"}, "handler": "nvidia"},
            {"kind": "RuntimeClass", "metadata": {"name": "broken"}},
        ]
    )
    assert fleet.runtime_classes == {"nvidia-experimental", "my-gpu", "broken"}
    assert fleet.runtime_handlers == {"nvidia-experimental": "nvidia-experimental", "my-gpu": "nvidia", "broken": ""}
