"""A real `gpugate serve` (gunicorn, TLS) with certificates from `gpugate certs`: verification, TLS
versions, keep-alive, and certificate rotation through a Secret-style `..data` symlink swap."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.support import stop

pytestmark = pytest.mark.tls

REPO = Path(__file__).resolve().parents[2]
GPUGATE = Path(sys.executable).with_name("gpugate")
SERVICE_NAME = "gpugate.gpugate.svc"  # the ServerName kube-apiserver sends
START_TIMEOUT = 60.0
POLL_TIMEOUT = 30.0
RELOAD_INTERVAL = 1.0  # webhook.serve.tls checks the certificate files at most once a second per worker


def gpugate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUGATE), *args], capture_output=True, text=True, check=False, env=env, cwd=REPO, timeout=120
    )


def make_certs(out: Path) -> Path:
    done = gpugate("certs", "--service", "gpugate", "--namespace", "gpugate", "--host", "127.0.0.1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


class SecretVolume:
    """A directory laid out as the kubelet lays out a Secret volume: tls.crt -> ..data/tls.crt,
    ..data -> ..<version>/; an update writes a new version directory and swaps ..data atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.versions = 0

    def publish(self, files: dict[str, bytes]) -> None:
        self.versions += 1
        version = self.root / f"..2026_11_29_00_00_{self.versions:02d}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content)
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(Path("..data") / name)
        temp = self.root / "..data_tmp"
        temp.symlink_to(version.name)
        os.replace(temp, self.root / "..data")

    @property
    def cert(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key(self) -> Path:
        return self.root / "tls.key"


def tls_files(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in ("tls.crt", "tls.key")}


def client_context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


class Connection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1 that verifies (and sends SNI for) another name, as the apiserver does
    for `https://gpugate.gpugate.svc`. server_hostname=None sends no SNI and skips the name check."""

    def __init__(self, port: int, *, context: ssl.SSLContext, server_hostname: str | None) -> None:
        super().__init__("127.0.0.1", port, timeout=10, context=context)
        self.server_hostname = server_hostname
        self.tls_context = context

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        try:
            self.sock = self.tls_context.wrap_socket(raw, server_hostname=self.server_hostname)
        except BaseException:
            raw.close()  # else a failed handshake leaks the socket: a ResourceWarning in a later test
            raise

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str) -> tuple[int, bytes]:
        self.request("GET", path, headers={"Host": SERVICE_NAME})
        response = self.getresponse()
        return response.status, response.read()

    def peer_certificate(self) -> bytes:
        assert isinstance(self.sock, ssl.SSLSocket)
        der = self.sock.getpeercert(binary_form=True)
        assert der is not None
        return der


def der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text())


def children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out.update(int(p) for p in (task / "children").read_text().split())
    return out


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    volume: SecretVolume
    log: Path
    tmpdir: Path
    first: Path  # the `gpugate certs` output the server started with

    def connect(self, ca: Path, server_hostname: str | None = SERVICE_NAME) -> Connection:
        connection = Connection(self.port, context=client_context(ca), server_hostname=server_hostname)
        connection.connect()
        return connection

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("serve")
    first = make_certs(root / "gen1")
    volume = SecretVolume(root / "tls")
    volume.publish(tls_files(first))
    tmpdir = root / "tmp"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBERNETES_SERVICE_HOST")}
    env["TMPDIR"] = str(tmpdir)
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                str(GPUGATE),
                "serve",
                "--policies",
                str(REPO / "policies"),
                "--cert",
                str(volume.cert),
                "--key",
                str(volume.key),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    running = Server(process, port, volume, log, tmpdir, first)

    def up() -> bool:
        assert process.poll() is None, f"gpugate serve exited:\n{running.log_text()}"
        try:
            connection = running.connect(first / "ca.crt")
        except OSError:
            return False
        with connection:
            return connection.get("/healthz")[0] == 200

    try:
        assert eventually(up, timeout=START_TIMEOUT, interval=0.2), (
            f"gpugate serve did not come up:\n{running.log_text()}"
        )
        yield running
    finally:
        stop(process)


def test_handshake_as_the_apiserver_does(server: Server) -> None:
    with server.connect(server.first / "ca.crt") as connection:
        assert connection.get("/healthz")[0] == 200
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
        assert sock.selected_alpn_protocol() == "http/1.1"
        assert connection.peer_certificate() == der(server.first / "tls.crt")


def test_admission_reviews_over_tls_as_the_apiserver_sends_them(server: Server) -> None:
    """The shipped example reviews through real gunicorn and TLS, on one kept-alive connection."""
    import base64
    import json

    headers = {
        "Host": f"{SERVICE_NAME}:443",
        "Content-Type": "application/json",
        "Accept": "application/json, */*",
        "User-Agent": "kube-apiserver-admission",
    }
    with server.connect(server.first / "ca.crt") as connection:
        answers = {}
        for name, path in (
            ("gpu-pod", "/mutate?timeout=10s"),
            ("fractional", "/mutate?timeout=10s"),
            ("gpu-pod", "/validate?timeout=10s"),
        ):
            body = (REPO / "policies" / "examples" / f"review-{name}.json").read_bytes()
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            assert response.status == 200
            answers[(name, path)] = json.loads(response.read())
    patched = answers[("gpu-pod", "/mutate?timeout=10s")]
    assert patched["apiVersion"] == "admission.k8s.io/v1" and patched["kind"] == "AdmissionReview"
    assert patched["response"]["uid"] == "3f1c0a52-6d7e-4b1e-9a51-7c1e2b5d9e01"
    assert patched["response"]["allowed"] is True and patched["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(patched["response"]["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in ops
    denied = answers[("fractional", "/mutate?timeout=10s")]["response"]
    assert denied["allowed"] is False and "must be an integer" in denied["status"]["message"]
    unmutated = answers[("gpu-pod", "/validate?timeout=10s")]["response"]
    assert unmutated["allowed"] is False and "lacks runtimeClassName=nvidia" in unmutated["status"]["message"]


def test_readyz_and_metrics(server: Server) -> None:
    with server.connect(server.first / "ca.crt") as connection:
        status, body = connection.get("/readyz")
        assert status == 200, body
        status, body = connection.get("/metrics")
        assert status == 200, body
    # Only workers write metric files; a master's file would add its zeros to every scrape.
    [metrics_dir] = [p for p in server.tmpdir.iterdir() if p.name.startswith("gpugate-metrics-")]
    files = [p.name for p in metrics_dir.iterdir()]
    assert files, "no worker wrote metrics into PROMETHEUS_MULTIPROC_DIR"
    assert not [name for name in files if name.endswith(f"_{server.process.pid}.db")], files


def test_name_outside_the_sans_fails_verification(server: Server) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        server.connect(server.first / "ca.crt", server_hostname="gpugate.other-namespace.svc")


def test_another_ca_fails_verification(server: Server, tmp_path: Path) -> None:
    stranger = make_certs(tmp_path / "stranger")
    with pytest.raises(ssl.SSLCertVerificationError):
        server.connect(stranger / "ca.crt")


def test_ip_address_without_sni(server: Server) -> None:
    # Python sends no SNI for an IP address; the certificate carries 127.0.0.1 from --host.
    with server.connect(server.first / "ca.crt", server_hostname="127.0.0.1") as connection:
        assert connection.get("/healthz")[0] == 200


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_old_tls_versions_are_refused(server: Server, version: ssl.TLSVersion) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer what the server must refuse
    context.minimum_version = version
    context.maximum_version = version
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"),
    ):  # the server's alert, not ours
        context.wrap_socket(raw, server_hostname=SERVICE_NAME)


def test_tls12_uses_forward_secret_aead(server: Server) -> None:
    context = client_context(server.first / "ca.crt")
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    connection = Connection(server.port, context=context, server_hostname=SERVICE_NAME)
    with connection:
        assert connection.get("/healthz")[0] == 200
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        cipher = sock.cipher()
        assert cipher is not None and sock.version() == "TLSv1.2"
        assert cipher[0].startswith("ECDHE-ECDSA-") and ("GCM" in cipher[0] or "CHACHA20" in cipher[0])


def test_bad_input_is_one_line_and_exit_2(server: Server, tmp_path: Path) -> None:
    first = server.first
    broken = tmp_path / "policies"
    broken.mkdir()
    (broken / "bad.yaml").write_text("apiVersion: gpugate.io/v2\nkind: GPUPolicy\nmetadata: {}\n")
    usable = ["--policies", str(REPO / "policies"), "--cert", str(first / "tls.crt"), "--key", str(first / "tls.key")]
    cases = [
        (["--policies", str(broken), "--cert", str(first / "tls.crt"), "--key", str(first / "tls.key")], "bad.yaml"),
        (
            ["--policies", str(REPO / "policies"), "--cert", str(first / "ca.crt"), "--key", str(first / "tls.key")],
            "does not belong to the certificate",
        ),
        (
            [
                "--policies",
                str(REPO / "policies"),
                "--cert",
                str(tmp_path / "missing.crt"),
                "--key",
                str(first / "tls.key"),
            ],
            "missing.crt",
        ),
        ([*usable, "--bind", "nowhere"], "HOST:PORT"),
        ([*usable, "--max-parked-connections", "0"], "--max-parked-connections must be at least 1, got 0"),
    ]
    for args, fragment in cases:
        done = gpugate("serve", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert fragment in done.stderr and "Traceback" not in done.stderr, done.stderr


# The tests below change the served certificate; they run last, in this order.


def test_rotation_reaches_new_handshakes_without_a_restart(server: Server, tmp_path: Path) -> None:
    first, second = server.first, make_certs(tmp_path / "gen2")
    pid, workers = server.process.pid, children(server.process.pid)
    before = server.connect(first / "ca.crt")  # a keep-alive connection from before the rotation
    assert before.get("/healthz")[0] == 200

    server.volume.publish(tls_files(second))

    def all_new() -> bool:
        # Every worker checks the files at most once a second; several new handshakes in a row
        # with the new certificate means each worker that answered has moved over.
        for _ in range(6):
            try:
                with server.connect(second / "ca.crt") as connection:
                    if connection.peer_certificate() != der(second / "tls.crt"):
                        return False
            except ssl.SSLCertVerificationError:
                return False
        return True

    assert eventually(all_new, timeout=POLL_TIMEOUT, interval=0.2), (
        f"new handshakes never saw the new certificate:\n{server.log_text()}"
    )
    # A worker that did not take one of those handshakes may have looked at the files less than a
    # second before the swap; it looks again at its next handshake once its one-second interval is up.
    time.sleep(RELOAD_INTERVAL + 0.2)
    with server.connect(second / "ca.crt") as connection:
        assert connection.get("/healthz")[0] == 200
    with server.connect(second / "ca.crt", server_hostname="127.0.0.1") as connection:  # no SNI
        assert connection.peer_certificate() == der(second / "tls.crt")
    with pytest.raises(ssl.SSLCertVerificationError):
        server.connect(first / "ca.crt")

    # The connection opened before keeps the old certificate and keeps working.
    assert before.get("/healthz")[0] == 200
    before.close()
    assert server.process.poll() is None and server.process.pid == pid
    assert children(pid) == workers, "workers were restarted"
    assert "TLS certificate reloaded" in server.log_text()
    server.first = second


def test_broken_new_files_keep_the_old_certificate(server: Server, tmp_path: Path) -> None:
    current, third = server.first, make_certs(tmp_path / "gen3")
    # A certificate with somebody else's key: unusable.
    server.volume.publish({"tls.crt": (third / "tls.crt").read_bytes(), "tls.key": (current / "tls.key").read_bytes()})

    def reported() -> bool:
        with server.connect(current / "ca.crt") as connection:  # handshakes are what look at the files
            assert connection.peer_certificate() == der(current / "tls.crt")
        return "TLS certificate reload failed" in server.log_text()

    assert eventually(reported, timeout=POLL_TIMEOUT, interval=0.2), server.log_text()
    for _ in range(4):
        with server.connect(current / "ca.crt") as connection:
            assert connection.peer_certificate() == der(current / "tls.crt")
            assert connection.get("/readyz")[0] == 200
    assert server.process.poll() is None


def test_every_worker_follows_a_rotation_without_handshakes(server: Server, tmp_path: Path) -> None:
    """A rotation nobody connects during, then a broken edit: every worker took the rotated certificate on
    its own (it looks at the files once a second), so none falls back to the one from before the rotation."""
    rotated, broken_with = make_certs(tmp_path / "quiet"), make_certs(tmp_path / "other")
    server.volume.publish(tls_files(rotated))
    time.sleep(3 * RELOAD_INTERVAL)  # no handshake meanwhile
    server.volume.publish(
        {"tls.crt": (broken_with / "tls.crt").read_bytes(), "tls.key": (rotated / "tls.key").read_bytes()}
    )
    time.sleep(2 * RELOAD_INTERVAL)
    for _ in range(12):  # two workers: twelve handshakes reach both with near certainty
        with server.connect(rotated / "ca.crt") as connection:
            assert connection.peer_certificate() == der(rotated / "tls.crt")
    server.first = rotated


def test_sigterm_stops_cleanly_and_removes_the_metrics_dir(server: Server) -> None:
    assert [p.name for p in server.tmpdir.iterdir() if p.name.startswith("gpugate-metrics-")]
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    assert not [p.name for p in server.tmpdir.iterdir() if p.name.startswith("gpugate-metrics-")]


def test_prometheus_client_is_not_imported_before_serve_sets_its_directory() -> None:
    # prometheus_client picks single- or multi-process values at import time; `gpugate serve`
    # sets PROMETHEUS_MULTIPROC_DIR before the workers import it. An import on the way there
    # (the CLI, the policy check) would silently make every worker count for itself.
    probe = (
        "import sys, webhook.cli, webhook.serve.command, webhook.policy.loader, webhook.certs, webhook.serve.tls; "
        "sys.exit('prometheus_client' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=False).returncode == 0


def test_metrics_dir_is_created_or_wiped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.serve import command as serve

    given = tmp_path / "given"
    given.mkdir()
    (given / "counter_123.db").write_bytes(b"stale")
    (given / "keep.txt").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(given))
    assert serve.prepare_metrics_dir() is None  # the operator's directory: wiped, never removed
    assert sorted(p.name for p in given.iterdir()) == ["keep.txt"]

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    created = serve.prepare_metrics_dir()
    assert created is not None and Path(created).parent == tmp_path
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == created


# ---- webhook.serve.tls.ReloadingCertificate on its own, with an injected clock -----------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def three_certs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("certs")
    return [make_certs(root / f"gen{i}") for i in range(3)]


def serial(reloading: Any) -> int:
    return int(reloading.certificate().serial_number)


def serial_of(directory: Path) -> int:
    from cryptography import x509

    return int(x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes()).serial_number)


def test_reload_is_rate_limited_and_follows_the_symlink(three_certs: list[Path], tmp_path: Path) -> None:
    from webhook.serve.tls import ReloadingCertificate

    first, second, _ = three_certs
    volume = SecretVolume(tmp_path / "tls")
    volume.publish(tls_files(first))
    clock = Clock()
    reloading = ReloadingCertificate(str(volume.cert), str(volume.key), clock=clock)
    old_context = reloading.context()
    volume.publish(tls_files(second))

    clock.now += 0.5
    assert reloading.context() is old_context, "looked at the files before a second had passed"
    clock.now += 0.5
    new_context = reloading.context()
    assert new_context is not old_context and serial(reloading) == serial_of(second)
    clock.now += 5
    assert reloading.context() is new_context, "unchanged files must not rebuild the context"
    assert reloading.ready()


def test_the_client_timeouts_reach_every_context_also_after_a_reload(three_certs: list[Path], tmp_path: Path) -> None:
    from webhook.serve.tls import DeadlineSocket, ReloadingCertificate, Timeouts

    first, second, _ = three_certs
    volume = SecretVolume(tmp_path / "tls")
    volume.publish(tls_files(first))
    clock = Clock()
    short = Timeouts(handshake=0.5, request=1.0, idle=0.25)
    reloading = ReloadingCertificate(str(volume.cert), str(volume.key), clock=clock, timeouts=short)
    before = reloading.context()
    volume.publish(tls_files(second))
    clock.now += 1
    after = reloading.context()
    assert after is not before
    for context in (before, after):
        assert issubclass(context.sslsocket_class, DeadlineSocket) and context.sslsocket_class.timeouts == short
    default = ReloadingCertificate(str(volume.cert), str(volume.key)).context()
    assert default.sslsocket_class is DeadlineSocket and DeadlineSocket.timeouts == Timeouts()


def test_broken_files_are_reported_once_and_retried_when_they_change(
    three_certs: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from webhook.serve.tls import ReloadingCertificate

    first, second, third = three_certs
    volume = SecretVolume(tmp_path / "tls")
    volume.publish(tls_files(first))
    clock = Clock()
    reloading = ReloadingCertificate(str(volume.cert), str(volume.key), clock=clock)
    volume.publish({"tls.crt": (second / "tls.crt").read_bytes(), "tls.key": (third / "tls.key").read_bytes()})
    for _ in range(3):
        clock.now += 2
        reloading.context()
    failures = [r for r in caplog.records if "reload failed" in r.getMessage()]
    assert len(failures) == 1, "one report per change, not one per second"
    assert "does not belong to the certificate" in failures[0].getMessage()
    assert serial(reloading) == serial_of(first)

    volume.publish({"tls.crt": b"not a certificate", "tls.key": (third / "tls.key").read_bytes()})
    clock.now += 2
    reloading.context()
    assert serial(reloading) == serial_of(first)
    assert "does not hold a PEM certificate" in caplog.records[-1].getMessage()

    volume.publish(tls_files(third))
    clock.now += 2
    reloading.context()
    assert serial(reloading) == serial_of(third)


def test_missing_files_keep_the_old_certificate(three_certs: list[Path], tmp_path: Path) -> None:
    from webhook.serve.tls import ReloadingCertificate, TLSConfigError

    volume = SecretVolume(tmp_path / "tls")
    volume.publish(tls_files(three_certs[0]))
    clock = Clock()
    reloading = ReloadingCertificate(str(volume.cert), str(volume.key), clock=clock)
    (tmp_path / "tls" / "..data").unlink()
    clock.now += 2
    reloading.context()
    assert serial(reloading) == serial_of(three_certs[0])
    with pytest.raises(TLSConfigError, match="cannot read"):
        ReloadingCertificate(str(volume.cert), str(volume.key))


def test_expired_certificate_is_not_ready(tmp_path: Path) -> None:
    import datetime as dt

    from webhook import certs
    from webhook.serve.tls import ReloadingCertificate

    long_ago = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    ca = certs.build_ca(common_name="old", now=long_ago, valid_for=dt.timedelta(days=1))
    leaf = certs.build_serving_certificate(ca, ["gpugate"], now=long_ago, valid_for=dt.timedelta(days=1))
    (tmp_path / "tls.crt").write_bytes(leaf.certificate_pem())
    (tmp_path / "tls.key").write_bytes(leaf.private_key_pem())
    assert not ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")).ready()


def test_encrypted_key_is_refused_without_a_prompt(three_certs: list[Path], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from webhook.serve.tls import TLSConfigError, server_context

    key = serialization.load_pem_private_key((three_certs[0] / "tls.key").read_bytes(), password=None)
    encrypted = tmp_path / "tls.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(TLSConfigError, match="is encrypted"):
        server_context(str(three_certs[0] / "tls.crt"), str(encrypted))
