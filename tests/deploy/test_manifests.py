"""deploy/: rendered by a real kustomize, every object schema-valid, the invariants held, the CEL right.

kustomize: the pinned build from scripts/install-tools (`$GPUGATE_TOOLS_CACHE/kustomize-<v>/kustomize`),
else the kubectl the e2e suite builds, else `kubectl kustomize` from PATH; `GPUGATE_KUSTOMIZE`
overrides. CEL: Google's cel-cpp runtime (cel-expr-python), type-checked with `object`,
`oldObject`, `request` and `variables` as dyn, as the apiserver declares them for admission.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cel_expr_python import cel
from cryptography import x509

from tests.harness.gpugate import control_plane_patch
from webhook import certs

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE_VERSION = "v5.7.1"  # as in scripts/install-tools
TOOLS = Path(os.environ.get("GPUGATE_TOOLS_CACHE", Path.home() / ".cache" / "gpugate-tools"))
HADOLINT = TOOLS / "hadolint-2.15.1" / "bin" / "hadolint"

EXCLUDED = ["kube-system", "gpugate"]
NAMESPACE_SELECTOR = {
    "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED}]
}
WORKLOAD_RULES = [
    {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
        "scope": "Namespaced",
    },
    {
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["jobs", "cronjobs"],
        "scope": "Namespaced",
    },
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["podtemplates"],
        "scope": "Namespaced",
    },
]
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


def kustomize_command() -> list[str]:
    if override := os.environ.get("GPUGATE_KUSTOMIZE"):
        return [override, "build"]
    pinned = TOOLS / f"kustomize-{KUSTOMIZE_VERSION}" / "kustomize"
    if pinned.is_file():
        return [str(pinned), "build"]
    build = REPO / "tests" / "e2e" / "build.sh"
    if build.is_file():
        printed = subprocess.run([str(build), "--print"], capture_output=True, text=True, check=False)
        lines = printed.stdout.strip().splitlines()
        if printed.returncode == 0 and lines and (Path(lines[-1]) / "kubectl").is_file():
            return [str(Path(lines[-1]) / "kubectl"), "kustomize"]
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize"]
    pytest.fail("no kustomize: run scripts/install-tools (or set GPUGATE_KUSTOMIZE)")


def render(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([*kustomize_command(), str(directory)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"kustomize build {directory} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [hook for o in objects if o["kind"].endswith("WebhookConfiguration") for hook in o["webhooks"]]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def cert_manager() -> list[dict[str, Any]]:
    return render(DEPLOY / "overlays" / "cert-manager")


@pytest.fixture(scope="module")
def static(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """The static overlay after the documented `gpugate certs --out deploy/overlays/static/certs`."""
    copy = tmp_path_factory.mktemp("static") / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("*.crt", "*.key", "*.b64"))
    out = copy / "overlays" / "static" / "certs"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.certs",
            "--service",
            "gpugate",
            "--namespace",
            "gpugate",
            "--out",
            str(out),
            "--force",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert made.returncode == 0, made.stderr
    return render(copy / "overlays" / "static"), out


@pytest.fixture(scope="module")
def renders(
    base: list[dict[str, Any]], cert_manager: list[dict[str, Any]], static: tuple[list[dict[str, Any]], Path]
) -> dict[str, list[dict[str, Any]]]:
    return {"base": base, "cert-manager": cert_manager, "static": static[0]}


# ---- every object valid ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["base", "cert-manager", "static"])
def test_every_object_is_valid_kubernetes(renders: dict[str, list[dict[str, Any]]], variant: str) -> None:
    version = kubernetes_validate.latest_version()
    checked = 0
    for obj in renders[variant]:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            assert obj["kind"] in CERT_MANAGER_KINDS  # no schema in kubernetes-validate; see below
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 12


def test_base_holds_exactly_these_objects(base: list[dict[str, Any]]) -> None:
    kinds = sorted(
        (o["kind"], o["metadata"]["name"].rsplit("-", 1)[0] if o["kind"] == "ConfigMap" else o["metadata"]["name"])
        for o in base
    )
    assert kinds == sorted(
        [
            ("Namespace", "gpugate"),
            ("ServiceAccount", "gpugate"),
            ("ClusterRole", "gpugate-namespace-reader"),
            ("ClusterRoleBinding", "gpugate-namespace-reader"),
            ("ClusterRole", "gpugate-inventory-reader"),
            ("ClusterRoleBinding", "gpugate-inventory-reader"),
            ("ConfigMap", "gpugate-policies"),
            ("Service", "gpugate"),
            ("Deployment", "gpugate"),
            ("PodDisruptionBudget", "gpugate"),
            ("NetworkPolicy", "gpugate"),
            ("MutatingWebhookConfiguration", "gpugate"),
            ("ValidatingWebhookConfiguration", "gpugate"),
            ("ValidatingAdmissionPolicy", "gpugate-backstop"),
            ("ValidatingAdmissionPolicyBinding", "gpugate-backstop"),
            ("ValidatingAdmissionPolicy", "gpugate-runtime-handlers"),
            ("ValidatingAdmissionPolicyBinding", "gpugate-runtime-handlers"),
        ]
    )
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in base:
        expected = None if obj["kind"] in cluster_scoped else "gpugate"
        assert obj["metadata"].get("namespace") == expected, obj["kind"]


def test_the_inventory_role_reads_exactly_its_kinds(base: list[dict[str, Any]]) -> None:
    role = find(base, "ClusterRole", "gpugate-inventory-reader")
    granted = {
        (g, r): tuple(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    watch = ("get", "list", "watch")
    assert granted == {
        ("", "nodes"): watch,
        # a ResourceClaim's CREATE: the pods labelled gpugate.io/claims-pending for it, or its owner pod
        ("", "pods"): ("get", "list"),
        ("node.k8s.io", "runtimeclasses"): watch,
        ("resource.k8s.io", "deviceclasses"): watch,
        ("resource.k8s.io", "resourceslices"): watch,
        ("resource.k8s.io", "resourceclaims"): watch,  # the watch-fed claims cache (webhook/kube/claims.py)
        ("resource.k8s.io", "resourceclaimtemplates"): watch,
        ("karpenter.sh", "nodepools"): watch,
    }
    binding = find(base, "ClusterRoleBinding", "gpugate-inventory-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpugate", "namespace": "gpugate"}]


def test_base_carries_no_certificate_material(base: list[dict[str, Any]]) -> None:
    assert not [o for o in base if o["kind"] == "Secret"]
    assert all("caBundle" not in hook["clientConfig"] for hook in webhooks(base))


# ---- webhooks ----------------------------------------------------------------------------------


POD_CREATE = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}
]


def test_mutating_webhook(base: list[dict[str, Any]]) -> None:
    """Two webhooks, one split in two: a pod's creation (which the native tier's objectSelector can skip: an
    objectSelector also matches an UPDATE's old object), and every other request."""
    config = find(base, "MutatingWebhookConfiguration", "gpugate")
    pods, other = config["webhooks"]
    assert [pods["name"], other["name"]] == ["mutate.gpugate.io", "mutate-objects.gpugate.io"]
    assert pods["clientConfig"]["service"] == {
        "name": "gpugate",
        "namespace": "gpugate",
        "path": "/mutate",
        "port": 443,
    }
    assert pods["failurePolicy"] == "Ignore"
    assert pods["reinvocationPolicy"] == "IfNeeded"
    assert pods["rules"] == POD_CREATE
    assert other["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods/ephemeralcontainers"],
            "scope": "Namespaced",
        },
        *WORKLOAD_RULES,
    ]
    assert {k: v for k, v in other.items() if k not in ("name", "rules")} == {
        k: v for k, v in pods.items() if k not in ("name", "rules")
    }


def test_validating_webhook(base: list[dict[str, Any]]) -> None:
    config = find(base, "ValidatingWebhookConfiguration", "gpugate")
    pods, other = config["webhooks"]
    assert [pods["name"], other["name"]] == ["validate.gpugate.io", "validate-objects.gpugate.io"]
    assert pods["clientConfig"]["service"] == {
        "name": "gpugate",
        "namespace": "gpugate",
        "path": "/validate",
        "port": 443,
    }
    assert pods["failurePolicy"] == "Fail"
    assert pods["rules"] == POD_CREATE
    assert other["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods", "pods/ephemeralcontainers", "pods/status"],
            "scope": "Namespaced",
        },
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods/binding", "bindings"],
            "scope": "Namespaced",
        },
        *WORKLOAD_RULES,
        # claims are judged on their own (webhook/admission/claims.py), so their order of creation does not matter
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "scope": "Namespaced",
        },
    ]
    assert {k: v for k, v in other.items() if k not in ("name", "rules")} == {
        k: v for k, v in pods.items() if k not in ("name", "rules")
    }


def test_both_webhooks_share_the_safety_settings(base: list[dict[str, Any]]) -> None:
    hooks = webhooks(base)
    assert len(hooks) == 4
    for hook in hooks:
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] == 5
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["namespaceSelector"] == NAMESPACE_SELECTOR
        assert hook["matchConditions"], f"{hook['name']} has no matchConditions"
        assert "objectSelector" not in hook
    assert all(hook["matchConditions"] == hooks[0]["matchConditions"] for hook in hooks)


# ---- workload, RBAC, service -------------------------------------------------------------------


def test_rbac_is_read_only_on_namespaces(base: list[dict[str, Any]]) -> None:
    rbac = [o for o in base if o["apiVersion"].startswith("rbac.authorization.k8s.io/")]
    assert sorted(o["kind"] for o in rbac) == ["ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding"]
    assert all(
        set(v for rule in o["rules"] for v in rule["verbs"]) <= {"get", "list", "watch"}
        for o in rbac
        if o["kind"] == "ClusterRole"
    )
    role = find(base, "ClusterRole", "gpugate-namespace-reader")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]
    binding = find(base, "ClusterRoleBinding", "gpugate-namespace-reader")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpugate", "namespace": "gpugate"}]
    assert find(base, "ServiceAccount", "gpugate")["automountServiceAccountToken"] is False


def test_deployment_is_redundant_and_locked_down(base: list[dict[str, Any]]) -> None:
    deployment = find(base, "Deployment", "gpugate")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["serviceAccountName"] == "gpugate"
    assert pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]

    [container] = pod["containers"]
    assert container["args"] == [
        "serve",
        "--policies",
        "/etc/gpugate/policies",
        "--cert",
        "/etc/gpugate/tls/tls.crt",
        "--key",
        "/etc/gpugate/tls/tls.key",
        "--bind",
        "0.0.0.0:8443",
    ]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tmp"]["mountPath"] == "/tmp" and "emptyDir" in volumes["tmp"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    assert volumes["tls"]["secret"]["secretName"] == "gpugate-tls"
    assert mounts["tls"]["mountPath"] == "/etc/gpugate/tls" and mounts["tls"]["readOnly"]
    assert mounts["policies"]["mountPath"] == "/etc/gpugate/policies"
    assert volumes["policies"]["configMap"]["name"] == find(base, "ConfigMap")["metadata"]["name"]


def test_service_and_pdb_select_the_pods(base: list[dict[str, Any]]) -> None:
    labels = find(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = find(base, "Service", "gpugate")
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= labels.items()
    pdb = find(base, "PodDisruptionBudget", "gpugate")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_network_policy_lets_in_the_control_plane_and_the_scraper_only(base: list[dict[str, Any]]) -> None:
    pod = find(base, "Deployment")["spec"]["template"]
    policy = find(base, "NetworkPolicy", "gpugate")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
    assert ports == ["https"]  # the webhooks and /metrics: one port, both rules name it
    control_plane, scraper = policy["ingress"]
    # No default that admits every address: a placeholder the apiserver refuses until an overlay replaces it.
    assert control_plane["from"] == [{"ipBlock": {"cidr": PLACEHOLDER}}]
    assert scraper["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert control_plane["ports"] == scraper["ports"] == [{"port": "https", "protocol": "TCP"}]


# The base's control-plane address, which is no CIDR: kube-apiserver refuses it (the NetworkPolicy's
# validation, k8s.io/kubernetes pkg/apis/networking/validation ValidateIPBlock) until an overlay sets the real one.
PLACEHOLDER = "REQUIRED-the-control-plane-CIDR-see-deploy-kustomization.yaml"


def test_no_shipped_network_policy_admits_every_address() -> None:
    """Neither the base nor an overlay nor the chart's values ship 0.0.0.0/0 or ::/0 (on Calico an ipBlock matches
    pod addresses too, projectcalico/calico#6634: every pod of the cluster could reach the port)."""
    shipped = [*DEPLOY.rglob("*.yaml"), *(REPO / "charts" / "gpugate").rglob("*.yaml")]
    for path in shipped:
        text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert "0.0.0.0/0" not in text and "::/0" not in text, path


def test_the_documented_control_plane_patch_sets_the_addresses(tmp_path: Path) -> None:
    """The patch deploy/kustomization.yaml documents, in an overlay as a user writes it, replaces the placeholder
    with the control plane's addresses, IPv4 and IPv6, in a valid NetworkPolicy; the rest stays."""
    patch = control_plane_patch("10.0.0.0/28")
    patch["patch"] = patch["patch"].replace(
        "- ipBlock: {cidr: 10.0.0.0/28}", "- ipBlock: {cidr: 10.0.0.0/28}\n    - ipBlock: {cidr: fd00::/120}"
    )
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {"resources": [os.path.relpath(DEPLOY, overlay)], "patches": [patch]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    policy = find(render(overlay), "NetworkPolicy", "gpugate")
    kubernetes_validate.validate(policy, kubernetes_validate.latest_version(), strict=True)
    control_plane, scraper = policy["spec"]["ingress"]
    assert control_plane["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00::/120"}}]
    assert control_plane["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert scraper == find(render(DEPLOY), "NetworkPolicy", "gpugate")["spec"]["ingress"][1]


def test_policies_configmap_ships_the_repository_policies(base: list[dict[str, Any]]) -> None:
    shipped = {p.name: p.read_text() for p in sorted((REPO / "policies").glob("*.yaml"))}
    copied = {p.name: p.read_text() for p in sorted((DEPLOY / "base" / "policies").glob("*.yaml"))}
    fix = (
        "run: rm deploy/base/policies/*.yaml && cp policies/*.yaml deploy/base/policies/ "
        "and list them under configMapGenerator in deploy/base/kustomization.yaml"
    )
    assert copied == shipped, f"deploy/base/policies/ is out of step with policies/; {fix}"
    assert find(base, "ConfigMap")["data"] == shipped, fix


def test_backstop_policy(base: list[dict[str, Any]]) -> None:
    policy = find(base, "ValidatingAdmissionPolicy", "gpugate-backstop")
    binding = find(base, "ValidatingAdmissionPolicyBinding", "gpugate-backstop")
    assert binding["spec"]["policyName"] == "gpugate-backstop"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == NAMESPACE_SELECTOR
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/status"]},
    ]
    # GPU-taint tolerations, then GPU runtime classes, on pods without GPUs, then CDI device annotations on any
    # pod, then gpugate.io metadata on pods/status, then the native tier's formed-by label on pods without GPUs. Whether a GPU pod needs a runtime class is gpugate's to judge
    # (DRA, CDI), never the backstop's.
    tolerations, runtime_class, cdi, status, formed_by = policy["spec"]["validations"]
    assert status["expression"] == "variables.gpugateMetadataKept"
    assert "'gpugate.io/formed-by' in object.metadata.labels" in formed_by["expression"]
    assert formed_by["expression"].startswith("variables.holdsGPU ||")
    assert "toleratesGPUTaint" in tolerations["expression"]
    assert "variables.gpuRuntimeClasses" in runtime_class["expression"]
    assert "variables.newCDIAnnotations" in cdi["expression"]


def test_exclusion_component_extends_every_namespace_list(tmp_path: Path) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    overlay = copy / "overlays" / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../../base]\ncomponents: [../../components/exclude-gpu-operator]\n"
    )
    objects = render(overlay)
    wanted = [*EXCLUDED, "gpu-operator"]
    for hook in webhooks(objects):
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == wanted
    for binding in (o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == wanted


# ---- overlays ----------------------------------------------------------------------------------


def test_cert_manager_overlay_injects_the_ca(cert_manager: list[dict[str, Any]]) -> None:
    assert not [o for o in cert_manager if o["kind"] == "Secret"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(cert_manager, kind, "gpugate")
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpugate/gpugate-tls"
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    serving = find(cert_manager, "Certificate", "gpugate-tls")
    assert serving["metadata"]["namespace"] == "gpugate"
    assert serving["spec"]["secretName"] == "gpugate-tls"
    assert serving["spec"]["dnsNames"] == certs.service_hosts("gpugate", namespace="gpugate")
    assert serving["spec"]["privateKey"] == {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}
    ca_issuer = find(cert_manager, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca = find(cert_manager, "Certificate", "gpugate-ca")
    assert ca["spec"]["isCA"] is True and ca_issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert "selfSigned" in find(cert_manager, "Issuer", ca["spec"]["issuerRef"]["name"])["spec"]


def test_static_overlay_fills_secret_and_ca_bundle(static: tuple[list[dict[str, Any]], Path]) -> None:
    objects, out = static
    secret = find(objects, "Secret", "gpugate-tls")
    assert secret["metadata"]["namespace"] == "gpugate"
    assert secret["type"] == "kubernetes.io/tls"
    for key in ("tls.crt", "tls.key", "ca.crt"):
        assert base64.b64decode(secret["data"][key]) == (out / key).read_bytes()
    ca_pem = (out / "ca.crt").read_bytes()
    hooks = webhooks(objects)
    assert len(hooks) == 4
    for hook in hooks:
        # kustomize folds long base64 onto several lines; base64 decoders skip the newlines.
        assert base64.b64decode("".join(hook["clientConfig"]["caBundle"].split())) == ca_pem
    deployment = find(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "gpugate-tls"  # no hash suffix: updated in place
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpugate.gpugate.svc" in names.get_values_for_type(x509.DNSName)


def test_static_overlay_certs_are_ignored_by_git() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "deploy/overlays/static/certs/tls.key"], cwd=REPO, check=False
    )
    assert ignored.returncode == 0


# ---- CEL ---------------------------------------------------------------------------------------

ENV = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request", "variables", "params")})


def compile_cel(expression: str) -> Any:
    return ENV.compile(expression)  # raises RuntimeError with the position of a syntax or type error


def evaluate(program: Any, **data: Any) -> Any:
    activation = {"object": None, "oldObject": None, "request": {"operation": "CREATE"}, "variables": {}}
    activation.update(data)
    value = program.eval(data=activation)
    assert value.type() != cel.Type.ERROR, value.value()
    return value.plain_value()


def container(
    name: str = "app",
    *,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    env: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    if resources:
        out["resources"] = resources
    if env:
        out["env"] = env
    return out


def pod_spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"containers": list(containers) or [container()], **extra}


def pod(spec: dict[str, Any], *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def workload(kind: str, spec: dict[str, Any], *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    if annotations:
        template["metadata"]["annotations"] = annotations
    if kind == "CronJob":
        body: dict[str, Any] = {"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}
    elif kind == "PodTemplate":
        body = {"template": template}
    else:
        body = {"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w", "namespace": "ml"}, **body}


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AMD_TOLERATION = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
INTEL_TOLERATION = {"key": "gpu.intel.com/i915", "operator": "Exists", "effect": "NoSchedule"}
GPU = pod_spec(container(limits={"nvidia.com/gpu": "1"}))
CPU = pod_spec(container(limits={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "1"}))
# DRA (resource.k8s.io): the GPU comes from a claim the container names; no GPU resource anywhere.
CLAIM = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]}
DRA = pod_spec({**container(), "resources": {"claims": [{"name": "gpu"}]}}, **CLAIM)
# KAI Scheduler GPU sharing: a fraction of a GPU by annotation, no GPU resource.
KAI_FRACTION = {"gpu-fraction": "0.5"}
KAI = {"schedulerName": "kai-scheduler"}  # the annotations hold a GPU only for the scheduler implementing them
INTEL_GAS = pod_spec(
    container(limits={"gpu.intel.com/i915": "1", "gpu.intel.com/millicores": "100", "gpu.intel.com/memory.max": "1G"})
)

MATCH_CASES: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None, bool]] = [
    ("GPU pod", pod(GPU), None, True),
    ("CPU pod", pod(CPU), None, False),
    ("pod without resources", pod(pod_spec()), None, False),
    ("CPU pod tolerating the GPU taint", pod(pod_spec(tolerations=[GPU_TOLERATION])), None, True),
    ("CPU pod tolerating every taint", pod(pod_spec(tolerations=[{"operator": "Exists"}])), None, True),
    (
        "CPU pod tolerating an unrelated taint",
        pod(pod_spec(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}])),
        None,
        False,
    ),
    (
        "CPU pod tolerating the AMD taint",
        pod(pod_spec(tolerations=[{"key": "amd.com/gpu", "operator": "Exists"}])),
        None,
        True,
    ),
    (
        "NVIDIA_VISIBLE_DEVICES",
        pod(pod_spec(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))),
        None,
        True,
    ),
    ("other env", pod(pod_spec(container(env=[{"name": "CUDA_HOME", "value": "/usr"}]))), None, False),
    ("NVIDIA_GDS", pod(pod_spec(container(env=[{"name": "NVIDIA_GDS", "value": "enabled"}]))), None, True),
    (
        "NVIDIA_IMEX_CHANNELS",
        pod(pod_spec(container(env=[{"name": "NVIDIA_IMEX_CHANNELS", "value": "0"}]))),
        None,
        True,
    ),
    (
        "envFrom with an NVIDIA_ prefix",
        pod(pod_spec({**container(), "envFrom": [{"prefix": "NVIDIA_", "configMapRef": {"name": "c"}}]})),
        None,
        True,
    ),
    (
        "envFrom with a prefix that begins NVIDIA_",
        pod(pod_spec({**container(), "envFrom": [{"prefix": "NV", "configMapRef": {"name": "c"}}]})),
        None,
        True,
    ),
    (
        "envFrom with another prefix",
        pod(pod_spec({**container(), "envFrom": [{"prefix": "APP_", "configMapRef": {"name": "c"}}]})),
        None,
        False,
    ),
    (
        "envFrom without a prefix",
        pod(pod_spec({**container(), "envFrom": [{"configMapRef": {"name": "c"}}]})),
        None,
        False,
    ),
    ("CPU pod under the NVIDIA runtime class", pod(pod_spec(runtimeClassName="nvidia")), None, True),
    ("CPU pod under another runtime class", pod(pod_spec(runtimeClassName="kata")), None, False),
    # The GPU Operator's other runtime classes (assets/pre-requisites/0210_*, 0220_*): gpuRuntimeClasses.
    ("CPU pod under nvidia-cdi", pod(pod_spec(runtimeClassName="nvidia-cdi")), None, True),
    ("CPU pod under nvidia-legacy", pod(pod_spec(runtimeClassName="nvidia-legacy")), None, True),
    # k3s's and RKE2's (k3s-io/k3s manifests/runtimes.yaml).
    ("CPU pod under nvidia-experimental", pod(pod_spec(runtimeClassName="nvidia-experimental")), None, True),
    ("Deployment under nvidia-cdi", workload("Deployment", pod_spec(runtimeClassName="nvidia-cdi")), None, True),
    (
        "GPU only in an init container",
        pod(pod_spec(initContainers=[container(limits={"nvidia.com/gpu": "1"})])),
        None,
        True,
    ),
    (
        "GPU in an ephemeral container",
        pod(pod_spec(ephemeralContainers=[container(limits={"nvidia.com/gpu": "1"})])),
        None,
        True,
    ),
    ("MIG slice in requests only", pod(pod_spec(container(requests={"nvidia.com/mig-1g.10gb": "1"}))), None, True),
    ("time-sliced GPU", pod(pod_spec(container(limits={"nvidia.com/gpu.shared": "1"}))), None, True),
    ("zero GPUs still involve GPUs", pod(pod_spec(container(limits={"nvidia.com/gpu": "0"}))), None, True),
    ("AMD GPU", pod(pod_spec(container(limits={"amd.com/gpu": "1"}))), None, True),
    ("Intel GPU", pod(pod_spec(container(limits={"gpu.intel.com/i915": "1"}))), None, True),
    ("look-alike resource", pod(pod_spec(container(limits={"nvidia.com/gpu-memory": "1"}))), None, False),
    ("Deployment with a GPU template", workload("Deployment", GPU), None, True),
    ("Deployment without GPUs", workload("Deployment", CPU), None, False),
    ("StatefulSet with a GPU template", workload("StatefulSet", GPU), None, True),
    ("Job with a GPU template", workload("Job", GPU), None, True),
    ("CronJob with a GPU template", workload("CronJob", GPU), None, True),
    ("CronJob without GPUs", workload("CronJob", CPU), None, False),
    ("PodTemplate with a GPU", workload("PodTemplate", GPU), None, True),
    ("UPDATE removing the GPUs", workload("Deployment", CPU), workload("Deployment", GPU), True),
    ("UPDATE without GPUs before or after", workload("Deployment", CPU), workload("Deployment", CPU), False),
    # Vendors: exact GPU resources and their auxiliary resources route; look-alikes do not.
    ("Intel xe GPU", pod(pod_spec(container(limits={"gpu.intel.com/xe": "1"}))), None, True),
    (
        "Intel millicores only (auxiliary)",
        pod(pod_spec(container(limits={"gpu.intel.com/millicores": "100"}))),
        None,
        True,
    ),
    (
        "Intel tiles in requests (auxiliary)",
        pod(pod_spec(container(requests={"gpu.intel.com/tiles": "1"}))),
        None,
        True,
    ),
    ("HAMi gpumem (auxiliary)", pod(pod_spec(container(limits={"nvidia.com/gpumem": "3000"}))), None, True),
    ("HAMi gpucores (auxiliary)", pod(pod_spec(container(limits={"nvidia.com/gpucores": "30"}))), None, True),
    ("unknown Intel resource", pod(pod_spec(container(limits={"gpu.intel.com/fpga": "1"}))), None, False),
    ("CPU pod tolerating the Intel taint", pod(pod_spec(tolerations=[INTEL_TOLERATION])), None, True),
    (
        "CPU pod tolerating a MIG taint",
        pod(pod_spec(tolerations=[{"key": "nvidia.com/mig-1g.10gb", "operator": "Exists"}])),
        None,
        True,
    ),
    # DRA-backed extended resources (KEP-5004) and AMD partitions route; look-alikes do not.
    (
        "implicit DRA extended resource",
        pod(pod_spec(container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}))),
        None,
        True,
    ),
    ("AMD partition", pod(pod_spec(container(limits={"amd.com/cpx_nps4": "1"}))), None, True),
    # Other ways to hold a GPU.
    ("DRA pod (spec.resourceClaims)", pod(DRA), None, True),
    ("DRA pod tolerating the GPU taint", pod({**DRA, "tolerations": [GPU_TOLERATION]}), None, True),
    ("empty resourceClaims", pod(pod_spec(resourceClaims=[])), None, False),
    ("KAI gpu-fraction pod", pod(pod_spec(), annotations=KAI_FRACTION), None, True),
    ("KAI gpu-memory pod", pod(pod_spec(), annotations={"gpu-memory": "2000"}), None, True),
    ("other annotation", pod(pod_spec(), annotations={"example.com/gpu-fraction": "0.5"}), None, False),
    ("Deployment with a DRA template", workload("Deployment", DRA), None, True),
    ("Deployment with a KAI template", workload("Deployment", pod_spec(), annotations=KAI_FRACTION), None, True),
    ("CronJob with a KAI template", workload("CronJob", pod_spec(), annotations={"gpu-memory": "2000"}), None, True),
    ("PodTemplate with a DRA template", workload("PodTemplate", DRA), None, True),
    ("UPDATE removing the KAI annotation", pod(pod_spec()), pod(pod_spec(), annotations=KAI_FRACTION), True),
    # CDI device annotations are refused, so they route on their own.
    ("CDI annotation only", pod(pod_spec(), annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all"}), None, True),
    (
        "NVIDIA NRI CDI annotation",
        pod(pod_spec(), annotations={"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=0"}),
        None,
        True,
    ),
    ("bare NVIDIA NRI CDI key", pod(pod_spec(), annotations={"nvidia.cdi.k8s.io": "nvidia.com/gpu=0"}), None, True),
    ("look-alike CDI annotation", pod(pod_spec(), annotations={"example.cdi.k8s.io/x": "a.b/c=d"}), None, False),
    (
        "Deployment with a CDI template",
        workload("Deployment", CPU, annotations={"cdi.k8s.io/x": "a.b/c=d"}),
        None,
        True,
    ),
    ("DELETE of a GPU pod (object null)", None, pod(GPU), True),
    ("DELETE of a CPU pod (object null)", None, pod(CPU), False),
    ("both null", None, None, False),
]


@pytest.fixture(scope="module")
def match_condition(base: list[dict[str, Any]]) -> Any:
    [condition] = webhooks(base)[0]["matchConditions"]
    assert condition["name"] == "involves-gpus"
    return compile_cel(condition["expression"])


@pytest.mark.parametrize(("case", "new", "old", "expected"), MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_match_condition(
    match_condition: Any, case: str, new: dict[str, Any] | None, old: dict[str, Any] | None, expected: bool
) -> None:
    operation = "DELETE" if new is None else "UPDATE" if old is not None else "CREATE"
    assert evaluate(match_condition, object=new, oldObject=old, request={"operation": operation}) is expected


def test_match_condition_returns_bool(match_condition: Any) -> None:
    assert match_condition.return_type() == cel.Type.BOOL


def labelled(spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out = pod(spec, annotations=annotations)
    out["metadata"]["labels"] = labels
    return out


POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
STATUS = {"operation": "UPDATE", "resource": POD_RESOURCE, "subResource": "status"}
TEAM = {"gpugate.io/team": "vision", "app": "x"}
# (case, new, old, sent): a status update is sent only when it changes labels or annotations, of a GPU pod.
STATUS_CASES = [
    ("status report of a GPU pod", labelled(GPU, TEAM), labelled(GPU, TEAM), False),
    ("status update rewriting the team", labelled(GPU, {**TEAM, "gpugate.io/team": "x"}), labelled(GPU, TEAM), True),
    ("status update removing the labels", pod(GPU), labelled(GPU, TEAM), True),
    ("status update adding an annotation", labelled(GPU, TEAM, {"a": "b"}), labelled(GPU, TEAM), True),
    ("status update rewriting a CPU pod's labels", labelled(CPU, {"app": "y"}), labelled(CPU, TEAM), False),
]


@pytest.mark.parametrize(("case", "new", "old", "sent"), STATUS_CASES, ids=[c[0] for c in STATUS_CASES])
def test_match_condition_sends_status_updates_only_when_they_change_metadata(
    match_condition: Any, case: str, new: dict[str, Any], old: dict[str, Any], sent: bool
) -> None:
    assert evaluate(match_condition, object=new, oldObject=old, request=STATUS) is sent
    # The pod itself: sent when the update changes labels or annotations, as before.
    ordinary = {"operation": "UPDATE", "resource": POD_RESOURCE}
    assert evaluate(match_condition, object=new, oldObject=old, request=ordinary) is (
        new != old and "nvidia.com/gpu" in str(new) + str(old)
    )


def _finalized(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    out["metadata"].update(meta)
    return out


OWNER = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}]
# (case, new, old, sent): an update of a GPU pod itself is sent only when it changes what gpugate reads of it.
UPDATE_CASES = [
    (
        "the Job controller removes its finalizer",
        _finalized(labelled(GPU, TEAM), finalizers=[]),
        _finalized(labelled(GPU, TEAM), finalizers=["batch.kubernetes.io/job-tracking"]),
        False,
    ),
    (
        "nothing but the resourceVersion",
        _finalized(labelled(GPU, TEAM), resourceVersion="2"),
        labelled(GPU, TEAM),
        False,
    ),
    ("a label changed", labelled(GPU, {**TEAM, "app": "y"}), labelled(GPU, TEAM), True),
    ("an annotation added", labelled(GPU, TEAM, {"a": "b"}), labelled(GPU, TEAM), True),
    (
        "the image changed",
        labelled({**GPU, "containers": [{**GPU["containers"][0], "image": "cuda:13"}]}, TEAM),
        labelled(GPU, TEAM),
        True,
    ),
    ("a toleration added", labelled({**GPU, "tolerations": [GPU_TOLERATION]}, TEAM), labelled(GPU, TEAM), True),
    ("orphaned", labelled(GPU, TEAM), _finalized(labelled(GPU, TEAM), ownerReferences=OWNER), True),
    ("a CPU pod's finalizer", _finalized(pod(CPU), finalizers=[]), _finalized(pod(CPU), finalizers=["f"]), False),
]


@pytest.mark.parametrize(("case", "new", "old", "sent"), UPDATE_CASES, ids=[c[0] for c in UPDATE_CASES])
def test_match_condition_sends_a_pod_update_only_when_it_changes_what_gpugate_reads(
    match_condition: Any, case: str, new: dict[str, Any], old: dict[str, Any], sent: bool
) -> None:
    request = {"operation": "UPDATE", "resource": POD_RESOURCE}
    assert evaluate(match_condition, object=new, oldObject=old, request=request) is sent
    # A subresource or a workload is not such an update: the ephemeral containers' and the status' own rules.
    ephemeral = {**request, "subResource": "ephemeralcontainers"}
    assert evaluate(match_condition, object=new, oldObject=old, request=ephemeral) is ("nvidia.com/gpu" in str(new))


CLAIMS = {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}
GPU_REQUESTS = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
# (case, object, sent): a claim or claim template with device requests is sent, whatever its DeviceClass (only
# the inventory says which classes serve GPUs); one without requests (config only, or nothing) is not.
CLAIM_CASES = [
    ("a ResourceClaim with a request", {"kind": "ResourceClaim", "spec": GPU_REQUESTS}, True),
    ("a ResourceClaimTemplate with a request", {"kind": "ResourceClaimTemplate", "spec": {"spec": GPU_REQUESTS}}, True),
    ("a claim of no devices", {"kind": "ResourceClaim", "spec": {"devices": {"requests": []}}}, False),
    ("a claim of config only", {"kind": "ResourceClaim", "spec": {"devices": {"config": []}}}, False),
    ("a template of an empty claim", {"kind": "ResourceClaimTemplate", "spec": {"spec": {}}}, False),
]


@pytest.mark.parametrize(("case", "obj", "sent"), CLAIM_CASES, ids=[c[0] for c in CLAIM_CASES])
def test_match_condition_sends_claims_with_requests(match_condition: Any, case: str, obj: dict[str, Any], sent: bool):
    for operation, old in (("CREATE", None), ("UPDATE", obj)):
        request = {"operation": operation, "resource": CLAIMS}
        assert evaluate(match_condition, object=obj, oldObject=old, request=request) is sent
    # a pod is judged as before: a claim-shaped spec in a pod request is no GPU
    assert evaluate(match_condition, object=obj, request={"operation": "CREATE", "resource": POD_RESOURCE}) is False


def binding(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata, "target": {"kind": "Node", "name": "n"}}


@pytest.mark.parametrize(
    ("new", "sent"),
    [
        (binding(), False),  # the scheduler's: never sent, so gpugate is never in the way of scheduling
        (binding(labels={"topology.kubernetes.io/zone": "a"}), False),
        (binding(labels={"gpugate.io/team": "x"}), True),
        (binding(annotations={"gpugate.io/workload": "Pod/x"}), True),
    ],
)
@pytest.mark.parametrize(
    "request_",
    [
        {"operation": "CREATE", "resource": POD_RESOURCE, "subResource": "binding"},
        {"operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": "bindings"}},
    ],
)
def test_match_condition_sends_bindings_only_with_gpugate_keys(
    match_condition: Any, new: dict[str, Any], sent: bool, request_: dict[str, Any]
) -> None:
    assert evaluate(match_condition, object=new, oldObject=None, request=request_) is sent


class Backstop:
    """The ValidatingAdmissionPolicy evaluated as the apiserver does: variables in order, then rules."""

    def __init__(self, policy: dict[str, Any]) -> None:
        self.conditions = [compile_cel(c["expression"]) for c in policy["spec"].get("matchConditions", [])]
        self.variables = [(v["name"], compile_cel(v["expression"])) for v in policy["spec"]["variables"]]
        self.validations = [
            (v.get("message"), compile_cel(v.get("messageExpression", "''")), compile_cel(v["expression"]))
            for v in policy["spec"]["validations"]
        ]

    def matches(
        self, new: dict[str, Any], old: dict[str, Any] | None = None, request: dict[str, Any] | None = None
    ) -> bool:
        """The policy's match conditions, as the apiserver evaluates them before any validation."""
        data = {"object": new, "oldObject": old, "request": request or {"operation": "UPDATE" if old else "CREATE"}}
        return all(evaluate(c, **data) is True for c in self.conditions)

    def denials(
        self,
        new: dict[str, Any],
        old: dict[str, Any] | None = None,
        request: dict[str, Any] | None = None,
        *,
        conditions: bool = True,
    ) -> list[str]:
        """The messages of the validations that fail; none when a match condition is false (unless conditions is
        False: then the validations are evaluated whatever the conditions say)."""
        if conditions and not self.matches(new, old, request):
            return []
        data: dict[str, Any] = {
            "object": new,
            "oldObject": old,
            "request": request or {"operation": "UPDATE" if old else "CREATE"},
        }
        variables: dict[str, Any] = {}
        for name, program in self.variables:
            variables[name] = evaluate(program, **data, variables=variables)
        out = []
        for message, message_expression, program in self.validations:
            verdict = evaluate(program, **data, variables=variables)
            assert isinstance(verdict, bool)
            if not verdict:
                out.append(message or evaluate(message_expression, **data, variables=variables))
        return out


@pytest.fixture(scope="module")
def backstop(base: list[dict[str, Any]]) -> Backstop:
    return Backstop(find(base, "ValidatingAdmissionPolicy", "gpugate-backstop"))


NVIDIA = {"runtimeClassName": "nvidia"}
FORMED = {"gpugate.io/formed-by": "native-tier"}
BACKSTOP_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, list[str]]] = [
    ("CPU pod", pod(CPU), None, []),
    ("CPU pod tolerating the GPU taint", pod(pod_spec(tolerations=[GPU_TOLERATION])), None, ["GPU node taint"]),
    ("CPU pod tolerating every taint", pod(pod_spec(tolerations=[{"operator": "Exists"}])), None, ["GPU node taint"]),
    (
        "CPU pod with an unrelated toleration",
        pod(pod_spec(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x"}])),
        None,
        [],
    ),
    ("GPU pod with the runtime class", pod({**GPU, **NVIDIA, "tolerations": [GPU_TOLERATION]}), None, []),
    # The runtime class is gpugate's to judge (DRA, CDI and clusters without it need none).
    ("GPU pod without the runtime class", pod(GPU), None, []),
    ("GPU pod with another runtime class", pod({**GPU, "runtimeClassName": "runc"}), None, []),
    # A pod without GPUs under a GPU runtime class would see every GPU of its node.
    ("CPU pod under nvidia", pod(pod_spec(**NVIDIA)), None, ['GPU runtime class "nvidia"']),
    (
        "CPU pod under nvidia-cdi",
        pod(pod_spec(runtimeClassName="nvidia-cdi")),
        None,
        ['GPU runtime class "nvidia-cdi"'],
    ),
    (
        "CPU pod under nvidia-legacy",
        pod(pod_spec(runtimeClassName="nvidia-legacy")),
        None,
        ['GPU runtime class "nvidia-legacy"'],
    ),
    (
        "CPU pod under nvidia-experimental",
        pod(pod_spec(runtimeClassName="nvidia-experimental")),
        None,
        ['GPU runtime class "nvidia-experimental"'],
    ),
    ("CPU pod under runc", pod(pod_spec(runtimeClassName="runc")), None, []),
    # The label that lets a pod skip gpugate-runtime-handlers (its binding's objectSelector): a pod that holds no GPU
    # and carries it is refused under any class the runtime class rule does not name.
    (
        "CPU pod carrying the formed-by label under runc",
        labelled(pod_spec(runtimeClassName="runc"), FORMED),
        None,
        ['formed-by, which gpugate\'s native tier gives the GPU pods it forms, under the runtime class "runc"'],
    ),
    (
        "CPU pod carrying the formed-by label under an alias",
        labelled(pod_spec(runtimeClassName="my-gpu"), FORMED),
        None,
        ["gpugate.io/formed-by"],
    ),
    (
        "CPU pod carrying the formed-by label under nvidia",
        labelled(pod_spec(**NVIDIA), FORMED),
        None,
        ['GPU runtime class "nvidia"'],
    ),
    ("CPU pod carrying the formed-by label without a runtime class", labelled(CPU, FORMED), None, []),
    (
        "GPU pod carrying the formed-by label under an alias",
        labelled({**GPU, "runtimeClassName": "my-gpu"}, FORMED),
        None,
        [],
    ),
    (
        "DRA pod carrying the formed-by label under runc",
        labelled({**DRA, "runtimeClassName": "runc"}, FORMED),
        None,
        [],
    ),
    (
        "UPDATE of a CPU pod carrying the formed-by label under runc",
        labelled(pod_spec(runtimeClassName="runc"), FORMED),
        labelled(pod_spec(runtimeClassName="runc"), FORMED),
        [],
    ),
    ("GPU pod under nvidia-cdi", pod({**GPU, "runtimeClassName": "nvidia-cdi"}), None, []),
    ("KAI pod under nvidia", pod(pod_spec(**NVIDIA, **KAI), annotations=KAI_FRACTION), None, []),
    (
        "KAI annotation on a default-scheduler pod under nvidia",
        pod(pod_spec(**NVIDIA, schedulerName="default-scheduler"), annotations=KAI_FRACTION),
        None,
        ['GPU runtime class "nvidia"'],
    ),
    ("DRA pod under nvidia-cdi", pod({**DRA, "runtimeClassName": "nvidia-cdi"}), None, []),
    ("UPDATE of a CPU pod stored under nvidia", pod(pod_spec(**NVIDIA)), pod(pod_spec(**NVIDIA)), []),
    (
        "GPU in an init container only",
        pod(pod_spec(initContainers=[container("init", limits={"nvidia.com/gpu": "1"})])),
        None,
        [],
    ),
    (
        "AMD GPU pod needs no NVIDIA runtime",
        pod(
            pod_spec(container(limits={"amd.com/gpu": "1"}), tolerations=[{"key": "amd.com/gpu", "operator": "Exists"}])
        ),
        None,
        [],
    ),
    (
        "UPDATE of a pod that tolerated before",
        pod(pod_spec(tolerations=[GPU_TOLERATION])),
        pod(pod_spec(tolerations=[GPU_TOLERATION])),
        [],
    ),
    ("UPDATE adding the toleration", pod(pod_spec(tolerations=[GPU_TOLERATION])), pod(pod_spec()), ["GPU node taint"]),
    ("UPDATE of an old GPU pod without runtime class", pod(GPU), pod(GPU), []),
    # Wrong GPU shapes are gpugate's to refuse, with its own message (the backstop runs first).
    ("zero GPUs", pod(pod_spec(container(limits={"nvidia.com/gpu": "0"}))), None, []),
    (
        "zero GPUs with the toleration ExtendedResourceToleration adds",
        pod(pod_spec(container(limits={"nvidia.com/gpu": "0"}), tolerations=[GPU_TOLERATION])),
        None,
        [],
    ),
    (
        "MIG slice without runtime class",
        pod(pod_spec(container(limits={"nvidia.com/mig-1g.10gb": "1"}))),
        None,
        [],
    ),
    # Vendors: each pool is tainted with its vendor's resource name.
    ("CPU pod tolerating the AMD taint", pod(pod_spec(tolerations=[AMD_TOLERATION])), None, ["GPU node taint"]),
    ("CPU pod tolerating the Intel taint", pod(pod_spec(tolerations=[INTEL_TOLERATION])), None, ["GPU node taint"]),
    (
        "CPU pod tolerating the Intel xe taint",
        pod(pod_spec(tolerations=[{"key": "gpu.intel.com/xe", "operator": "Exists"}])),
        None,
        ["GPU node taint"],
    ),
    (
        "CPU pod tolerating a MIG taint",
        pod(pod_spec(tolerations=[{"key": "nvidia.com/mig-1g.10gb", "operator": "Exists"}])),
        None,
        ["GPU node taint"],
    ),
    (
        "UPDATE of a pod that tolerated the AMD taint before",
        pod(pod_spec(tolerations=[AMD_TOLERATION])),
        pod(pod_spec(tolerations=[AMD_TOLERATION])),
        [],
    ),
    ("Intel GPU pod needs no NVIDIA runtime", pod({**INTEL_GAS, "tolerations": [INTEL_TOLERATION]}), None, []),
    (
        "Intel millicores only, tolerating the Intel taint",
        pod(pod_spec(container(limits={"gpu.intel.com/millicores": "100"}), tolerations=[INTEL_TOLERATION])),
        None,
        [],
    ),
    (
        "HAMi gpumem beside an NVIDIA GPU without runtime class",
        pod(pod_spec(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}))),
        None,
        [],
    ),
    (
        "unknown Intel resource tolerating the Intel taint",
        pod(pod_spec(container(limits={"gpu.intel.com/fpga": "1"}), tolerations=[INTEL_TOLERATION])),
        None,
        ["GPU node taint"],
    ),
    # Several vendors in one pod: gpugate refuses it naming them; the backstop must not answer first.
    (
        "NVIDIA and AMD GPUs in one pod",
        pod(
            pod_spec(container("cuda", limits={"nvidia.com/gpu": "1"}), container("rocm", limits={"amd.com/gpu": "1"}))
        ),
        None,
        [],
    ),
    (
        "NVIDIA GPU beside zero AMD GPUs",
        pod(pod_spec(container(limits={"nvidia.com/gpu": "1", "amd.com/gpu": "0"}))),
        None,
        [],
    ),
    # DRA-backed extended resources and AMD partitions hold GPUs: they may tolerate the GPU taint.
    (
        "implicit DRA extended resource tolerating the GPU taint",
        pod(
            pod_spec(
                container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}),
                tolerations=[GPU_TOLERATION],
            )
        ),
        None,
        [],
    ),
    (
        "AMD partition tolerating the AMD taint",
        pod(pod_spec(container(limits={"amd.com/cpx_nps4": "1"}), tolerations=[AMD_TOLERATION])),
        None,
        [],
    ),
    (
        "look-alike AMD resource tolerating the AMD taint",
        pod(pod_spec(container(limits={"amd.com/fpga": "1"}), tolerations=[AMD_TOLERATION])),
        None,
        ["GPU node taint"],
    ),
    # Other ways to hold a GPU: allowed to tolerate the GPU taint, no runtime class required.
    ("DRA pod tolerating the GPU taint", pod({**DRA, "tolerations": [GPU_TOLERATION]}), None, []),
    (
        "KAI gpu-fraction pod tolerating the GPU taint",
        pod(pod_spec(tolerations=[GPU_TOLERATION], **KAI), annotations=KAI_FRACTION),
        None,
        [],
    ),
    (
        "KAI gpu-memory pod tolerating the GPU taint",
        pod(pod_spec(tolerations=[GPU_TOLERATION], **KAI), annotations={"gpu-memory": "2000"}),
        None,
        [],
    ),
    # Created bound (spec.nodeName): no scheduler places it, so the annotation holds nothing.
    (
        "KAI gpu-fraction pod created with spec.nodeName tolerating the GPU taint",
        pod(pod_spec(tolerations=[GPU_TOLERATION], nodeName="gpu-1", **KAI), annotations=KAI_FRACTION),
        None,
        ["GPU node taint"],
    ),
    (
        "KAI gpu-fraction pod created with spec.nodeName under the NVIDIA runtime class",
        pod(pod_spec(runtimeClassName="nvidia", nodeName="gpu-1", **KAI), annotations=KAI_FRACTION),
        None,
        ["GPU runtime class"],
    ),
    # Another scheduler ignores the annotation: the pod holds no GPU.
    (
        "gpu-fraction on a default-scheduler pod tolerating the GPU taint",
        pod(pod_spec(tolerations=[GPU_TOLERATION], schedulerName="default-scheduler"), annotations=KAI_FRACTION),
        None,
        ["GPU node taint"],
    ),
    (
        "gpu-memory on a volcano pod tolerating the GPU taint",
        pod(pod_spec(tolerations=[GPU_TOLERATION], schedulerName="volcano"), annotations={"gpu-memory": "2000"}),
        None,
        ["GPU node taint"],
    ),
    (
        "another annotation does not hold a GPU",
        pod(pod_spec(tolerations=[GPU_TOLERATION]), annotations={"example.com/gpu-fraction": "0.5"}),
        None,
        ["GPU node taint"],
    ),
    # CDI device annotations, with or without anything else GPU-like.
    ("CDI annotation only", pod(CPU, annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all"}), None, ["CDI device"]),
    ("CDI annotation on a GPU pod", pod(GPU, annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all"}), None, ["CDI device"]),
    ("NVIDIA NRI CDI annotation", pod(CPU, annotations={"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=0"}), None, ["CDI"]),
    ("look-alike CDI annotation", pod(CPU, annotations={"example.cdi.k8s.io/x": "a.b/c=d"}), None, []),
    (
        "UPDATE keeping a CDI annotation the pod had",
        pod(CPU, annotations={"cdi.k8s.io/x": "a.b/c=d", "note": "y"}),
        pod(CPU, annotations={"cdi.k8s.io/x": "a.b/c=d"}),
        [],
    ),
    (
        "UPDATE adding a CDI annotation",
        pod(CPU, annotations={"cdi.k8s.io/x": "a.b/c=d"}),
        pod(CPU, annotations={"note": "y"}),
        ["CDI device"],
    ),
]


@pytest.mark.parametrize(("case", "new", "old", "expected"), BACKSTOP_CASES, ids=[c[0] for c in BACKSTOP_CASES])
def test_backstop_policy_verdicts(
    backstop: Backstop, case: str, new: dict[str, Any], old: dict[str, Any] | None, expected: list[str]
) -> None:
    denials = backstop.denials(new, old)
    assert len(denials) == len(expected), denials
    for message, fragment in zip(denials, expected, strict=True):
        assert fragment in message


STATUS_REFUSED = "gpugate: a status update must not add, change or remove a gpugate.io label or annotation"


@pytest.mark.parametrize(
    ("case", "new", "old", "refused"),
    [
        ("status report", labelled(GPU, TEAM), labelled(GPU, TEAM), False),
        ("status update renaming app", labelled(GPU, {**TEAM, "app": "y"}), labelled(GPU, TEAM), False),
        ("status update adding an annotation", labelled(GPU, TEAM, {"a": "b"}), labelled(GPU, TEAM), False),
        (
            "status update rewriting the team",
            labelled(GPU, {**TEAM, "gpugate.io/team": "x"}),
            labelled(GPU, TEAM),
            True,
        ),
        ("status update removing the team", labelled(GPU, {"app": "x"}), labelled(GPU, TEAM), True),
        ("status update adding a team", labelled(GPU, {"gpugate.io/team": "x"}), pod(GPU), True),
        (
            "status update adding gpugate's annotation",
            labelled(GPU, TEAM, {"gpugate.io/policy": "x"}),
            labelled(GPU, TEAM),
            True,
        ),
        ("status update of a CPU pod adding a team", labelled(CPU, {"gpugate.io/team": "x"}), pod(CPU), True),
    ],
)
def test_backstop_refuses_status_updates_that_change_gpugate_metadata(
    backstop: Backstop, case: str, new: dict[str, Any], old: dict[str, Any], refused: bool
) -> None:
    denials = backstop.denials(new, old, STATUS)
    assert [d[: len(STATUS_REFUSED)] for d in denials] == ([STATUS_REFUSED] if refused else []), denials
    # The same change through an UPDATE of the pod itself is gpugate's to judge (attributionEdits), not the backstop's.
    assert backstop.denials(new, old, {"operation": "UPDATE", "resource": POD_RESOURCE}) == []


def _status_changed(p: dict[str, Any]) -> dict[str, Any]:
    return {**p, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize(("case", "new", "old", "expected"), BACKSTOP_CASES, ids=[c[0] for c in BACKSTOP_CASES])
def test_the_backstop_skips_an_update_that_changes_nothing_it_judges_and_nothing_it_skips_could_fail(
    backstop: Backstop, case: str, new: dict[str, Any], old: dict[str, Any] | None, expected: list[str]
) -> None:
    """Its match condition: a CREATE is judged; an UPDATE or status update that leaves the labels, annotations and
    tolerations as they were is not, and every validation would have passed it (evaluated regardless here), whatever
    the pod, including one stored before the backstop that it would refuse now."""
    update = {"operation": "UPDATE", "resource": POD_RESOURCE}
    for request in (update, STATUS):
        assert not backstop.matches(_status_changed(new), new, request), case
        assert backstop.denials(_status_changed(new), new, request, conditions=False) == [], case
    if old is not None:  # the case's own update: judged as before when it changes what is judged
        assert backstop.denials(new, old) == backstop.denials(new, old, conditions=False)


CDI_ANNOTATIONS = {
    "cdi.k8s.io/x": "nvidia.com/gpu=all",
    "nvidia.cdi.k8s.io": "nvidia.com/gpu=0",
    "nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=0",
}
NOT_CDI_ANNOTATIONS = {"example.cdi.k8s.io/x": "a.b/c=d", "cdi.k8s.io": "x", "gpugate.io/policy": "training"}


def _variable(policy: dict[str, Any], name: str) -> Any:
    return evaluate(compile_cel(next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == name)))


def _creations(base: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Pods to create: the backstop's cases, one per resource name its lists hold (read from the policy itself, so
    a name added to a list is tested here) and per prefix, in a container's limits and an init container's requests,
    the shipped examples' and the real manifests' pods; each also tolerating the GPU taint under the nvidia runtime
    class, with every CDI annotation, and with look-alikes."""
    policy = find(base, "ValidatingAdmissionPolicy", "gpugate-backstop")
    names = [*_variable(policy, "gpuResources"), *_variable(policy, "auxiliaryResources")]
    names += ["nvidia.com/mig-1g.10gb", "amd.com/cpx_nps4", "amd.com/spx_nps1", "deviceclass.resource.kubernetes.io/g"]
    names += ["amd.com/xpx_nps1", "example.com/gpu", "nvidia.com/gpu-look-alike", "cpu"]
    pods = [(case, new) for case, new, old, _ in BACKSTOP_CASES if old is None]
    for name in names:
        pods.append((f"{name} in limits", pod(pod_spec(container(limits={name: "1"})))))
        init = {"initContainers": [container("i", requests={name: "1"})]}
        pods.append((f"{name} in an init container's requests", pod(pod_spec(**init))))
    for directory in (REPO / "policies" / "examples", REPO / "tests" / "fixtures" / "real-manifests"):
        for path in sorted(directory.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "Pod" and doc.get("apiVersion") == "v1":
                    pods.append((path.name, doc))
    for case, new in pods:
        yield case, new
        # What the backstop refuses on a pod that holds no GPU: a creation the match condition wrongly took for a
        # GPU pod's would be skipped and refused by the validations.
        squatting = {"tolerations": [*new["spec"].get("tolerations", []), GPU_TOLERATION], "runtimeClassName": "nvidia"}
        yield f"{case}, tolerating the GPU taint under nvidia", {**new, "spec": {**new["spec"], **squatting}}
        for key, value in {**CDI_ANNOTATIONS, **NOT_CDI_ANNOTATIONS}.items():
            annotations = {**new["metadata"].get("annotations", {}), key: value}
            yield f"{case} with {key}", {**new, "metadata": {**new["metadata"], "annotations": annotations}}


def test_the_backstop_skips_only_creations_that_every_validation_passes(
    base: list[dict[str, Any]], backstop: Backstop
) -> None:
    """Its match condition not-a-gpu-pod-creation-without-cdi-annotations: a creation it leaves out (one that holds a
    GPU and carries no CDI annotation) is one the validations, evaluated regardless, pass; and it leaves out the GPU
    pods, while a CPU pod or a pod with a CDI annotation is judged."""
    request = {"operation": "CREATE", "resource": POD_RESOURCE}
    skipped = judged = 0
    for case, new in _creations(base):
        if backstop.matches(new, None, request):
            judged += 1
        else:
            skipped += 1
            assert backstop.denials(new, None, request, conditions=False) == [], case
        if any(key in CDI_ANNOTATIONS for key in new["metadata"].get("annotations", {})):
            assert backstop.matches(new, None, request), case
    assert skipped > 100 and judged > 100, (skipped, judged)
    # Every name the policy's lists hold is a GPU to the condition too (in step, so such a pod is not judged for
    # nothing), and so is a fraction pod of every scheduler the policy names.
    policy = find(base, "ValidatingAdmissionPolicy", "gpugate-backstop")
    for name in [*_variable(policy, "gpuResources"), *_variable(policy, "auxiliaryResources")]:
        assert not backstop.matches(pod(pod_spec(container(limits={name: "1"}))), None, request), name
    for scheduler in _variable(policy, "annotationSchedulers"):
        fraction = pod(pod_spec(schedulerName=scheduler), annotations=KAI_FRACTION)
        assert not backstop.matches(fraction, None, request), scheduler
        bound = pod(pod_spec(schedulerName=scheduler, nodeName="n"), annotations=KAI_FRACTION)
        assert backstop.matches(bound, None, request), scheduler
    assert not backstop.matches(pod(GPU), None, request)
    assert not backstop.matches(pod(DRA), None, request)
    assert backstop.matches(pod(CPU), None, request)
    assert backstop.matches(pod(GPU, annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all"}), None, request)


@pytest.mark.parametrize(
    ("case", "change", "refusal"),
    [
        ("adds a CDI annotation", {"metadata": {"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=all"}}}, "CDI device"),
        ("adds a GPU toleration", {"spec": {"tolerations": [GPU_TOLERATION]}}, "GPU node taint"),
        ("adds a gpugate.io label", {"metadata": {"labels": {"gpugate.io/team": "x"}}}, STATUS_REFUSED),
    ],
)
def test_the_backstop_judges_an_update_of_a_cpu_pod_that_changes_what_it_judges(
    backstop: Backstop, case: str, change: dict[str, Any], refusal: str
) -> None:
    old = pod(CPU)
    new = {
        **old,
        "metadata": {**old["metadata"], **change.get("metadata", {})},
        "spec": {**old["spec"], **change.get("spec", {})},
    }
    for request in ({"operation": "UPDATE", "resource": POD_RESOURCE}, STATUS):
        assert backstop.matches(new, old, request), case
    denials = backstop.denials(new, old, STATUS)
    assert len(denials) == 1 and refusal in denials[0], denials


def test_every_cel_expression_compiles(renders: dict[str, list[dict[str, Any]]]) -> None:
    expressions = list(_cel_expressions(renders["base"]))
    # a match condition per webhook (four); gpugate-backstop's two match conditions, 13 variables, 5 validations and
    # the message expressions of two; gpugate-runtime-handlers' 8 variables, its validation with its message
    # expression and a match condition
    assert len(expressions) == 4 + 2 + 13 + 5 + 2 + 8 + 1 + 1 + 1
    for where, expression in expressions:
        try:
            compile_cel(expression)
        except RuntimeError as err:
            pytest.fail(f"{where}: {err}")


def _cel_expressions(objects: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for hook in webhooks(objects):
        for condition in hook.get("matchConditions", []):
            yield f"{hook['name']} matchCondition {condition['name']}", condition["expression"]
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            for section in ("variables", "validations", "matchConditions"):
                for i, item in enumerate(obj["spec"].get(section, [])):
                    yield f"{obj['metadata']['name']} {section}[{i}]", item["expression"]
                    if "messageExpression" in item:
                        yield f"{obj['metadata']['name']} {section}[{i}].messageExpression", item["messageExpression"]


# ---- image -------------------------------------------------------------------------------------


def test_dockerfile_runs_gpugate_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert text.count("\nFROM ") == 2, "multi-stage: a build stage and a runtime stage"
    assert "\nUSER 65532:65532\n" in text
    assert '\nENTRYPOINT ["gpugate"]\n' in text


@pytest.mark.skipif(not HADOLINT.is_file(), reason="hadolint not installed: run scripts/install-tools")
def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
