"""The workload CRDs of current training and serving stacks (webhook/pods/objects.py, webhook/pods/operated.py):
every template path refuses a fractional GPU naming its own field, and is patched where it sits with
mutateTemplates; the pods an operator builds from its own fields (a TrainJob's resourcesPerNode, a Dynamo
service's resources) are judged as those pods, every message naming the field the user wrote."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import apply, container, env, request, standard
from webhook.admission import mutate, validate
from webhook.admission.shapes import object_problems
from webhook.pods.objects import BUILTIN_WORKLOADS, dig, shapes_of, workload_kinds

NEW = {
    "TFJob",
    "MPIJob",
    "TrainingRuntime",
    "ClusterTrainingRuntime",
    "PodSet",
    "RoleSet",
    "StormService",
    "RayClusterFleet",
    "RayClusterReplicaSet",
    "LLMInferenceService",
}
KINDS = [w for w in BUILTIN_WORKLOADS if w.kind in NEW]
LABELS = {"default": {"team": "ml"}}


def _put(node: dict[str, Any], parts: list[str], value: Any) -> list[str]:
    """Set ``value`` at a template path pattern (one list item per ``[*]``, key ``Worker`` per ``*``); return the
    concrete dotted path."""
    part, rest = parts[0], parts[1:]
    if part == "*":
        key, concrete = "Worker", "Worker"
    elif part.endswith("[*]"):
        key, concrete = part[:-3], f"{part[:-3]}[0]"
    else:
        key, concrete = part, part
    if part.endswith("[*]"):
        items = node.setdefault(key, [{"name": "r"}])
        target = items[0]
        if not rest:
            items[0] = value
            return [concrete]
        return [concrete, *_put(target, rest, value)]
    if not rest:
        node[key] = value
        return [concrete]
    return [concrete, *_put(node.setdefault(key, {}), rest, value)]


def workload(kind: str, gpus: str) -> tuple[dict[str, Any], str, str]:
    """An object of ``kind`` with one GPU pod at its first template (or bare PodSpec) path, the concrete path of
    that pod's spec, and of the metadata its pods take their labels from."""
    [known] = [w for w in KINDS if w.kind == kind]
    meta: dict[str, Any] = {"name": "w"} if known.cluster_scoped else {"name": "w", "namespace": "default"}
    obj: dict[str, Any] = {"apiVersion": f"{known.group}/{known.versions[-1]}", "kind": kind, "metadata": meta}
    spec = {"containers": [container("worker", limits={"nvidia.com/gpu": gpus})]}
    if known.templates:
        path = ".".join(_put(obj, known.templates[0].split("."), {"metadata": {"labels": {"app": "w"}}, "spec": spec}))
        return obj, f"{path}.spec", f"{path}.metadata"
    pattern, holder = known.pod_specs[0]
    path = ".".join(_put(obj, pattern.split("."), spec))
    parent = path.rpartition(".")[0]
    return obj, path, f"{parent}.{holder}" if holder else parent


def at(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        name, _, index = part.partition("[")
        obj = obj[name]
        if index:
            obj = obj[int(index.rstrip("]"))]
    return obj


@pytest.mark.parametrize("kind", sorted(NEW))
def test_a_fractional_gpu_is_refused_naming_the_template_field(kind):
    obj, spec_path, _ = workload(kind, "500m")
    decision = mutate(request(obj), env(standard()))
    assert not decision.allowed
    assert f'{spec_path}.containers[0].resources.limits[nvidia.com/gpu]: container "worker"' in decision.message
    assert "must be an integer" in decision.message


@pytest.mark.parametrize("kind", sorted(NEW))
def test_mutate_templates_patches_the_pod_where_it_sits_once(kind):
    policy = standard(mutateTemplates=True)
    obj, spec_path, meta_path = workload(kind, "1")
    decision = mutate(request(obj), env(policy, LABELS))
    assert decision.allowed and decision.patch
    result = apply(obj, decision.patch)
    assert at(result, spec_path)["runtimeClassName"] == "nvidia"
    assert at(result, spec_path)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert at(result, meta_path)["labels"]["gpugate.io/team"] == "ml"
    assert mutate(request(result), env(policy, LABELS)).patch is None
    assert validate(request(result), env(policy, LABELS)).allowed


@pytest.mark.parametrize("kind", sorted(NEW))
def test_without_mutate_templates_it_says_what_the_pods_will_get(kind):
    obj, _, _ = workload(kind, "1")
    assert mutate(request(obj), env(standard())).patch is None
    verdict = validate(request(obj), env(standard(), LABELS))
    assert verdict.allowed
    assert any("pods will get runtimeClassName=nvidia" in w for w in verdict.warnings), verdict.warnings


def test_an_llm_inference_service_reads_all_four_pod_specs_with_their_labels():
    spec = {"containers": [container("main", limits={"nvidia.com/gpu": "1"})]}
    obj = {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "l", "namespace": "default"},
        "spec": {
            "labels": {"app": "l"},
            "template": spec,
            "worker": spec,
            "prefill": {"labels": {"role": "prefill"}, "template": spec, "worker": spec},
        },
    }
    shapes = shapes_of(obj, workloads=workload_kinds())
    assert shapes is not None
    assert [(s.spec_path, s.meta_path) for s in shapes] == [
        ("spec.template", "spec"),
        ("spec.worker", "spec"),
        ("spec.prefill.template", "spec.prefill"),
        ("spec.prefill.worker", "spec.prefill"),
    ]
    assert dig(obj, shapes[2].meta_keys)["labels"] == {"role": "prefill"}


# ---- pods an operator builds from its own fields ----------------------------------------------------------


def trainjob(resources: dict[str, Any] | None, runtime: str = "torch-distributed") -> dict[str, Any]:
    trainer: dict[str, Any] = {"numNodes": 2}
    if resources is not None:
        trainer["resourcesPerNode"] = resources
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }


def dynamo(**services: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"services": services},
    }


def test_a_trainjob_without_its_runtime_is_not_refused_for_it_and_says_so():
    for obj in (trainjob(None), trainjob({"limits": {"nvidia.com/gpu": "2"}})):
        assert mutate(request(obj), env(standard())).allowed
        verdict = validate(request(obj), env(standard(), LABELS))
        assert verdict.allowed, verdict.message
        assert (
            'TrainJob "t": pod template in ClusterTrainingRuntime "torch-distributed", judged when that is applied'
            in (verdict.warnings)
        )
    assert any("trainer: pods will get runtimeClassName=nvidia" in w for w in verdict.warnings)


@pytest.mark.parametrize(
    ("resources", "field", "words"),
    [
        ({"limits": {"nvidia.com/gpu": "1.5"}}, "limits[nvidia.com/gpu]", 'Invalid value: "1.5": must be an integer'),
        (
            {"limits": {"nvidia.com/gpu": "-1"}},
            "limits[nvidia.com/gpu]",
            'Invalid value: "-1": must be greater than or equal to 0',
        ),
        (
            {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}},
            "requests[nvidia.com/gpu]",
            'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2',
        ),
        # Merged into the runtime's node container, whose limit stays: judged as that limit, named as written.
        (
            {"requests": {"nvidia.com/gpu": "0.5"}},
            "requests[nvidia.com/gpu]",
            'Invalid value: "0.5": must be an integer',
        ),
    ],
)
def test_resources_per_node_is_judged_as_the_trainer_pods_request(resources, field, words):
    decision = mutate(request(trainjob(resources)), env(standard()))
    assert not decision.allowed
    assert f'spec.trainer.resourcesPerNode.{field}: container "node": {words}' in decision.message


def test_a_request_only_resources_per_node_is_allowed_and_told_the_runtime_must_limit_it():
    verdict = validate(request(trainjob({"requests": {"nvidia.com/gpu": "2", "cpu": "8"}})), env(standard()))
    assert verdict.allowed
    assert any("resourcesPerNode.requests[nvidia.com/gpu] has no limit" in w for w in verdict.warnings)
    assert not any("requests[cpu]" in w for w in verdict.warnings)  # CPU needs no limit


def test_a_trainjob_over_the_policy_limit_names_resources_per_node():
    verdict = validate(request(trainjob({"limits": {"nvidia.com/gpu": "6"}})), env(standard()))
    assert not verdict.allowed
    assert "spec.trainer.resourcesPerNode" in verdict.message and "more than the 4 per container" in verdict.message
    assert "operated" not in verdict.message


def test_dynamo_gpu_limits_become_the_resource_the_operator_requests():
    half = dynamo(worker={"resources": {"limits": {"gpu": "0.5", "gpuType": "nvidia.com/mig-1g.10gb"}}})
    decision = mutate(request(half), env(standard()))
    assert not decision.allowed
    assert 'spec.services.worker.resources.limits.gpu: container "main": Invalid value: "0.5"' in decision.message
    ok = dynamo(worker={"resources": {"limits": {"gpu": "1"}}, "extraPodSpec": {"mainContainer": {"image": "x"}}})
    verdict = validate(request(ok), env(standard(), LABELS))
    assert verdict.allowed, verdict.message
    assert any(w.startswith('DynamoGraphDeployment "d" services.worker: pods will get') for w in verdict.warnings)


def test_dynamo_requests_gpu_is_ignored_by_the_operator_and_said_so():
    obj = dynamo(worker={"resources": {"requests": {"gpu": "1"}}})
    verdict = validate(request(obj), env(standard()))
    assert verdict.allowed
    assert any(
        "spec.services.worker.resources.requests.gpu is ignored by the Dynamo operator" in w for w in verdict.warnings
    )
    assert not any("pods will get runtimeClassName" in w for w in verdict.warnings)  # no GPU: nothing injected


def test_dynamo_custom_resources_and_extra_containers_keep_their_own_fields():
    obj = dynamo(
        worker={
            "resources": {"requests": {"custom": {"nvidia.com/gpu": "1"}}},
            "extraPodSpec": {
                "containers": [container("sidecar", limits={"nvidia.com/gpu": "0.5"})],
                "mainContainer": {"image": "x"},
            },
        }
    )
    decision = mutate(request(obj), env(standard()))
    assert not decision.allowed
    assert 'spec.services.worker.extraPodSpec.containers[0].resources.limits[nvidia.com/gpu]: container "sidecar"' in (
        decision.message
    )
    assert 'spec.services.worker.resources.limits: container "main": Required value: Limit must be set' in (
        decision.message
    )


def test_dynamo_extra_pod_metadata_chooses_the_model_class():
    obj = dynamo(
        worker={"resources": {"limits": {"gpu": "1"}}, "extraPodMetadata": {"labels": {"gpugate.io/model": "a100"}}}
    )
    verdict = validate(request(obj), env(standard()))
    assert not verdict.allowed
    assert "spec.services.worker.extraPodMetadata.labels[gpugate.io/model]" in verdict.message


def test_an_update_that_leaves_a_dynamo_service_as_it_was_is_judged_on_what_changed():
    before = dynamo(worker={"resources": {"limits": {"gpu": "6"}}})
    after = dynamo(worker={"resources": {"limits": {"gpu": "6"}}, "replicas": 3})
    assert not validate(request(before), env(standard())).allowed
    assert validate(request(after, operation="UPDATE", old=before), env(standard())).allowed


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (
            dynamo(a={"resources": {"limits": {"gpu": "1"}}, "extraPodSpec": {"containers": 3, "tolerations": "x"}}),
            "spec.services.a.extraPodSpec.containers: expected a list, got a number",
        ),
        (
            dynamo(a={"resources": {"limits": {"gpu": "1"}}, "extraPodMetadata": {"labels": {"x": 1}}}),
            "spec.services.a.extraPodMetadata.labels[x]: expected a string, got a number",
        ),
        (
            dynamo(a={"extraPodSpec": {"mainContainer": "x"}}),
            "spec.services.a.extraPodSpec.mainContainer: expected an object, got a string",
        ),
        (
            dynamo(a={"resources": {"limits": {"gpu": {"n": 1}}}}),
            "spec.services.a.resources.limits.gpu: expected a quantity string, got an object",
        ),
        (
            trainjob({"limits": {"nvidia.com/gpu": {"a": 1}}}),
            "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: expected a quantity string, got an object",
        ),
    ],
)
def test_operator_fields_of_the_wrong_type_are_named_by_their_own_field_and_never_crash(obj, problem):
    assert f"request.object.{problem}" in object_problems(obj, path="request.object")
    assert validate(request(obj), env(standard())).code < 500
    assert mutate(request(obj), env(standard())).code < 500


def test_dynamo_main_container_resources_count_unless_the_service_resources_replace_them():
    main = {"image": "x", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}
    decision = mutate(request(dynamo(worker={"extraPodSpec": {"mainContainer": main}})), env(standard()))
    assert not decision.allowed
    assert 'spec.services.worker.extraPodSpec.mainContainer.resources.limits[nvidia.com/gpu]: container "main"' in (
        decision.message
    )
    replaced = dynamo(worker={"resources": {"limits": {"gpu": "1"}}, "extraPodSpec": {"mainContainer": main}})
    assert mutate(request(replaced), env(standard())).allowed


def runtime(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    node = container("node", limits=limits, requests=requests)
    trainer_job = {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}}
    initializer = {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "dataset-initializer",
                            "template": {
                                **initializer,
                                "spec": {"template": {"spec": {"containers": [container("init")]}}},
                            },
                        },
                        {
                            "name": "node",
                            "template": {**trainer_job, "spec": {"template": {"spec": {"containers": [node]}}}},
                        },
                    ]
                }
            }
        },
    }


def with_runtime(found: dict[str, Any] | None):
    return lambda kind, ns, name: (
        found if (kind, ns, name) == ("ClusterTrainingRuntime", "", "torch-distributed") else None
    )


def test_a_visible_runtime_is_merged_with_resources_per_node_as_the_trainer_merges_it():
    from webhook.admission.decision import Environment

    base = env(standard())
    one = runtime(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})
    seen = Environment(policies=base.policies, namespace_labels=base.namespace_labels, runtimes=with_runtime(one))
    raised = trainjob({"limits": {"nvidia.com/gpu": "2"}})
    verdict = mutate(request(raised), seen)
    assert not verdict.allowed
    assert (
        'ClusterTrainingRuntime "torch-distributed" spec.template.spec.replicatedJobs[1].template.spec.template.spec'
        '.containers[0].resources.requests[nvidia.com/gpu]: container "node": Invalid value: "1": must be equal to '
        "nvidia.com/gpu limit of 2"
    ) in verdict.message
    assert mutate(request(raised), base).allowed  # the runtime unseen: not refused for it
    both = trainjob({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}})
    allowed = validate(request(both), seen)
    assert allowed.allowed, allowed.message
    assert (
        'TrainJob "t": judged with ClusterTrainingRuntime "torch-distributed" of this manifest (resourcesPerNode merged)'
        in (allowed.warnings)
    )
    # Only the trainer job's pods get resourcesPerNode: the initializer is not judged here.
    assert not any("init" in w for w in allowed.warnings)


# ---- a policy directory describing a kind with bare PodSpecs -----------------------------------------------


def _kind_document(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpugate.io/v2",
        "kind": "GPUWorkloadKind",
        "metadata": {"name": "servers.example.com"},
        "spec": spec,
    }


def test_a_workload_kind_document_can_name_bare_pod_specs_and_their_pod_metadata():
    from webhook.policy.loader import parse_workload_kind

    issues: list[Any] = []
    spec = {"group": "example.com", "kind": "Server", "podSpecs": [{"path": "spec.pod", "podMetadata": "podMeta"}]}
    kind = parse_workload_kind(_kind_document(spec), file="k.yaml", index=0, issues=issues)
    assert issues == [] and kind is not None and kind.pod_specs == (("spec.pod", "podMeta"),)
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Server",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {
            "podMeta": {"labels": {"gpugate.io/model": "a100"}},
            "pod": {"containers": [container("main", limits={"nvidia.com/gpu": "1"})]},
        },
    }
    policies = standard()
    from dataclasses import replace

    with_kind = replace(policies, workloads={("example.com", "Server"): kind})
    verdict = validate(request(obj), env(with_kind))
    assert not verdict.allowed
    assert "spec.podMeta.labels[gpugate.io/model]" in verdict.message


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"podSpecs": "spec.pod"}, "spec.podSpecs: must be a list of {path, podMetadata}"),
        ({"podSpecs": [{"podMetadata": "m"}]}, "spec.podSpecs[0].path: is required"),
        ({"podSpecs": [{"path": "spec..pod"}]}, "spec.podSpecs[0].path: 'spec..pod' is not a path"),
        ({"podSpecs": [{"path": "spec.pod", "podMetadata": "a.*"}]}, "spec.podSpecs[0].podMetadata: 'a.*' is not"),
        ({"podSpecs": [{"path": "spec.pod", "extra": 1}]}, "spec.podSpecs[0].extra: unknown field"),
        ({}, "spec.podTemplates: must list at least one path to a pod template (or spec.podSpecs"),
    ],
)
def test_a_wrong_pod_specs_entry_is_named(spec, problem):
    from webhook.policy.loader import parse_workload_kind

    issues: list[Any] = []
    parse_workload_kind(
        _kind_document({"group": "example.com", "kind": "Server", **spec}), file="k.yaml", index=0, issues=issues
    )
    assert any(f"{i.path}: {i.message}".startswith(problem) for i in issues), issues
