"""A gpugate server for a test control plane, and its registration from deploy/: the webhook
configurations rendered by `kubectl kustomize`, their clientConfig pointed at 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.controlplane import REPO, ControlPlane
from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.harness.processes import Process, https_get, wait_for_https


def gpugate_executable() -> Path:
    venv = REPO / ".venv" / "bin" / "gpugate"
    if venv.exists():
        return venv
    found = shutil.which("gpugate")
    if found:
        return Path(found)
    raise FileNotFoundError(f"no gpugate entry point at {venv} (run `make venv`)")


@dataclass
class GPUGate:
    """`gpugate serve` on 127.0.0.1 with certificates from `gpugate certs`."""

    workdir: Path
    policy_dir: Path
    kubeconfig: Path | None = None
    extra_args: tuple[str, ...] = ()  # more `gpugate serve` options (--native-sync)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cert_dir = self.workdir / "certs"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.exe = gpugate_executable()
        done = subprocess.run(
            [
                str(self.exe),
                "certs",
                "--service",
                "gpugate",
                "--namespace",
                "gpugate",
                "--host",
                "127.0.0.1",
                "--out",
                str(self.cert_dir),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"gpugate certs failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        self.ca = self.cert_dir / "ca.crt"
        self.ca_bundle = (self.cert_dir / "ca-bundle.b64").read_text().strip()
        argv = [
            str(self.exe),
            "serve",
            "--policies",
            str(self.policy_dir),
            "--cert",
            str(self.cert_dir / "tls.crt"),
            "--key",
            str(self.cert_dir / "tls.key"),
            "--bind",
            f"127.0.0.1:{self.port}",
        ]
        if self.kubeconfig is not None:
            argv += ["--kubeconfig", str(self.kubeconfig)]
        argv += list(self.extra_args)
        self.process = Process("gpugate", argv, self.workdir)

    def start(self) -> None:
        self.process.start()
        wait_for_https(f"{self.url}/readyz", process=self.process, ca=self.ca, timeout=60)

    def stop(self) -> None:
        self.process.stop()

    def metrics(self) -> str:
        status, body = https_get(f"{self.url}/metrics", ca=self.ca)
        assert status == 200, f"GET /metrics -> {status}: {body[:500]}"
        return body

    def admission_requests(self) -> float:
        """Sum of gpugate_admission_requests_total over every label set."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("gpugate_admission_requests_total"):
                total += float(line.rsplit(" ", 1)[1])
        return total


WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


# Where the test control plane's apiserver calls webhooks from (it runs on 127.0.0.1).
CONTROL_PLANE_CIDR = "127.0.0.1/32"


def control_plane_patch(cidr: str) -> dict[str, Any]:
    """The patch deploy/kustomization.yaml documents for the NetworkPolicy's control-plane addresses, read from
    that comment (so that the documented patch is the one the tests apply), with ``cidr`` in place of its
    example."""
    lines = (REPO / "deploy" / "kustomization.yaml").read_text().splitlines()
    start = lines.index("#   patches:")
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line.removeprefix("#   "))
    patches = yaml.safe_load("\n".join(block))["patches"]
    assert len(patches) == 1 and "10.0.0.0/28" in patches[0]["patch"], patches
    return {**patches[0], "patch": patches[0]["patch"].replace("10.0.0.0/28", cidr)}


def render_deploy(cp: ControlPlane, *components: str) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay of deploy/ with the documented control-plane patch (the apiserver's
    address here) and `components` (names under deploy/components/), as a user's overlay would list them."""
    overlay = cp.workdir / "overlay"
    overlay.mkdir(exist_ok=True)
    # kustomize takes only relative paths to resources and components.
    kustomization = {
        "resources": [os.path.relpath(REPO / "deploy", overlay)],
        "components": [os.path.relpath(REPO / "deploy" / "components" / c, overlay) for c in components],
        "patches": [control_plane_patch(CONTROL_PLANE_CIDR)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    rendered = cp.kubectl("kustomize", str(overlay))
    return [d for d in yaml.safe_load_all(rendered.stdout) if d]


def point_at(objects: list[dict[str, Any]], gate: GPUGate) -> list[dict[str, Any]]:
    """Copy of `objects` whose webhooks call `gate` by URL: only `clientConfig` changes."""
    out = json.loads(json.dumps(objects))
    for obj in out:
        if obj.get("kind") not in WEBHOOK_KINDS:
            continue
        for hook in obj.get("webhooks", []):
            service = hook.get("clientConfig", {}).get("service") or {}
            path = service.get("path") or "/"
            hook["clientConfig"] = {"url": f"{gate.url}{path}", "caBundle": gate.ca_bundle}
    return out


def webhook(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj.get("kind") == kind:
            for hook in obj.get("webhooks", []):
                if hook.get("name") == name:
                    return hook
    raise LookupError(f"no {kind} webhook {name!r} in the rendered deploy/")


def register(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """Apply everything deploy/ renders; the webhook configurations last, so that nothing else
    of ours goes through a webhook that is half registered."""
    order = {
        "Namespace": 0,
        "CustomResourceDefinition": 0,
        **dict.fromkeys(WEBHOOK_KINDS, 3),
        "ValidatingAdmissionPolicy": 1,
        "ValidatingAdmissionPolicyBinding": 2,
    }
    for obj in sorted(objects, key=lambda o: order.get(o.get("kind", ""), 1)):
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=obj)
    wait_until_in_force(cp, objects)


def wait_until_in_force(cp: ControlPlane, objects: list[dict[str, Any]], timeout: float = 60.0) -> None:
    """The apiserver picks up webhook configurations and admission policies through informers, and
    compiles policies asynchronously: until they are in force, requests skip them. Wait for each
    to answer a dry run, so that no test depends on how quickly that happens."""
    ns = cp.create_namespace("e2e-registration")
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10"}

    def probe_pod(**spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": ns},
            "spec": {"containers": [container], **spec},
        }

    kinds = {o.get("kind") for o in objects}
    if "MutatingWebhookConfiguration" in kinds:
        gpu = probe_pod(containers=[{**container, "resources": {"limits": {"nvidia.com/gpu": "1"}}}])

        def mutated() -> bool:
            dry = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu, check=False)
            return dry.ok and "gpugate.io/policy" in json.loads(dry.stdout)["metadata"].get("annotations", {})

        if not eventually(mutated, timeout=timeout):
            raise RuntimeError(f"the mutating webhook did not take effect within {timeout:.0f}s")
    if "ValidatingWebhookConfiguration" in kinds:
        env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
        peeker = probe_pod(containers=[{**container, "env": env}])

        def validated() -> bool:
            dry = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=peeker, check=False)
            return 'admission webhook "validate.gpugate.io"' in dry.stderr

        if not eventually(validated, timeout=timeout):
            raise RuntimeError(f"the validating webhook did not take effect within {timeout:.0f}s")
    if "ValidatingAdmissionPolicyBinding" in kinds:
        squatter = probe_pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])

        def backstop() -> bool:
            dry = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=squatter, check=False)
            return "ValidatingAdmissionPolicy" in dry.stderr

        if not eventually(backstop, timeout=timeout):
            raise RuntimeError(f"the ValidatingAdmissionPolicy backstop did not take effect within {timeout:.0f}s")


@contextlib.contextmanager
def running(*things: ControlPlane | GPUGate) -> Iterator[None]:
    try:
        yield
    finally:
        for thing in reversed(things):
            thing.stop()


@dataclass
class Stack:
    """A control plane with gpugate registered from deploy/."""

    cluster: ControlPlane
    gpugate: GPUGate
    deploy: list[dict[str, Any]]  # what kubectl kustomize rendered of deploy/ with the control-plane patch, unmodified
    registered: list[dict[str, Any]]  # what was applied: deploy/ with clientConfig -> 127.0.0.1
    policy_dir: Path

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        return self.cluster.kubectl(*args, **kwargs)
