"""The watch-fed cache of ResourceClaims and ResourceClaimTemplates (webhook/kube/claims.py) against the
real-HTTP fake apiserver of tests/kube/fakeapi.py: objects of the same name in two namespaces kept apart, watch
events (a claim allocated, reserved, deleted) applied, ``allocations`` listing the allocated devices with their
pods, a claim the cache holds resolved with no read, and RBAC without list/watch leaving every claim to the
bounded reads. The informer's list+watch itself is tested in tests/kube/test_informer.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from tests.kube.fakeapi import FakeAPI, wait_until, write_kubeconfig
from webhook.inventory.model import ClaimOption
from webhook.kube.claims import Allocation, ClaimsCache, allocations, record_of
from webhook.kube.client import configuration
from webhook.kube.inventory import FleetWatcher
from webhook.serve.lookups import RequestLookups

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"


def claim(namespace: str, name: str, *, count: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ResourceClaim as the apiserver lists it (list items carry no kind)."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}},
                    {
                        "name": "nic",
                        "firstAvailable": [
                            {"name": "fast", "deviceClassName": "rdma.example.com", "count": 2},
                            {"name": "any", "deviceClassName": "nic.example.com", "allocationMode": "All"},
                        ],
                    },
                ]
            }
        },
        **({"status": status} if status else {}),
    }


def template(namespace: str, name: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim(namespace, name, count=count)["spec"]},
    }


ALLOCATED = {
    "allocation": {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-1"},
                {"request": "nic/any", "driver": "nic.example.com", "pool": "node-a", "device": "eth1"},
            ]
        }
    },
    "reservedFor": [
        {"resource": "pods", "name": "trainer-1", "uid": "u1"},
        {"resource": "pods", "name": "trainer-0", "uid": "u0"},
        {"apiGroup": "example.com", "resource": "pods", "name": "not-a-pod", "uid": "u2"},
    ],
}


def _client(tmp_path: Path, api: FakeAPI) -> Any:
    return kubernetes.client.ApiClient(configuration(write_kubeconfig(tmp_path / "kubeconfig", api.url)))


@pytest.fixture
def claims_api() -> Iterator[FakeAPI]:
    api = FakeAPI(CLAIMS, "ResourceClaim")
    try:
        yield api
    finally:
        api.close()


def _cache(tmp_path: Path, api: FakeAPI) -> ClaimsCache:
    cache = ClaimsCache(_client(tmp_path, api), backoff_initial=0.05, backoff_max=0.2, page_size=2)
    cache.start()
    wait_until(cache.synced, "claims listed")
    return cache


def test_claims_are_listed_by_namespace_and_name_and_follow_the_watch(tmp_path: Path, claims_api: FakeAPI) -> None:
    claims_api.put_object("ml/train", claim("ml", "train", count=8))
    claims_api.put_object("other/train", claim("other", "train", count=1))
    claims_api.put_object("ml/eval", claim("ml", "eval"))
    cache = _cache(tmp_path, claims_api)
    try:
        held = cache.get("ResourceClaim", "ml", "train")
        assert held is not None and held.namespace == "ml" and held.requests[0].count == 8
        other = cache.get("ResourceClaim", "other", "train")
        assert other is not None and other.requests[0].count == 1  # same name, another namespace: its own
        assert cache.get("ResourceClaimTemplate", "ml", "train") is None  # templates are another kind
        assert cache.stats() == {"resourceclaims": 3, "resourceclaimtemplates": 0}
        assert list(allocations(cache)) == []  # nothing allocated yet

        claims_api.put_object("ml/train", claim("ml", "train", count=8, status=ALLOCATED))  # the scheduler
        wait_until(lambda: bool(list(allocations(cache))), "the allocation watched")
        assert list(allocations(cache)) == [
            Allocation("ml", "train", "gpu", "gpu.nvidia.com", "gpu.nvidia.com", "node-a", "gpu-0", False, PODS),
            Allocation("ml", "train", "gpu", "gpu.nvidia.com", "gpu.nvidia.com", "node-a", "gpu-1", False, PODS),
            Allocation("ml", "train", "nic/any", "nic.example.com", "nic.example.com", "node-a", "eth1", False, PODS),
        ]
        claims_api.delete("ml/eval")
        wait_until(lambda: cache.get("ResourceClaim", "ml", "eval") is None, "the delete watched")
    finally:
        cache.stop()


PODS = ("trainer-0", "trainer-1")  # sorted; an entry of another API group is not a pod


def test_a_template_keeps_each_alternative_of_its_requests() -> None:
    record = record_of("ResourceClaimTemplate", template("ml", "t", 4))
    [gpu, nic] = record.spec.requests
    assert record.spec.kind == "ResourceClaimTemplate" and record.allocated == ()
    assert (gpu.name, gpu.count, gpu.options) == ("gpu", 4, (ClaimOption("gpu.nvidia.com", 4),))
    assert nic.count is None  # the worst alternative is All
    assert nic.options == (
        ClaimOption("rdma.example.com", 2, name="fast"),
        ClaimOption("nic.example.com", None, name="any"),
    )


def test_malformed_status_is_no_allocation() -> None:
    for status in ({"allocation": "x"}, {"allocation": {"devices": {"results": "x"}}}, {"reservedFor": 3}):
        record = record_of("ResourceClaim", {**claim("ml", "c"), "status": status})
        assert record.allocated == () and record.pods == ()


def test_a_claim_the_cache_holds_costs_no_read(tmp_path: Path) -> None:
    """The fleet watcher over a fake that serves claim templates only: twenty templates a pod names are all
    resolved from the cache, though one request reads at most four."""
    api = FakeAPI(TEMPLATES, "ResourceClaimTemplate")
    for index in range(20):
        api.put_object(f"ml/t{index}", template("ml", f"t{index}", 2))
    watcher = FleetWatcher(_client(tmp_path, api), backoff_initial=0.05, backoff_max=0.2)
    try:
        watcher.start()
        wait_until(watcher.claims.synced, "templates listed")
        reads: list[tuple[str, str, str]] = []

        def read(kind: str, namespace: str, name: str) -> Any:
            reads.append((kind, namespace, name))
            return watcher.claim(kind, namespace, name)

        lookups = RequestLookups(read, deadline=time.monotonic() + 60, cached=watcher.cached_claim)
        found = [lookups("ResourceClaimTemplate", "ml", f"t{index}") for index in range(20)]
        assert all(f is not None and f.requests[0].count == 2 for f in found)
        assert reads == [] and lookups.skipped == 0
        assert lookups("ResourceClaimTemplate", "ml", "missing") is None and len(reads) == 1  # a miss is read
        assert api.count("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/missing") == 1
        assert watcher.stats()["resourceclaimtemplates"] == 20
        assert watcher.claim("ResourceClaimTemplate", "ml", "t3") is not None
        # FleetWatcher.claim itself asks the cache first: no GET of any held template
        assert not [r for r in api.requests if "/namespaces/ml/resourceclaimtemplates/t" in r]
    finally:
        watcher.stop()
        api.close()


def test_without_list_and_watch_every_claim_is_left_to_the_reads(tmp_path: Path, claims_api: FakeAPI) -> None:
    """RBAC that grants get only (the rule before this cache): the list is forbidden, the cache counts as
    synced and holds nothing, and says which kinds it could not read."""
    claims_api.put_object("ml/train", claim("ml", "train"))
    claims_api.forbidden.add(CLAIMS)
    cache = _cache(tmp_path, claims_api)
    try:
        assert cache.get("ResourceClaim", "ml", "train") is None
        assert cache.unread() == frozenset({"resourceclaims"})
        claims_api.forbidden.clear()  # the rule granted: the next look lists them
        wait_until(lambda: cache.get("ResourceClaim", "ml", "train") is not None, "claims listed once allowed")
        assert cache.unread() == frozenset()
    finally:
        cache.stop()
