"""Feasibility against the reference fleet snapshot: refused with what exists, never without an inventory."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from tests.support import REPO, apply, container, pod, request
from webhook.admission import Environment, mutate, validate
from webhook.inventory.model import Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.policy.files import load_policies

FLEET = load_policies(REPO / "policies")
SNAPSHOT = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
NVIDIA_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def decide(obj, fleet: Inventory | None = SNAPSHOT):
    env = Environment(policies=FLEET, fleet=lambda: fleet)
    decision = mutate(request(obj), env)
    if not decision.allowed:
        return obj, decision
    result = apply(obj, decision.patch)
    return result, validate(request(result), env)


def feasibility(decision):
    return [v.message() for v in decision.violations if v.rule == "feasibility"]


def test_an_eight_gpu_pod_naming_no_class_takes_the_first_default_that_holds_it():
    # default: [l4, h100]; L4 nodes hold 4, so the pod goes to H100 (it used to get L4's selector: Pending for ever)
    result, verdict = decide(pod(container(limits={"nvidia.com/gpu": 8})))
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    small, _ = decide(pod(container(limits={"nvidia.com/gpu": 4})))
    assert small["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}


def test_a_choice_several_classes_share_takes_the_first_default_that_holds_it():
    # HAMi's vgpu-mode hami-core is listed on l4 and h100; 8 GPUs are past an L4 node's 4, so h100, as for a pod
    # that chose nothing (it used to be the first default among them whatever its size: Pending for ever)
    def hami_core(gpus):
        obj = pod(container(limits={"nvidia.com/gpu": gpus}), tolerations=[NVIDIA_TOLERATION])
        obj["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "hami-core"}
        return obj

    result, verdict = decide(hami_core(8))
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    small, _ = decide(hami_core(4))
    assert small["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}


def test_no_default_holds_it_refused_naming_the_classes_whose_nodes_would(tmp_path):
    text = (REPO / "policies" / "00-default.yaml").read_text().replace("default: [l4, h100]", "default: l4")
    (tmp_path / "00-default.yaml").write_text(text)
    env = Environment(policies=load_policies(tmp_path), fleet=lambda: SNAPSHOT)
    obj = pod(container(limits={"nvidia.com/gpu": 8}))
    result = apply(obj, mutate(request(obj), env).patch)
    assert result["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}  # the only default, as before
    decision = validate(request(result), env)
    assert not decision.allowed
    [message] = feasibility(decision)
    assert message.endswith(
        "(largest: 4 × nvidia.com/gpu on NVIDIA-L4 nodes); request at most 4, label the pod gpugate.io/model with "
        "a class whose nodes hold 8 (t4, h100, h100-mig, h200, l40s), or split the work across pods"
    )


def test_more_gpus_than_the_class_s_largest_node_names_it():
    _, verdict = decide(pod(container(limits={"nvidia.com/gpu": 8}), labels={"gpugate.io/model": "l4"}))
    assert not verdict.allowed
    [message] = feasibility(verdict)
    assert "largest: 4 × nvidia.com/gpu on NVIDIA-L4 nodes" in message
    assert message.startswith("spec.containers[0].resources.limits[nvidia.com/gpu]: pod: requests 8 × nvidia.com/gpu")


def test_the_same_pod_on_a_class_whose_nodes_hold_eight_is_fine():
    obj = pod(container(limits={"nvidia.com/gpu": 8}), labels={"gpugate.io/model": "h100"})
    result, verdict = decide(obj)
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_no_inventory_no_verdict():
    _, verdict = decide(pod(container(limits={"nvidia.com/gpu": 8})), fleet=None)
    assert verdict.allowed and not feasibility(verdict)


def test_sidecars_add_up_init_containers_do_not():
    init = container("init", limits={"nvidia.com/gpu": 4})
    sidecar = {**container("side", limits={"nvidia.com/gpu": 1}), "restartPolicy": "Always"}
    l4 = {"gpugate.io/model": "l4"}
    ok = pod(container(limits={"nvidia.com/gpu": 3}), initContainers=[init, sidecar], labels=l4)
    assert decide(ok)[1].allowed
    too_many = pod(container(limits={"nvidia.com/gpu": 4}), initContainers=[sidecar], labels=l4)
    assert "requests 5 × nvidia.com/gpu on one node" in feasibility(decide(too_many)[1])[0]


def test_a_resource_no_node_offers_names_what_nodes_offer():
    obj = pod(container(limits={"amd.com/cpx_nps4": 1}), tolerations=[{"key": "amd.com/gpu", "operator": "Exists"}])
    [message] = feasibility(decide(obj)[1])
    assert "requests amd.com/cpx_nps4, which no node of the cluster offers (nodes offer amd.com/gpu)" in message


def test_a_gpu_name_chosen_by_affinity_that_no_node_carries_is_refused_naming_it():
    # AIBrix's L20 sample on Volcano Engine (tests/fixtures/real-manifests/aibrix-heterogeneous-l20-deployment.yaml)
    term = {
        "matchExpressions": [
            {"key": "machine.cluster.vke.volcengine.com/gpu-name", "operator": "In", "values": ["NVIDIA-L20"]}
        ]
    }
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    obj = pod(container(limits={"nvidia.com/gpu": 1}), affinity=affinity, tolerations=[NVIDIA_TOLERATION])
    result, verdict = decide(obj)
    assert not verdict.allowed and "nodeSelector" not in result["spec"]
    [message] = feasibility(verdict)
    assert (
        "(no node carries machine.cluster.vke.volcengine.com/gpu-name=NVIDIA-L20); nodes offering it: NVIDIA-L4"
        in message
    )
    either = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, term]}}}
    obj = pod(container(limits={"nvidia.com/gpu": 1}), affinity=either, tolerations=[NVIDIA_TOLERATION])
    assert "no node carries" not in feasibility(decide(obj)[1])[0]  # ORed terms: no one expression is required


def test_a_selector_value_no_node_carries():
    obj = pod(container(limits={"nvidia.com/gpu": 1}), nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"})
    obj["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] = "mars-1a"
    [message] = feasibility(decide(obj)[1])
    assert "no node carries topology.kubernetes.io/zone=mars-1a" in message
    assert "nodes offering it: NVIDIA-L4 (1 node), Tesla-T4-SHARED (1 node)" in message


def test_untolerated_taints_keep_a_pod_off_every_node():
    # Bound to an H100 node by name: the AMD GPUs it requests are on nodes its name excludes.
    obj = pod(container(limits={"amd.com/gpu": 1}), nodeName="h100-0")
    assert "no node its selector, affinity and tolerations admit offers it" in feasibility(decide(obj)[1])[0]


def test_a_missing_runtime_class_is_named():
    fleet = Inventory(SNAPSHOT.nodes, frozenset({"runc"}), SNAPSHOT.device_classes, SNAPSHOT.slices)
    obj = pod(container(limits={"nvidia.com/gpu": 1}), runtimeClassName="nvidia")
    [message] = feasibility(decide(obj, fleet)[1])
    assert 'RuntimeClass "nvidia" does not exist in the cluster (there are: runc)' in message


def test_gpugate_injects_no_runtime_class_that_does_not_exist():
    fleet = Inventory(SNAPSHOT.nodes, frozenset(), SNAPSHOT.device_classes, SNAPSHOT.slices)
    result, verdict = decide(pod(container(limits={"nvidia.com/gpu": 1})), fleet)
    assert verdict.allowed, verdict.message
    assert "runtimeClassName" not in result["spec"]
    assert decide(pod(container(limits={"nvidia.com/gpu": 1})))[0]["spec"]["runtimeClassName"] == "nvidia"


def test_dra_backed_requests_count_the_node_s_devices():
    ok = pod(
        container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8}), tolerations=[NVIDIA_TOLERATION]
    )
    assert decide(ok)[1].allowed
    half = tuple(dataclasses.replace(s, devices=4) if s.driver == "gpu.nvidia.com" else s for s in SNAPSHOT.slices)
    fleet = Inventory(SNAPSHOT.nodes, SNAPSHOT.runtime_classes, SNAPSHOT.device_classes, half)
    assert (
        "largest: 4 × deviceclass.resource.kubernetes.io/gpu.nvidia.com on NVIDIA H200 nodes"
        in (feasibility(decide(copy.deepcopy(ok), fleet)[1])[0])
    )


def test_an_implicit_name_of_a_missing_device_class():
    obj = pod(container(limits={"deviceclass.resource.kubernetes.io/mig.nvidia.com": 1}))
    [message] = feasibility(decide(obj)[1])
    assert 'DeviceClass "mig.nvidia.com" does not exist (there are: dra.cpu, gpu.nvidia.com)' in message


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_other_modes_only_report(mode, tmp_path):
    text = (REPO / "policies" / "00-default.yaml").read_text().replace("mode: enforce", f"mode: {mode}")
    (tmp_path / "00-default.yaml").write_text(text)
    env = Environment(policies=load_policies(tmp_path), fleet=lambda: SNAPSHOT)
    obj = pod(container(limits={"nvidia.com/gpu": 8}), labels={"gpugate.io/model": "l4"})
    result = apply(obj, mutate(request(obj), env).patch)
    verdict = validate(request(result), env)
    assert verdict.allowed
    shown = verdict.warnings if mode == "warn" else [verdict.audit_annotations.get("violations", "")]
    assert any("more than any node it can land on has" in w for w in shown)


def claiming(template: str, requests: list[dict], **kw):
    obj = pod(container(), resourceClaims=[{"name": "c", "resourceClaimTemplateName": template}], **kw)
    claim = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    return obj, SNAPSHOT.with_claims([claim])


def test_a_claim_on_more_devices_than_any_node_publishes():
    obj, fleet = claiming("nine", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 9}}])
    [message] = feasibility(decide(obj, fleet)[1])
    assert message.startswith('spec.resourceClaims[0]: pod: claims 9 device(s) of DeviceClass "gpu.nvidia.com"')
    assert "(largest: 8 on one node)" in message
    obj, fleet = claiming("eight", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}])
    assert decide(obj, fleet)[1].allowed


def test_a_claim_on_a_device_class_that_does_not_exist():
    obj, fleet = claiming(
        "two",
        [
            {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
            {"name": "n", "exactly": {"deviceClassName": "sriov.example.com"}},
        ],
    )
    [message] = feasibility(decide(obj, fleet)[1])
    assert 'claims devices of DeviceClass "sriov.example.com", which does not exist' in message


def test_a_fleet_without_any_of_the_vendor_s_gpus_gives_no_verdict():
    # Scale from zero (Karpenter, autoscaler node groups at 0): no GPU node of the vendor exists yet.
    cpu_only = Inventory(tuple(n for n in SNAPSHOT.nodes if n.name == "cpu-0"), SNAPSHOT.runtime_classes)
    _, verdict = decide(pod(container(limits={"nvidia.com/gpu": 8})), cpu_only)
    assert verdict.allowed and not feasibility(verdict)


# ---- what the cluster can have: pools that scale up ------------------------------------------------------


def warnings_of(decision):
    return [v.message() for v in decision.violations if v.rule == "feasibility" and v.advisory]


def test_a_gke_pool_declared_in_policy_at_zero_nodes_is_waited_for_not_refused():
    # No node carries gke-accelerator=nvidia-tesla-a100 now; policies/05-node-pools.yaml's a100-gke pool can add one.
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}), nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    )
    result, verdict = decide(obj)
    assert verdict.allowed, verdict.message
    [warning] = warnings_of(verdict)
    assert warning.endswith(
        'pod: no node can host 1 × nvidia.com/gpu now; node pool "a100-gke" can add one (Pending until then)'
    )
    # GKE's own taint value is tolerated by the injected toleration (operator Exists)
    assert NVIDIA_TOLERATION in result["spec"]["tolerations"]


def test_more_than_the_declared_pool_s_node_holds_is_refused_naming_what_it_could_add():
    obj = pod(
        container(limits={"nvidia.com/gpu": 2}), nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    )
    _, verdict = decide(obj)
    assert not verdict.allowed
    [message] = feasibility(verdict)
    assert "no node its selector, affinity and tolerations admit offers it" in message
    assert 'pools that scale up cannot either: node pool "a100-gke" (up to 1 × nvidia.com/gpu per node)' in message


def test_the_l40s_class_goes_to_the_karpenter_nodepool_and_waits():
    obj = pod(container(limits={"nvidia.com/gpu": 8}), labels={"gpugate.io/model": "l40s"})
    result, verdict = decide(obj)
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "l40s"}
    [warning] = warnings_of(verdict)
    assert 'NodePool "l40s" can add one (Pending until then)' in warning


def test_a_selector_the_nodepool_cannot_meet_is_still_refused():
    # GFD's product label is not one Karpenter knows before the node exists: the NodePool cannot provision for it.
    obj = pod(container(limits={"nvidia.com/gpu": 1}), nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L40S"})
    _, verdict = decide(obj)
    assert not verdict.allowed
    assert "no node carries nvidia.com/gpu.product=NVIDIA-L40S" in feasibility(verdict)[0]


def test_a_nodepool_whose_gpus_gpugate_cannot_know_gets_a_warning_not_a_refusal():
    doc = REPO / "tests" / "fixtures" / "karpenter" / "docs-scheduling-gpu-nodepool.yaml"
    fleet = dataclasses.replace(SNAPSHOT, pools=Inventory.of(yaml.safe_load_all(doc.read_text())).pools, _cache={})
    # p3 instances carry V100s; no class names v100, so the choice is left as the pod made it
    obj = pod(container(limits={"nvidia.com/gpu": 8}), nodeSelector={"karpenter.k8s.aws/instance-gpu-name": "v100"})
    _, verdict = decide(obj, fleet)
    assert verdict.allowed, verdict.message
    [warning] = warnings_of(verdict)
    assert 'no node can host 8 × nvidia.com/gpu now; NodePool "gpu" may add one (its GPUs are unknown)' in warning
    # without that NodePool the same pod is refused
    no_pools = dataclasses.replace(SNAPSHOT, pools=(), _cache={})
    assert not decide(obj, no_pools)[1].allowed


def test_nodepools_gpugate_may_not_read_make_it_warn():
    unread = dataclasses.replace(SNAPSHOT, pools=(), unread=frozenset({"nodepools"}), _cache={})
    obj = pod(container(limits={"nvidia.com/gpu": 1}), nodeSelector={"karpenter.k8s.aws/instance-gpu-name": "v100"})
    _, verdict = decide(obj, unread)
    assert verdict.allowed
    assert "Karpenter NodePools are unreadable (RBAC), one may add it" in warnings_of(verdict)[0]


def test_a_pod_bound_to_a_node_by_name_is_not_helped_by_pools():
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}),
        nodeName="l4-0",
        nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
    )
    assert not decide(obj)[1].allowed
