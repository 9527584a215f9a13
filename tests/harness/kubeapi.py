"""A small Kubernetes REST client for tests and benches: the admin client certificate of a ControlPlane, one
kept-alive HTTPS connection per thread, JSON in and out. Faster than forking kubectl when a test creates
hundreds of objects and polls their state; kubectl stays the tool for what a user would type."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# kind -> (API path prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Event": ("/api/v1", "events", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "CronJob": ("/apis/batch/v1", "cronjobs", True),
    "RuntimeClass": ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "NodePool": ("/apis/karpenter.sh/v1", "nodepools", False),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
    "RayCluster": ("/apis/ray.io/v1", "rayclusters", True),
    "RayService": ("/apis/ray.io/v1", "rayservices", True),
    "RayJob": ("/apis/ray.io/v1", "rayjobs", True),
    "PyTorchJob": ("/apis/kubeflow.org/v1", "pytorchjobs", True),
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    "LeaderWorkerSet": ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    # The newer workload CRDs (tests/fixtures/crds/README.md: group, storage version, plural, scope).
    "TFJob": ("/apis/kubeflow.org/v1", "tfjobs", True),
    "MPIJob": ("/apis/kubeflow.org/v2beta1", "mpijobs", True),
    "TrainJob": ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", True),
    "TrainingRuntime": ("/apis/trainer.kubeflow.org/v1alpha1", "trainingruntimes", True),
    "ClusterTrainingRuntime": ("/apis/trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", False),
    "PodSet": ("/apis/orchestration.aibrix.ai/v1alpha1", "podsets", True),
    "RoleSet": ("/apis/orchestration.aibrix.ai/v1alpha1", "rolesets", True),
    "StormService": ("/apis/orchestration.aibrix.ai/v1alpha1", "stormservices", True),
    "RayClusterFleet": ("/apis/orchestration.aibrix.ai/v1alpha1", "rayclusterfleets", True),
    "RayClusterReplicaSet": ("/apis/orchestration.aibrix.ai/v1alpha1", "rayclusterreplicasets", True),
    "LLMInferenceService": ("/apis/serving.kserve.io/v1alpha2", "llminferenceservices", True),
    "DynamoGraphDeployment": ("/apis/nvidia.com/v1alpha1", "dynamographdeployments", True),
}
# Volcano's Job is also `kind: Job`: told apart by its group.
GROUP_RESOURCES: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("batch.volcano.sh/v1alpha1", "Job"): ("/apis/batch.volcano.sh/v1alpha1", "jobs", True),
    ("ray.io/v1alpha1", "RayCluster"): ("/apis/ray.io/v1alpha1", "rayclusters", True),
    ("serving.kserve.io/v1alpha1", "LLMInferenceService"): (
        "/apis/serving.kserve.io/v1alpha1",
        "llminferenceservices",
        True,
    ),
}


@dataclass
class ApiError(Exception):
    status: int
    reason: str
    message: str
    body: dict[str, Any]

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.reason}: {self.message}"


class KubeAPI:
    """REST calls against `server` (https://127.0.0.1:<port>) with a client certificate."""

    def __init__(self, server: str, *, ca: Path, cert: Path, key: Path, timeout: float = 120.0) -> None:
        parsed = urllib.parse.urlsplit(server)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 443
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(str(cert), str(key))
        self._local = threading.local()

    @classmethod
    def for_control_plane(cls, cp: Any) -> KubeAPI:
        return cls(cp.server, ca=cp.ca.cert_path, cert=cp.admin.cert, key=cp.admin.key)

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's objects go)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        decoded: Any = json.loads(data) if data else {}
        if resp.status >= 400:
            status = decoded if isinstance(decoded, dict) else {}
            raise ApiError(
                resp.status, str(status.get("reason", resp.reason)), str(status.get("message", data[:500])), status
            )
        return decoded

    # -- paths -----------------------------------------------------------------------------------

    @staticmethod
    def namespaced(kind: str, api_version: str | None = None) -> bool:
        return (GROUP_RESOURCES.get((api_version or "", kind)) or RESOURCES[kind])[2]

    @staticmethod
    def collection(kind: str, namespace: str | None = None, api_version: str | None = None) -> str:
        prefix, plural, namespaced = GROUP_RESOURCES.get((api_version or "", kind)) or RESOURCES[kind]
        if namespaced and namespace:
            return f"{prefix}/namespaces/{namespace}/{plural}"
        return f"{prefix}/{plural}"

    def path_of(self, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata", {})
        return self.collection(obj["kind"], meta.get("namespace"), obj.get("apiVersion"))

    # -- verbs -----------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> Any:
        return self.request("POST", self.path_of(obj), obj)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.request("GET", f"{self.collection(kind, namespace)}/{name}")

    def list(self, kind: str, namespace: str | None = None, *, page: int = 2000, **params: str) -> list[dict[str, Any]]:
        """Every object of `kind`, fetched `page` at a time (one huge response can outlast the timeout)."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = {**params, "limit": str(page), **({"continue": token} if token else {})}
            body = self.request("GET", f"{self.collection(kind, namespace)}?{urllib.parse.urlencode(query)}")
            items += body.get("items", [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def delete(self, kind: str, name: str, namespace: str | None = None, *, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", f"{self.collection(kind, namespace)}/{name}")
        except ApiError as e:
            if not (missing_ok and e.status == 404):
                raise

    def patch_status(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None) -> Any:
        return self.request(
            "PATCH",
            f"{self.collection(kind, namespace)}/{name}/status",
            patch,
            content_type="application/merge-patch+json",
        )

    def raw(self, path: str) -> str:
        """GET a non-JSON endpoint (/metrics)."""
        conn = self._connection()
        conn.request("GET", path, headers={"Accept": "text/plain"})
        resp = conn.getresponse()
        data = resp.read().decode()
        if resp.status >= 400:
            raise ApiError(resp.status, resp.reason, data[:500], {})
        return data
