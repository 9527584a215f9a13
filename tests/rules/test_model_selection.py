"""Model selection: class from the pod label or the default; nodeSelector for one value, affinity for several."""

from __future__ import annotations

import pytest

from tests.support import container, gpu_pod, model_classes, mutated, pod, standard, validated

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
