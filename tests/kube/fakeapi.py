"""A small, real HTTP fake of kube-apiserver's list, watch and get endpoints for one kind (namespaces by
default), shared by the tests of every cache that stands on webhook.kube.informer."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

HANG_GUARD = 30.0  # seconds; only so that a broken build fails instead of hanging CI


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for: {what}")
        time.sleep(0.02)


class FakeAPI:
    """Three endpoints of kube-apiserver for one kind, with resourceVersions, watch and compaction; every other
    path is a 404 (a kind the cluster does not serve).

    GET <collection>                 list (limit/continue paging), metadata.resourceVersion
    GET <collection>?watch=1&...     chunked stream of JSON lines: ADDED/MODIFIED/DELETED, BOOKMARK never,
                                     ERROR 410 for a resourceVersion older than compaction
    GET <collection>/{name}          the object, or a 404 Status
    """

    def __init__(self, collection: str = "/api/v1/namespaces", kind: str = "Namespace") -> None:
        self.collection, self.kind = collection, kind
        self.cond = threading.Condition()
        self.rv = 100
        self.objects: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted = 0  # watches from a resourceVersion older than this get 410 Gone
        self.generation = 0  # bumped by expire(): open watches send ERROR 410 and end
        self.open_watches = 0
        self.trickle: set[str] = set()  # namespace names whose GET never finishes, one byte at a time
        self.refuse_with_http_410 = False  # else, like kube-apiserver, a 200 stream with an ERROR event
        self.requests: list[str] = []
        self.forbidden: set[str] = set()  # paths answered 403 Forbidden (an RBAC rule gpugate lacks)
        self.hanging = threading.Event()
        self.released = threading.Event()
        self.closing = False

        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    # -- what a test does to the "cluster" ------------------------------------------------------------

    def _object(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        self.rv += 1
        return {
            "kind": self.kind,
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": dict(labels), "resourceVersion": str(self.rv)},
        }

    def put(self, name: str, labels: dict[str, str], *, notify: bool = True) -> None:
        """Create or relabel a namespace; notify=False changes state without a watch event (lost event)."""
        with self.cond:
            kind = "MODIFIED" if name in self.objects else "ADDED"
            obj = self.objects[name] = self._object(name, labels)
            if notify:
                self.events.append((self.rv, kind, obj))
            self.cond.notify_all()

    def put_object(self, key: str, obj: dict[str, Any]) -> None:
        """Create or replace any object (a namespaced kind: ``key`` is unique in the fake, e.g. ns/name); its
        resourceVersion is set, its watch event sent."""
        with self.cond:
            self.rv += 1
            kind = "MODIFIED" if key in self.objects else "ADDED"
            stored = self.objects[key] = json.loads(json.dumps(obj))
            stored.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, kind, stored))
            self.cond.notify_all()

    def delete(self, name: str) -> None:
        with self.cond:
            obj = self.objects.pop(name)
            self.rv += 1
            gone = json.loads(json.dumps(obj))
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, "DELETED", gone))
            self.cond.notify_all()

    def expire(self, *, end_open_watches: bool = True) -> None:
        """etcd compaction: every resourceVersion handed out so far is too old. Open watches get an
        ERROR 410 event, or (end_open_watches=False) run on and meet a 410 when they reconnect."""
        with self.cond:
            self.rv += 1
            self.compacted = self.rv
            self.events.clear()
            if end_open_watches:
                self.generation += 1
            self.cond.notify_all()

    def count(self, path: str) -> int:
        with self.cond:
            return sum(1 for r in self.requests if urlsplit(r).path == path)

    # -- the HTTP side ----------------------------------------------------------------------------

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        with self.cond:
            self.requests.append(req.path)
        if self.hanging.is_set():
            self.released.wait(HANG_GUARD)  # a hung apiserver: accept, then say nothing
        parts = urlsplit(req.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path in self.forbidden:
            self.send_json(req, 403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
            return
        if parts.path == self.collection:
            if query.get("watch") in ("1", "true"):
                self.watch(req, query)
            else:
                self.list(req, query)
        elif parts.path.startswith(f"{self.collection}/"):
            name = parts.path.rsplit("/", 1)[1]
            if name in self.trickle:
                self.send_slowly(req)
                return
            with self.cond:
                obj = self.objects.get(name)
            if obj is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "message": f'{self.collection.rsplit("/", 1)[1]} "{name}" not found',
                    "code": 404,
                }
                self.send_json(req, 404, status)
            else:
                self.send_json(req, 200, obj)
        else:
            self.send_json(req, 404, {"kind": "Status", "code": 404})

    def send_slowly(self, req: BaseHTTPRequestHandler) -> None:
        """Headers at once, then a byte now and then: every socket read succeeds, the body never ends."""
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", "100000")
        req.end_headers()
        try:
            while not self.released.wait(0.05):
                req.wfile.write(b" ")
                req.wfile.flush()
        except OSError:
            pass
        req.close_connection = True

    def send_json(self, req: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        req.send_response(code)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def list(self, req: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        with self.cond:
            names = sorted(self.objects)
            after = query.get("continue", "")
            names = [n for n in names if n > after]
            limit = int(query.get("limit", "0")) or len(names)
            page = names[:limit]
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if len(names) > limit:
                meta["continue"] = page[-1]
            items = [self.objects[n] for n in page]
        self.send_json(req, 200, {"kind": f"{self.kind}List", "apiVersion": "v1", "metadata": meta, "items": items})

    def watch(self, req: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + int(query.get("timeoutSeconds", "60"))
        if since < self.compacted and self.refuse_with_http_410:
            self.send_json(
                req,
                410,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "Expired",
                    "code": 410,
                    "message": "too old resource version",
                },
            )
            return
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()

        def chunk(event: dict[str, Any]) -> None:
            line = json.dumps(event).encode() + b"\n"
            req.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            req.wfile.flush()

        with self.cond:
            self.open_watches += 1
            generation = self.generation
        try:
            if since < self.compacted:
                chunk(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "Expired",
                            "code": 410,
                            "message": f"too old resource version: {since}",
                        },
                    }
                )
                return
            while True:
                with self.cond:
                    pending = [(rv, t, o) for rv, t, o in self.events if rv > since]
                    if not pending:
                        if self.closing or time.monotonic() > deadline:
                            return
                        if self.generation != generation:
                            pending = [
                                (
                                    self.rv,
                                    "ERROR",
                                    {
                                        "kind": "Status",
                                        "code": 410,
                                        "reason": "Expired",
                                        "message": "too old resource version",
                                    },
                                )
                            ]
                        else:
                            self.cond.wait(0.05)
                            if client_gone(req):
                                return
                            continue
                for rv, kind, obj in pending:
                    chunk({"type": kind, "object": obj})
                    since = rv
                    if kind == "ERROR":
                        return
        except OSError:  # the client went away
            pass
        finally:
            with self.cond:
                self.open_watches -= 1
            try:
                req.wfile.write(b"0\r\n\r\n")
                req.wfile.flush()
            except OSError:
                pass
            req.close_connection = True


def client_gone(req: BaseHTTPRequestHandler) -> bool:
    # Like the apiserver, notice a watcher that hung up even when there is nothing to send it.
    conn = req.connection
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def write_kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
                "current-context": "fake",
            }
        )
    )
    return str(path)


FakeNamespaceAPI = FakeAPI


class FakeAdmissionAPI:
    """What ``gpugate serve --native-sync`` talks to, as kube-apiserver answers it: discovery of
    admissionregistration.k8s.io/v1 (with or without MutatingAdmissionPolicy), server-side apply (PATCH
    application/apply-patch+yaml, the object replaced by what the manager applies; for a webhook configuration,
    the applied matchConditions merged by name into the named webhooks, as the structured merge of a
    ``listType=map`` does, and an applied objectSelector set, and removed once its manager no longer states it), GET and DELETE by name, and coordination.k8s.io Leases with resourceVersion
    conflicts (409). Every request is recorded as "METHOD path"."""

    GROUP = "/apis/admissionregistration.k8s.io/v1"
    LEASES = "/apis/coordination.k8s.io/v1/namespaces/"

    def __init__(self, *, serves_mutating_policies: bool = True) -> None:
        self.serves_mutating_policies = serves_mutating_policies
        self.objects: dict[str, dict[str, Any]] = {}  # path -> object
        self.requests: list[str] = []
        self.managers: dict[str, str] = {}  # path -> field manager of the last apply
        #: (path, webhook, manager) -> the matchConditions entries that manager applied last
        self.owned: dict[tuple[str, ...], set[str]] = {}
        self.forbidden: set[str] = set()  # paths answered 403
        self.conflicts = 0  # Lease updates answered 409 as if another writer had just updated it
        self.rv = 1
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api.handle(self, "GET")

            def do_PATCH(self) -> None:
                api.handle(self, "PATCH")

            def do_POST(self) -> None:
                api.handle(self, "POST")

            def do_PUT(self) -> None:
                api.handle(self, "PUT")

            def do_DELETE(self) -> None:
                api.handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def named(self, plural: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(f"{self.GROUP}/{plural}/{name}")

    def writes(self) -> list[str]:
        return [r for r in self.requests if not r.startswith("GET")]

    def _discovery(self) -> dict[str, Any]:
        kinds = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration",
                 "ValidatingWebhookConfiguration"]  # fmt: skip
        if self.serves_mutating_policies:
            kinds += ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
        return {"kind": "APIResourceList", "groupVersion": "admissionregistration.k8s.io/v1",
                "resources": [{"kind": k, "name": k.lower() + "s", "verbs": ["get", "patch"]} for k in kinds]}  # fmt: skip

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(req.path)
        path, query = url.path, {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(req.headers.get("Content-Length") or 0)
        body: Any = json.loads(req.rfile.read(length) or b"null") if length else None
        with self.lock:
            self.requests.append(f"{method} {path}")
            if path in self.forbidden:
                return self._send(req, 403, {"kind": "Status", "message": f"forbidden: {method} {path}"})
            if method == "GET" and path == self.GROUP:
                return self._send(req, 200, self._discovery())
            if path.startswith(self.GROUP) and not self.serves_mutating_policies and "mutatingadmissionpolic" in path:
                return self._send(
                    req, 404, {"kind": "Status", "message": "the server could not find the requested resource"}
                )
            if method == "GET":
                found = self.objects.get(path)
                return self._send(req, 200, found) if found else self._send(req, 404, {"kind": "Status"})
            if method == "DELETE":
                if self.objects.pop(path, None) is None:
                    return self._send(req, 404, {"kind": "Status"})
                return self._send(req, 200, {"kind": "Status", "status": "Success"})
            if method == "PATCH":
                assert req.headers.get("Content-Type") == "application/apply-patch+yaml", req.headers
                return self._apply(req, path, query, body)
            if method == "POST" and path.startswith(self.LEASES):
                target = f"{path}/{body['metadata']['name']}"
                if target in self.objects:
                    return self._send(req, 409, {"kind": "Status", "message": "already exists"})
                return self._store(req, target, body, 201)
            if method == "PUT" and path.startswith(self.LEASES):
                current = self.objects.get(path)
                if current is None:
                    return self._send(req, 404, {"kind": "Status"})
                if self.conflicts:
                    self.conflicts -= 1
                    current["metadata"]["resourceVersion"] = str(self.rv + 1000)
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return self._send(req, 409, {"kind": "Status", "message": "the object has been modified"})
                return self._store(req, path, body, 200)
            return self._send(req, 405, {"kind": "Status", "message": f"{method} {path}"})

    def _apply(self, req: BaseHTTPRequestHandler, path: str, query: dict[str, str], body: Any) -> None:
        self.managers[path] = query.get("fieldManager", "")
        existing = self.objects.get(path)
        if body.get("kind", "").endswith("WebhookConfiguration"):
            if existing is None:
                return self._send(req, 422, {"kind": "Status", "message": "webhooks[0].clientConfig: Required value"})
            merged = json.loads(json.dumps(existing))
            for applied in body.get("webhooks", []):
                for hook in merged["webhooks"]:
                    if hook["name"] != applied["name"]:
                        continue
                    conditions = {c["name"]: c for c in hook.get("matchConditions", [])}
                    # An entry this manager applied before and states no more is removed (structured merge).
                    stated = {c["name"] for c in applied.get("matchConditions", [])}
                    key = (path, hook["name"], self.managers[path])
                    for gone in self.owned.get(key, set()) - stated:
                        conditions.pop(gone, None)
                    self.owned[key] = stated
                    conditions.update({c["name"]: c for c in applied.get("matchConditions", [])})
                    hook["matchConditions"] = list(conditions.values())
                    # A field (the objectSelector) is this manager's while it states it, and goes when it does not.
                    selector = (path, hook["name"], self.managers[path], "objectSelector")
                    if "objectSelector" in applied:
                        hook["objectSelector"] = applied["objectSelector"]
                        self.owned[selector] = {"objectSelector"}
                    elif self.owned.pop(selector, None):
                        hook.pop("objectSelector", None)
            return self._store(req, path, merged, 200)
        return self._store(req, path, body, 200 if existing else 201)

    def _store(self, req: BaseHTTPRequestHandler, path: str, obj: dict[str, Any], code: int) -> None:
        self.rv += 1
        obj = json.loads(json.dumps(obj))
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[path] = obj
        self._send(req, code, obj)

    def _send(self, req: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        req.send_response(code)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)
