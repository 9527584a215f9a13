"""``gpugate serve --native-sync`` through the real apiserver (v1.36.3), the server running under exactly the
RBAC of deploy/components/native-sync (a token of the gpugate service account, not the admin's certificate):
it applies the compiled objects and narrows the webhooks, a plain GPU pod then makes no webhook call, a policy
edit is applied again, an edit that does not load changes nothing, the role grants its own objects only, and
/readyz and `gpugate fleet` say which tier is in force."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import ControlPlane, find_binaries
from tests.harness.gpugate import WEBHOOK_KINDS, GPUGate, gpugate_executable, point_at, render_deploy
from tests.harness.polling import eventually
from tests.harness.processes import https_get
from tests.support import REPO

pytestmark = pytest.mark.e2e

SHIPPED = REPO / "policies"
SERVICE_ACCOUNT = "system:serviceaccount:gpugate:gpugate"


@dataclass
class Synced:
    cluster: ControlPlane
    gate: GPUGate
    policy_dir: Any


def _token_kubeconfig(cp: ControlPlane, path: Any) -> None:
    token = cp.kubectl("create", "token", "gpugate", "-n", "gpugate", "--duration=2h").stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {
                    "server": cp.server,
                    "certificate-authority-data": base64.b64encode(cp.ca.cert_path.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "gpugate", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "gpugate"}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    cp = ControlPlane(find_binaries(), tmp_path_factory.mktemp("cluster-native-sync"))
    gate: GPUGate | None = None
    try:
        cp.start()
        for runtime_class in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
            cp.ensure_runtime_class(runtime_class)
        work = tmp_path_factory.mktemp("gpugate-native-sync")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        for shipped in sorted(SHIPPED.glob("*.yaml")):
            shutil.copy(shipped, policy_dir / shipped.name)
        kubeconfig = work / "service-account.kubeconfig"
        gate = GPUGate(work, policy_dir, kubeconfig=kubeconfig, extra_args=("--native-sync",))
        objects = point_at(render_deploy(cp, "native-sync"), gate)
        # The service account and its roles first (the token needs the account), the webhooks once gpugate runs.
        first = sorted(
            (o for o in objects if o["kind"] not in WEBHOOK_KINDS), key=lambda o: 0 if o["kind"] == "Namespace" else 1
        )
        for obj in first:
            cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=obj)
        _token_kubeconfig(cp, kubeconfig)
        gate.start()
        # Not register(): its wait for the validating webhook sends a pod gpugate-always refuses first once the
        # sync has applied it; the tests wait for the sync instead, and see the webhooks answer.
        for obj in (o for o in objects if o["kind"] in WEBHOOK_KINDS):
            cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=obj)
        yield Synced(cp, gate, policy_dir)
    finally:
        if gate is not None:
            gate.stop()
        cp.stop()


def _readyz(s: Synced) -> str:
    status, body = https_get(f"{s.gate.url}/readyz", ca=s.gate.ca)
    assert status == 200, body
    return body


def _get(s: Synced, kind: str, name: str) -> dict[str, Any] | None:
    got = s.cluster.kubectl("get", kind, name, "-o", "json", "--show-managed-fields", check=False)
    return json.loads(got.stdout) if got.ok else None


def _in_sync(s: Synced) -> bool:
    always = _get(s, "validatingadmissionpolicy", "gpugate-always")
    hooks = [_get(s, k, "gpugate") for k in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")]
    return (
        "kept by this replica" in _readyz(s)
        and always is not None
        and all(
            h is not None and "not-decided-natively" in [c["name"] for c in h["webhooks"][0]["matchConditions"]]
            for h in hooks
        )
    )


def _plain(s: Synced) -> dict[str, Any]:
    ns = s.cluster.create_namespace("sync", {"team": "probe"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }


def test_the_server_applies_the_native_tier_and_a_plain_pod_then_makes_no_webhook_call(synced: Synced) -> None:
    assert eventually(lambda: _in_sync(synced), timeout=90), _readyz(synced)
    # /readyz is answered by any worker: one that has not stepped yet says "starting" (the flake once seen here).
    in_force = "admission tier: native + webhook: the native objects of policies "
    assert eventually(lambda: in_force in _readyz(synced), timeout=60), _readyz(synced)
    for kind, name in (
        ("mutatingadmissionpolicy", "gpugate-mutate"),
        ("validatingadmissionpolicybinding", "gpugate-always"),
    ):
        obj = _get(synced, kind, name)
        assert obj is not None, name
        assert [m["manager"] for m in obj["metadata"]["managedFields"]] == ["gpugate-serve"]
    plain = _plain(synced)
    last: list[Any] = []

    def formed_natively() -> Any:
        # The objects are stored, but kube-apiserver takes the MutatingAdmissionPolicy in (compiled on its policy
        # refresh, about once a second) and the narrowed webhook configurations from its informers a moment later:
        # until it has both, a plain pod is formed by the webhook. Ask until gpugate-mutate forms it with no call.
        before = synced.gate.admission_requests()
        done = synced.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=plain, check=False)
        last[:] = [done, synced.gate.admission_requests() - before]
        annotations = json.loads(done.stdout)["metadata"].get("annotations") or {} if done.ok else {}
        return (done, before) if "gpugate.io/policy" in annotations and last[1] == 0 else None

    answered = eventually(formed_natively, timeout=60)
    assert answered, (
        "60 s after the sync, a plain GPU pod was still not formed by gpugate-mutate without a call to gpugate's "
        f"server ({last[1]:.0f} calls):\n{last[0]}"
    )
    done, before = answered
    stored = json.loads(done.stdout)
    assert stored["metadata"]["annotations"]["gpugate.io/policy"] == "default"
    assert stored["metadata"]["labels"]["gpugate.io/team"] == "probe"
    assert synced.gate.admission_requests() == before, "a plain GPU pod was sent to gpugate's server"
    # An instance type both H100 pools share: the webhook narrows the pod's own choice to one class's product.
    chosen = _plain(synced)
    chosen["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}

    def webhook_forms_it() -> bool:
        done = synced.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=chosen, check=False)
        selector = json.loads(done.stdout)["spec"].get("nodeSelector") or {} if done.ok else {}
        return selector.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"

    assert eventually(webhook_forms_it, timeout=60), "a pod that chose its model was not formed by the webhook"
    assert synced.gate.admission_requests() > before
    fleet = subprocess.run(
        [str(gpugate_executable()), "fleet", "--kubeconfig", str(synced.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "admission tier: native + webhook: the native objects of policies " in fleet.stdout, fleet.stderr
    assert "applied by gpugate-serve" in fleet.stdout


def test_the_role_grants_gpugate_s_own_admission_objects_only(synced: Synced) -> None:
    def can(*args: str) -> str:
        return synced.cluster.kubectl("auth", "can-i", *args, f"--as={SERVICE_ACCOUNT}", check=False).stdout.strip()

    assert can("patch", "validatingadmissionpolicies/gpugate-always") == "yes"
    assert can("create", "mutatingadmissionpolicies/gpugate-mutate") == "yes"
    assert can("patch", "validatingadmissionpolicies/someone-elses") == "no"
    assert can("create", "validatingadmissionpolicies") == "no"
    assert can("delete", "mutatingwebhookconfigurations/gpugate") == "no"
    assert can("patch", "validatingwebhookconfigurations/another-webhook") == "no"
    assert can("patch", "clusterroles/gpugate-native-sync") == "no"


def _per_container(enforce: dict[str, Any]) -> int | None:
    """Policy "serving"'s maxPerContainer as the compiled table in gpugate-always (which holds the enforce-mode rules) holds it."""
    for v in enforce["spec"]["variables"]:
        if v["name"] == "maxPerContainer":
            table = v["expression"].split("[?", 1)[0]
            return int(json.loads(table)["serving"])
    return None


def test_a_policy_edit_is_applied_and_one_that_does_not_load_changes_nothing(synced: Synced) -> None:
    assert eventually(lambda: _in_sync(synced), timeout=90), _readyz(synced)

    def digest() -> str:
        always = _get(synced, "validatingadmissionpolicy", "gpugate-always")
        return always["metadata"]["annotations"]["gpugate.io/policy-digest"] if always else ""

    first = digest()
    serving = synced.policy_dir / "10-serving.yaml"
    original = serving.read_text()
    assert "maxPerContainer: 4" in original
    serving.write_text(original.replace("maxPerContainer: 4", "maxPerContainer: 2"))

    def enforced() -> bool:
        enforce = _get(synced, "validatingadmissionpolicy", "gpugate-always")
        return enforce is not None and _per_container(enforce) == 2 and digest() != first

    assert eventually(enforced, timeout=90), "the edited policy was not applied"
    second = digest()
    serving.write_text("apiVersion: gpugate.io/v1\nkind: GPUPolicy\nspec: [\n")
    try:
        assert eventually(lambda: "policy edit ignored" in _readyz(synced), timeout=60), _readyz(synced)
        assert "admission tier: native + webhook" in _readyz(synced)
        assert digest() == second
        enforce = _get(synced, "validatingadmissionpolicy", "gpugate-always")
        assert enforce is not None and _per_container(enforce) == 2
    finally:
        serving.write_text(original)


def _conditions(s: Synced, webhook: str = "validate.gpugate.io") -> dict[str, str]:
    config = _get(s, "validatingwebhookconfiguration", "gpugate") or {"webhooks": []}
    hook: dict[str, Any] = next((h for h in config["webhooks"] if h["name"] == webhook), {})
    return {c["name"]: c["expression"] for c in hook.get("matchConditions", [])}


def _claim(namespace: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}},
    }


def test_claims_of_a_device_class_that_serves_no_gpu_skip_the_validating_webhook(synced: Synced) -> None:
    """Once the inventory has a DeviceClass of a driver no policy's device names (dra.cpu), the sync adds
    gpu-device-classes to the validating webhook: a CPU claim makes no webhook call, a GPU claim still does."""
    assert eventually(lambda: _in_sync(synced), timeout=90), _readyz(synced)
    for name, driver in (("dra.cpu", "dra.cpu"), ("gpu.nvidia.com", "gpu.nvidia.com")):
        device_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
        }
        synced.cluster.kubectl("apply", "-f", "-", stdin=device_class)
    # On the webhook that routes the claims, not the pod-create one (which keeps its narrowing).
    claims = "validate-objects.gpugate.io"
    assert eventually(lambda: '["dra.cpu"]' in _conditions(synced, claims).get("gpu-device-classes", ""), timeout=90), (
        _conditions(synced, claims)
    )
    assert "not-decided-natively" in _conditions(synced)
    assert "gpu-device-classes" not in _conditions(synced)
    ns = synced.cluster.create_namespace("sync-claims", {"team": "probe"})

    def skipped() -> bool:
        # The apiserver reads the changed configuration from its informer a moment after it is stored.
        before = synced.gate.admission_requests()
        done = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=_claim(ns, "dra.cpu"), check=False)
        assert done.ok, done.stderr
        return synced.gate.admission_requests() == before

    assert eventually(skipped, timeout=30), "a CPU claim was still sent to gpugate's validating webhook"
    before = synced.gate.admission_requests()
    gpu = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=_claim(ns, "gpu.nvidia.com"))
    assert gpu.ok, gpu.stderr
    assert synced.gate.admission_requests() > before, "a GPU claim skipped gpugate's validating webhook"


def test_the_pool_digest_refuses_a_pod_without_gpus_under_an_alias_of_the_nvidia_runtime(synced: Synced) -> None:
    """``my-gpu`` (handler nvidia) is in no static list: gpugate-always carries it from the inventory (the pool digest) and refuses a
    pod without GPUs under it in the apiserver, on its own (gpugate-runtime-handlers, the static deploy's defence
    by handler, unbound for this test), and gpugate's server is never called."""
    assert eventually(lambda: _in_sync(synced), timeout=90), _readyz(synced)
    synced.cluster.ensure_runtime_class("my-gpu", "nvidia")

    def carried() -> bool:
        always = _get(synced, "validatingadmissionpolicy", "gpugate-always")
        return always is not None and '["my-gpu"]' in always["spec"]["matchConditions"][0]["expression"]

    assert eventually(carried, timeout=90), _readyz(synced)
    handlers = _get(synced, "validatingadmissionpolicybinding", "gpugate-runtime-handlers")
    assert handlers is not None
    synced.cluster.kubectl("delete", "validatingadmissionpolicybinding", "gpugate-runtime-handlers")
    try:
        ns = synced.cluster.create_namespace("sync-alias", {"team": "probe"})
        cpu = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "cpu", "namespace": ns},
            "spec": {
                "runtimeClassName": "my-gpu",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        before = synced.gate.admission_requests()

        def answered() -> Any:
            # Admitted (a failure: stop), or refused by gpugate-always. A refusal by gpugate-runtime-handlers means
            # the apiserver's policy cache has not seen the binding's deletion yet: ask again.
            done = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=cpu, check=False)
            return done if done.ok or "'gpugate-always'" in done.stderr else None

        refused = eventually(answered, timeout=60)
        assert refused, "gpugate-runtime-handlers still refused the pod 60 s after its binding was deleted"
        assert not refused.ok, "a pod without GPUs under my-gpu (handler nvidia) was admitted"
        assert "ValidatingAdmissionPolicy 'gpugate-always'" in refused.stderr, refused.stderr
        assert (
            'requests no GPU but runs under the GPU runtime class "my-gpu" (RuntimeClass "my-gpu" has handler '
            '"nvidia", a GPU runtime\'s)'
        ) in refused.stderr, refused.stderr
        assert synced.gate.admission_requests() == before, "a pod without GPUs was sent to gpugate's server"
    finally:
        handlers.pop("status", None)
        handlers["metadata"] = {"name": "gpugate-runtime-handlers"}
        synced.cluster.kubectl("apply", "-f", "-", stdin=handlers)


def test_the_pool_digest_refuses_a_plain_pod_no_node_could_host(synced: Synced) -> None:
    """Last in this module: it adds a GPU node, which the others do not expect."""
    assert eventually(lambda: _in_sync(synced), timeout=90), _readyz(synced)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        # An L4 node (GFD's product label), the class a plain nvidia.com/gpu pod is formed for.
        "metadata": {
            "name": "gpu-2",
            "labels": {"kubernetes.io/hostname": "gpu-2", "nvidia.com/gpu.product": "NVIDIA-L4"},
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"},
        },
    }
    synced.cluster.kubectl("create", "-f", "-", stdin=node)

    def largest() -> Any:
        always = _get(synced, "validatingadmissionpolicy", "gpugate-always")
        if always is None:
            return None
        table = next((v["expression"] for v in always["spec"]["variables"] if v["name"] == "largest"), None)
        if table is None:
            return None
        return json.loads(table.split("[?", 1)[0]).get("nvidia.com/gpu")

    assert eventually(lambda: largest() == 2, timeout=90), _readyz(synced)
    # /readyz is answered by any worker; the Lease holder's says the digest.
    assert eventually(lambda: "; pool digest " in _readyz(synced), timeout=60), _readyz(synced)
    pod = _plain(synced)
    before = synced.gate.admission_requests()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"

    def refused_now() -> Any:
        done = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod, check=False)
        return None if done.ok else done

    # kube-apiserver compiles a changed ValidatingAdmissionPolicy from its own informer, a moment after the
    # object is stored: a dry-run right after the update can still meet the previous digest (CI saw it once).
    refused = eventually(refused_now, timeout=30)
    assert refused, "the apiserver still admits a pod asking for 3 GPUs after the pool digest said 2"
    assert "ValidatingAdmissionPolicy 'gpugate-always'" in refused.stderr
    assert "requests 3 × nvidia.com/gpu, more than the 2 one node of the cluster" in refused.stderr
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    admitted = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=pod, check=False)
    assert admitted.ok, admitted.stderr
    # A pod naming a class no node of the cluster belongs to, and no pool adds: refused in the apiserver, naming
    # the class, as the webhook's feasibility rule refuses it (a pod formed for nodes that can never exist).
    named = _plain(synced)
    named["metadata"]["labels"] = {"gpugate.io/model": "h100"}
    refused = synced.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=named, check=False)
    assert not refused.ok, "a pod naming a class without nodes was admitted"
    assert "ValidatingAdmissionPolicy 'gpugate-always'" in refused.stderr, refused.stderr
    assert 'requests 1 × nvidia.com/gpu, which no node of GPU model class "h100" offers' in refused.stderr
    assert synced.gate.admission_requests() == before, "a plain GPU pod was sent to gpugate's server"
