"""The native tier against the webhook, through the real apiserver (v1.36.3: MutatingAdmissionPolicy GA).

One control plane of its own, gpugate serving the SHIPPED policies and registered from deploy/. Every example
and real-world manifest with an expected verdict that holds a Pod (policies/examples/expected.yaml,
tests/fixtures/real-manifests/expected.yaml) is sent with `kubectl create --dry-run=server` three times:

(a) the webhook only;
(c) the objects `gpugate policy compile policies` prints, applied, and the webhook configurations deleted (the
    strongest form of "gpugate's server is down": no webhook at all, so nothing is refused for failing closed);
(b) the native objects and the webhook together, the webhooks narrowed by the compiled matchCondition (as
    deploy/components/native-tier and the chart's nativeTier install them);
and, between them, the native objects and the narrowed webhooks with gpugate's server stopped.

(a) and (b) must give the same verdict and store the same objects; in (c) and with the server stopped every
manifest the apiserver admits must be stored exactly as in (a) (formed as /mutate forms it), anything else
refused. A plain GPU pod makes no call to gpugate's server in (b) (its admission counter does not move). The messages of (a)
and (b) are printed side by side where they differ (the validating admission policies run before the
validating webhook, so their message answers first).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.harness.controlplane import ControlPlane, find_binaries
from tests.harness.fleet import device_classes
from tests.harness.gpugate import WEBHOOK_KINDS, GPUGate, gpugate_executable, point_at, register, render_deploy
from tests.harness.polling import eventually
from tests.harness.ports import free_port
from webhook.native.compiler import Compiled, webhook_patch
from webhook.policy.keys import FORMED_BY_LABEL

from .test_fleet import CASES, NAMESPACE_PREFIX

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "policies"
POD_CASES = [
    (source, case)
    for source, case in CASES
    if any(d.get("kind") == "Pod" for d in yaml.safe_load_all(source.read_text()) if d)
]
CLUSTER_SCOPED = {"DeviceClass", "ClusterTrainingRuntime"}


@dataclass
class Outcome:
    ok: bool
    objects: list[Any]  # as _normal leaves them
    stderr: str
    marked: int = 0  # how many carried gpugate.io/formed-by (what the native tier gives a pod it formed)


@dataclass
class Native:
    cluster: ControlPlane
    gate: GPUGate
    webhooks: list[dict[str, Any]]
    native: str
    namespaces: dict[tuple[str, str], str]

    @property
    def narrowed(self) -> list[dict[str, Any]]:
        """The webhook configurations with the compiled objectSelector and narrowing condition added, as the
        native-tier component's patch adds them (to the first webhook of each, a pod's creation)."""
        patch = webhook_patch(Compiled(tuple(d for d in yaml.safe_load_all(self.native) if d), ()))
        return [jsonpatch.apply_patch(config, patch) for config in self.webhooks]


def _compiled() -> str:
    done = subprocess.run(
        [str(gpugate_executable()), "policy", "compile", str(SHIPPED)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Native]:
    cp = ControlPlane(find_binaries(), tmp_path_factory.mktemp("cluster-native"))
    gate: GPUGate | None = None
    try:
        cp.start()
        for runtime_class in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
            cp.ensure_runtime_class(runtime_class)
        for device_class in device_classes():
            cp.kubectl("apply", "-f", "-", stdin=device_class)
        cp.ensure_default_service_account("kube-system")
        work = tmp_path_factory.mktemp("gpugate-native")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        for shipped in sorted(SHIPPED.glob("*.yaml")):
            shutil.copy(shipped, policy_dir / shipped.name)
        gate = GPUGate(work, policy_dir, kubeconfig=cp.kubeconfig)
        gate.start()
        registered = point_at(render_deploy(cp), gate)
        register(cp, registered)
        yield Native(cp, gate, [o for o in registered if o["kind"] in WEBHOOK_KINDS], _compiled(), {})
    finally:
        if gate is not None:
            gate.stop()
        cp.stop()


def _namespace(n: Native, original: str, labels: dict[str, str] | None) -> str:
    key = (original, yaml.safe_dump(labels or {}))
    if key not in n.namespaces:
        prefix = NAMESPACE_PREFIX.get(original, original)
        n.namespaces[key] = n.cluster.create_namespace(prefix, {k: str(v) for k, v in (labels or {}).items()})
    return n.namespaces[key]


def _docs(n: Native, source: Path, case: dict[str, Any]) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    labels = case.get("namespaceLabels") or {}
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            continue
        original = doc["metadata"].get("namespace", "default")
        doc["metadata"]["namespace"] = _namespace(n, original, labels.get(original))
        if doc["kind"] == "Pod" and doc["spec"].get("serviceAccountName"):
            n.cluster.kubectl(
                "create",
                "serviceaccount",
                doc["spec"]["serviceAccountName"],
                "-n",
                doc["metadata"]["namespace"],
                check=False,
            )
    return docs


_VOLATILE = re.compile(r"kube-api-access-[a-z0-9]{5}")


def _normal(obj: dict[str, Any]) -> dict[str, Any]:
    """The stored object without what differs between two dry runs of the same object, and without the one label
    the native tier adds to a pod it formed (gpugate.io/formed-by: its webhooks' objectSelector skips that pod; the
    tests below count and check it)."""
    meta = obj.get("metadata", {})
    if obj.get("kind") == "Pod":
        (meta.get("labels") or {}).pop(FORMED_BY_LABEL, None)
    for key in ("uid", "creationTimestamp", "managedFields", "resourceVersion"):
        meta.pop(key, None)
    if meta.get("generateName"):
        meta.pop("name", None)
    normal: dict[str, Any] = json.loads(_VOLATILE.sub("kube-api-access-x", json.dumps(obj, sort_keys=True)))
    return normal


def _send(n: Native, docs: list[dict[str, Any]]) -> Outcome:
    stdin: dict[str, Any] | list[Any] = docs[0] if len(docs) == 1 else docs
    result = n.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=stdin, check=False)
    decoder, text, objects, marked = json.JSONDecoder(), result.stdout.strip(), [], 0
    while text:
        obj, end = decoder.raw_decode(text)
        marked += FORMED_BY_LABEL in ((obj.get("metadata") or {}).get("labels") or {})
        objects.append(_normal(obj))
        text = text[end:].strip()
    return Outcome(result.ok, objects, result.stderr, marked)


def _phase(n: Native, sent: list[list[dict[str, Any]]]) -> list[Outcome]:
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda docs: _send(n, docs), sent))


def _probe(n: Native, **extra: Any) -> dict[str, Any]:
    ns = _namespace(n, "default", {"team": "probe"})
    labels = extra.pop("labels", {})
    selector = extra.pop("node_selector", None)
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
    }
    if selector:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns, "labels": labels},
        "spec": spec,
    }


def _without_webhooks(n: Native) -> None:
    for hook in n.webhooks:
        n.cluster.kubectl("delete", hook["kind"], hook["metadata"]["name"])
    # A pod that chose its GPU by a cloud's label: only the webhook forms it, so alone the native tier refuses it.
    plain, chosen = _probe(n), _probe(n, node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"})

    def native_alone() -> bool:
        # The refusal of the chosen pod says the mutating webhook is gone (it would form that pod), the plain pod's
        # count that the validating one is too (the apiserver drops each configuration through its own informer).
        before = n.gate.admission_requests()
        formed = n.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=plain, check=False)
        refused = n.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=chosen, check=False)
        return (
            formed.ok
            and "nvidia.com/gpu.product" in (json.loads(formed.stdout)["spec"].get("nodeSelector") or {})
            and "ValidatingAdmissionPolicy 'gpugate-always'" in refused.stderr
            and n.gate.admission_requests() == before
        )

    assert eventually(native_alone, timeout=60), "the native objects did not take effect alone within 60 s"


def _with_webhooks(n: Native, *, narrowed: bool = False) -> None:
    for hook in n.narrowed if narrowed else n.webhooks:
        n.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=hook)
    # An instance type both H100 pools share: the webhook narrows the pod's own choice to one class's product.
    chosen = _probe(n, node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"})

    def webhook_back() -> bool:
        formed = n.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=chosen, check=False)
        selector = json.loads(formed.stdout)["spec"].get("nodeSelector") or {} if formed.ok else {}
        return selector.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"

    assert eventually(webhook_back, timeout=60), "the webhooks did not take effect again within 60 s"


def _server_stopped(n: Native) -> None:
    _with_webhooks(n, narrowed=True)
    n.gate.stop()
    # A pod only the validating webhook judges (no GPU, a device variable set to none): nothing native refuses
    # it first, so its refusal says the webhook failed closed.
    webhook_only = _probe(n)
    container = webhook_only["spec"]["containers"][0]
    container["resources"] = {}
    container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]

    def failing_closed() -> bool:
        refused = n.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=webhook_only, check=False)
        return 'failed calling webhook "validate.gpugate.io"' in refused.stderr

    assert eventually(failing_closed, timeout=60), "the stopped server was still answering after 60 s"


def _holds_by_claim(docs: list[dict[str, Any]]) -> bool:
    return any(d.get("kind") == "Pod" and d["spec"].get("resourceClaims") for d in docs)


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("Error from server")]
    return (lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else "")[:240]


def test_native_tier_decides_as_the_webhook_and_forms_every_pod_it_admits_alone(native: Native) -> None:
    assert POD_CASES, "no example holds a Pod"
    sent = [_docs(native, source, case) for source, case in POD_CASES]

    webhook_only = _phase(native, sent)
    native.cluster.kubectl("apply", "-f", "-", stdin=native.native)
    _without_webhooks(native)
    native_only = _phase(native, sent)
    _server_stopped(native)
    server_down = _phase(native, sent)
    native.gate.start()
    _with_webhooks(native, narrowed=True)
    both = _phase(native, sent)

    names = [f"{source.parent.name}/{source.name}" for source, _ in POD_CASES]
    differences, malformed, messages = [], [], []
    claims = []
    for name, docs, a, b, c, down in zip(names, sent, webhook_only, both, native_only, server_down, strict=True):
        if a.ok != b.ok or (a.ok and a.objects != b.objects):
            differences.append(
                f"{name}: (a) {'admitted' if a.ok else 'refused'}, (b) {'admitted' if b.ok else 'refused'}"
                f"\n  (a) {_first_line(a.stderr)}\n  (b) {_first_line(b.stderr)}"
                + (f"\n  (a) {a.objects}\n  (b) {b.objects}" if a.ok and b.ok else "")
            )
        if down.ok and (not a.ok or down.objects != a.objects):
            malformed.append(f"{name}: admitted with gpugate's server stopped as\n  {down.objects}")
        # Only the webhook can tell a GPU claim from any other (it reads the claim's DeviceClass): with no webhook
        # at all, a pod holding a GPU only through a claim is left as sent.
        if c.ok and _holds_by_claim(docs) and c.objects != a.objects:
            claims.append(name)
            continue
        if c.ok and (not a.ok or c.objects != a.objects):
            malformed.append(
                f"{name}: admitted by the native tier alone as\n  {c.objects}\n  (a): "
                + (str(a.objects) if a.ok else _first_line(a.stderr))
            )
        if not a.ok and _first_line(a.stderr) != _first_line(b.stderr):
            messages.append(f"| {name} | {_first_line(a.stderr)} | {_first_line(b.stderr)} |")
    print("\n".join(["(a) webhook only | (b) native + webhook, where the messages differ:", *messages]))
    formed = sum(1 for c in native_only if c.ok)
    print(
        f"{len(names)} manifests; native tier alone admitted {formed}, refused {len(names) - formed}; "
        f"with the server stopped admitted {sum(1 for d in server_down if d.ok)}; claim pods left as sent "
        f"without any webhook: {', '.join(claims) or 'none'}"
    )
    # With the webhooks narrowed, a pod the native tier formed skips them: it starts while gpugate is down.
    stranded = [
        name
        for name, c, down in zip(names, native_only, server_down, strict=True)
        if c.ok and _formed_natively(c.objects) and not down.ok
    ]
    print(
        f"with the server stopped: {sum(1 for c in native_only if c.ok and _formed_natively(c.objects))} formed by "
        f"the native tier, {len(stranded)} of them refused"
    )
    # The label is the native tier's alone, on what it formed: never on what the webhook alone stored.
    assert not any(a.marked for a in webhook_only), [n for n, a in zip(names, webhook_only, strict=True) if a.marked]
    unmarked = [
        name
        for name, b in zip(names, both, strict=True)
        if b.ok and _formed_natively(b.objects) and not b.marked and name not in claims
    ]
    print(f"(b): {sum(b.marked for b in both)} pods carry {FORMED_BY_LABEL}; formed without it: {unmarked or 'none'}")
    assert not differences, "\n".join(differences)
    assert not malformed, "\n".join(malformed)
    assert not stranded, f"formed natively, yet refused with the server stopped: {stranded}"


def _formed_natively(objects: list[Any]) -> bool:
    return any(
        o.get("kind") == "Pod" and "gpugate.io/policy" in (o["metadata"].get("annotations") or {}) for o in objects
    )


def _dry_run(n: Native, pod: dict[str, Any]) -> Any:
    return n.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=pod, check=False)


def test_a_plain_gpu_pod_makes_no_webhook_call_and_one_that_only_claims_to_be_formed_is_refused(native: Native) -> None:
    native.cluster.kubectl("apply", "-f", "-", stdin=native.native)
    _with_webhooks(native, narrowed=True)
    plain = _probe(native)
    last: list[Any] = []

    def formed_natively() -> Any:
        # _with_webhooks saw a chosen pod formed, as the webhook also forms it before the apiserver has compiled the
        # native objects (its policy refresh, about once a second) and read the narrowed configurations: until then
        # a plain pod is formed by the webhook (when this test runs without the one above). Ask until it is not.
        before = native.gate.admission_requests()
        formed = _dry_run(native, plain)
        last[:] = [formed, native.gate.admission_requests() - before]
        annotations = json.loads(formed.stdout)["metadata"].get("annotations") or {} if formed.ok else {}
        return (formed, before) if "gpugate.io/policy" in annotations and last[1] == 0 else None

    answered = eventually(formed_natively, timeout=60)
    assert answered, (
        "60 s after the native objects and the narrowed webhooks were applied, a plain GPU pod was still not formed "
        f"by gpugate-mutate without a call to gpugate's server ({last[1]:.0f} calls):\n{last[0]}"
    )
    formed, before = answered
    assert formed.ok, formed.stderr
    stored = json.loads(formed.stdout)
    assert stored["metadata"]["annotations"]["gpugate.io/policy"] == "default"
    assert "nvidia.com/gpu.product" in stored["spec"]["nodeSelector"]
    assert stored["metadata"]["labels"][FORMED_BY_LABEL] == "native-tier"
    assert native.gate.admission_requests() == before, "a plain GPU pod was sent to gpugate's server"

    # The label written by the pod's author: gpugate-mutate removes it from a pod it does not form, so the webhooks
    # judge that pod as ever (one that chose an instance type is formed by /mutate, a CPU pod is nobody's).
    forged_label = {FORMED_BY_LABEL: "native-tier"}
    chose = _probe(native, labels=dict(forged_label), node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"})
    by_webhook = _dry_run(native, chose)
    assert by_webhook.ok, by_webhook.stderr
    assert FORMED_BY_LABEL not in json.loads(by_webhook.stdout)["metadata"]["labels"]
    assert json.loads(by_webhook.stdout)["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert native.gate.admission_requests() >= before + 2
    cpu = _probe(native, labels=dict(forged_label))
    cpu["spec"]["containers"][0]["resources"] = {}
    unmarked = _dry_run(native, cpu)
    assert unmarked.ok, unmarked.stderr
    assert FORMED_BY_LABEL not in (json.loads(unmarked.stdout)["metadata"].get("labels") or {})
    before = native.gate.admission_requests()

    # A copy of what the native tier stored claims to be formed, and is: admitted as it is, no call either.
    copy = json.loads(json.dumps(plain))
    copy["metadata"]["labels"] = stored["metadata"]["labels"]
    copy["metadata"]["annotations"] = stored["metadata"]["annotations"]
    for field in ("nodeSelector", "tolerations", "runtimeClassName", "affinity"):
        if field in stored["spec"]:
            copy["spec"][field] = stored["spec"][field]
    again = _dry_run(native, copy)
    assert again.ok, again.stderr
    assert native.gate.admission_requests() == before

    # The same claim with the namespace's attribution label changed: the webhooks still skip it, gpugate-always
    # refuses it (one place judges it, one message).
    forged = json.loads(json.dumps(copy))
    assert forged["metadata"]["labels"]["gpugate.io/team"] == "probe", stored["metadata"]["labels"]
    forged["metadata"]["labels"]["gpugate.io/team"] = "someone-else"

    def refused_now() -> Any:
        # gpugate-always is compiled apart from gpugate-mutate: until it is, the webhooks skip the forged pod and
        # nothing refuses it.
        done = _dry_run(native, forged)
        return None if done.ok else done

    refused = eventually(refused_now, timeout=60)
    assert refused, "60 s after gpugate-always was applied, a pod that only claims to be formed was still admitted"
    assert not refused.ok
    assert "ValidatingAdmissionPolicy 'gpugate-always'" in refused.stderr
    assert "as if gpugate had formed it, but its label gpugate.io/team is not probe" in refused.stderr
    assert "remove the gpugate.io annotations" in refused.stderr
    assert "validate.gpugate.io" not in refused.stderr
    assert native.gate.admission_requests() == before

    # A container added after gpugate-mutate (a sidecar injector's, here in the pod as sent) lacks its void:
    # gpugate-mutate adds it (and `containers` to gpugate.io/mutated) as /mutate would, so the pod is formed again and
    # the webhooks skip it (the last test has the injector itself).
    sidecar = json.loads(json.dumps(copy))
    sidecar["spec"]["containers"].append({"name": "proxy", "image": "registry.k8s.io/pause:3.10"})
    voided = _dry_run(native, sidecar)
    assert voided.ok, voided.stderr
    proxy = json.loads(voided.stdout)["spec"]["containers"][1]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in proxy.get("env", [])
    assert "containers" in json.loads(voided.stdout)["metadata"]["annotations"]["gpugate.io/mutated"].split(",")
    assert native.gate.admission_requests() == before

    # A pod naming a class that serves it is formed natively as /mutate forms it: no call either.
    named = _dry_run(native, _probe(native, labels={"gpugate.io/model": "h100-mig"}))
    assert named.ok, named.stderr
    selector = json.loads(named.stdout)["spec"]["nodeSelector"]
    assert selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    assert native.gate.admission_requests() == before, "a pod naming its class was sent to gpugate's server"

    # A pod that chose its GPU by an instance type is the webhook's: the counter counts (mutate and validate).
    chosen = _dry_run(native, _probe(native, node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"}))
    assert chosen.ok, chosen.stderr
    assert native.gate.admission_requests() >= before + 2


class _SidecarInjector(BaseHTTPRequestHandler):
    """Another project's mutating webhook (Istio's sidecar injector, Datadog's library injection): it adds, once, a
    container and an init container that request no GPU to every pod it is sent, as Istio adds istio-proxy and
    istio-init."""

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        spec = request["object"]["spec"]
        if not any(c["name"] == "proxy" for c in spec["containers"]):
            init = {"name": "proxy-init", "image": "envoy"}
            patch = [
                {"op": "add", "path": "/spec/containers/-", "value": {"name": "proxy", "image": "envoy"}},
                {"op": "add", "path": "/spec/initContainers/-", "value": init}
                if spec.get("initContainers")
                else {"op": "add", "path": "/spec/initContainers", "value": [init]},
            ]
            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _sidecar_injector(cp: ControlPlane, namespace: str) -> Iterator[None]:
    """The injector registered for the pods of ``namespace`` labelled sidecar=inject, under a configuration name
    that sorts after "gpugate" (webhooks run in that order), as Istio's "istio-sidecar-injector" does."""
    pair = cp.ca.issue("sidecar-injector", common_name="sidecar-injector", ips=["127.0.0.1"], server=True)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _SidecarInjector)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    name = "zz-sidecar-injector"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "inject.sidecar.example.com",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{server.server_address[1]}/inject",
                    "caBundle": base64.b64encode(cp.ca.cert_path.read_bytes()).decode(),
                },
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": {"matchLabels": {"sidecar": "inject"}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
            }
        ],
    }
    cp.kubectl("apply", "-f", "-", stdin=config)
    try:
        yield
    finally:
        cp.kubectl("delete", "mutatingwebhookconfiguration", name, check=False)
        server.shutdown()
        server.server_close()


def _mutating_policy_evaluations(n: Native) -> float:
    """How often the apiserver has evaluated gpugate-mutate's match condition: it moves only while the policy is
    in force."""
    metrics = n.cluster.kubectl("get", "--raw", "/metrics").stdout
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_match_condition_evaluation_seconds_count{")
        and 'name="gpugate-mutate"' in line
    )


def test_a_container_another_webhook_adds_after_gpugate_gets_its_void_natively_as_from_the_webhook(
    native: Native,
) -> None:
    """A mutating webhook that runs after gpugate's adds a container and an init container without GPUs to a GPU
    pod. The webhook alone voids both on the reinvocation pass (/mutate, reinvocationPolicy IfNeeded). With the
    native tier gpugate's webhook was skipped on the first pass, so the apiserver does not reinvoke it, and
    /validate refused every such pod for the missing void; gpugate-mutate now voids both on that pass, with no call
    to gpugate's server, and the stored pod is the webhook's."""
    ns = _namespace(native, "sidecar", {"team": "probe"})
    pod = _probe(native, labels={"sidecar": "inject"})
    pod["metadata"]["namespace"] = ns
    void = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}

    def proxy(result: Any, field: str = "containers", name: str = "proxy") -> dict[str, Any]:
        containers = json.loads(result.stdout)["spec"].get(field) or []
        return next((c for c in containers if c["name"] == name), {})

    with _sidecar_injector(native.cluster, ns):
        native.cluster.kubectl("apply", "-f", "-", stdin=native.native)
        _with_webhooks(native, narrowed=True)
        last: list[Any] = []

        def natively() -> Any:
            before = native.gate.admission_requests()
            done = _dry_run(native, pod)
            last[:] = [done.stderr if not done.ok else done.stdout[-400:]]
            return done if done.ok and proxy(done) and native.gate.admission_requests() == before else None

        b = eventually(natively, timeout=60)
        assert b, f"with the native tier, the injected pod was not admitted without a call to gpugate: {last}"
        assert void in proxy(b).get("env", []), proxy(b)
        assert void in proxy(b, "initContainers", "proxy-init").get("env", []), json.loads(b.stdout)["spec"]
        annotations = json.loads(b.stdout)["metadata"]["annotations"]
        assert {"containers", "initContainers"} <= set(annotations["gpugate.io/mutated"].split(",")), annotations

        # (a) the webhook alone: once gpugate-mutate is no longer evaluated.
        native.cluster.kubectl("delete", "-f", "-", stdin=native.native)
        _with_webhooks(native)

        def by_the_webhook() -> Any:
            before, evaluated = native.gate.admission_requests(), _mutating_policy_evaluations(native)
            done = _dry_run(native, pod)
            alone = _mutating_policy_evaluations(native) == evaluated and native.gate.admission_requests() > before
            return done if done.ok and alone else None

        a = eventually(by_the_webhook, timeout=60)
        assert a, "60 s after the native objects were deleted, gpugate-mutate was still evaluated"
        assert void in proxy(a).get("env", []), proxy(a)
        assert void in proxy(a, "initContainers", "proxy-init").get("env", []), json.loads(a.stdout)["spec"]
        assert _normal(json.loads(b.stdout)) == _normal(json.loads(a.stdout))
