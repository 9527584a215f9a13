"""webhook.kube.cluster's reads for `gpugate audit` against a small real HTTP server speaking the apiserver's list and
discovery shapes: paging with `continue`, an expired token (HTTP 410), discovery by version, errors as one line."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from webhook.kube import cluster as kube

PODS = [{"metadata": {"name": f"p{i}", "namespace": "ml", "managedFields": [{"manager": "kubectl"}]}} for i in range(5)]
DISCOVERY: dict[str, Any] = {
    "/api/v1": {
        "resources": [
            {"name": "pods", "kind": "Pod", "verbs": ["get", "list"]},
            {"name": "pods/status", "kind": "Pod", "verbs": ["get"]},
        ]
    },
    "/apis": {
        "groups": [
            {
                "name": "ray.io",
                "versions": [{"version": "v1"}, {"version": "v1alpha1"}],
                "preferredVersion": {"version": "v1"},
            },
            {
                "name": "batch.volcano.sh",
                "versions": [{"version": "v1alpha1"}],
                "preferredVersion": {"version": "v1alpha1"},
            },
        ]
    },
    "/apis/ray.io/v1": {"resources": [{"name": "rayclusters", "kind": "RayCluster", "verbs": ["list"]}]},
    "/apis/ray.io/v1alpha1": {
        "resources": [
            {"name": "rayclusters", "kind": "RayCluster", "verbs": ["list"]},
            {"name": "rayjobs", "kind": "RayJob", "verbs": ["list"]},
        ]
    },
    "/apis/batch.volcano.sh/v1alpha1": {"resources": [{"name": "jobs", "kind": "Job", "verbs": ["list"]}]},
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[str]
    expire_with_token = True

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        self.requests.append(self.path)
        if path in DISCOVERY:
            return self._send(200, DISCOVERY[path])
        if path == "/api/v1/namespaces/secret/pods":
            return self._send(403, {"kind": "Status", "message": 'pods is forbidden: User "x" cannot list'})
        if path == "/api/v1/pods":
            token = query.get("continue", [""])[0]
            if token == "page-2":  # compacted away: continue from the next key, in a newer snapshot
                status = {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "continue expired",
                    "metadata": {"continue": "page-2-newer"} if self.expire_with_token else {},
                }
                return self._send(410, status)
            start = {"": 0, "page-2-newer": 2, "page-3": 4}[token]
            following = {0: "page-2", 2: "page-3"}.get(start, "")
            return self._send(200, {"items": PODS[start : start + 2], "metadata": {"continue": following}})
        return self._send(404, {"kind": "Status", "code": 404})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"requests": [], "expire_with_token": True})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{httpd.server_address[1]}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    try:
        yield config, handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_pages_follow_continue_and_survive_an_expired_token(
    server: tuple[Path, type[_Handler]], caplog: pytest.LogCaptureFixture
) -> None:
    config, handler = server
    client = kube.api_client(str(config))
    with caplog.at_level(logging.WARNING, logger="webhook.kube.cluster"):
        items = list(kube.list_objects(client, group="", version="v1", plural="pods", kind="Pod", page_size=2))
    client.close()
    assert [i["metadata"]["name"] for i in items] == ["p0", "p1", "p2", "p3", "p4"]
    assert all(i["apiVersion"] == "v1" and i["kind"] == "Pod" and "managedFields" not in i["metadata"] for i in items)
    pages = [parse_qs(urlparse(p).query) for p in handler.requests if p.startswith("/api/v1/pods")]
    assert [(q["limit"], q.get("continue")) for q in pages] == [
        (["2"], None),
        (["2"], ["page-2"]),
        (["2"], ["page-2-newer"]),
        (["2"], ["page-3"]),
    ]
    assert "continue token expired; the rest of the list is from a newer snapshot" in caplog.text


def test_an_expired_token_without_a_successor_is_an_error(server: tuple[Path, type[_Handler]]) -> None:
    config, handler = server
    handler.expire_with_token = False
    client = kube.api_client(str(config))
    with pytest.raises(kube.ClusterError, match=r"list /api/v1/pods: HTTP 410: continue expired"):
        list(kube.list_objects(client, group="", version="v1", plural="pods", kind="Pod", page_size=2))
    client.close()


def test_forbidden_says_which_request_and_which_roles(server: tuple[Path, type[_Handler]]) -> None:
    client = kube.api_client(str(server[0]))
    with pytest.raises(kube.ClusterError) as caught:
        list(kube.list_objects(client, group="", version="v1", plural="pods", kind="Pod", namespace="secret"))
    client.close()
    assert str(caught.value) == (
        'list /api/v1/namespaces/secret/pods: HTTP 403: pods is forbidden: User "x" cannot '
        "list (grant the gpugate-auditor roles in deploy/audit; see docs/audit.md)"
    )


def test_discovery_picks_a_registry_version_the_group_serves(server: tuple[Path, type[_Handler]]) -> None:
    client = kube.api_client(str(server[0]))
    served = kube.served_kinds(
        client,
        wanted=[
            ("", "Pod", "pods", ["v1"]),
            ("ray.io", "RayCluster", "rayclusters", ["v1"]),
            ("ray.io", "RayJob", "rayjobs", ["v1beta9", "v1alpha1"]),  # the first listed version served
            ("batch.volcano.sh", "Job", "jobs", ["v1alpha1"]),
            ("kubeflow.org", "PyTorchJob", "pytorchjobs", ["v1"]),  # not installed: left out
            ("ray.io", "RayService", "rayservices", ["v1"]),  # group served, kind not: left out
        ],
    )
    client.close()
    assert served == {
        ("", "Pod"): ("v1", "pods"),
        ("ray.io", "RayCluster"): ("v1", "rayclusters"),
        ("ray.io", "RayJob"): ("v1alpha1", "rayjobs"),
        ("batch.volcano.sh", "Job"): ("v1alpha1", "jobs"),
    }
