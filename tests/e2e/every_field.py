"""The every-field upstream Pod (kubernetes/api testdata v1.36.0, fuzzer-filled), made acceptable
to a real apiserver with as little change as possible, and given a GPU limit."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.harness.controlplane import REPO

FIXTURE = REPO / "tests" / "fixtures" / "kubernetes-api" / "v1.36.0" / "core.v1.Pod.json"


# The Priority admission plugin resolves priorityClassName and refuses a different priority.
PRIORITY_CLASS: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "e2e-every-field"},
    "value": 25,
    "preemptionPolicy": "Never",
}


def load_fixture() -> dict[str, Any]:
    return json.loads(Path(FIXTURE).read_text())


def kebab(value: str) -> str:
    """The fuzzer's "serviceAccountNameValue" -> "service-account-name": a valid DNS label."""
    stem = value.removesuffix("Value")
    return "".join(f"-{ch.lower()}" if ch.isupper() else ch for ch in stem).strip("-")


def _kebab_all(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _kebab_all(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_kebab_all(v) for v in node]
    if isinstance(node, str) and node.endswith("Value"):
        return kebab(node)
    return node


# Projections behind feature gates that are off by default in v1.36: the apiserver drops them.
DROPPED_PROJECTIONS = ("clusterTrustBundle", "podCertificate")

# Top-level spec fields of the fixture that cannot be part of a pod created here (reasons below).
REMOVED_SPEC_FIELDS = frozenset(
    {"ephemeralContainers", "nodeName", "overhead", "hostPID", "hostnameOverride", "schedulingGroup"}
)

GPU_LIMIT = {"nvidia.com/gpu": "1"}
IMAGE = "registry.k8s.io/pause:3.10"


def every_field_pod(namespace: str) -> dict[str, Any]:
    """The fixture, with every placeholder string turned into a DNS label and each field the
    apiserver refuses either fixed (enums, paths, one-of unions split into several entries) or,
    where no valid value exists in this cluster, removed (REMOVED_SPEC_FIELDS and the comments
    where it happens)."""
    pod: dict[str, Any] = _kebab_all(load_fixture())
    pod.pop("status", None)
    meta = pod["metadata"]
    for key in (
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ):
        meta.pop(key, None)
    meta["name"] = "every-field"
    meta["namespace"] = namespace
    meta["generateName"] = "every-field-"
    meta["finalizers"] = ["example.com/every-field"]
    spec = pod["spec"]
    spec.pop("ephemeralContainers", None)  # only through the pods/ephemeralcontainers subresource
    spec.pop("nodeName", None)
    spec["serviceAccountName"] = spec["serviceAccount"] = "default"
    spec["priorityClassName"] = PRIORITY_CLASS["metadata"]["name"]
    spec["priority"] = PRIORITY_CLASS["value"]
    spec["preemptionPolicy"] = PRIORITY_CLASS["preemptionPolicy"]
    spec["runtimeClassName"] = "nvidia"
    # The RuntimeClass admission plugin refuses a pod overhead its RuntimeClass does not define.
    spec.pop("overhead", None)
    spec["volumes"] = fix_volumes(split_volumes(spec["volumes"]))
    spec["initContainers"] = [fix_container(spec["initContainers"][0], "sidecar", init=True)]
    spec["containers"] = [fix_container(spec["containers"][0], "main", init=False)]
    spec["restartPolicy"] = "Always"
    spec["dnsPolicy"] = "None"
    spec["dnsConfig"] = {
        "nameservers": ["10.0.0.10"],
        "searches": ["every.example"],
        "options": [{"name": "ndots", "value": "2"}],
    }
    spec.pop("hostPID")  # cannot be combined with shareProcessNamespace
    spec["hostname"], spec["subdomain"] = "every-field", "sub"
    spec.pop("hostnameOverride", None)  # forbidden with hostNetwork and setHostnameAsFQDN
    sc = spec["securityContext"]
    sc.pop("windowsOptions", None)  # spec.os.name is linux
    sc["sysctls"] = [{"name": "kernel.domainname", "value": "every"}]  # not host-namespaced
    sc["fsGroupChangePolicy"] = "OnRootMismatch"
    sc["seccompProfile"] = {"type": "Localhost", "localhostProfile": "profiles/every.json"}
    sc["appArmorProfile"] = {"type": "Localhost", "localhostProfile": "every-profile"}
    sc["supplementalGroupsPolicy"] = "Merge"
    sc["seLinuxChangePolicy"] = "Recursive"
    _fix_operators(spec["affinity"])
    for term_kind in ("podAffinity", "podAntiAffinity"):
        for fld in (
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ):
            for term in spec["affinity"][term_kind][fld]:
                term = term.get("podAffinityTerm", term)
                term["namespaces"] = ["other"]
    node = spec["affinity"]["nodeAffinity"]
    for term in [
        *node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        *(p["preference"] for p in node["preferredDuringSchedulingIgnoredDuringExecution"]),
    ]:
        for f in term["matchFields"]:
            f["key"] = "metadata.name"
    spec["tolerations"] = [{**spec["tolerations"][0], "operator": "Equal", "effect": "NoExecute"}]
    spec["hostAliases"] = [{"ip": "10.1.2.3", "hostnames": ["alias.every.example"]}]
    tsc = spec["topologySpreadConstraints"][0]
    tsc.update(whenUnsatisfiable="DoNotSchedule", nodeAffinityPolicy="Honor", nodeTaintsPolicy="Honor")
    _fix_operators(tsc)
    spec["os"] = {"name": "linux"}
    spec["schedulingGates"] = [{"name": "example.com/gate"}]
    claim = spec["resourceClaims"][0]
    claim.pop("resourceClaimTemplateName")  # one of resourceClaimName / resourceClaimTemplateName
    spec.pop("schedulingGroup")  # alpha (feature gate off): the apiserver drops it on create
    spec["resources"] = {"limits": {"cpu": "2", "memory": "256Mi"}, "requests": {"cpu": "1", "memory": "128Mi"}}
    return pod


def _fix_operators(node: Any) -> None:
    """Selector operators: "In" is valid in every selector the fixture uses."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "operator" and isinstance(v, str):
                node[k] = "In"
            else:
                _fix_operators(v)
    elif isinstance(node, list):
        for v in node:
            _fix_operators(v)


def fix_container(c: dict[str, Any], name: str, *, init: bool) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["name"] = name
    c["image"] = IMAGE
    port = 3 if not init else 4  # a port and its name are unique across the pod's containers
    c["ports"][0].update(name=f"{name}-port", protocol="TCP", containerPort=port, hostPort=port, hostIP="127.0.0.1")
    env = c["env"][0]
    sources = env.pop("valueFrom")
    sources["fieldRef"] = {"apiVersion": "v1", "fieldPath": "metadata.name"}
    sources["resourceFieldRef"].update(containerName=name, resource="limits.cpu", divisor="1")
    sources["fileKeyRef"]["volumeName"] = "v-emptydir"
    c["env"] = [env] + [{"name": f"FROM_{src.upper()}", "valueFrom": {src: body}} for src, body in sources.items()]
    both = c["envFrom"][0]
    c["envFrom"] = [
        {"prefix": both["prefix"], "configMapRef": both["configMapRef"]},
        {"prefix": both["prefix"], "secretRef": both["secretRef"]},
    ]
    mount = c["volumeMounts"][0]
    mount.update(
        name="v-emptydir",
        mountPath="/mnt/every",
        mountPropagation="None",
        recursiveReadOnly="IfPossible",
        readOnly=True,
    )
    expr = mount.pop("subPathExpr")
    c["volumeMounts"] = [mount, {"name": "v-hostpath", "mountPath": "/mnt/expr", "subPathExpr": expr}]
    c["volumeDevices"] = [{"name": "v-persistentvolumeclaim", "devicePath": "/dev/every"}]
    limits = {"cpu": "500m", "memory": "64Mi"} if not init else {"cpu": "100m", "memory": "32Mi"}
    c["resources"]["limits"] = {**limits, **({} if init else GPU_LIMIT)}
    c["resources"]["requests"] = dict(limits)
    c["resources"]["claims"] = [{"name": "name", "request": "request"}]
    c["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    c["restartPolicy"] = "Always" if init else "Never"
    c["restartPolicyRules"][0]["action"] = "Restart"
    c["restartPolicyRules"][0]["exitCodes"]["operator"] = "In"
    probes = {"livenessProbe": "exec", "readinessProbe": "httpGet", "startupProbe": "grpc"}
    for probe, handler in probes.items():
        p = c[probe]
        for h in ("exec", "httpGet", "tcpSocket", "grpc"):
            if h != handler:
                p.pop(h)
    for p in (c["livenessProbe"], c["startupProbe"]):
        p["successThreshold"] = 1
    c["readinessProbe"].pop("terminationGracePeriodSeconds")
    c["readinessProbe"]["httpGet"].update(path="/healthz", port=8080, scheme="HTTP")
    c["lifecycle"]["postStart"] = {"exec": c["lifecycle"]["postStart"]["exec"]}
    c["lifecycle"]["preStop"] = {"sleep": c["lifecycle"]["preStop"]["sleep"]}
    c["lifecycle"].pop("stopSignal")  # feature gate ContainerStopSignals (alpha): dropped on create
    c["terminationMessagePath"] = "/tmp/termination-log"
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    c["imagePullPolicy"] = "IfNotPresent"
    sc = c["securityContext"]
    sc.pop("windowsOptions")  # spec.os.name is linux
    sc["capabilities"] = {"add": ["NET_ADMIN"], "drop": ["ALL"]}
    sc["procMount"] = "Default"
    # A privileged container of a GPU pod sees every GPU of its node: gpugate refuses it (rules/privileged.py).
    # The field stays, set as an ordinary pod sets it.
    sc["privileged"] = False
    sc["seccompProfile"] = {"type": "Localhost", "localhostProfile": "profiles/every.json"}
    sc["appArmorProfile"] = {"type": "Localhost", "localhostProfile": "every-profile"}
    return c


def fix_volumes(volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {next(k for k in v if k != "name"): v for v in volumes}
    by["hostPath"]["hostPath"].update(path="/var/every", type="DirectoryOrCreate")
    by["emptyDir"]["emptyDir"].update(medium="Memory", sizeLimit="1Mi")
    by["nfs"]["nfs"]["path"] = "/exports"
    by["iscsi"]["iscsi"].update(
        iqn="iqn.2001-04.com.example:storage", initiatorName="iqn.2001-04.com.example:initiator"
    )
    by["flocker"]["flocker"].pop("datasetUUID")
    by["downwardAPI"]["downwardAPI"]["items"] = fix_downward_items(by["downwardAPI"]["downwardAPI"]["items"])
    by["fc"]["fc"].pop("wwids")
    by["quobyte"]["quobyte"]["registry"] = "registry.every.example:7861"
    by["azureDisk"]["azureDisk"].update(
        cachingMode="ReadOnly",
        kind="Managed",
        diskURI="/subscriptions/s/resourcegroups/g/providers/microsoft.compute/disks/every",
    )
    by["image"]["image"].update(reference=IMAGE, pullPolicy="IfNotPresent")
    projected = by["projected"]["projected"]
    sources = []
    for i, (kind, body) in enumerate(projected["sources"][0].items()):
        if kind in DROPPED_PROJECTIONS:
            continue
        if kind == "downwardAPI":
            body["items"] = fix_downward_items(body["items"], prefix=f"p{i}-")
        elif kind == "serviceAccountToken":
            body.update(expirationSeconds=3600, path=f"p{i}-token")
        elif "items" in body:
            for item in body["items"]:
                item["path"] = f"p{i}-{item['path']}"
        elif "path" in body:
            body["path"] = f"p{i}-{body['path']}"
        sources.append({kind: body})
    projected["sources"] = sources
    tpl = by["ephemeral"]["ephemeral"]["volumeClaimTemplate"]
    tpl["metadata"] = {k: tpl["metadata"][k] for k in ("labels", "annotations")}
    pvc = tpl["spec"]
    _fix_operators(pvc["selector"])
    pvc.update(accessModes=["ReadWriteOnce"], volumeMode="Filesystem")
    pvc["resources"] = {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}}
    pvc["dataSource"]["apiGroup"] = "snapshot.storage.k8s.io"
    pvc["dataSourceRef"] = dict(pvc["dataSource"])
    return volumes


def fix_downward_items(items: list[dict[str, Any]], prefix: str = "") -> list[dict[str, Any]]:
    item = items[0]
    resource = item.pop("resourceFieldRef")
    item["fieldRef"] = {"apiVersion": "v1", "fieldPath": "metadata.name"}
    item["path"] = f"{prefix}name"
    resource.update(containerName="main", resource="limits.cpu", divisor="1")
    return [item, {"path": f"{prefix}cpu", "resourceFieldRef": resource}]


def split_volumes(volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixture's one volume sets every source at once; a volume has exactly one source."""
    out = []
    for vol in volumes:
        for source, body in vol.items():
            if source != "name":
                out.append({"name": f"v-{source.lower()}", source: body})
    return out
