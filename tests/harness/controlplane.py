"""A throw-away Kubernetes control plane (etcd + kube-apiserver), run as plain processes on 127.0.0.1,
with its own CA, serving certificates, service-account keys and an admin kubeconfig; driven by the
real kubectl.

No controller-manager and no scheduler: pods stay Pending, namespaces never finish deleting, and
nothing creates ServiceAccounts, so callers create the `default` ServiceAccount the ServiceAccount
admission plugin requires (see `ControlPlane.create_namespace`).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.harness.pki import CertificateAuthority, write_key
from tests.harness.ports import free_port
from tests.harness.processes import LOOPBACK_ENV, Process, wait_for_https

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "tests" / "e2e" / "build.sh"


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
    #: Serve /debug/pprof (kube-apiserver's --profiling) for the admin client: benchmarks take CPU profiles
    #: with it (bench/apiserver.py --profile); tests leave it off, as production-like clusters do.
    profiling: bool = False
    #: Write an audit log of the pods' creates (and nothing else) to :attr:`audit_log`: each event's timestamps give
    #: one create's latency to the microsecond, where the apiserver's request-duration histogram has buckets of
    #: 5, 25, 50, 100, 200 ms (bench/fleet_scale.py's exact percentiles).
    audit_pod_creates: bool = False
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(exist_ok=True)
        self.pki = self.workdir / "pki"
        self.pki.mkdir(exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.audit_log = self.log_dir / "audit-pod-creates.jsonl"
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
        write_key(sa_private, sa_key)
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
                f"--profiling={'true' if self.profiling else 'false'}",
                *self._audit_args(),
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

    def _audit_args(self) -> list[str]:
        if not self.audit_pod_creates:
            return []
        policy = self.workdir / "audit-policy.yaml"
        rules = [
            {"level": "Metadata", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
            {"level": "None"},
        ]
        policy.write_text(
            yaml.safe_dump(
                {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}
            )
        )
        # Batched: the events are written off the request's path, so the log does not add to the latency it records.
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-wait=1s",
            "--audit-log-maxsize=0",
        ]

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
            env={**os.environ, **LOOPBACK_ENV, "KUBECONFIG": str(self.kubeconfig)},
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

    def ensure_runtime_class(self, name: str, handler: str | None = None) -> None:
        """The RuntimeClass `name` (handler of the same name unless `handler` says another: an alias): the
        RuntimeClass admission plugin refuses pods naming a RuntimeClass that does not exist."""
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}}
        self.kubectl("apply", "-f", "-", stdin={**body, "handler": handler or name})

    def ensure_default_service_account(self, namespace: str) -> None:
        # Normally the controller-manager's serviceaccount controller creates it; where one runs, it can create it
        # between kubectl apply's read and its create (AlreadyExists): then it exists, which is all this asks.
        done = self.kubectl(
            "apply",
            "-f",
            "-",
            stdin={
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace},
            },
            check=False,
        )
        if not done.ok and "AlreadyExists" not in done.stderr:
            raise AssertionError(f"kubectl failed:\n{done}")
