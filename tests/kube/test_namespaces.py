"""NamespaceLabelCache against a small, real HTTP fake of the apiserver's namespace endpoints."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from webhook.kube.namespaces import NamespaceLabelCache, namespace_cache

HANG_GUARD = 30.0  # seconds; only so that a broken build fails instead of hanging CI


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for: {what}")
        time.sleep(0.02)


class FakeNamespaceAPI:
    """The three namespace endpoints of kube-apiserver, with resourceVersions, watch and compaction.

    GET /api/v1/namespaces                 list (limit/continue paging), metadata.resourceVersion
    GET /api/v1/namespaces?watch=1&...     chunked stream of JSON lines: ADDED/MODIFIED/DELETED, BOOKMARK
                                           never, ERROR 410 for a resourceVersion older than compaction
    GET /api/v1/namespaces/{name}          the object, or a 404 Status
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted = 0  # watches from a resourceVersion older than this get 410 Gone
        self.generation = 0  # bumped by expire(): open watches send ERROR 410 and end
        self.open_watches = 0
        self.trickle: set[str] = set()  # namespace names whose GET never finishes, one byte at a time
        self.refuse_with_http_410 = False  # else, like kube-apiserver, a 200 stream with an ERROR event
        self.requests: list[str] = []
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
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": dict(labels), "resourceVersion": str(self.rv)},
        }

    def put(self, name: str, labels: dict[str, str], *, notify: bool = True) -> None:
        """Create or relabel a namespace; notify=False changes state without a watch event (lost event)."""
        with self.cond:
            kind = "MODIFIED" if name in self.namespaces else "ADDED"
            obj = self.namespaces[name] = self._object(name, labels)
            if notify:
                self.events.append((self.rv, kind, obj))
            self.cond.notify_all()

    def delete(self, name: str) -> None:
        with self.cond:
            obj = self.namespaces.pop(name)
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
        if parts.path == "/api/v1/namespaces":
            if query.get("watch") in ("1", "true"):
                self.watch(req, query)
            else:
                self.list(req, query)
        elif parts.path.startswith("/api/v1/namespaces/"):
            name = parts.path.rsplit("/", 1)[1]
            if name in self.trickle:
                self.send_slowly(req)
                return
            with self.cond:
                obj = self.namespaces.get(name)
            if obj is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "message": f'namespaces "{name}" not found',
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
            names = sorted(self.namespaces)
            after = query.get("continue", "")
            names = [n for n in names if n > after]
            limit = int(query.get("limit", "0")) or len(names)
            page = names[:limit]
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if len(names) > limit:
                meta["continue"] = page[-1]
            items = [self.namespaces[n] for n in page]
        self.send_json(req, 200, {"kind": "NamespaceList", "apiVersion": "v1", "metadata": meta, "items": items})

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


@pytest.fixture
def api() -> Iterator[FakeNamespaceAPI]:
    fake = FakeNamespaceAPI()
    fake.put("ml-serving", {"team": "vision", "cost-center": "cc-100"})
    fake.put("research", {"team": "nlp"})
    fake.put("sandbox", {})
    yield fake
    fake.close()


@pytest.fixture
def make_cache(tmp_path: Path) -> Iterator[Callable[..., NamespaceLabelCache]]:
    made: list[NamespaceLabelCache] = []

    def make(fake_or_url: FakeNamespaceAPI | str, **options: Any) -> NamespaceLabelCache:
        url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.url
        options.setdefault("backoff_initial", 0.05)
        options.setdefault("backoff_max", 0.2)
        cache = namespace_cache(write_kubeconfig(tmp_path / f"kubeconfig-{len(made)}", url), **options)
        assert cache is not None
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.stop()


def started(cache: NamespaceLabelCache) -> NamespaceLabelCache:
    cache.start()
    wait_until(cache.synced, "first list")
    return cache


def test_first_list_fills_the_cache_and_labels_come_from_memory(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))

    assert cache.labels("ml-serving") == {"team": "vision", "cost-center": "cc-100"}
    assert cache.labels("research") == {"team": "nlp"}
    assert cache.labels("sandbox") == {}
    assert api.count("/api/v1/namespaces/ml-serving") == 0  # no live GET once synced
    assert cache.stats()["relists"] == 1
    assert cache.stats()["namespaces"] == 3


def test_list_is_paged(api: FakeNamespaceAPI, make_cache: Any) -> None:
    for i in range(7):
        api.put(f"team-{i}", {"team": f"t{i}"})

    cache = started(make_cache(api, page_size=3))

    assert cache.stats()["namespaces"] == 10
    assert cache.labels("team-6") == {"team": "t6"}
    assert sum(1 for r in api.requests if "continue=" in r) >= 3


def test_label_change_arrives_through_the_watch(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))

    api.put("research", {"team": "speech", "cost-center": "cc-7"})

    wait_until(lambda: cache.labels("research") == {"team": "speech", "cost-center": "cc-7"}, "MODIFIED")
    assert api.count("/api/v1/namespaces/research") == 0


def test_added_namespace_arrives_through_the_watch(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))

    api.put("team-new", {"team": "robotics"})

    wait_until(lambda: cache.stats()["namespaces"] == 4, "ADDED")
    assert cache.labels("team-new") == {"team": "robotics"}
    assert api.count("/api/v1/namespaces/team-new") == 0


def test_deleted_namespace_leaves_the_cache(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))

    api.delete("sandbox")

    wait_until(lambda: cache.stats()["namespaces"] == 2, "DELETED")
    assert cache.labels("sandbox") is None  # asked the API, which says 404
    assert cache.stats()["lookups_not_found"] == 1


def test_410_gone_makes_it_relist_and_catch_up(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))
    wait_until(lambda: api.open_watches == 1, "watch open")

    # A change the watch never reports (it happened inside the compacted window), then 410.
    api.put("research", {"team": "lost-event"}, notify=False)
    api.expire()

    wait_until(lambda: cache.stats()["relists"] == 2, "relist after 410")
    assert cache.labels("research") == {"team": "lost-event"}
    # and the new watch, from the new list's resourceVersion, keeps working
    api.put("research", {"team": "after-relist"})
    wait_until(lambda: cache.labels("research") == {"team": "after-relist"}, "event after relist")
    assert cache.stats()["watch_errors"] == 0


def test_reconnect_from_a_compacted_version_relists(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api, watch_timeout=0.5))
    wait_until(lambda: api.open_watches == 1, "watch open")

    api.refuse_with_http_410 = True
    api.put("sandbox", {"team": "compacted-away"}, notify=False)
    api.expire(end_open_watches=False)  # the open watch runs to its timeout, then reconnects too late

    wait_until(lambda: cache.stats()["relists"] == 2, "relist after HTTP 410")
    assert cache.labels("sandbox") == {"team": "compacted-away"}


def test_watch_timeout_rewatches_without_relisting(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api, watch_timeout=0.5))

    wait_until(lambda: cache.stats()["watches"] >= 3, "server-side watch timeouts")
    api.put("ml-serving", {"team": "vision", "cost-center": "cc-200"})
    wait_until(lambda: cache.labels("ml-serving") == {"team": "vision", "cost-center": "cc-200"}, "event")
    assert cache.stats()["relists"] == 1


def test_live_lookup_before_sync_then_cached(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = make_cache(api)  # never started: nothing synced

    assert not cache.synced()
    assert cache.labels("ml-serving") == {"team": "vision", "cost-center": "cc-100"}
    assert cache.labels("ml-serving") == {"team": "vision", "cost-center": "cc-100"}
    assert api.count("/api/v1/namespaces/ml-serving") == 1
    assert cache.stats()["live_lookups"] == 1


def test_live_lookup_entries_expire_before_sync(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = make_cache(api, live_ttl=0.0)

    assert cache.labels("research") == {"team": "nlp"}
    api.put("research", {"team": "speech"})
    assert cache.labels("research") == {"team": "speech"}
    assert api.count("/api/v1/namespaces/research") == 2


def test_stale_live_answer_beats_none_when_the_api_fails(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = make_cache(api, live_ttl=0.0, lookup_timeout=0.3)
    assert cache.labels("research") == {"team": "nlp"}

    api.hanging.set()

    assert call_in_thread(lambda: cache.labels("research")) == {"team": "nlp"}
    assert cache.stats()["lookup_failures"] == 1
    assert cache.labels("research") == {"team": "nlp"}  # failure backoff: from memory, no new GET
    assert api.count("/api/v1/namespaces/research") == 2


def test_namespace_unknown_to_a_synced_cache_is_looked_up(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))

    # Created a moment ago: the watch has not told us yet (here: never will).
    api.put("just-created", {"team": "fresh"}, notify=False)

    assert cache.labels("just-created") == {"team": "fresh"}
    assert api.count("/api/v1/namespaces/just-created") == 1
    assert cache.labels("just-created") == {"team": "fresh"}
    assert api.count("/api/v1/namespaces/just-created") == 1


def test_missing_namespace_is_none(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = make_cache(api)

    assert cache.labels("") is None
    assert cache.labels("no-such-namespace") is None
    assert cache.stats()["lookups_not_found"] == 1
    assert cache.stats()["lookup_failures"] == 0


def call_in_thread(fn: Callable[[], Any]) -> Any:
    """Run fn in a thread and return its result; fail (rather than hang) if it never returns."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "call did not return"
    return box[0]


def test_hung_apiserver_gives_none_within_the_bound(api: FakeNamespaceAPI, make_cache: Any) -> None:
    api.hanging.set()
    cache = make_cache(api, lookup_timeout=0.3, list_timeout=0.3)
    cache.start()

    assert call_in_thread(lambda: cache.labels("ml-serving")) is None
    assert not cache.synced()
    wait_until(lambda: cache.stats()["lookup_failures"] == 1, "the GET to time out")


def test_trickling_apiserver_cannot_stretch_the_bound(api: FakeNamespaceAPI, make_cache: Any) -> None:
    # Per-read socket timeouts never fire when bytes keep coming; the caller's own bound must.
    api.trickle.add("research")
    cache = make_cache(api, lookup_timeout=0.3)

    assert call_in_thread(lambda: cache.labels("research")) is None
    assert cache.labels("ml-serving") == {"team": "vision", "cost-center": "cc-100"}  # others unaffected


def test_concurrent_callers_share_one_lookup_and_failures_back_off(api: FakeNamespaceAPI, make_cache: Any) -> None:
    api.hanging.set()
    cache = make_cache(api, lookup_timeout=0.3, failure_backoff=60.0)

    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(cache.labels("research"))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD)
    assert results == [None] * 16
    wait_until(lambda: cache.stats()["lookup_failures"] == 1, "the GET to time out")
    assert call_in_thread(lambda: cache.labels("research")) is None  # within failure_backoff: no new GET
    assert api.count("/api/v1/namespaces/research") == 1


def test_unreachable_apiserver_gives_none_and_keeps_retrying(make_cache: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = make_cache(f"http://127.0.0.1:{port}")  # nothing listens there now

    assert cache.labels("ml-serving") is None
    assert cache.stats()["lookup_failures"] == 1
    cache.start()
    wait_until(lambda: cache.stats()["watch_errors"] >= 2, "list retries with backoff")
    assert not cache.synced()


def test_recovers_when_the_apiserver_comes_back(api: FakeNamespaceAPI, make_cache: Any) -> None:
    api.hanging.set()
    cache = make_cache(api, lookup_timeout=0.3, list_timeout=0.3)
    cache.start()
    wait_until(lambda: cache.stats()["watch_errors"] >= 1, "a failed list")

    api.hanging.clear()
    api.released.set()

    wait_until(cache.synced, "list after recovery")
    assert cache.labels("research") == {"team": "nlp"}


def test_stop_closes_the_watch(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))
    wait_until(lambda: api.open_watches == 1, "watch open")

    cache.stop()

    wait_until(lambda: api.open_watches == 0, "watch closed")
    assert cache.labels("research") == {"team": "nlp"}  # the last contents stay


def test_no_cluster_means_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert namespace_cache(None) is None


def test_labels_are_read_only(api: FakeNamespaceAPI, make_cache: Any) -> None:
    cache = started(make_cache(api))
    labels = cache.labels("research")
    assert labels is not None
    with pytest.raises(TypeError):
        labels["team"] = "forged"  # type: ignore[index]


def test_namespace_selector_and_attribution_through_the_cache_end_to_end(
    api: FakeNamespaceAPI, make_cache: Any, tmp_path: Path
) -> None:
    """A policy selecting by namespaceSelector and attributing fromNamespaceLabel, answered by the app."""
    import base64
    import json

    import jsonpatch

    from tests.support import gpu_pod, review
    from webhook.serve.app import create_app
    from webhook.serve.policies import PolicyStore

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "serving.yaml").write_text("""
apiVersion: gpugate.io/v2
kind: GPUPolicy
metadata: {name: serving}
spec:
  match: {namespaceSelector: {matchLabels: {team: vision}}}
  devices: {nvidia: {runtimeClassName: nvidia}}
  attribution:
    labels:
      gpugate.io/team: {fromNamespaceLabel: team}
      gpugate.io/cost-center: {fromNamespaceLabel: cost-center}
""")
    cache = started(make_cache(api))
    app = create_app(policies=PolicyStore(tmp_path / "policies"), namespace_labels=cache.labels, namespace_cache=cache)
    client = app.test_client()

    def stored(namespace: str) -> dict[str, Any]:
        obj = gpu_pod(1, namespace=namespace)
        out = client.post("/mutate", json=review(obj)).get_json()["response"]
        return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(out["patch"])) if "patch" in out else [])

    selected = stored("ml-serving")
    assert selected["spec"]["runtimeClassName"] == "nvidia"
    assert selected["metadata"]["labels"]["gpugate.io/team"] == "vision"
    assert selected["metadata"]["labels"]["gpugate.io/cost-center"] == "cc-100"
    assert "runtimeClassName" not in stored("research")["spec"]  # team=nlp: the policy does not match

    api.put("research", {"team": "vision"})  # relabel: the watch brings it, the next pod is governed
    wait_until(lambda: cache.labels("research") == {"team": "vision"}, "MODIFIED")
    relabelled = stored("research")
    assert relabelled["metadata"]["labels"]["gpugate.io/cost-center"] == "unassigned"
    assert relabelled["spec"]["runtimeClassName"] == "nvidia"
