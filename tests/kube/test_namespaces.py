"""NamespaceLabelCache against a small, real HTTP fake of the apiserver's namespace endpoints (tests/kube/fakeapi.py):
its live lookups and its answers; the list+watch under it is tests/kube/test_informer.py's."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fakeapi import HANG_GUARD, FakeNamespaceAPI, wait_until, write_kubeconfig
from webhook.kube.namespaces import NamespaceLabelCache, namespace_cache


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
