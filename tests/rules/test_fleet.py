"""The reference fleet's semantics, rule by rule, against the shipped policies: vendors decide what is
injected, pods only land on pools that offer what they request, a pod's own choice wins, other ways of
holding a GPU, and workload CRDs with several pod templates."""

from __future__ import annotations

import pytest

from tests.support import REPO, apply, container, env, pod, request, validated
from webhook.admission import mutate, validate
from webhook.policy.files import load_policies

FLEET = load_policies(REPO / "policies")
PRODUCT = "nvidia.com/gpu.product"
NVIDIA_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def admit(obj, labels=None):
    decision = mutate(request(obj), env(FLEET, labels))
    assert decision.allowed, decision.message
    result = apply(obj, decision.patch)
    verdict = validate(request(result), env(FLEET, labels))
    return result, verdict


def refused(obj):
    decision = mutate(request(obj), env(FLEET))
    if decision.allowed:
        decision = validate(request(apply(obj, decision.patch)), env(FLEET))
    assert not decision.allowed
    return decision.message


@pytest.mark.parametrize(
    ("limits", "labels", "selector"),
    [
        ({"nvidia.com/gpu": 1}, None, {PRODUCT: "NVIDIA-L4"}),
        ({"nvidia.com/gpu": 1}, {"gpugate.io/model": "t4"}, {PRODUCT: "Tesla-T4-SHARED"}),
        ({"nvidia.com/gpu": 1}, {"gpugate.io/model": "h100-mig"}, {PRODUCT: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}),
        ({"nvidia.com/gpu.shared": 1}, None, {PRODUCT: "NVIDIA-A10G"}),
        ({"nvidia.com/mig-1g.10gb": 1}, None, {PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
        ({"nvidia.com/mig-3g.40gb": 2}, None, {PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ],
)
def test_nvidia_pods_land_on_a_pool_that_offers_what_they_request(limits, labels, selector):
    result, verdict = admit(pod(container(limits=limits), labels=labels))
    assert result["spec"]["nodeSelector"] == selector
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert result["spec"]["tolerations"] == [NVIDIA_TOLERATION]
    assert verdict.allowed and verdict.violations == []


@pytest.mark.parametrize(
    ("limits", "toleration", "selector"),
    [
        ({"amd.com/gpu": 1}, "amd.com/gpu", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
        (
            {"gpu.intel.com/i915": 1, "gpu.intel.com/millicores": 100},
            "gpu.intel.com/i915",
            {"gpu.intel.com/product": "Max_1550"},
        ),
    ],
)
def test_amd_and_intel_pods_get_their_own_vendor_profile_never_nvidias(limits, toleration, selector):
    result, verdict = admit(pod(container(limits=limits)))
    assert "runtimeClassName" not in result["spec"]
    assert result["spec"]["nodeSelector"] == selector
    assert [t["key"] for t in result["spec"]["tolerations"]] == [toleration]
    assert verdict.allowed and verdict.violations == []


def test_auxiliary_resources_are_never_counted_as_gpus():
    obj = pod(container(limits={"gpu.intel.com/i915": 1, "gpu.intel.com/millicores": 100}))
    # 101 "GPUs" would break the default policy's 8-per-container limit; it is one GPU plus 100 millicores.
    assert admit(obj)[1].violations == []
    hami = pod(
        container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}),
        namespace="ml-serving",
    )
    assert admit(hami)[1].violations == []


def test_a_pod_mixing_vendors_is_refused_and_gets_no_vendor_profile():
    obj = pod(container("a", limits={"nvidia.com/gpu": 1}), container("b", limits={"amd.com/gpu": 1}))
    decision = mutate(request(obj), env(FLEET))
    result = apply(obj, decision.patch)
    assert "runtimeClassName" not in result["spec"] and "tolerations" not in result["spec"]
    assert "requests GPUs of several vendors (nvidia, amd)" in refused(obj)


def test_a_mig_request_never_falls_to_the_l4_default_and_a_class_that_cannot_serve_it_is_refused():
    message = refused(pod(container(limits={"nvidia.com/mig-1g.10gb": 1}), labels={"gpugate.io/model": "l4"}))
    assert (
        'GPU model class "l4" cannot serve nvidia.com/mig-1g.10gb: its nodes offer nvidia.com/gpu; use one of: a100'
        in message
    )
    message = refused(pod(container(limits={"nvidia.com/mig-2g.20gb": 1})))
    assert 'requests nvidia.com/mig-2g.20gb, which no GPU model class of policy "default" offers' in message


@pytest.mark.parametrize(
    ("spec", "annotations", "warned"),
    [
        ({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}, None, False),
        ({"nodeSelector": {"node.kubernetes.io/instance-type": "g6.12xlarge"}}, None, False),
        ({"nodeSelector": {PRODUCT: "NVIDIA-H100-80GB-HBM3"}}, None, False),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "cloud.google.com/gke-accelerator",
                                            "operator": "In",
                                            "values": ["nvidia-l4"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            None,
            False,
        ),
        ({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-v100"}}, None, True),
        ({}, {"nvidia.com/use-gputype": "A100"}, True),
        ({"nodeName": "gpu-node-7"}, None, False),
    ],
)
def test_the_pods_own_choice_wins(spec, annotations, warned):
    obj = pod(container(limits={"nvidia.com/gpu": 1}), **spec)
    if annotations:
        obj["metadata"]["annotations"] = annotations
    result, verdict = admit(obj)
    assert result["spec"].get("nodeSelector") == spec.get("nodeSelector")
    assert result["spec"].get("affinity") == spec.get("affinity")
    assert verdict.allowed
    assert any("left as chosen" in w for w in verdict.warnings) is warned


def test_a_choice_two_pools_share_gets_the_chosen_class_s_own_constraint_too():
    # p5.48xlarge carries whole H100s (h100) or MIG-single slices (h100-mig): the choice alone could land on
    # slices, so the first class listing it (h100) adds its product; the pod's own selector stays.
    obj = pod(container(limits={"nvidia.com/gpu": 8}), nodeSelector={"node.kubernetes.io/instance-type": "p5.48xlarge"})
    result, verdict = admit(obj)
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        PRODUCT: "NVIDIA-H100-80GB-HBM3",
    }
    # a choice on the model label itself is never narrowed, nor contradicted
    obj = pod(container(limits={"nvidia.com/gpu": 1}), nodeSelector={PRODUCT: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    assert admit(obj)[0]["spec"]["nodeSelector"] == {PRODUCT: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}


def test_a_choice_that_maps_to_a_class_outside_the_policy_or_the_request_is_refused():
    # serving allows l4, t4, a10g, h100: an A100 MIG pod choosing a100 through its product label is outside.
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}), namespace="ml-serving", nodeSelector={PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    )
    assert 'outside every GPU model class of policy "serving"' in refused(obj)
    # the a10g pool offers only the renamed shared resource
    obj = pod(container(limits={"nvidia.com/gpu": 1}), nodeSelector={PRODUCT: "NVIDIA-A10G"})
    assert (
        'chooses nvidia.com/gpu.product=NVIDIA-A10G (class "a10g"), whose nodes do not offer nvidia.com/gpu'
        in refused(obj)
    )


def test_dra_claims_hold_a_gpu_and_get_nothing_their_driver_does_not_need():
    obj = pod(
        container(),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
        tolerations=[NVIDIA_TOLERATION],
    )
    result, verdict = admit(obj, {"default": {"team": "vision"}})
    assert verdict.allowed and verdict.violations == []
    assert "runtimeClassName" not in result["spec"] and "nodeSelector" not in result["spec"]
    assert result["metadata"]["labels"]["gpugate.io/team"] == "vision"


def test_fractional_gpu_annotations_hold_a_gpu_with_nvidias_profile():
    obj = pod(container(), tolerations=[NVIDIA_TOLERATION], schedulerName="kai-scheduler")
    obj["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    result, verdict = admit(obj)
    assert verdict.allowed and verdict.violations == []
    assert result["spec"]["runtimeClassName"] == "nvidia" and "nodeSelector" not in result["spec"]


def test_kai_visible_devices_configmap_is_accepted_only_in_the_shape_kai_writes():
    def kai_pod(configmap, scheduler="kai-scheduler", annotation="p-abcdefg-shared-gpu"):
        env_var = {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
        obj = pod(
            container(env=[env_var]),
            schedulerName=scheduler,
            runtimeClassName="nvidia",
            tolerations=[NVIDIA_TOLERATION],
        )
        obj["metadata"]["annotations"] = {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": annotation}
        return obj

    assert admit(kai_pod("p-abcdefg-shared-gpu-0"))[1].violations == []
    for obj in (
        kai_pod("my-own-configmap"),
        kai_pod("p-abcdefg-shared-gpu-0", scheduler="default-scheduler"),
        kai_pod("p-abcdefg-shared-gpu-1"),
    ):
        verdict = validated(apply(obj, mutate(request(obj), env(FLEET)).patch), FLEET)
        assert not verdict.allowed and "sets NVIDIA_VISIBLE_DEVICES=<from a reference>" in verdict.message


def test_pods_without_any_gpu_hold_still_may_not_tolerate_a_gpu_taint():
    for key in ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"):
        obj = pod(container(), tolerations=[{"key": key, "operator": "Exists", "effect": "NoSchedule"}])
        assert f"requests no GPU but tolerates the GPU node taint ({key}:NoSchedule)" in refused(obj)


def raycluster(worker_gpus, *, head_labels=None):
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "research-a"},
        "spec": {
            "headGroupSpec": {
                "template": {"metadata": {"labels": head_labels or {}}, "spec": {"containers": [container("head")]}}
            },
            "workerGroupSpecs": [
                {"groupName": "cpu", "template": {"spec": {"containers": [container("cpu")]}}},
                {
                    "groupName": "gpu",
                    "template": {"spec": {"containers": [container("w", limits={"nvidia.com/gpu": worker_gpus})]}},
                },
            ],
        },
    }


def test_every_pod_template_of_a_crd_is_checked_and_named_in_messages():
    decision = mutate(request(raycluster("0.5")), env(FLEET))
    assert not decision.allowed
    assert (
        'spec.workerGroupSpecs[1].template.spec.containers[0].resources.limits[nvidia.com/gpu]: container "w": '
        'Invalid value: "0.5": must be an integer'
    ) in decision.message


def test_mutate_templates_patches_only_the_gpu_template_of_a_crd_and_is_idempotent():
    obj = raycluster("2")
    result, verdict = admit(obj, {"research-a": {"team": "nlp"}})  # research: mutateTemplates: true, warn mode
    gpu = result["spec"]["workerGroupSpecs"][1]["template"]
    assert gpu["spec"]["runtimeClassName"] == "nvidia"
    assert gpu["spec"]["nodeSelector"] == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    assert gpu["metadata"]["labels"]["gpugate.io/team"] == "nlp"
    assert gpu["metadata"]["labels"]["gpugate.io/workload-kind"] == "RayCluster"
    assert result["spec"]["workerGroupSpecs"][0] == obj["spec"]["workerGroupSpecs"][0]
    assert result["spec"]["headGroupSpec"] == obj["spec"]["headGroupSpec"]
    assert verdict.allowed and verdict.violations == []
    assert mutate(request(result), env(FLEET, {"research-a": {"team": "nlp"}})).patch is None


def test_a_policy_directory_can_add_a_workload_kind(tmp_path):
    for source in (REPO / "policies").glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    (tmp_path / "90-kinds.yaml").write_text(
        "apiVersion: gpugate.io/v2\nkind: GPUWorkloadKind\nmetadata: {name: notebooks.example.com}\n"
        "spec: {group: example.com, kind: Notebook, podTemplates: [spec.template]}\n"
    )
    policies = load_policies(tmp_path)
    notebook = {
        "apiVersion": "example.com/v1",
        "kind": "Notebook",
        "metadata": {"name": "nb", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [container(limits={"nvidia.com/gpu": "0.5"})]}}},
    }
    decision = mutate(request(notebook), env(policies))
    assert (
        not decision.allowed and "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]" in decision.message
    )
    assert mutate(request(notebook), env(FLEET)).allowed  # without it, not a kind gpugate reads
