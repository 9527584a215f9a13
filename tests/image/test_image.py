"""The image, built by `make image`'s script with buildah and run by its own entrypoint as the Deployment runs it.

`scripts/build-image` builds the Dockerfile with `buildah build --isolation chroot` on a Debian base made by
mmdebstrap (the official Python image's registry is not needed) and writes the OCI archive. The test then
runs the image's ENTRYPOINT + CMD with `buildah run --isolation chroot`, changing only `--bind` to a
loopback port, as UID 65532, with the policies, the certificate Secret and /tmp mounted at the paths and
with the environment deploy/base/deployment.yaml gives them, and asks it /readyz, /mutate and /metrics.

Without buildah or mmdebstrap the module skips locally and fails in CI (scripts/install-tools installs them).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.ports import free_port
from tests.harness.processes import Process, https_get, wait_for_https
from tests.support import REPO

BUILD = REPO / "scripts" / "build-image"
DEPLOYMENT = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
POD = DEPLOYMENT["spec"]["template"]["spec"]
CONTAINER = POD["containers"][0]
UID = POD["securityContext"]["runAsUser"]
GID = POD["securityContext"]["runAsGroup"]
VERSION = next(
    line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("version = ")
)

pytestmark = pytest.mark.image


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"image tests cannot run in CI: {reason}", pytrace=False)
    pytest.skip(f"!!! IMAGE TESTS SKIPPED: {reason}")


def buildah(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False, timeout=timeout)
    assert done.returncode == 0, f"buildah {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(image name, OCI archive) from scripts/build-image, into a temporary archive path; the image is
    removed afterwards (the cached base stays)."""
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (run scripts/install-tools)")
    archive = tmp_path_factory.mktemp("image") / f"gpugate-{VERSION}.oci.tar"
    image = f"localhost/gpugate-test:{VERSION}"
    done = subprocess.run(
        [str(BUILD)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        cwd=REPO,
        env={**os.environ, "IMAGE": image, "OCI_ARCHIVE": str(archive)},
    )
    assert done.returncode == 0, f"scripts/build-image failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == image
    try:
        yield image, archive
    finally:
        subprocess.run(["buildah", "rmi", image], capture_output=True, check=False, timeout=120)


@pytest.fixture(scope="module")
def config(built: tuple[str, Path]) -> dict[str, Any]:
    inspected = json.loads(buildah("inspect", "--type", "image", built[0]))
    return dict(inspected["OCIv1"]["config"])


def test_image_runs_as_the_deployments_user_with_the_deployments_command(config: dict[str, Any]) -> None:
    assert config["User"] == f"{UID}:{GID}"
    assert config["Entrypoint"] == ["gpugate"]
    assert config["Cmd"] == CONTAINER["args"]  # the Deployment passes exactly the image's defaults
    assert "8443/tcp" in config["ExposedPorts"]


def test_oci_archive_is_a_pushable_oci_layout(built: tuple[str, Path]) -> None:
    """What `skopeo copy oci-archive:<file> docker://…` reads: an OCI layout with the tagged image."""
    with tarfile.open(built[1]) as archive:
        names = set(archive.getnames())
        assert "oci-layout" in names and "index.json" in names
        index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
    [manifest] = index["manifests"]
    assert manifest["annotations"]["org.opencontainers.image.ref.name"] == f"gpugate:{VERSION}"
    if shutil.which("skopeo"):
        done = subprocess.run(
            ["skopeo", "inspect", "--config", f"oci-archive:{built[1]}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["config"]["User"] == f"{UID}:{GID}"


def test_skopeo_pushes_the_archive_to_a_registry(built: tuple[str, Path], tmp_path: Path) -> None:
    """The documented push, `skopeo copy oci-archive:… docker://…`, into a real registry (Debian's
    docker-registry, the CNCF distribution registry) on loopback; the registry then serves the same manifest."""
    if shutil.which("skopeo") is None:
        _unavailable("skopeo is not installed (run scripts/install-tools)")
    tools = Path(os.environ.get("GPUGATE_TOOLS_CACHE", Path.home() / ".cache" / "gpugate-tools"))
    found = sorted(tools.glob("docker-registry-*/docker-registry"))
    if not found:
        _unavailable(f"docker-registry is not in {tools} (run scripts/install-tools)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "storage")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    registry = Process("docker-registry", [str(found[-1]), "serve", str(config)], tmp_path)
    registry.start()
    try:
        reference = f"docker://127.0.0.1:{port}/platform/gpugate:{VERSION}"
        for _ in range(100):  # until it listens
            probe = subprocess.run(
                ["skopeo", "list-tags", "--tls-verify=false", f"docker://127.0.0.1:{port}/x"],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
            if "connection refused" not in probe.stderr:
                break
            assert registry.running, registry.log_tail()
        # Plain HTTP on loopback: the registry has no certificate here, hence --dest-tls-verify=false.
        pushed = subprocess.run(
            ["skopeo", "copy", "--dest-tls-verify=false", f"oci-archive:{built[1]}", reference],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert pushed.returncode == 0, pushed.stderr + registry.log_tail()
        inspected = subprocess.run(
            ["skopeo", "inspect", "--tls-verify=false", reference],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert inspected.returncode == 0, inspected.stderr
        served = json.loads(inspected.stdout)
        with tarfile.open(built[1]) as archive:
            [manifest] = json.load(archive.extractfile("index.json"))["manifests"]  # type: ignore[arg-type]
        assert served["Digest"] == manifest["digest"]  # the very manifest of the archive
        assert served["Architecture"] == "amd64" and served["Os"] == "linux"
    finally:
        registry.stop()


def _mount_path(volume: str) -> str:
    [mount] = [m for m in CONTAINER["volumeMounts"] if m["name"] == volume]
    return str(mount["mountPath"])


def _argv(config: dict[str, Any], bind: str) -> list[str]:
    """The image's ENTRYPOINT + CMD with only the --bind value changed."""
    argv = [*config["Entrypoint"], *config["Cmd"]]
    argv[argv.index("--bind") + 1] = bind
    return argv


@pytest.fixture(scope="module")
def running(
    built: tuple[str, Path], config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, Process]]:
    work = tmp_path_factory.mktemp("run")
    # The Secret volume: tls.crt / tls.key / ca.crt, mode 0440 (defaultMode 288), group fsGroup.
    tls = work / "tls"
    made = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "gpugate"),
            "certs",
            "--service",
            "gpugate",
            "--namespace",
            "gpugate",
            "--host",
            "127.0.0.1",
            "--out",
            str(tls),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    mode = next(v for v in POD["volumes"] if v["name"] == "tls")["secret"]["defaultMode"]
    for path in tls.iterdir():
        os.chown(path, 0, POD["securityContext"]["fsGroup"])
        path.chmod(mode)
    tls.chmod(0o755)
    # The ConfigMap volume: the base's policy files.
    policies = work / "policies"
    shutil.copytree(REPO / "deploy" / "base" / "policies", policies)
    # The emptyDir at /tmp, writable by the pod's user.
    tmp = work / "tmp"
    tmp.mkdir()
    os.chown(tmp, UID, GID)

    container = buildah("from", "--pull-never", built[0]).strip()
    port = free_port()
    env = [f"{e['name']}={e['value']}" for e in CONTAINER["env"]]
    argv = [
        "buildah",
        "run",
        "--isolation",
        "chroot",
        "--user",
        f"{UID}:{GID}",
        *[arg for item in env for arg in ("--env", item)],
        "--volume",
        f"{policies}:{_mount_path('policies')}:ro",
        "--volume",
        f"{tls}:{_mount_path('tls')}:ro",
        "--volume",
        f"{tmp}:{_mount_path('tmp')}",
        container,
        "--",
        *_argv(config, f"127.0.0.1:{port}"),
    ]
    process = Process("gpugate-image", argv, work)
    try:
        process.start()
        wait_for_https(f"https://127.0.0.1:{port}/healthz", process=process, ca=tls / "ca.crt", timeout=120)
        yield f"https://127.0.0.1:{port}", tls / "ca.crt", process
    finally:
        process.stop()
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False, timeout=60)


def test_readyz(running: tuple[str, Path, Process]) -> None:
    url, ca, _ = running
    status, body = https_get(f"{url}/readyz", ca=ca)
    assert (status, body.strip()) == (200, "ok")


def _post(url: str, ca: Path, body: bytes) -> dict[str, Any]:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=30) as answer:
        assert answer.status == 200
        return dict(json.loads(answer.read()))


def test_mutate_answers_a_gpu_pod_with_the_policies_patch(running: tuple[str, Path, Process]) -> None:
    url, ca, _ = running
    review = json.loads((REPO / "policies" / "examples" / "review-gpu-pod.json").read_text())
    answer = _post(f"{url}/mutate", ca, json.dumps(review).encode())
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in patch


def test_mutate_refuses_a_fractional_gpu(running: tuple[str, Path, Process]) -> None:
    url, ca, _ = running
    body = (REPO / "policies" / "examples" / "review-fractional.json").read_bytes()
    response = _post(f"{url}/mutate", ca, body)["response"]
    assert response["allowed"] is False and "must be an integer" in response["status"]["message"]


def test_metrics_name_the_release(running: tuple[str, Path, Process]) -> None:
    url, ca, _ = running
    status, text = https_get(f"{url}/metrics", ca=ca)
    assert status == 200
    assert 'gpugate_build_info{python="3.11' in text and f'version="{VERSION}"' in text


def test_server_processes_run_as_uid_65532(running: tuple[str, Path, Process]) -> None:
    _, _, process = running
    assert process.proc is not None
    group = process.proc.pid  # its own process group (start_new_session)
    servers = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            pid = int(status.parent.name)
            if os.getpgid(pid) != group:
                continue
            cmdline = (status.parent / "cmdline").read_bytes().split(b"\0")
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except (OSError, ValueError):
            continue
        if any(part.endswith(b"/gpugate") for part in cmdline) and b"serve" in cmdline:
            servers.append((pid, fields["Uid"].split(), fields["Gid"].split()))
    assert len(servers) >= 1 + 2, servers  # gunicorn's master and its two workers
    for _pid, uids, gids in servers:
        assert set(uids) == {str(UID)} and set(gids) == {str(GID)}
