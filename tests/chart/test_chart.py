"""charts/gpugate: linted and rendered by the pinned helm, every object schema-valid, the default render the same
objects and invariants as the kustomize base, and installed into a real kube-apiserver whose webhooks then
answer a dry run (gpugate itself on loopback, reached through the chart's `webhooks.url` value).

helm: built by tests/chart/build-helm.sh from the pinned Go module in tests/chart/tools (scripts/install-tools
does it); `GPUGATE_HELM` overrides. Without it the module skips locally and fails in CI.
"""

from __future__ import annotations

import base64
import copy
import filecmp
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.deploy.test_manifests import DEPLOY, find, render, webhooks
from tests.support import REPO

CHART = REPO / "charts" / "gpugate"
FILES = CHART / "files"
CERT_MANAGER = {"Issuer", "Certificate"}
NO_SCHEMA = {"cert-manager.io/v1", "monitoring.coreos.com/v1"}  # CRDs kubernetes-validate has no schema for


def helm_binary() -> Path:
    if override := os.environ.get("GPUGATE_HELM"):
        return Path(override)
    printed = subprocess.run(
        [str(REPO / "tests" / "chart" / "build-helm.sh"), "--print"], capture_output=True, text=True, check=True
    )
    path = Path(printed.stdout.strip().splitlines()[-1])
    if not path.is_file():
        reason = f"helm is not built at {path}: run scripts/install-tools (or tests/chart/build-helm.sh)"
        if os.environ.get("CI"):
            pytest.fail(f"chart tests cannot run in CI: {reason}", pytrace=False)
        pytest.skip(f"!!! CHART TESTS SKIPPED: {reason}")
    return path


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


# networkPolicy.controlPlaneCIDRs has no default (the chart refuses to render without it): every render, lint,
# install and upgrade here gives one, before the test's own values, which may override it. The control plane of
# the install tests runs on 127.0.0.1.
CONTROL_PLANE = "networkPolicy.controlPlaneCIDRs={127.0.0.1/32}"
RENDERING = ("template", "lint", "install", "upgrade")


def run_helm(
    helm: Path,
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 120,
    control_plane: bool = True,
) -> subprocess.CompletedProcess[str]:
    if control_plane and args and args[0] in RENDERING:
        args = (args[0], "--set", CONTROL_PLANE, *args[1:])
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/gpugate-helm/cache",
        "HELM_CONFIG_HOME": "/tmp/gpugate-helm/config",
        "HELM_DATA_HOME": "/tmp/gpugate-helm/data",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([str(helm), *args], capture_output=True, text=True, check=False, timeout=timeout, env=env)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def template(helm: Path, *values: str, namespace: str = "gpugate", release: str = "gpugate") -> list[dict[str, Any]]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for value in values:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(run_helm(helm, *args).stdout) if doc]


@pytest.fixture(scope="module")
def default(helm: Path) -> list[dict[str, Any]]:
    return template(helm)


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(DEPLOY)


VARIANTS: dict[str, list[str]] = {
    "default": [],
    "cert-manager": ["certificates.mode=cert-manager"],
    "own secret": ["certificates.mode=secret", "certificates.secretName=mine", "certificates.caBundle=Zm9v"],
    "url": ["webhooks.url=https://127.0.0.1:8443", "certificates.ipAddresses={127.0.0.1}"],
    "workload CRDs": ["workloadCRDs.enabled=true"],
    "no backstop": ["backstop.enabled=false"],
    "native tier": ["nativeTier.enabled=true"],
    "narrowed network policy": ["networkPolicy.controlPlaneCIDRs={10.0.0.0/28}", "networkPolicy.metricsNamespace="],
    "no network policy": ["networkPolicy.enabled=false"],
    "prometheus rule": ["prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus"],
    "dashboard": ["dashboard.enabled=true"],
    "namespace": ["namespace.create=true"],
    "auditor RBAC": ["audit.rbac.enabled=true"],
    "existing configmap": ["policies.existingConfigMap=fleet-policies"],
    "tuned": [
        "replicas=3",
        "workers=4",
        "threads=8",
        "maxParkedConnections=300",
        "logLevel=debug",
        "priorityClassName=system-cluster-critical",
        "webhooks.validating.failurePolicy=Ignore",
        "webhooks.excludedNamespaces={kube-system,gpu-operator}",
    ],
}


# ---- lint and schemas --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_helm_lint(helm: Path, variant: str) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", "gpugate"]
    for value in VARIANTS[variant]:
        args += ["--set", value]
    done = run_helm(helm, *args)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_every_rendered_object_is_valid_kubernetes(helm: Path, variant: str) -> None:
    version = kubernetes_validate.latest_version()
    objects = template(helm, *VARIANTS[variant])
    checked = 0
    for obj in objects:
        if obj["apiVersion"] in NO_SCHEMA:
            assert obj["kind"] in CERT_MANAGER | {"PrometheusRule"}
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 10


def test_the_native_tier_renders_the_compiled_objects_with_the_release_s_exclusions(helm: Path) -> None:
    off = {o["metadata"]["name"] for o in template(helm) if o["kind"] == "MutatingAdmissionPolicy"}
    assert off == set()
    objects = template(helm, "nativeTier.enabled=true", namespace="gpu-system")
    shipped = [d for d in yaml.safe_load_all((FILES / "native" / "native.yaml").read_text()) if d]
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for compiled in shipped:
        obj = rendered[(compiled["kind"], compiled["metadata"]["name"])]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        if "matchConstraints" in compiled["spec"]:
            selector = obj["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]
            assert selector["values"] == ["kube-system", "gpu-system"]
            del (
                obj["spec"]["matchConstraints"]["namespaceSelector"],
                compiled["spec"]["matchConstraints"]["namespaceSelector"],
            )
        assert obj["spec"] == compiled["spec"]


def test_the_native_tier_narrows_both_pod_webhooks_with_the_condition_of_its_own_objects(helm: Path) -> None:
    def conditions(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
        return {
            h["name"]: [c["name"] for c in h.get("matchConditions", [])]
            for o in objects
            if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for h in o["webhooks"]
        }

    assert all("not-decided-natively" not in names for names in conditions(template(helm)).values())
    objects = template(helm, "nativeTier.enabled=true", "workloadCRDs.enabled=true")
    always = next(
        o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "gpugate-always"
    )
    expression = always["metadata"]["annotations"]["gpugate.io/webhook-match-condition"]
    narrowed = {
        h["name"]: h["matchConditions"][-1]["expression"]
        for o in objects
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in o["webhooks"]
        if h.get("matchConditions") and h["matchConditions"][-1]["name"] == "not-decided-natively"
    }
    # The pod-create webhooks, not those of every other request, nor the workload CRDs' (they see no pods).
    assert narrowed == {"mutate.gpugate.io": expression, "validate.gpugate.io": expression}
    assert expression.startswith("!(request.operation == 'CREATE'")
    # And only they skip what the native tier formed, by the objectSelector the same objects carry.
    selectors = {
        h["name"]: h["objectSelector"]
        for o in objects
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in o["webhooks"]
        if "objectSelector" in h
    }
    selector = json.loads(always["metadata"]["annotations"]["gpugate.io/webhook-object-selector"])
    assert selectors == {"mutate.gpugate.io": selector, "validate.gpugate.io": selector}
    assert selector == {"matchExpressions": [{"key": "gpugate.io/formed-by", "operator": "DoesNotExist"}]}


def test_the_native_sync_renders_the_flag_and_a_role_limited_to_gpugate_s_own_objects(helm: Path) -> None:
    objects = template(helm, "nativeTier.sync=true", release="gate", namespace="gpu-system")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    configuration = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")["metadata"]["name"]
    assert f"--native-sync={configuration}" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    role = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-native-sync"))
    for rule in role["rules"]:
        assert rule["resourceNames"], rule  # every rule by name
        assert "list" not in rule["verbs"] and "watch" not in rule["verbs"]
    webhooks = next(r for r in role["rules"] if "mutatingwebhookconfigurations" in r["resources"])
    assert webhooks["verbs"] == ["get", "patch"] and webhooks["resourceNames"] == [configuration]
    lease = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-native-sync"))
    assert lease["metadata"]["namespace"] == "gpu-system"
    # The server writes the objects: the chart renders none, and no narrowing of its own.
    assert not [o for o in objects if o["kind"] == "MutatingAdmissionPolicy"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.36.0", strict=True) if obj["kind"] in ("ClusterRole", "Role") else None
    both = run_helm(
        helm, "template", "gpugate", str(CHART), "--set", "nativeTier.sync=true", "--set", "nativeTier.enabled=true",
        check=False,
    )  # fmt: skip
    assert both.returncode != 0 and "choose one" in both.stderr
    assert not any(
        a.startswith("--native-sync")
        for o in template(helm)
        if o["kind"] == "Deployment"
        for a in o["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_unknown_certificate_mode_is_refused_with_a_message(helm: Path) -> None:
    done = run_helm(helm, "template", "gpugate", str(CHART), "--set", "certificates.mode=manual", check=False)
    assert done.returncode != 0
    assert 'certificates.mode must be generate, cert-manager or secret, not "manual"' in done.stderr


def test_secret_mode_requires_the_ca_bundle(helm: Path) -> None:
    done = run_helm(helm, "template", "gpugate", str(CHART), "--set", "certificates.mode=secret", check=False)
    assert done.returncode != 0 and "certificates.caBundle" in done.stderr


# ---- one source: the chart's files are deploy/'s ------------------------------------------------


@pytest.mark.parametrize(
    ("copy_", "source"),
    [
        ("base/webhooks.yaml", DEPLOY / "base" / "webhooks.yaml"),
        ("base/admission-policy.yaml", DEPLOY / "base" / "admission-policy.yaml"),
        ("gpugate-attribution.rules.yaml", DEPLOY / "monitoring" / "gpugate-attribution.rules.yaml"),
        ("gpugate-report-dashboard.json", DEPLOY / "monitoring" / "gpugate-report-dashboard.json"),
        ("audit/rbac.yaml", DEPLOY / "audit" / "rbac.yaml"),
    ],
)
def test_chart_files_equal_deploy(copy_: str, source: Path) -> None:
    assert filecmp.cmp(FILES / copy_, source, shallow=False), f"charts/gpugate/files/{copy_} differs: make chart-sync"


def test_chart_policies_equal_deploy_base_policies() -> None:
    ours = sorted(p.name for p in (FILES / "policies").iterdir())  # the policies and their JSON Schema
    theirs = sorted(p.name for p in (DEPLOY / "base" / "policies").iterdir())
    assert ours == theirs, "the policy files differ: make chart-sync"
    for name in ours:
        assert filecmp.cmp(FILES / "policies" / name, DEPLOY / "base" / "policies" / name, shallow=False), (
            f"charts/gpugate/files/policies/{name} differs: make chart-sync"
        )


# ---- the default render against the kustomize base ------------------------------------------------


def unhashed(name: str) -> str:
    """A kustomize-generated ConfigMap name without its content-hash suffix (`gpugate-policies-5m8kc7d2g4`)."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def _without_instance(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "app.kubernetes.io/instance"}


def test_default_render_holds_the_base_objects(default: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    def kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
        return sorted((o["kind"], unhashed(o["metadata"]["name"]), o["metadata"].get("namespace")) for o in objects)

    # Helm keeps its release record in the namespace, so `helm install --create-namespace` makes it
    # (namespace.create adds the base's Namespace object); the chart adds the generated certificate.
    expected = [k for k in kinds(base) if k[0] != "Namespace"] + [("Secret", "gpugate-tls", "gpugate")]
    assert kinds(default) == sorted(expected)


def test_webhooks_equal_the_base_but_for_the_ca_bundle(
    default: list[dict[str, Any]], base: list[dict[str, Any]]
) -> None:
    ours, theirs = webhooks(default), webhooks(base)
    assert (
        [h["name"] for h in ours]
        == [h["name"] for h in theirs]
        == [
            "mutate.gpugate.io",
            "mutate-objects.gpugate.io",
            "validate.gpugate.io",
            "validate-objects.gpugate.io",
        ]
    )
    secret = find(default, "Secret", "gpugate-tls")
    for mine, reference in zip(ours, theirs, strict=True):
        bundle = mine["clientConfig"].pop("caBundle")
        assert base64.b64decode(bundle) == base64.b64decode(secret["data"]["ca.crt"])
        assert mine == reference


@pytest.mark.parametrize(
    "kind",
    [
        "ValidatingAdmissionPolicy/gpugate-backstop",
        "ValidatingAdmissionPolicyBinding/gpugate-backstop",
        "ValidatingAdmissionPolicy/gpugate-runtime-handlers",
        "ValidatingAdmissionPolicyBinding/gpugate-runtime-handlers",
        "ClusterRole/gpugate-namespace-reader",
        "ClusterRole/gpugate-inventory-reader",
        "Service",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ],
)
def test_object_bodies_equal_the_base(default: list[dict[str, Any]], base: list[dict[str, Any]], kind: str) -> None:
    def body(obj: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in copy.deepcopy(obj).items() if k != "metadata"}
        if kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
            spec = out["spec"]
            selector = {
                "PodDisruptionBudget": lambda: spec["selector"]["matchLabels"],
                "NetworkPolicy": lambda: spec["podSelector"]["matchLabels"],
            }.get(kind, lambda: spec["selector"])()
            for key in list(selector):
                if key == "app.kubernetes.io/instance":
                    del selector[key]
        if kind == "NetworkPolicy":  # the control plane's addresses are the install's (chart value, kustomize patch)
            out["spec"]["ingress"][0]["from"] = "the control plane"
        return out

    kind, _, name = kind.partition("/")
    ours, theirs = find(default, kind, name or None), find(base, kind, name or None)
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    assert body(ours) == body(theirs)
    if kind == "NetworkPolicy":
        assert ours["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "127.0.0.1/32"}}]  # CONTROL_PLANE


def test_deployment_equals_the_base(default: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    ours, theirs = copy.deepcopy(find(default, "Deployment")), copy.deepcopy(find(base, "Deployment"))
    for deployment in (ours, theirs):
        spec = deployment["spec"]
        spec["selector"]["matchLabels"] = _without_instance(spec["selector"]["matchLabels"])
        template_ = spec["template"]
        template_["metadata"]["labels"] = _without_instance(template_["metadata"]["labels"])
        template_["metadata"].pop("annotations", None)
        term = template_["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        selector = term["podAffinityTerm"]["labelSelector"]
        selector["matchLabels"] = _without_instance(selector["matchLabels"])
        for volume in template_["spec"]["volumes"]:
            if "configMap" in volume:  # kustomize appends a content hash to the name
                volume["configMap"]["name"] = unhashed(volume["configMap"]["name"])
    assert ours["spec"] == theirs["spec"]
    assert "checksum/policies" in find(default, "Deployment")["spec"]["template"]["metadata"]["annotations"]


def test_policies_configmap_equals_the_base(default: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    assert find(default, "ConfigMap")["data"] == find(base, "ConfigMap")["data"]


# ---- values ----------------------------------------------------------------------------------------


def test_generated_certificate_serves_the_service_names(default: list[dict[str, Any]]) -> None:
    secret = find(default, "Secret", "gpugate-tls")
    assert secret["type"] == "kubernetes.io/tls"
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        "gpugate",
        "gpugate.gpugate",
        "gpugate.gpugate.svc",
        "gpugate.gpugate.svc.cluster.local",
    ]
    leaf.verify_directly_issued_by(ca)


def test_release_name_and_namespace_reach_every_name(helm: Path) -> None:
    objects = template(helm, namespace="platform", release="fleet")
    assert {o["metadata"].get("namespace") for o in objects} == {None, "platform"}
    for hook in webhooks(objects):
        assert hook["clientConfig"]["service"]["name"] == "fleet-gpugate"
        assert hook["clientConfig"]["service"]["namespace"] == "platform"
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "platform"]
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    policies = [o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    assert sorted(policies) == ["fleet-gpugate-backstop", "fleet-gpugate-runtime-handlers"]
    leaf = x509.load_pem_x509_certificate(base64.b64decode(find(objects, "Secret")["data"]["tls.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "fleet-gpugate.platform.svc" in names.get_values_for_type(x509.DNSName)


def test_network_policy_narrowed_to_the_control_plane(helm: Path, tmp_path: Path) -> None:
    narrowed = find(template(helm, *VARIANTS["narrowed network policy"]), "NetworkPolicy")
    assert narrowed["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/28"}}], "ports": [{"port": "https", "protocol": "TCP"}]}
    ]
    assert not [o for o in template(helm, *VARIANTS["no network policy"]) if o["kind"] == "NetworkPolicy"]
    for refused in (
        run_helm(helm, "template", "g", str(CHART), check=False, control_plane=False),
        run_helm(helm, "template", "g", str(CHART), "--set", "networkPolicy.controlPlaneCIDRs=null", check=False),
    ):
        assert refused.returncode != 0, refused.stdout[:300]
        assert "networkPolicy.controlPlaneCIDRs is required" in refused.stderr, refused.stderr
        assert "docs/operations.md" in refused.stderr and "networkPolicy.enabled=false" in refused.stderr
    # Peers instead of addresses: the agents of a tunnel the apiserver reaches pods through (AKS's konnectivity).
    agents = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"app": "konnectivity-agent"}},
    }
    values = tmp_path / "peers.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {"controlPlanePeers": [agents]}}))
    rendered = run_helm(helm, "template", "g", str(CHART), "--values", str(values), control_plane=False).stdout
    peered = find([d for d in yaml.safe_load_all(rendered) if d], "NetworkPolicy")
    assert peered["spec"]["ingress"][0]["from"] == [agents]
    kubernetes_validate.validate(peered, kubernetes_validate.latest_version(), strict=True)
    # Without a NetworkPolicy there is nothing to give.
    assert run_helm(helm, "template", "g", str(CHART), "--set", "networkPolicy.enabled=false", control_plane=False)


def test_failure_policies_and_exclusions(helm: Path) -> None:
    objects = template(helm, *VARIANTS["tuned"])
    hooks = {h["name"]: h for h in webhooks(objects)}
    assert len(hooks) == 4
    assert all(hook["failurePolicy"] == "Ignore" for hook in hooks.values())
    for hook in hooks.values():
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "gpu-operator", "gpugate"]
    for binding in (o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "kube-system",
            "gpu-operator",
            "gpugate",
        ]
    deployment = find(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    args = pod["containers"][0]["args"]
    assert args[args.index("--workers") + 1] == "4" and args[args.index("--threads") + 1] == "8"
    assert args[args.index("--max-parked-connections") + 1] == "300"
    assert args[args.index("--log-level") + 1] == "debug"


def test_cert_manager_mode(helm: Path) -> None:
    objects = template(helm, *VARIANTS["cert-manager"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(objects, kind)
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "gpugate/gpugate-tls"}
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])
    serving = find(objects, "Certificate", "gpugate-tls")
    assert serving["spec"]["secretName"] == "gpugate-tls"
    assert serving["spec"]["dnsNames"][2] == "gpugate.gpugate.svc"
    assert find(objects, "Issuer", serving["spec"]["issuerRef"]["name"])["spec"]["ca"]["secretName"] == "gpugate-ca"


def test_own_secret_mode(helm: Path) -> None:
    objects = template(helm, *VARIANTS["own secret"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    assert all(h["clientConfig"]["caBundle"] == "Zm9v" for h in webhooks(objects))
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"] == "mine"


def test_url_client_config(helm: Path) -> None:
    objects = template(helm, *VARIANTS["url"])
    hooks = {h["name"]: h["clientConfig"] for h in webhooks(objects)}
    assert hooks["mutate.gpugate.io"]["url"] == hooks["mutate-objects.gpugate.io"]["url"]
    assert hooks["mutate.gpugate.io"]["url"] == "https://127.0.0.1:8443/mutate"
    assert hooks["validate.gpugate.io"]["url"] == hooks["validate-objects.gpugate.io"]["url"]
    assert hooks["validate.gpugate.io"]["url"] == "https://127.0.0.1:8443/validate"
    assert all("service" not in c for c in hooks.values())
    leaf = x509.load_pem_x509_certificate(base64.b64decode(find(objects, "Secret")["data"]["tls.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_workload_crd_webhooks(helm: Path, default: list[dict[str, Any]]) -> None:
    objects = template(helm, *VARIANTS["workload CRDs"])
    hooks = {h["name"]: h for h in webhooks(objects)}
    assert len(webhooks(objects)) == len(hooks) == 6  # no name twice
    # One CRD webhook per configuration, beside the base's two.
    assert sorted(hooks) == [
        "mutate-objects.gpugate.io",
        "mutate-workloads.gpugate.io",
        "mutate.gpugate.io",
        "validate-objects.gpugate.io",
        "validate-workloads.gpugate.io",
        "validate.gpugate.io",
    ]
    crd = hooks["mutate-workloads.gpugate.io"]
    assert "matchConditions" not in crd
    groups = [g for rule in crd["rules"] for g in rule["apiGroups"]]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert groups == [g for rule in values["workloadCRDs"]["rules"] for g in rule["apiGroups"]]
    assert {"ray.io", "kubeflow.org", "trainer.kubeflow.org", "orchestration.aibrix.ai"} <= set(groups)
    from webhook.pods.objects import BUILTIN_WORKLOADS

    cluster_scoped = {w.plural for w in BUILTIN_WORKLOADS if w.cluster_scoped}
    for r in crd["rules"]:
        assert r["operations"] == ["CREATE", "UPDATE"]
        assert r["scope"] == ("Cluster" if set(r["resources"]) <= cluster_scoped else "Namespaced"), r
    assert crd["failurePolicy"] == "Ignore" and hooks["validate-workloads.gpugate.io"]["failurePolicy"] == "Fail"
    assert hooks["mutate.gpugate.io"] == webhooks(default)[0] | {
        "clientConfig": hooks["mutate.gpugate.io"]["clientConfig"]
    }


def test_workload_crd_rules_are_the_kinds_gpugate_reads() -> None:
    """The chart's default CRD rules name exactly the built-in workload kinds outside core, apps and batch."""
    from webhook.pods.objects import BUILTIN_WORKLOADS

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    ours = sorted(
        (g, r, tuple(rule["apiVersions"]), rule.get("scope", "Namespaced"))
        for rule in values["workloadCRDs"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    )
    builtin = sorted(
        (w.group, w.plural, w.versions, "Cluster" if w.cluster_scoped else "Namespaced")
        for w in BUILTIN_WORKLOADS
        if w.group not in ("", "apps", "batch")
    )
    assert ours == builtin


def test_backstop_off(helm: Path) -> None:
    kinds = {o["kind"] for o in template(helm, *VARIANTS["no backstop"])}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_prometheus_rule_carries_the_recording_rules(helm: Path) -> None:
    rule = find(template(helm, *VARIANTS["prometheus rule"]), "PrometheusRule")
    shipped = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    assert rule["spec"] == shipped["spec"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"


def test_namespace_create(helm: Path, base: list[dict[str, Any]]) -> None:
    namespace = find(template(helm, *VARIANTS["namespace"]), "Namespace")
    for key, value in find(base, "Namespace")["metadata"]["labels"].items():
        if key.startswith("pod-security"):
            assert namespace["metadata"]["labels"][key] == value


def test_auditor_rbac_is_deploy_audit_pinned_to_the_release(helm: Path) -> None:
    assert not [o for o in template(helm) if o["metadata"]["name"].endswith("-auditor")]  # off by default
    objects = template(
        helm,
        "audit.rbac.enabled=true",
        "policies.existingConfigMap=fleet-policies",
        namespace="gpu-system",
        release="gate",
    )
    shipped = [d for d in yaml.safe_load_all((DEPLOY / "audit" / "rbac.yaml").read_text()) if d]
    assert find(objects, "ClusterRole", "gate-gpugate-auditor")["rules"] == find(shipped, "ClusterRole")["rules"]
    role = find(objects, "Role", "gate-gpugate-auditor")
    assert role["metadata"]["namespace"] == "gpu-system"
    assert [(r["resources"], r["resourceNames"], r["verbs"]) for r in role["rules"]] == [
        (["deployments"], ["gate-gpugate"], ["get"]),
        (["configmaps"], ["fleet-policies"], ["get"]),
    ]
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = find(objects, kind, "gate-gpugate-auditor")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": "gate-gpugate-auditor",
        }
        assert binding["subjects"] == find(shipped, kind)["subjects"]


def test_auditor_rbac_without_subjects_is_refused_with_a_message(helm: Path) -> None:
    done = run_helm(
        helm,
        "template",
        "gpugate",
        str(CHART),
        "--set",
        "audit.rbac.enabled=true",
        "--set",
        "audit.rbac.subjects=null",
        check=False,
    )
    assert done.returncode != 0 and "audit.rbac.enabled needs audit.rbac.subjects" in done.stderr


def test_existing_configmap(helm: Path) -> None:
    objects = template(helm, *VARIANTS["existing configmap"])
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "policies")["configMap"]["name"] == "fleet-policies"


def test_inline_policies(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    text = (REPO / "policies" / "10-serving.yaml").read_text()
    values.write_text(yaml.safe_dump({"policies": {"files": {"serving.yaml": text}}}))
    done = run_helm(helm, "template", "gpugate", str(CHART), "--namespace", "gpugate", "--values", str(values))
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert find(objects, "ConfigMap")["data"] == {"serving.yaml": text}


# ---- helm install into the real apiserver -------------------------------------------------------


@pytest.fixture(scope="module")
def installed(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A control plane of its own, the chart installed into it with `webhooks.url` pointing at gpugate on
    loopback, and that gpugate serving the chart's generated certificate and the chart's policy ConfigMap."""
    from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries
    from tests.harness.gpugate import GPUGate, wait_until_in_force
    from tests.harness.polling import eventually

    try:
        bin_dir = find_binaries()
    except BinariesMissing as err:
        if os.environ.get("CI") or shutil.which("go"):
            pytest.fail(f"{err}: run tests/e2e/build.sh (or `make tools`)", pytrace=False)
        pytest.skip(f"!!! CHART INSTALL TEST SKIPPED: {err}")
    work = tmp_path_factory.mktemp("chart-e2e")
    cp = ControlPlane(bin_dir, work / "cluster")
    gate: GPUGate | None = None
    try:
        cp.start()
        cp.ensure_runtime_class("nvidia")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        gate = GPUGate(work / "gpugate", policy_dir, kubeconfig=cp.kubeconfig)  # picks its loopback port
        values = [
            "--set",
            f"webhooks.url={gate.url}",
            "--set",
            "certificates.ipAddresses={127.0.0.1}",
            "--set",
            "audit.rbac.enabled=true",
        ]
        run_helm(
            helm,
            "install",
            "gpugate",
            str(CHART),
            "--namespace",
            "gpugate",
            "--create-namespace",
            *values,
            kubeconfig=cp.kubeconfig,
        )
        cp.ensure_default_service_account("gpugate")
        # gpugate serves what the chart made: its Secret's certificate and its ConfigMap's policies.
        secret = cp.kubectl("get", "secret", "gpugate-tls", "-n", "gpugate", "-o", "json").json()
        for key in ("tls.crt", "tls.key", "ca.crt"):
            (gate.cert_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
        configmap = cp.kubectl("get", "configmap", "gpugate-policies", "-n", "gpugate", "-o", "json").json()
        for name, text in configmap["data"].items():
            (policy_dir / name).write_text(text)
        gate.start()
        manifest = run_helm(
            helm, "get", "manifest", "gpugate", "--namespace", "gpugate", kubeconfig=cp.kubeconfig
        ).stdout
        objects = [d for d in yaml.safe_load_all(manifest) if d]
        # The mutating webhook and the backstop with the e2e suite's probes; the validating webhook by
        # gpugate's own count of /validate calls, which does not depend on what the policies refuse.
        wait_until_in_force(cp, [o for o in objects if o["kind"] != "ValidatingWebhookConfiguration"])
        probe_ns = cp.create_namespace("chart-probe")

        def validated() -> bool:
            before = validate_calls(gate)
            cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=_gpu_pod(probe_ns, "probe"), check=False)
            return validate_calls(gate) > before

        assert eventually(validated, timeout=60), "the validating webhook did not take effect within 60s"
        yield {"cluster": cp, "gate": gate, "secret": secret, "values": values, "objects": objects}
    finally:
        if gate is not None:
            gate.stop()
        cp.stop()


def validate_calls(gate: Any) -> float:
    """gpugate's gpugate_admission_requests_total summed over every label set of endpoint="validate"."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in gate.metrics().splitlines()
        if line.startswith("gpugate_admission_requests_total{") and 'endpoint="validate"' in line
    )


def _gpu_pod(namespace: str, name: str, quantity: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": quantity}},
                }
            ]
        },
    }


@pytest.mark.e2e
def test_installed_webhooks_mutate_a_gpu_pod_dry_run(installed: dict[str, Any]) -> None:
    cp = installed["cluster"]
    namespace = cp.create_namespace("chart-gpu", labels={"team": "vision"})
    before, validations = installed["gate"].admission_requests(), validate_calls(installed["gate"])
    dry = cp.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=_gpu_pod(namespace, "train"))
    pod = dry.json()
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert pod["metadata"]["annotations"]["gpugate.io/policy"] == "default"
    assert pod["metadata"]["labels"]["gpugate.io/team"] == "vision"
    assert installed["gate"].admission_requests() >= before + 2  # /mutate and /validate both answered
    assert validate_calls(installed["gate"]) >= validations + 1


@pytest.mark.e2e
def test_installed_webhooks_refuse_a_fractional_gpu(installed: dict[str, Any]) -> None:
    cp = installed["cluster"]
    namespace = cp.create_namespace("chart-frac")
    dry = cp.kubectl("apply", "--dry-run=server", "-f", "-", stdin=_gpu_pod(namespace, "half", "500m"), check=False)
    assert not dry.ok
    assert 'admission webhook "mutate.gpugate.io" denied the request' in dry.stderr
    assert "must be an integer" in dry.stderr


@pytest.mark.e2e
def test_release_namespace_is_excluded(installed: dict[str, Any]) -> None:
    cp = installed["cluster"]
    before = installed["gate"].admission_requests()
    dry = cp.kubectl(
        "apply",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        stdin={
            **_gpu_pod("gpugate", "own"),
            "spec": {**_gpu_pod("gpugate", "own")["spec"], "runtimeClassName": "nvidia"},
        },
    )
    assert "gpugate.io/policy" not in (dry.json()["metadata"].get("annotations") or {})
    assert installed["gate"].admission_requests() == before


@pytest.mark.e2e
def test_installed_auditor_rbac_runs_gpugate_audit_and_nothing_more(installed: dict[str, Any], tmp_path: Path) -> None:
    """`gpugate audit` as a member of gpugate-auditors reads the release's policies; a stranger is refused; the
    role reaches no other ConfigMap, no Secret and no write."""
    from tests.e2e.test_audit import _user_kubeconfig, audit

    cp = installed["cluster"]
    alice = _user_kubeconfig(cp, tmp_path, "alice", ["gpugate-auditors"])
    done = audit(cp, "-o", "json", "--exit-zero", kubeconfig=alice)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["policies"]["source"] == "configmap gpugate/gpugate-policies"
    stranger = audit(cp, kubeconfig=_user_kubeconfig(cp, tmp_path, "mallory", []))
    assert stranger.returncode == 2 and "HTTP 403" in stranger.stderr
    as_alice = ("--as", "alice", "--as-group", "gpugate-auditors")
    for verb, resource, allowed in (
        ("list", "statefulsets.apps", "yes"),
        ("get", "configmaps/gpugate-policies", "yes"),
        ("get", "configmaps/other", "no"),
        ("get", "secrets/gpugate-tls", "no"),
        ("create", "pods", "no"),
        ("watch", "pods", "no"),
    ):
        answer = cp.kubectl("auth", "can-i", verb, resource, "-n", "gpugate", *as_alice, check=False)
        assert answer.stdout.strip() == allowed, (verb, resource, answer.stdout, answer.stderr)


@pytest.mark.e2e
def test_upgrade_keeps_the_certificate_and_uninstall_removes_the_webhooks(
    helm: Path, installed: dict[str, Any]
) -> None:
    cp = installed["cluster"]
    run_helm(
        helm,
        "upgrade",
        "gpugate",
        str(CHART),
        "--namespace",
        "gpugate",
        *installed["values"],
        "--set",
        "replicas=3",
        kubeconfig=cp.kubeconfig,
    )
    after = cp.kubectl("get", "secret", "gpugate-tls", "-n", "gpugate", "-o", "json").json()
    assert after["data"] == installed["secret"]["data"]
    config = cp.kubectl("get", "mutatingwebhookconfiguration", "gpugate", "-o", "json").json()
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == installed["secret"]["data"]["ca.crt"]
    assert cp.kubectl("get", "deployment", "gpugate", "-n", "gpugate", "-o", "json").json()["spec"]["replicas"] == 3
    # Still trusted after the upgrade: a dry run goes through gpugate.
    namespace = cp.create_namespace("chart-upgraded")
    pod = cp.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=_gpu_pod(namespace, "p")).json()
    assert pod["spec"]["runtimeClassName"] == "nvidia"

    run_helm(helm, "uninstall", "gpugate", "--namespace", "gpugate", kubeconfig=cp.kubeconfig)
    for kind in (
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "clusterroles",
    ):
        listed = cp.kubectl("get", kind, "-o", "json").json()["items"]
        assert not [o for o in listed if o["metadata"]["name"].startswith("gpugate")], kind
    assert json.loads(cp.kubectl("get", "secrets", "-n", "gpugate", "-o", "json").stdout)["items"] == []


def test_the_report_dashboard_is_a_configmap_for_grafana_s_sidecar(helm: Path) -> None:
    [configmap] = [
        d
        for d in template(helm, "dashboard.enabled=true")
        if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]
    ]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["gpugate-report-dashboard.json"])
    assert dashboard == json.loads((DEPLOY / "monitoring" / "gpugate-report-dashboard.json").read_text())
    assert not [d for d in template(helm) if "dashboard" in d["metadata"]["name"]]
