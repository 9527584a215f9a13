"""Model selection (webhook/rules/model_selection.py): the class from the pod label, the pod's own choice or the
default; nodeSelector for one value, affinity for several; each finding's rule, field, subject, text and fix."""

from __future__ import annotations

import pytest

from tests.rules.test_fleet import FLEET, NVIDIA_TOLERATION, admit
from tests.support import (
    apply,
    container,
    env,
    gpu_pod,
    model_classes,
    mutated,
    nvidia,
    pod,
    request,
    standard,
    validated,
)
from webhook.admission import mutate

LABEL = "nvidia.com/gpu.product"
H100 = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"]


def required_terms(obj):
    return obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def test_default_class_with_one_value_becomes_a_node_selector():
    result, _ = mutated(gpu_pod(1, nodeSelector={"kubernetes.io/os": "linux"}), standard())
    assert result["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux", LABEL: "NVIDIA-L4"}


def test_a_class_with_several_values_becomes_a_required_affinity_term():
    result, _ = mutated(gpu_pod(1, labels={"gpugate.io/model": "h100"}), standard())
    assert required_terms(result) == [{"matchExpressions": [{"key": LABEL, "operator": "In", "values": H100}]}]
    assert "nodeSelector" not in result["spec"]


def test_the_expression_is_merged_into_every_user_term_without_replacing_any():
    user_terms = [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}
            ],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}}}
            ]
        },
    }
    obj = gpu_pod(1, labels={"gpugate.io/model": "h100"}, affinity=affinity)
    result, _ = mutated(obj, standard())
    terms = required_terms(result)
    assert terms[0]["matchExpressions"] == [
        user_terms[0]["matchExpressions"][0],
        {"key": LABEL, "operator": "In", "values": H100},
    ]
    assert terms[1]["matchFields"] == user_terms[1]["matchFields"]
    assert terms[1]["matchExpressions"] == [{"key": LABEL, "operator": "In", "values": H100}]
    assert result["spec"]["affinity"]["podAntiAffinity"] == affinity["podAntiAffinity"]
    assert (
        obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        == user_terms
    )


def test_a_pod_already_selecting_an_allowed_value_is_left_alone():
    obj = gpu_pod(1, labels={"gpugate.io/model": "h100"}, nodeSelector={LABEL: H100[1]})
    result, _ = mutated(obj, standard())
    assert result["spec"]["nodeSelector"] == {LABEL: H100[1]}
    assert "affinity" not in result["spec"]
    assert validated(result, standard()).allowed


def test_class_values_are_never_rewritten_for_shared_gpus():
    # GFD keeps the plain product for a renamed time-sliced resource (nvidia.com/gpu.shared) and appends
    # -SHARED only when not renamed (k8s-device-plugin internal/lm/resource.go): values are used as written.
    result, _ = mutated(pod(container(limits={"nvidia.com/gpu.shared": 1})), standard())
    assert result["spec"]["nodeSelector"][LABEL] == "NVIDIA-L4"
    h100, _ = mutated(
        pod(container(limits={"nvidia.com/gpu.shared": 1}), labels={"gpugate.io/model": "h100"}), standard()
    )
    assert required_terms(h100)[0]["matchExpressions"][0]["values"] == H100


def test_a_pod_selecting_an_allowed_model_itself_keeps_its_choice():
    obj = gpu_pod(1, nodeSelector={LABEL: "NVIDIA-H100-80GB-HBM3"})
    result, _ = mutated(obj, standard())
    assert result["spec"]["nodeSelector"] == {LABEL: "NVIDIA-H100-80GB-HBM3"}  # no L4 default beside it
    assert "affinity" not in result["spec"]
    assert validated(result, standard()).allowed


@pytest.mark.parametrize(
    ("labels", "spec", "words"),
    [
        (
            {"gpugate.io/model": "a100"},
            {},
            'GPU model class "a100" is not allowed by policy "standard"; use one of: l4, h100',
        ),
        (
            {},
            {"nodeSelector": {LABEL: "NVIDIA-A100-SXM4-80GB"}},
            'selects nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB, outside every GPU model class of policy "standard"',
        ),
        (
            {"gpugate.io/model": "l4"},
            {"nodeSelector": {LABEL: "NVIDIA-H100-80GB-HBM3"}},
            'outside class "l4" (NVIDIA-L4)',
        ),
        (
            {"gpugate.io/model": "h100"},
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["NVIDIA-L4"]}]}
                            ]
                        }
                    }
                }
            },
            'reaches outside class "h100"',
        ),
    ],
)
def test_selections_outside_the_class_are_violations(labels, spec, words):
    obj = gpu_pod(1, labels=labels, **spec)
    result, decision = mutated(obj, standard())
    for fld in ("nodeSelector", "affinity"):  # mutate leaves a wrong selection for validate to report
        assert result["spec"].get(fld) == obj["spec"].get(fld)
    verdict = validated(result, standard())
    assert not verdict.allowed and words in verdict.message


def test_no_label_and_no_default_is_a_violation_listing_the_classes():
    devices = {"nvidia": {"modelLabel": LABEL}}
    verdict = validated(gpu_pod(1), standard(devices=devices, models=model_classes(default=None), attribution={}))
    assert "names no GPU model class" in verdict.message and "l4, h100" in verdict.message


MODEL = "nvidia.com/gpu.product"


AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def test_a_selection_outside_its_class_is_one_violation_with_every_part():
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}),
        labels={"gpugate.io/model": "h100"},
        nodeSelector={MODEL: "NVIDIA-L4"},
        runtimeClassName="nvidia",
        tolerations=[NVIDIA_TOLERATION],
    )
    found = [v for v in validated(obj, standard()).violations if v.rule == "model-selection"]
    assert len(found) == 1
    assert (found[0].path, found[0].subject) == (f"spec.nodeSelector[{MODEL}]", "pod")
    assert found[0].text == (
        'selects nvidia.com/gpu.product=NVIDIA-L4, outside class "h100" (NVIDIA-H100-80GB-HBM3, NVIDIA-H100-SXM5-80GB)'
    )
    assert found[0].fix == "remove the selector (gpugate adds it) or choose the class with label gpugate.io/model"


def affinity_on(values):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]},
                            {"key": MODEL, "operator": "In", "values": values},
                        ]
                    }
                ]
            }
        }
    }


def test_a_pod_choosing_its_model_by_affinity_gets_that_class():
    result, verdict = admit(
        pod(
            container(limits={"nvidia.com/gpu": 1}),
            affinity=affinity_on(["NVIDIA-H100-80GB-HBM3"]),
            tolerations=[NVIDIA_TOLERATION],
        )
    )
    assert verdict.allowed and verdict.violations == []
    assert MODEL not in (result["spec"].get("nodeSelector") or {})  # no L4 default beside its own choice


def test_a_choice_outside_every_class_names_the_expression():
    obj = pod(
        container(limits={"nvidia.com/gpu": 1}),
        affinity=affinity_on(["NVIDIA-Unknown"]),
        tolerations=[NVIDIA_TOLERATION],
    )
    verdict = validated(apply(obj, mutate(request(obj), env(FLEET)).patch), FLEET)
    assert not verdict.allowed
    assert f"spec.{AFFINITY}.nodeSelectorTerms[0].matchExpressions[1]" in verdict.message


def test_a_hami_annotation_is_the_pods_own_choice_left_as_chosen():
    obj = pod(container(limits={"nvidia.com/gpu": 1}), tolerations=[NVIDIA_TOLERATION])
    obj["metadata"]["annotations"] = {"nvidia.com/use-gputype": "NVIDIA-H100-80GB-HBM3"}
    result, verdict = admit(obj)
    assert verdict.allowed and "nodeSelector" not in result["spec"] and "affinity" not in result["spec"]
    assert [v.text for v in verdict.violations] == [
        'nvidia.com/use-gputype=NVIDIA-H100-80GB-HBM3 left as chosen: no class of policy "default" names it'
    ]


def model_findings(verdict):
    return [(v.rule, v.path, v.subject, v.text, v.fix) for v in verdict.violations if v.rule == "model-selection"]


AMD_TOLERATION = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("limits", "model", "toleration", "text", "fix"),
    [
        (
            {"nvidia.com/gpu.shared": 1},
            "l4",
            NVIDIA_TOLERATION,
            'GPU model class "l4" cannot serve nvidia.com/gpu.shared: its nodes offer nvidia.com/gpu',
            "use one of: a10g",
        ),
        (
            {"nvidia.com/mig-1g.10gb": 1},
            "h100",
            NVIDIA_TOLERATION,
            'GPU model class "h100" cannot serve nvidia.com/mig-1g.10gb: its nodes offer nvidia.com/gpu',
            "use one of: a100",
        ),
        (
            {"amd.com/gpu": 1},
            "l4",
            AMD_TOLERATION,
            'GPU model class "l4" is not allowed by policy "default"',
            "use one of: mi300x",
        ),
    ],
)
def test_a_named_class_that_cannot_serve_the_request_is_one_finding_on_the_label(limits, model, toleration, text, fix):
    obj = pod(container(limits=limits), labels={"gpugate.io/model": model}, tolerations=[toleration])
    assert model_findings(admit(obj)[1]) == [("model-selection", "metadata.labels[gpugate.io/model]", "pod", text, fix)]


def test_an_unknown_class_is_one_finding_on_the_label():
    verdict = validated(gpu_pod(1, labels={"gpugate.io/model": "a100"}), standard())
    assert model_findings(verdict) == [
        (
            "model-selection",
            "metadata.labels[gpugate.io/model]",
            "pod",
            'GPU model class "a100" is not allowed by policy "standard"',
            "use one of: l4, h100",
        )
    ]


def test_an_annotation_choice_no_class_names_is_reported_on_the_annotation():
    obj = pod(container(limits={"nvidia.com/gpu": 1}), tolerations=[NVIDIA_TOLERATION])
    obj["metadata"]["annotations"] = {"nvidia.com/use-gputype": "X"}
    assert model_findings(admit(obj)[1]) == [
        (
            "model-selection",
            "metadata.annotations[nvidia.com/use-gputype]",
            "pod",
            'nvidia.com/use-gputype=X left as chosen: no class of policy "default" names it',
            "or name a class with label gpugate.io/model (l4, t4, h100, h100-mig, h200, l40s)",
        )
    ]


def test_a_pod_bound_to_a_node_gets_no_model_selector():
    result, decision = mutated(gpu_pod(1, nodeName="node-1"), standard())
    assert decision.allowed and "nodeSelector" not in result["spec"] and "affinity" not in result["spec"]
    assert validated(result, standard()).allowed


# ---- the pod's own choice everywhere it is written (issue 27 item 2), against the shipped policies ------------


def hami(annotations, gpus=1, **spec):
    obj = pod(container(limits={"nvidia.com/gpu": gpus}), tolerations=[NVIDIA_TOLERATION], **spec)
    obj["metadata"]["annotations"] = annotations
    return obj


def test_hami_vgpu_mode_mig_lands_on_a_mig_capable_class_never_the_l4_default():
    result, verdict = admit(hami({"nvidia.com/vgpu-mode": "mig"}, gpus=2))
    assert result["spec"]["nodeSelector"] == {MODEL: "NVIDIA-H100-80GB-HBM3"}
    assert verdict.allowed and verdict.violations == []


def test_hami_gpus_pinned_by_uuid_get_no_product_constraint():
    result, verdict = admit(hami({"nvidia.com/use-gpuuuid": "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"}))
    assert "nodeSelector" not in result["spec"] and "affinity" not in result["spec"]
    assert verdict.allowed and verdict.violations == []


def test_an_empty_uuid_pin_constrains_nothing_so_the_default_class_applies():
    result, _ = admit(hami({"nvidia.com/use-gpuuuid": " "}))  # CheckUUID: an empty value is no constraint
    assert result["spec"]["nodeSelector"] == {MODEL: "NVIDIA-L4"}


def test_cards_excluded_by_uuid_choose_no_product():
    result, _ = admit(hami({"nvidia.com/nouse-gpuuuid": "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"}))
    assert result["spec"]["nodeSelector"] == {MODEL: "NVIDIA-L4"}


def test_volcano_engine_gpu_name_affinity_is_the_pods_choice_with_nothing_added_beside_it():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "machine.cluster.vke.volcengine.com/gpu-name",
                                "operator": "In",
                                "values": ["NVIDIA-L20"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    obj = pod(container(limits={"nvidia.com/gpu": 1}), affinity=affinity, tolerations=[NVIDIA_TOLERATION])
    result, verdict = admit(obj)
    assert "nodeSelector" not in result["spec"] and result["spec"]["affinity"] == affinity
    assert [v.text for v in verdict.violations] == [
        'machine.cluster.vke.volcengine.com/gpu-name=NVIDIA-L20 left as chosen: no class of policy "default" names it'
    ]


def test_an_alias_value_of_several_classes_is_judged_by_the_one_that_serves():
    alias = "example.com/gpu-mode"
    classes = {
        "slices": {
            "values": ["NVIDIA-A100-SXM4-80GB"],
            "resources": ["nvidia.com/mig-1g.10gb"],
            "aliases": {alias: ["mig"]},
        },
        "whole": {"values": ["NVIDIA-H100-80GB-HBM3"], "resources": ["nvidia.com/gpu"], "aliases": {alias: ["mig"]}},
    }
    policy = standard(devices=nvidia(choiceAnnotations=[alias]), models={"default": "whole", "classes": classes})
    obj = gpu_pod(1)
    obj["metadata"]["annotations"] = {alias: "mig"}
    result, decision = mutated(obj, policy)  # the first class listing "mig" offers only slices: not a refusal
    assert decision.allowed and result["spec"]["nodeSelector"] == {LABEL: "NVIDIA-H100-80GB-HBM3"}
    assert validated(result, policy).violations == []


def test_hami_core_mode_is_hamis_default_device_mode_so_the_pod_gets_the_default_class():
    # hami-core is the mode of every GPU HAMi shares without MIG or MPS (Project-HAMi/HAMi pkg/device/nvidia
    # device.go: checkType keeps a device whose Mode the annotation contains); the shipped classes l4 and h100
    # list it, so the pod gets the default order's class like any other, not "left as chosen".
    result, verdict = admit(hami({"nvidia.com/vgpu-mode": "hami-core"}))
    assert result["spec"]["nodeSelector"] == {MODEL: "NVIDIA-L4"}
    assert verdict.allowed and verdict.violations == [] and verdict.warnings == []
