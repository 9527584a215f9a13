"""Objects the scenarios send: the policies gpugate runs with, and pods and workloads built
from plain dicts (never kubernetes.client models, which drop fields)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from tests.harness.polling import eventually
from tests.support import STANDARD, model_classes, policy_yaml

if TYPE_CHECKING:
    from tests.harness.gpugate import Stack

GPU = "nvidia.com/gpu"
NODE_LABEL = "nvidia.com/gpu.product"
H100_VALUES = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"]

# The standard test policy (tests/support.py) governing every namespace, plus one for the hot-reload scenario.
BASE_POLICY = policy_yaml(
    "e2e-fleet",
    priority=10,
    mode="enforce",
    **STANDARD,
    nonGPUPods={"gpuTolerations": "deny"},
    # Refuse GPUs held only by init containers (the default is a warning; the shipped policies and
    # test_fleet.py show that one).
    initOnlyGPUs="deny",
)


def reload_policy(default_class: str) -> str:
    """A higher-priority policy for namespaces `reload-*` only; the reload test rewrites it."""
    return policy_yaml(
        "e2e-reload",
        priority=100,
        mode="enforce",
        match={"namespaces": ["reload-*"]},
        devices=STANDARD["devices"],
        models=model_classes(default=default_class),
        attribution=STANDARD["attribution"],
        nonGPUPods={"gpuTolerations": "deny"},
    )


IMAGE = "registry.k8s.io/pause:3.10"


def container(
    name: str = "main", *, gpus: str | None = None, requests: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A container; `gpus` sets the nvidia.com/gpu limit, `requests` the request."""
    c: dict[str, Any] = {"name": name, "image": IMAGE}
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources["limits"] = {GPU: gpus}
    if requests is not None:
        resources["requests"] = {GPU: requests}
    if resources:
        c["resources"] = resources
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return c


def pod(
    name: str,
    namespace: str,
    *containers: dict[str, Any],
    labels: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers) or [container()], **spec}
    if tolerations is not None:
        body["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})},
        "spec": body,
    }


def gpu_pod(name: str, namespace: str, gpus: str = "1", **kwargs: Any) -> dict[str, Any]:
    return pod(name, namespace, container("main", gpus=gpus), **kwargs)


def template_of(p: dict[str, Any]) -> dict[str, Any]:
    meta = copy.deepcopy(p["metadata"])
    meta.pop("name", None)
    meta.pop("namespace", None)
    return {"metadata": meta, "spec": copy.deepcopy(p["spec"])}


def deployment(name: str, namespace: str, template_pod: dict[str, Any]) -> dict[str, Any]:
    tpl = template_of(template_pod)
    tpl["metadata"].setdefault("labels", {})["app"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": tpl},
    }


def job(name: str, namespace: str, template_pod: dict[str, Any]) -> dict[str, Any]:
    tpl = template_of(template_pod)
    tpl["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": tpl},
    }


GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}

# Set by the apiserver on every write, or random per request (the ServiceAccount plugin's
# projected token volume is named kube-api-access-<random>): not what a comparison is about.
_VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without the fields that differ between a dry-run and a real create of the same input."""
    out = copy.deepcopy(obj)
    for key in _VOLATILE_METADATA:
        out.get("metadata", {}).pop(key, None)
    out.pop("status", None)
    spec = out.get("spec", {})
    renames: dict[str, str] = {}
    for vol in spec.get("volumes", []):
        if vol.get("name", "").startswith("kube-api-access-"):
            renames[vol["name"]] = "kube-api-access-*"
            vol["name"] = "kube-api-access-*"
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind, []):
            for mount in c.get("volumeMounts", []):
                mount["name"] = renames.get(mount["name"], mount["name"])
    return out


def model_selection(p: dict[str, Any]) -> list[str] | None:
    """The accepted values of nvidia.com/gpu.product the pod is steered to, from its nodeSelector
    or its required node affinity (every term must carry the same In list)."""
    spec = p["spec"]
    if NODE_LABEL in spec.get("nodeSelector", {}):
        return [spec["nodeSelector"][NODE_LABEL]]
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    found: list[list[str]] = []
    for term in terms:
        for expr in term.get("matchExpressions", []):
            if expr.get("key") == NODE_LABEL and expr.get("operator") == "In":
                found.append(sorted(expr.get("values", [])))
    if found and all(f == found[0] for f in found) and len(found) == len(terms):
        return found[0]
    return None


def gpugate_denial(stderr: str) -> str | None:
    """The message after `admission webhook "<one of gpugate's>" denied the request: `: a pod's creation, every other
    request, the workload CRDs."""
    for hook in (
        "mutate.gpugate.io",
        "validate.gpugate.io",
        "mutate-objects.gpugate.io",
        "validate-objects.gpugate.io",
        "mutate-workloads.gpugate.io",
        "validate-workloads.gpugate.io",
    ):
        marker = f'admission webhook "{hook}" denied the request: '
        if marker in stderr:
            return stderr.split(marker, 1)[1]
    return None


TEAM = "gpugate.io/team"


def refusal(stderr: str) -> str | None:
    """gpugate's denial, or the ValidatingAdmissionPolicy backstop's (which runs before the
    validating webhooks, so it may be the one that answers)."""
    message = gpugate_denial(stderr)
    if message is None and "ValidatingAdmissionPolicy" in stderr:
        return stderr
    return message


def wait_for_team_label(stack: Stack, namespace: str, team: str) -> str | None:
    """gpugate learns namespace labels from a watch: wait (bounded) until it attributes to `team`."""

    def probe() -> str | None:
        dry = stack.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("probe", namespace), check=False
        )
        if not dry.ok:  # the workers may disagree for a moment (one has seen the new labels): ask again
            return None
        got = dry.json()["metadata"].get("labels", {}).get(TEAM)
        return got if got == team else None

    return eventually(probe, timeout=15)
