"""Offline verdicts: objects through mutate and validate as the apiserver would send them, without a cluster."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from ..inventory.model import Inventory
from ..pods.objects import group_of, shapes_of, workload_kinds
from ..policy.model import PolicySet
from .claims import CLAIM_KINDS, GROUP
from .decision import Decision, Environment
from .engine import mutate, validate
from .patch import Operation


@dataclass
class Result:
    """One object's verdict: the decisions of both endpoints and the object as it would be stored."""

    obj: Mapping[str, Any]
    mutated: Mapping[str, Any]
    patch: list[Operation]
    mutation: Decision
    validation: Decision | None
    warnings: list[str] = field(default_factory=list)
    #: Not a kind gpugate reads: neither allowed nor denied, and left as it is.
    skipped: bool = False

    @property
    def allowed(self) -> bool:
        return self.mutation.allowed and (self.validation is None or self.validation.allowed)

    @property
    def decision(self) -> Decision:
        return self.mutation if not self.mutation.allowed or self.validation is None else self.validation

    def describe(self) -> str:
        meta = self.obj.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or "<unnamed>"
        return f'{self.obj.get("kind")} "{name}"'


def default_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the apiserver's defaulting does before admission that matters here: a Pod container's missing
    requests are copied from its limits (k/k pkg/apis/core/v1/defaults.go SetDefaults_Pod; not templates)."""
    pod = copy.deepcopy(dict(obj))
    if pod.get("kind") != "Pod" or group_of(str(pod.get("apiVersion"))) != "":
        return pod
    spec = pod.get("spec") or {}
    for fld in ("initContainers", "containers"):
        for container in spec.get(fld) or []:
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                resources["requests"] = {**limits, **(resources.get("requests") or {})}
    return pod


def _namespaced_claims(objects: list[Mapping[str, Any]], namespace: str) -> list[Mapping[str, Any]]:
    """The manifest's claims and claim templates, in the namespace they would be created in: a pod's claims
    are read from them, as the server reads them from the cluster."""
    return [
        {
            **o,
            "metadata": {
                **(o.get("metadata") or {}),
                "namespace": (o.get("metadata") or {}).get("namespace") or namespace,
            },
        }
        for o in objects
        if o.get("kind") in ("ResourceClaim", "ResourceClaimTemplate")
    ]


def request(obj: Mapping[str, Any], *, namespace: str = "", uid: str) -> dict[str, Any]:
    """A CREATE AdmissionRequest for ``obj`` as the apiserver builds it (a dry run); ``namespace`` for an
    object that names none."""
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    meta = obj.get("metadata") or {}
    return {
        "uid": uid,
        "operation": "CREATE",
        "namespace": meta.get("namespace") or namespace,
        "name": meta.get("name", ""),
        "kind": {"group": group, "version": version, "kind": obj.get("kind")},
        "object": obj,
        "oldObject": None,
        "dryRun": True,
    }


def judge(
    obj: Mapping[str, Any], env: Environment, *, namespace: str = "", uid: str
) -> tuple[Decision, Decision | None, Mapping[str, Any]]:
    """Both passes as the apiserver runs them: /mutate, its patch applied, then /validate on the result.
    Returns both decisions (no validation when /mutate refused) and the object as it would be stored."""
    mutation = mutate(request(obj, namespace=namespace, uid=uid), env)
    if not mutation.allowed:
        return mutation, None, obj
    mutated = jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj
    return mutation, validate(request(mutated, namespace=namespace, uid=uid), env), mutated


def _runtimes(objects: list[Mapping[str, Any]], namespace: str) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """The manifest's Kubeflow Trainer runtimes by (kind, namespace, name): a TrainJob beside its runtime is judged
    with the runtime's template (a ClusterTrainingRuntime is in no namespace)."""
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for o in objects:
        kind = o.get("kind")
        if group_of(str(o.get("apiVersion") or "")) != "trainer.kubeflow.org" or kind not in TRAINER_RUNTIMES:
            continue
        raw = o.get("metadata")
        meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        where = "" if kind == "ClusterTrainingRuntime" else str(meta.get("namespace") or namespace)
        found[(str(kind), where, str(meta.get("name") or ""))] = o
    return found


TRAINER_RUNTIMES = ("TrainingRuntime", "ClusterTrainingRuntime")


def check_objects(
    objects: Iterable[Mapping[str, Any]],
    *,
    policies: PolicySet,
    namespace_labels: Mapping[str, Mapping[str, str]],
    namespace: str = "default",
    fleet: Inventory | None = None,
) -> list[Result]:
    """``fleet``: the cluster's inventory (``--fleet``); None decides without one, as a server does before its
    inventory has synced. The manifest's own claims and claim templates are read either way."""
    objects = list(objects)
    own = _namespaced_claims(objects, namespace)
    known = fleet.with_claims(own) if fleet is not None else None
    manifest = Inventory().with_claims(own).claims
    runtimes = _runtimes(objects, namespace)
    env = Environment(
        policies=policies,
        namespace_labels=lambda ns: namespace_labels.get(ns, {}),
        fleet=lambda: known,
        claims=lambda kind, ns, name: manifest.get((kind, ns, name)),
        runtimes=lambda kind, ns, name: runtimes.get((kind, ns, name)),
    )
    kinds = workload_kinds(policies.workloads)
    results = []
    for index, raw in enumerate(objects):
        obj = default_pod(raw)
        if obj.get("kind") in CLAIM_KINDS and group_of(str(obj.get("apiVersion") or "")) == GROUP:
            # Judged on its own, as the server judges it when it is created (validate only: /mutate skips it).
            judged = validate(request(obj, namespace=namespace, uid=f"check-{index}"), env)
            results.append(Result(obj, obj, [], Decision(allowed=True), judged, list(judged.warnings)))
            continue
        if shapes_of(obj, workloads=kinds) is None:
            nothing = Decision(allowed=True)
            results.append(Result(obj, obj, [], nothing, None, skipped=True))
            continue
        known_kind = kinds.get((group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or "")))
        # A cluster-scoped object (a ClusterTrainingRuntime) is in no namespace, as the apiserver sends it.
        where = "" if known_kind is not None and known_kind.cluster_scoped else namespace
        mutation, validation, mutated = judge(obj, env, namespace=where, uid=f"check-{index}")
        if validation is None:
            results.append(Result(obj, obj, [], mutation, None, list(mutation.warnings)))
            continue
        patch = mutation.patch or []
        results.append(
            Result(obj, mutated, patch, mutation, validation, list(mutation.warnings) + list(validation.warnings))
        )
    return results
