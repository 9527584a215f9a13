"""`gpugate audit` without a cluster: bad input and an unreachable apiserver are one line on stderr, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from webhook.cli import main

REPO = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--kubeconfig", "/nonexistent/kubeconfig", "--policies", "policies"], "cannot load a kubeconfig"),
        (["--policies", "/nonexistent"], "--policies /nonexistent: not a directory"),
        (["--policies", "policies", "--compare-to", "README.md"], "--compare-to README.md: not a directory"),
        (["--policies", "policies", "--page-size", "0"], "--page-size must be at least 1"),
    ],
)
def test_bad_input(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["audit", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpugate audit: ") and words in err and err.count("\n") == 1, err


def test_an_unreachable_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}")
    assert main(["audit", "--kubeconfig", str(config), "--policies", "policies"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("gpugate audit: list namespaces: cannot reach the cluster") and out.err.count("\n") == 1
