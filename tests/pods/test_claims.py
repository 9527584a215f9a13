"""A pod's DRA claims (webhook/pods/claims.py): which requests take GPUs, and how many at worst: ``exactly.count``,
``allocationMode: All`` as the largest node of its DeviceClass (ResourceSlices, or a pool that scales), and a
``firstAvailable`` list as the most of its GPU alternatives. The limits that count them are tested in
tests/rules/test_dra.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.support import REPO
from webhook.inventory.model import ClaimRequest, Inventory, claim_of, declared_pool
from webhook.pods.claims import RequestGPUs, claims_of, class_largest_node, gpu_requests, request_devices
from webhook.policy.files import load_policies

DEFAULT = next(p for p in load_policies(REPO / "policies").policies if p.name == "default")


def device_class(name: str, driver: str) -> dict[str, Any]:
    return {
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }


def resource_slice(node: str, driver: str, devices: int) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node},
            "devices": [{"name": f"d{i}"} for i in range(devices)],
        },
    }


FLEET = Inventory.of(
    [
        device_class("gpu.nvidia.com", "gpu.nvidia.com"),
        device_class("dra.cpu", "dra.cpu"),
        resource_slice("a", "gpu.nvidia.com", 4),
        resource_slice("b", "gpu.nvidia.com", 8),
        resource_slice("b", "dra.cpu", 128),
    ]
)


def template(*requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def test_gpu_requests_keep_gpu_alternatives_and_drop_admin_access_and_other_classes():
    claim = claim_of(
        template(
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 16}},
            {"name": "cpu", "exactly": {"deviceClassName": "dra.cpu", "count": 64}},
            {"name": "watch", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
            {
                "name": "pick",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
                    {"name": "cpus", "deviceClassName": "dra.cpu", "count": 32},
                ],
            },
        )
    )
    found = gpu_requests(claim, DEFAULT, FLEET)
    assert found.label == 'ResourceClaimTemplate "t"'
    assert found.requests == (
        RequestGPUs("gpu", (("gpu.nvidia.com", 16),)),
        RequestGPUs("pick", (("gpu.nvidia.com", None),)),
    )


def test_all_is_the_largest_node_of_the_class():
    assert class_largest_node(FLEET, "gpu.nvidia.com", DEFAULT) == 8
    counted = request_devices(RequestGPUs("gpu", (("gpu.nvidia.com", None),)), FLEET, DEFAULT)
    assert (counted.devices, counted.how) == (8, 'all of DeviceClass "gpu.nvidia.com" (8 on its largest node)')


def test_all_is_unknowable_without_an_inventory_or_a_node_publishing_the_class():
    alone = Inventory.of([device_class("gpu.nvidia.com", "gpu.nvidia.com")])
    for inventory in (None, alone, Inventory()):
        assert class_largest_node(inventory, "gpu.nvidia.com", DEFAULT) is None
        assert request_devices(RequestGPUs("gpu", (("gpu.nvidia.com", None),)), inventory, DEFAULT).devices is None


def test_a_pool_that_scales_can_make_the_largest_node_larger_or_unknowable():
    pool = declared_pool("h200", labels=(), taints=(), allocatable=(("nvidia.com/gpu", 16),), max_nodes=2)
    bigger = Inventory(FLEET.nodes, device_classes=FLEET.device_classes, slices=FLEET.slices, pools=(pool,))
    assert class_largest_node(bigger, "gpu.nvidia.com", DEFAULT) == 16
    unbounded = declared_pool("any", labels=(), taints=(), allocatable=(), max_nodes=None)
    unbounded = replace(unbounded, gpus={"nvidia.com/gpu": None})  # a pool that may add any number
    some = Inventory(FLEET.nodes, device_classes=FLEET.device_classes, slices=FLEET.slices, pools=(unbounded,))
    assert class_largest_node(some, "gpu.nvidia.com", DEFAULT) is None


def test_first_available_is_its_worst_alternative():
    request = RequestGPUs("gpu", (("gpu.nvidia.com", 2), ("gpu.nvidia.com", None), ("gpu.nvidia.com", 6)))
    counted = request_devices(request, FLEET, DEFAULT)
    assert counted.devices == 8
    assert counted.how == (
        'the most of firstAvailable: 2 of DeviceClass "gpu.nvidia.com", all of DeviceClass "gpu.nvidia.com" '
        '(8 on its largest node), 6 of DeviceClass "gpu.nvidia.com"'
    )


def test_feasibility_wants_the_gpu_classs_own_count_not_a_cpu_alternatives():
    claim = claim_of(
        template(
            {
                "name": "pick",
                "firstAvailable": [
                    {"name": "g", "deviceClassName": "gpu.nvidia.com", "count": 2},
                    {"name": "c", "deviceClassName": "dra.cpu", "count": 64},
                ],
            }
        )
    )
    spec = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}
    use = claims_of(spec, namespace="ml", policy=DEFAULT, inventory=FLEET, lookup=lambda *key: claim)
    assert use.wants == {"spec.resourceClaims[0]": ("gpu.nvidia.com", 2)}  # was 64, the CPU alternative's count


def test_a_hand_built_request_lists_classes_that_share_its_count():
    claim = claim_of(template())
    claim = replace(claim, requests=(ClaimRequest(("gpu.nvidia.com",), 3, name="g"),))
    assert gpu_requests(claim, DEFAULT, FLEET).requests == (RequestGPUs("g", (("gpu.nvidia.com", 3),)),)
