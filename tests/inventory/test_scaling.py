"""Pools that scale up: Karpenter NodePools as gpugate reads them, pools a policy declares, and which pod
requirements a node such a pool would add could meet (Karpenter's compatibility rules)."""

from __future__ import annotations

import yaml

from tests.support import REPO
from webhook.inventory.model import Inventory, Taint, declared_pool, nodepool_of
from webhook.inventory.snapshot import load_snapshot

KARPENTER = REPO / "tests" / "fixtures" / "karpenter"
FLEET = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")


def nodepool(requirements=(), *, labels=None, taints=(), limits=None, name="p"):
    spec = {"template": {"spec": {"requirements": list(requirements), "taints": list(taints)}}}
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if limits:
        spec["limits"] = limits
    return nodepool_of({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec})


def req(key, operator, *values):
    return {"key": key, "operator": operator, "values": list(values)}


def test_the_reference_l40s_nodepool_holds_up_to_eight_nvidia_gpus_a_node():
    [pool] = FLEET.pools
    assert pool.name == "l40s" and pool.source == "NodePool"
    # 1, 4 or 8 GPUs a node; the NodePool names no manufacturer, so an AMD GPU named l40s is not ruled out
    assert dict(pool.gpus) == {"nvidia.com/gpu": 8, "amd.com/gpu": 8}
    assert not pool.gpus_unknown
    assert pool.taints == (Taint("nvidia.com/gpu", "", "NoSchedule"),)
    assert pool.labels["karpenter.sh/nodepool"] == "l40s"


def test_the_documented_gpu_nodepool_names_no_gpu_so_its_gpus_are_unknown():
    doc = yaml.safe_load((KARPENTER / "docs-scheduling-gpu-nodepool.yaml").read_text())
    pool = nodepool_of(doc)
    assert pool.gpus_unknown and not pool.gpus
    assert pool.may_satisfy("karpenter.k8s.aws/instance-family", "In", ["p3"])
    assert not pool.may_satisfy("karpenter.k8s.aws/instance-family", "In", ["g6e"])


def test_gpu_count_bounds_come_from_in_lt_and_limits():
    assert dict(nodepool([req("karpenter.k8s.aws/instance-gpu-count", "In", "1", "2", "4")]).gpus) == {
        "nvidia.com/gpu": 4,
        "amd.com/gpu": 4,
    }
    lt = nodepool(
        [
            req("karpenter.k8s.aws/instance-gpu-count", "Lt", "5"),
            req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "nvidia"),
        ]
    )
    assert dict(lt.gpus) == {"nvidia.com/gpu": 4}
    limited = nodepool([req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")], limits={"nvidia.com/gpu": "2"})
    assert limited.gpus["nvidia.com/gpu"] == 2
    assert limited.gpus["amd.com/gpu"] is None  # a name, no count: how many is unknown


def test_a_nodepool_without_gpus_offers_none():
    none = nodepool([req("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist")])
    assert not none.gpus and not none.gpus_unknown
    zero_limit = nodepool([req("karpenter.k8s.aws/instance-gpu-name", "In", "l4")], limits={"nvidia.com/gpu": "0"})
    assert "nvidia.com/gpu" not in zero_limit.gpus


def test_karpenter_compatibility_undefined_keys_are_refused_unless_well_known_or_negative():
    pool = nodepool([req("karpenter.k8s.aws/instance-family", "In", "g6e")], labels={"team": "ml"})
    assert pool.may_satisfy("team", "In", ["ml"]) and not pool.may_satisfy("team", "In", ["cv"])
    # a GFD label no NodePool defines: Karpenter says "label ... does not have known values"
    assert not pool.may_satisfy("nvidia.com/gpu.product", "In", ["NVIDIA-L40S"])
    assert pool.may_satisfy("nvidia.com/gpu.product", "NotIn", ["NVIDIA-L4"])
    assert pool.may_satisfy("nvidia.com/gpu.product", "DoesNotExist", [])
    # well-known and undefined: any value an instance type may carry
    assert pool.may_satisfy("topology.kubernetes.io/zone", "In", ["us-east-1a"])
    assert pool.may_satisfy("karpenter.k8s.aws/instance-gpu-name", "In", ["l40s"])
    assert not pool.may_satisfy("karpenter.k8s.aws/instance-family", "NotIn", ["g6e"])
    assert not pool.may_satisfy("karpenter.k8s.aws/instance-family", "Bogus", ["g6e"])


def test_numeric_requirements_intersect():
    pool = nodepool([req("karpenter.k8s.aws/instance-gpu-count", "In", "1", "4", "8")])
    assert pool.may_satisfy("karpenter.k8s.aws/instance-gpu-count", "Gt", ["4"])
    assert not pool.may_satisfy("karpenter.k8s.aws/instance-gpu-count", "Gt", ["8"])
    assert pool.may_satisfy("karpenter.k8s.aws/instance-gpu-count", "In", ["4"])


def test_terms_with_match_fields_name_a_node_no_new_node_can_be():
    pool = nodepool()
    assert not pool.admits_term({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]})


def test_a_declared_pool_carries_its_labels_and_kubelets():
    pool = declared_pool(
        "a100-gke",
        labels=[("cloud.google.com/gke-accelerator", "nvidia-tesla-a100")],
        taints=[("nvidia.com/gpu", "present", "NoSchedule")],
        allocatable=[("nvidia.com/gpu", 1)],
        max_nodes=4,
    )
    assert pool.describe() == 'node pool "a100-gke"'
    assert pool.admits_selector({"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"})
    assert not pool.admits_selector({"cloud.google.com/gke-accelerator": "nvidia-l4"})
    assert pool.admits_selector({"kubernetes.io/hostname": "anything"})
    assert not pool.admits_selector({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    assert dict(pool.gpus) == {"nvidia.com/gpu": 1}


def test_with_pools_is_built_once_per_key():
    calls = []

    def make():
        calls.append(1)
        return [declared_pool("x", labels=[], taints=[], allocatable=[("nvidia.com/gpu", 1)], max_nodes=None)]

    first = FLEET.with_pools(("k",), make)
    assert first.with_pools is not None and FLEET.with_pools(("k",), make) is first
    assert len(calls) == 1 and [p.name for p in first.pools] == ["l40s", "x"]
    assert Inventory().with_pools(("none",), list) == Inventory()
