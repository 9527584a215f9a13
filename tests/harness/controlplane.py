"""A throw-away Kubernetes control plane (etcd + kube-apiserver) and a gpugate server, run as plain
processes on 127.0.0.1, with their own CA, serving certificates, service-account keys and an
admin kubeconfig; driven by the real kubectl.

No controller-manager and no scheduler: pods stay Pending, namespaces never finish deleting, and
nothing creates ServiceAccounts, so callers create the `default` ServiceAccount the ServiceAccount
admission plugin requires (see `ControlPlane.create_namespace`).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "tests" / "e2e" / "build.sh"

# Loopback only: make sure no proxy setting ever routes a request of ours elsewhere.
_LOOPBACK_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
for _name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    _LOOPBACK_ENV[_name] = ""


class BinariesMissing(Exception):
    """The pinned kube-apiserver / kubectl / etcd are not built."""


def binary_dir() -> Path:
    """Where tests/e2e/build.sh puts (or put) the binaries; GPUGATE_E2E_BIN overrides it."""
    override = os.environ.get("GPUGATE_E2E_BIN")
    if override:
        return Path(override)
    out = subprocess.run(["bash", str(BUILD_SH), "--print"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def find_binaries() -> Path:
    bin_dir = binary_dir()
    missing = [b for b in ("etcd", "kube-apiserver", "kubectl") if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise BinariesMissing(f"{', '.join(missing)} not found in {bin_dir}")
    return bin_dir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: Any) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class CertificateAuthority:
    """A CA that signs the apiserver's serving certificate and the admin client certificate."""

    def __init__(self, directory: Path, *, now: datetime.datetime) -> None:
        self.directory = directory
        self.now = now
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpugate-e2e-ca")])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(hours=1))
            .not_valid_after(self.now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair


# --------------------------------------------------------------------------------------------
# Processes


def _exited(pid: int) -> bool:
    """Has child `pid` exited? Without reaping it (WNOWAIT), so its id stays ours."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _die_with_parent() -> None:
    """Linux: SIGKILL the child when the test process dies without tearing down (kill -9, OOM)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class Process:
    """A child process in its own process group, logging to a file; stopped by its id only."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self.env = {**os.environ, **_LOOPBACK_ENV, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        log.write(f"\n==== start: {' '.join(self.argv)}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: gunicorn workers die with their master
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not _exited(self.proc.pid)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace`. The leader is reaped
        only after the group is killed, so its id cannot have been reused by then."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while not _exited(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers (e.g. workers) and a stuck leader
            proc.wait(timeout=grace)
        else:
            # Reaped earlier (it died on its own): a surviving group member keeps the id reserved.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"({self.log_path} does not exist)"
        return "\n".join(text[-lines:])

    def describe_failure(self, what: str) -> str:
        code = self.proc.poll() if self.proc and _exited(self.proc.pid) else None
        state = f"exited with code {code}" if code is not None else "still running"
        return f"{self.name} {what} ({state}); last log lines from {self.log_path}:\n{self.log_tail()}"


def wait_for_https(
    url: str,
    *,
    process: Process,
    ca: Path,
    client: KeyPair | None = None,
    timeout: float = 90.0,
) -> None:
    """Poll `url` until it answers 200; fail early, with the process's log, if the process dies."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        if not process.running:
            raise RuntimeError(process.describe_failure(f"died before {url} answered"))
        try:
            with opener.open(url, timeout=5) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}: {e.read()[:300]!r}"
        except (OSError, ssl.SSLError) as e:
            last = repr(e)
        if time.monotonic() > deadline:
            raise RuntimeError(process.describe_failure(f"not ready at {url} after {timeout:.0f}s: {last}"))
        time.sleep(0.3)


def https_get(url: str, *, ca: Path, timeout: float = 10.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


# --------------------------------------------------------------------------------------------
# The control plane


@dataclass
class KubectlResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def warnings(self) -> list[str]:
        """`Warning: ...` lines kubectl printed for the apiserver's warning headers."""
        return [line for line in self.stderr.splitlines() if line.startswith("Warning:")]

    def json(self) -> Any:
        return json.loads(self.stdout)

    def yaml(self) -> Any:
        return yaml.safe_load(self.stdout)

    def __str__(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\n(exit {self.returncode})\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


@dataclass
class ControlPlane:
    bin_dir: Path
    workdir: Path
    extended_resource_toleration: bool = False
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(exist_ok=True)
        self.pki = self.workdir / "pki"
        self.pki.mkdir(exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self._namespaces = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        self.ca = CertificateAuthority(self.pki, now=now)
        serving = self.ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=["127.0.0.1", "10.0.0.1"],
            server=True,
        )
        self.admin = self.ca.issue(
            "admin", common_name="gpugate-e2e-admin", organizations=["system:masters"], client=True
        )
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_private = self.pki / "sa.key"
        _write_key(sa_private, sa_key)
        sa_public = self.pki / "sa.pub"
        sa_public.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        self._write_kubeconfig()

        etcd_client, etcd_peer = free_port(), free_port()
        etcd = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{etcd_peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a test cluster thrown away after the session
                "--log-level=warn",
            ],
            self.log_dir,
        )
        self.processes.append(etcd)
        etcd.start()
        self._wait_for_etcd(etcd, etcd_client)

        toggle = "enable" if self.extended_resource_toleration else "disable"
        apiserver = Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.cert_path}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_public}",
                f"--service-account-signing-key-file={sa_private}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=Node,RBAC",
                f"--{toggle}-admission-plugins=ExtendedResourceToleration",
                "--allow-privileged=true",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--profiling=false",
                "--v=1",
            ],
            self.log_dir,
        )
        self.processes.append(apiserver)
        apiserver.start()
        wait_for_https(f"{self.server}/readyz", process=apiserver, ca=self.ca.cert_path, client=self.admin, timeout=120)
        self.apiserver = apiserver

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()

    def _wait_for_etcd(self, etcd: Process, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if not etcd.running:
                raise RuntimeError(etcd.describe_failure("died at start-up"))
            try:
                with opener.open(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(etcd.describe_failure(f"not healthy after {timeout:.0f}s"))
            time.sleep(0.2)

    def _write_kubeconfig(self) -> None:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(self.ca.cert_path)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {"client-certificate-data": b64(self.admin.cert), "client-key-data": b64(self.admin.key)},
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def log_tails(self) -> dict[str, str]:
        return {p.name: p.log_tail() for p in self.processes}

    # -- kubectl -----------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        stdin: str | dict[str, Any] | list[Any] | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> KubectlResult:
        """Run the pinned kubectl against this cluster. A dict or list on stdin is sent as JSON."""
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        if isinstance(stdin, dict):
            stdin = json.dumps(stdin)
        elif isinstance(stdin, list):
            stdin = json.dumps({"apiVersion": "v1", "kind": "List", "items": stdin})
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **_LOOPBACK_ENV, "KUBECONFIG": str(self.kubeconfig)},
        )
        result = KubectlResult(argv, done.returncode, done.stdout, done.stderr)
        if check and not result.ok:
            raise AssertionError(f"kubectl failed:\n{result}")
        return result

    def create_namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        """A fresh namespace with the `default` ServiceAccount the ServiceAccount plugin requires."""
        self._namespaces += 1
        name = f"{prefix}-{self._namespaces}-{os.urandom(2).hex()}"[:63]
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels or {}},
            },
        )
        self.ensure_default_service_account(name)
        return name

    def ensure_default_service_account(self, namespace: str) -> None:
        # Normally the controller-manager's serviceaccount controller creates it.
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin={
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace},
            },
        )


# --------------------------------------------------------------------------------------------
# gpugate


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


# --------------------------------------------------------------------------------------------
# Registration: deploy/ rendered by kubectl kustomize, clientConfig pointed at 127.0.0.1


WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def render_deploy(cp: ControlPlane, *components: str) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/`, or of an overlay of deploy/ with `components` (names under
    deploy/components/), as a user's overlay would list them."""
    if not components:
        rendered = cp.kubectl("kustomize", str(REPO / "deploy"))
        return [d for d in yaml.safe_load_all(rendered.stdout) if d]
    overlay = cp.workdir / "overlay"
    overlay.mkdir(exist_ok=True)
    # kustomize takes only relative paths to resources and components.
    kustomization = {
        "resources": [os.path.relpath(REPO / "deploy", overlay)],
        "components": [os.path.relpath(REPO / "deploy" / "components" / c, overlay) for c in components],
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
    deploy: list[dict[str, Any]]  # what kubectl kustomize deploy/ rendered, unmodified
    registered: list[dict[str, Any]]  # what was applied: deploy/ with clientConfig -> 127.0.0.1
    policy_dir: Path

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        return self.cluster.kubectl(*args, **kwargs)


def eventually(probe: Any, *, timeout: float = 15.0, interval: float = 0.5) -> Any:
    """Call `probe()` until it returns a truthy value or `timeout` passes; return the last value.
    For state that propagates asynchronously (gpugate's namespace cache, policy reload): the test
    then asserts on the returned value, never on how long it took."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
