"""What one node must hold for a pod, and what a class's nodes and pools can hold (webhook/pods/fit.py)."""

from __future__ import annotations

from fractions import Fraction

from tests.support import REPO, container, pod
from webhook.inventory.snapshot import load_snapshot
from webhook.pods.fit import capacity, class_largest, per_node_amounts
from webhook.policy.files import load_policies

SNAPSHOT = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
DEFAULT = next(p for p in load_policies(REPO / "policies").policies if p.name == "default")
NVIDIA = DEFAULT.devices["nvidia"]


def is_gpu(resource: str) -> bool:
    return resource == "nvidia.com/gpu"


def test_apps_and_sidecars_add_up_an_init_container_counts_alone():
    sidecar = {**container("side", limits={"nvidia.com/gpu": 1}), "restartPolicy": "Always"}
    init = container("init", limits={"nvidia.com/gpu": 6})
    spec = pod(container(limits={"nvidia.com/gpu": 2}), initContainers=[sidecar, init])["spec"]
    assert per_node_amounts(spec, is_gpu) == {"nvidia.com/gpu": Fraction(6)}
    spec = pod(container(limits={"nvidia.com/gpu": 2}), initContainers=[sidecar])["spec"]
    assert per_node_amounts(spec, is_gpu) == {"nvidia.com/gpu": Fraction(3)}


def test_a_node_offers_its_allocatable_or_its_dra_devices():
    by_name = {n.name: n for n in SNAPSHOT.nodes}
    assert capacity(SNAPSHOT, by_name["l4-0"], "nvidia.com/gpu") == 4
    h200 = next(n for n in SNAPSHOT.nodes if n.name.startswith("h200"))
    assert capacity(SNAPSHOT, h200, "nvidia.com/gpu") == 8  # served by DeviceClass gpu.nvidia.com (KEP-5004)
    assert capacity(SNAPSHOT, by_name["l4-0"], "amd.com/gpu") == 0


def test_a_class_s_largest_node_counts_its_nodes_and_the_pools_that_scale_for_it():
    classes = DEFAULT.models.classes  # type: ignore[union-attr]
    assert class_largest(SNAPSHOT, classes["l4"], NVIDIA, "nvidia.com/gpu") == 4
    assert class_largest(SNAPSHOT, classes["h100"], NVIDIA, "nvidia.com/gpu") == 8
    # no node of class l40s exists: the Karpenter NodePool's g6e nodes hold up to 8
    assert class_largest(SNAPSHOT, classes["l40s"], NVIDIA, "nvidia.com/gpu") == 8
    # nothing known of a class with no node and no pool: None, never "too small"
    assert class_largest(SNAPSHOT, classes["l40s"], NVIDIA, "nvidia.com/mig-1g.10gb") is None
