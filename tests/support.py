"""Test helpers: pods, policies and admission requests, and the schema check every patched object passes."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml

from webhook.admission import Decision, Environment, mutate, validate
from webhook.pods.objects import dig, shapes_of, workload_kinds
from webhook.policy.keys import API_VERSION
from webhook.policy.loader import PolicyIssue, parse_policy
from webhook.policy.model import PolicySet

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "kubernetes-api"  # vendored, provenance in SOURCE.md
SCHEMA_VERSION = kubernetes_validate.latest_version()


def policy(name: str = "test", *, api_version: str = API_VERSION, **spec: Any) -> PolicySet:
    """A policy set with one policy, built through the real parser (so tests also exercise validation).
    `api_version=LEGACY_API_VERSION` (webhook.policy.keys) for a test of the deprecated 0.1 format."""
    return policies({"name": name, **spec}, api_version=api_version)


def policies(*specs: Mapping[str, Any], api_version: str = API_VERSION) -> PolicySet:
    built = []
    for index, raw in enumerate(specs):
        raw = dict(raw)
        name = raw.pop("name")
        issues: list[PolicyIssue] = []
        document = {"apiVersion": api_version, "kind": "GPUPolicy", "metadata": {"name": name}, "spec": raw}
        parsed = parse_policy(document, file="test.yaml", index=index, issues=issues)
        assert parsed is not None and not issues, [str(i) for i in issues]
        built.append(parsed)
    return PolicySet.of(built)


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
#: Every resource NVIDIA's device plugin advertises (webhook.policy.model.BUILTIN_DEVICE_RESOURCES): each
#: class of the standard policy offers them all, as a 0.1 class did.
NVIDIA_RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"]
H100_VALUES = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"]


def nvidia(**fields: Any) -> dict[str, Any]:
    """`spec.devices` with the standard NVIDIA profile, `fields` laid over it."""
    return {
        "nvidia": {
            "runtimeClassName": "nvidia",
            "tolerations": [dict(GPU_TAINT)],
            "modelLabel": "nvidia.com/gpu.product",
            **fields,
        }
    }


def model_classes(default: str | None = "l4") -> dict[str, Any]:
    """`spec.models` of the standard policy: L4 by default, H100 on request."""
    classes = {
        "l4": {"values": ["NVIDIA-L4"], "resources": list(NVIDIA_RESOURCES)},
        "h100": {"values": list(H100_VALUES), "resources": list(NVIDIA_RESOURCES)},
    }
    return {"default": default, "classes": classes} if default is not None else {"classes": classes}


#: The standard test policy (the current format of policies/README.md): NVIDIA's runtime class and GPU
#: toleration, L4 by default and H100 on request on nvidia.com/gpu.product, the team from the namespace.
#: A policy test pins that its 0.1 spelling (how these tests first wrote it) loads to the same policy.
STANDARD: dict[str, Any] = {
    "devices": nvidia(),
    "limits": {"maxPerContainer": 4, "maxPerPod": 8},
    "models": model_classes(),
    "attribution": {"labels": {"gpugate.io/team": {"fromNamespaceLabel": "team", "default": "unassigned"}}},
}


def policy_yaml(name: str, **spec: Any) -> str:
    """One GPUPolicy document as YAML text, for a policy directory."""
    document = {"apiVersion": API_VERSION, "kind": "GPUPolicy", "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False)  # plain copies: no YAML anchors


def standard(**overrides: Any) -> PolicySet:
    return policy("standard", **{**STANDARD, **overrides})


def container(
    name: str = "main",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", **extra}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if resources:
        c["resources"] = resources
    return c


def pod(
    *containers: Mapping[str, Any],
    name: str = "p",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    init: list[Mapping[str, Any]] | None = None,
    default_requests: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod as the apiserver sends it: requests defaulted from limits unless told otherwise."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    body: dict[str, Any] = {"containers": [copy.deepcopy(dict(c)) for c in containers] or [container()], **spec}
    if init:
        body["initContainers"] = [copy.deepcopy(dict(c)) for c in init]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}
    if default_requests:
        for fld in ("initContainers", "containers"):
            for c in body.get(fld, []):
                res = c.get("resources") or {}
                if res.get("limits"):
                    res.setdefault("requests", {})
                    for k, v in res["limits"].items():
                        res["requests"].setdefault(k, v)
    return obj


def gpu_pod(gpus: Any = 1, **kw: Any) -> dict[str, Any]:
    return pod(container(limits={"nvidia.com/gpu": gpus}), **kw)


def deployment(
    spec: Mapping[str, Any], *, name: str = "d", annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Deployment whose pod template has `spec` (labels app=<name>, and `annotations` if given)."""
    meta: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": meta, "spec": dict(spec)}},
    }


def request(
    obj: Mapping[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: Mapping[str, Any] | None = None,
    sub_resource: str | None = None,
    uid: str = "0b1c-uid",
) -> dict[str, Any]:
    source = obj if obj is not None else old
    assert source is not None
    group, _, version = str(source["apiVersion"]).rpartition("/")
    req: dict[str, Any] = {
        "uid": uid,
        "operation": operation,
        "kind": {"group": group, "version": version, "kind": source["kind"]},
        "resource": {"group": group, "version": version, "resource": source["kind"].lower() + "s"},
        "namespace": source.get("metadata", {}).get("namespace", "default"),
        "name": source.get("metadata", {}).get("name", ""),
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub_resource:
        req["subResource"] = sub_resource
    return req


def review(obj: Mapping[str, Any] | None, **kw: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request(obj, **kw)}


def env(policy_set: PolicySet, labels: Mapping[str, Mapping[str, str]] | None = None) -> Environment:
    known = dict(labels or {})
    return Environment(policies=policy_set, namespace_labels=lambda ns: known.get(ns, {}))


def schema_check(obj: Mapping[str, Any]) -> None:
    """Strict validation against the newest upstream schema kubernetes-validate ships. A workload CRD
    (which that schema does not know) has each of its pod templates validated as a PodTemplate's."""
    try:
        kubernetes_validate.validate(dict(obj), SCHEMA_VERSION, strict=True)
        return
    except kubernetes_validate.utils.SchemaNotFoundError:
        shapes = shapes_of(obj, workloads=workload_kinds())
        if not shapes:
            raise
    for shape in shapes:
        template = dig(obj, shape.template)
        if shape.pod_meta is not None:  # a bare PodSpec, whose pods take labels and annotations from pod_meta
            holder = dig(obj, shape.meta_keys) or {}
            meta = {k: holder[k] for k in ("labels", "annotations") if k in holder}
            template = {"metadata": meta, "spec": dig(obj, shape.spec_keys)}
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
            SCHEMA_VERSION,
            strict=True,
        )


def apply(obj: Mapping[str, Any], patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Apply with RFC 6902 semantics (python-json-patch) to a copy; the original is left alone."""
    before = json.dumps(obj, sort_keys=True)
    result = jsonpatch.apply_patch(obj, patch or [], in_place=False)
    assert json.dumps(obj, sort_keys=True) == before, "applying the patch changed the original"
    return dict(result)


def mutated(
    obj: Mapping[str, Any], policy_set: PolicySet, *, labels: Any = None, check_schema: bool = True
) -> tuple[dict[str, Any], Decision]:
    """Run /mutate, apply its patch, and check the result against the upstream schema."""
    decision = mutate(request(obj), env(policy_set, labels))
    result = apply(obj, decision.patch)
    if check_schema and decision.allowed:
        schema_check(result)
    return result, decision


def validated(obj: Mapping[str, Any], policy_set: PolicySet, *, labels: Any = None, **kw: Any) -> Decision:
    return validate(request(obj, **kw), env(policy_set, labels))


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, as the kubelet sends, then SIGKILL if the server has not exited within 30 s."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
