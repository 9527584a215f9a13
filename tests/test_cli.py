"""The command line (webhook/cli.py and the commands it dispatches to) as a new user meets it: --version, empty manifests, refused objects kept off stdout,
flag errors that name the flag, a busy port, `make help` and the README's decode one-liner."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

EXAMPLES = REPO / "policies" / "examples"
GPUGATE = Path(sys.executable).with_name("gpugate")


def gpugate(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        input=stdin,
        timeout=timeout,
        check=False,
    )


def installed_version() -> str:
    from importlib.metadata import version

    return version("gpugate")


# ---- --version and the build-info gauge --------------------------------------------------------


def test_version_prints_the_installed_release() -> None:
    proc = gpugate("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"gpugate {installed_version()} (Python ")
    assert installed_version() == _pyproject_version()


def _pyproject_version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match
    return match.group(1)


def test_metrics_carry_the_build_info_gauge() -> None:
    from webhook.serve import metrics

    text, _ = metrics.render()
    lines = [line for line in text.decode().splitlines() if line.startswith("gpugate_build_info{")]
    assert len(lines) == 1, lines
    assert f'version="{installed_version()}"' in lines[0]
    assert lines[0].endswith(" 1.0")


# ---- gpugate check -----------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "# only a comment\n", "---\n---\n"], ids=["empty", "comment", "separators"])
def test_check_of_an_empty_manifest_is_bad_input(tmp_path: Path, content: str) -> None:
    manifest = tmp_path / "empty.yaml"
    manifest.write_text(content)
    proc = gpugate("check", "--policies", "policies", "-f", str(manifest))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"gpugate check: {manifest}: no Kubernetes objects in it (empty, or only comments)"
    assert proc.stdout == ""


def test_check_of_empty_stdin_is_bad_input() -> None:
    proc = gpugate("check", "--policies", "policies", "-f", "-", stdin="")
    assert proc.returncode == 2 and "no Kubernetes objects" in proc.stderr


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_a_denied_object_is_never_printed(output: str) -> None:
    proc = gpugate("check", "--policies", "policies", "-f", str(EXAMPLES / "pod-fractional.yaml"), "-o", output)
    assert proc.returncode == 1 and "DENIED" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_only_the_allowed_objects_of_a_mixed_manifest_are_printed(output: str) -> None:
    manifest = (EXAMPLES / "pod-gpu-basic.yaml").read_text() + "---\n" + (EXAMPLES / "pod-fractional.yaml").read_text()
    denied_name = yaml.safe_load((EXAMPLES / "pod-fractional.yaml").read_text())["metadata"]["name"]
    allowed_name = yaml.safe_load((EXAMPLES / "pod-gpu-basic.yaml").read_text())["metadata"]["name"]
    proc = gpugate("check", "--policies", "policies", "-f", "-", "-o", output, stdin=manifest)
    assert proc.returncode == 1
    printed = [json.loads(proc.stdout)] if output == "json" else [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert [obj["metadata"]["name"] for obj in printed] == [allowed_name]
    assert printed[0]["spec"]["runtimeClassName"] == "nvidia"
    assert denied_name != allowed_name


@pytest.mark.parametrize("bad", ["ml", "=team=vision", "ml=team"])
def test_namespace_labels_errors_name_the_flag_not_the_manifest(bad: str) -> None:
    manifest = str(EXAMPLES / "pod-gpu-basic.yaml")
    proc = gpugate("check", "--policies", "policies", "-f", manifest, "--namespace-labels", bad)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"gpugate check: --namespace-labels {bad!r}: ")
    assert manifest not in line


# ---- gpugate serve on a busy port --------------------------------------------------------------


def test_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    made = subprocess.run(
        [
            str(GPUGATE),
            "certs",
            "--service",
            "gpugate",
            "--namespace",
            "gpugate",
            "--host",
            "127.0.0.1",
            "--out",
            str(tmp_path / "certs"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = subprocess.run(
            [
                str(GPUGATE),
                "serve",
                "--policies",
                str(REPO / "policies"),
                "--cert",
                str(tmp_path / "certs" / "tls.crt"),
                "--key",
                str(tmp_path / "certs" / "tls.key"),
                "--bind",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd=tmp_path,
        )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"gpugate serve: --bind 127.0.0.1:{port}: Address already in use"), line
    assert done.stdout == ""


# ---- make help ---------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_help_prints_the_bind_value() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "help", "BIND=127.0.0.1:9443"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    [run] = [line for line in done.stdout.splitlines() if line.split()[:1] == ["run"]]
    assert "https://127.0.0.1:9443 " in run
    assert "$(BIND)" not in done.stdout


# ---- the README's decode one-liner -------------------------------------------------------------


def readme_decoder() -> str:
    """The python3 -c program of the README's decode one-liner, exactly as a reader copies it."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"… \| python3 -c '([^']+)'", text)
    assert match, "README.md has no `… | python3 -c '…'` decode line"
    return match.group(1)


@pytest.mark.parametrize(
    ("review", "expected"),
    [
        ("review-gpu-pod.json", '"path":"/spec/runtimeClassName"'),
        ("review-fractional.json", "must be an integer"),
    ],
)
def test_readme_decode_one_liner_works_on_a_patch_and_on_a_denial(review: str, expected: str) -> None:
    from webhook.serve.wiring import build_app

    app = build_app(str(REPO / "policies"))  # no kubeconfig, not in a pod: no namespace labels
    answer = app.test_client().post("/mutate", data=(EXAMPLES / review).read_bytes(), content_type="application/json")
    assert answer.status_code == 200
    done = subprocess.run(
        ["python3", "-c", readme_decoder()],
        input=answer.get_data(as_text=True),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
