"""The list+watch every cache stands on (webhook/kube/informer.py), through each cache that uses it: the
namespace-label cache and the fleet watcher, against the real-HTTP fake apiserver of tests/kube/fakeapi.py
(namespaces, or nodes with every other inventory kind unserved). List in pages, events through the watch,
relist on 410 (an ERROR event, or a refused reconnect), a watch timeout that rewatches without relisting,
retries with backoff while the apiserver is away, recovery, and stop."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from tests.kube.fakeapi import FakeAPI, wait_until, write_kubeconfig
from webhook.kube.client import configuration
from webhook.kube.inventory import FleetWatcher
from webhook.kube.namespaces import NamespaceLabelCache


@dataclass(frozen=True)
class Cache:
    """One cache over the informer: how to build it, its fake's collection, and what it holds (name -> labels)."""

    name: str
    collection: str
    kind: str
    build: Callable[..., Any]
    held: Callable[[Any], dict[str, dict[str, str]]]


def _namespaces(cache: NamespaceLabelCache) -> dict[str, dict[str, str]]:
    return {name: dict(entry.labels) for name, entry in cache._entries.items()}


def _nodes(watcher: FleetWatcher) -> dict[str, dict[str, str]]:
    inventory = watcher.inventory()
    return {} if inventory is None else {node.name: dict(node.labels) for node in inventory.nodes}


def _fleet(api_client: Any, **options: Any) -> FleetWatcher:
    if "list_timeout" in options:
        options["request_timeout"] = options.pop("list_timeout")
    options.pop("lookup_timeout", None)
    return FleetWatcher(api_client, **options)


CACHES = [
    Cache("namespaces", "/api/v1/namespaces", "Namespace", NamespaceLabelCache, _namespaces),
    Cache("fleet", "/api/v1/nodes", "Node", _fleet, _nodes),
]


@pytest.fixture(params=CACHES, ids=[c.name for c in CACHES])
def cache_kind(request: pytest.FixtureRequest) -> Cache:
    return request.param


@pytest.fixture
def api(cache_kind: Cache) -> Iterator[FakeAPI]:
    fake = FakeAPI(cache_kind.collection, cache_kind.kind)
    fake.put("a", {"team": "vision"})
    fake.put("b", {"team": "nlp"})
    fake.put("c", {})
    yield fake
    fake.close()


@pytest.fixture
def make(cache_kind: Cache, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def build(fake_or_url: FakeAPI | str, **options: Any) -> Any:
        url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.url
        options.setdefault("backoff_initial", 0.05)
        options.setdefault("backoff_max", 0.2)
        configured = configuration(write_kubeconfig(tmp_path / f"kubeconfig-{len(made)}", url))
        cache = cache_kind.build(kubernetes.client.ApiClient(configured), **options)
        made.append(cache)
        return cache

    yield build
    for cache in made:
        cache.stop()


def started(cache: Any) -> Any:
    cache.start()
    wait_until(cache.synced, "first list")
    return cache


def test_the_first_list_fills_the_cache(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api))
    assert cache_kind.held(cache) == {"a": {"team": "vision"}, "b": {"team": "nlp"}, "c": {}}
    assert cache.stats()["relists"] == 1


def test_the_list_is_paged(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    for i in range(7):
        api.put(f"more-{i}", {"team": f"t{i}"})
    cache = started(make(api, page_size=3))
    assert len(cache_kind.held(cache)) == 10 and cache_kind.held(cache)["more-6"] == {"team": "t6"}
    assert sum(1 for r in api.requests if "continue=" in r) >= 3


def test_changes_additions_and_deletions_arrive_through_the_watch(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api))
    api.put("b", {"team": "speech"})
    api.put("d", {"team": "robotics"})
    api.delete("c")
    wait_until(
        lambda: cache_kind.held(cache) == {"a": {"team": "vision"}, "b": {"team": "speech"}, "d": {"team": "robotics"}},
        "MODIFIED, ADDED, DELETED",
    )
    assert cache.stats()["relists"] == 1 and cache.stats()["watch_errors"] == 0


def test_a_410_in_the_watch_relists_and_catches_up(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api))
    wait_until(lambda: api.open_watches == 1, "watch open")
    # A change the watch never reports (it happened inside the compacted window), then 410.
    api.put("b", {"team": "lost-event"}, notify=False)
    api.expire()
    wait_until(lambda: cache.stats()["relists"] == 2, "relist after 410")
    assert cache_kind.held(cache)["b"] == {"team": "lost-event"}
    api.put("b", {"team": "after-relist"})  # the new watch, from the new list's resourceVersion, works
    wait_until(lambda: cache_kind.held(cache)["b"] == {"team": "after-relist"}, "event after relist")
    assert cache.stats()["watch_errors"] == 0


def test_a_reconnect_refused_with_410_relists(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api, watch_timeout=0.5))
    wait_until(lambda: api.open_watches == 1, "watch open")
    api.refuse_with_http_410 = True
    api.put("c", {"team": "compacted-away"}, notify=False)
    api.expire(end_open_watches=False)  # the open watch runs to its timeout, then reconnects too late
    wait_until(lambda: cache.stats()["relists"] == 2, "relist after a refused reconnect")
    assert cache_kind.held(cache)["c"] == {"team": "compacted-away"}


def test_a_watch_timeout_rewatches_without_relisting(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api, watch_timeout=0.5))
    watches = sum(1 for r in api.requests if "watch=" in r)
    wait_until(lambda: sum(1 for r in api.requests if "watch=" in r) >= watches + 2, "two more watches")
    assert cache.stats()["relists"] == 1
    api.put("a", {"team": "later"})
    wait_until(lambda: cache_kind.held(cache)["a"] == {"team": "later"}, "event on a later watch")


def test_an_unreachable_apiserver_is_retried_and_the_cache_stays_unsynced(make: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = make(f"http://127.0.0.1:{port}")  # nothing listens there now
    cache.start()
    wait_until(lambda: cache.stats()["watch_errors"] >= 2, "list retries with backoff")
    assert not cache.synced()


def test_it_recovers_when_the_apiserver_comes_back(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    api.hanging.set()
    cache = make(api, lookup_timeout=0.3, list_timeout=0.3)
    cache.start()
    wait_until(lambda: cache.stats()["watch_errors"] >= 1, "a failed list")
    api.hanging.clear()
    api.released.set()
    wait_until(cache.synced, "list after recovery")
    assert cache_kind.held(cache)["b"] == {"team": "nlp"}


def test_stop_closes_the_watch_and_the_contents_stay(api: FakeAPI, make: Any, cache_kind: Cache) -> None:
    cache = started(make(api))
    wait_until(lambda: api.open_watches == 1, "watch open")
    cache.stop()
    wait_until(lambda: api.open_watches == 0, "watch closed")
    assert cache_kind.held(cache)["b"] == {"team": "nlp"}
