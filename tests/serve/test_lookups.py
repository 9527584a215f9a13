"""One request's claim reads (webhook/serve/lookups.py): deduplicated, at most a few, none after the budget or
the apiserver's ?timeout=; and a pod naming more claims than any real one refused before any read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support import REPO, gpu_pod, review
from webhook.inventory.model import ClaimSpec
from webhook.serve.app import create_app
from webhook.serve.lookups import (
    CLAIM_BUDGET,
    MAX_CLAIM_READS,
    POD_LIMIT,
    POD_TIMEOUT,
    RequestLookups,
    RequestPods,
    go_duration,
    request_deadline,
)
from webhook.serve.policies import PolicyStore


class Reads:
    """A claim source that records each read (the apiserver's side of FleetWatcher.claim)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.keys: list[tuple[str, str, str]] = []
        self.delay = delay

    def __call__(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        self.keys.append((kind, namespace, name))
        time.sleep(self.delay)
        return None


def test_the_same_claim_is_read_once_and_only_a_few_distinct_ones_at_all():
    reads = Reads()
    lookups = RequestLookups(reads, deadline=time.monotonic() + 60)
    for _ in range(3):
        lookups("ResourceClaimTemplate", "ml", "one")
    for index in range(20):
        lookups("ResourceClaimTemplate", "ml", f"t{index}")
    assert len(reads.keys) == MAX_CLAIM_READS
    assert reads.keys[0] == ("ResourceClaimTemplate", "ml", "one")
    assert lookups.skipped == 20 - (MAX_CLAIM_READS - 1)


def test_no_read_starts_after_the_deadline():
    reads = Reads(delay=0.2)
    lookups = RequestLookups(reads, deadline=time.monotonic() + 0.3)
    for index in range(4):
        lookups("ResourceClaim", "ml", f"c{index}")
    assert len(reads.keys) == 2


@pytest.mark.parametrize(
    ("text", "seconds"), [("5s", 5.0), ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("x", None), ("", None)]
)
def test_go_durations_as_the_apiserver_writes_timeout(text, seconds):
    assert go_duration(text) == seconds


def test_the_budget_ends_before_the_apiservers_timeout():
    assert request_deadline(100.0, None) == 100.0 + CLAIM_BUDGET
    assert request_deadline(100.0, "1s") == pytest.approx(100.5)
    assert request_deadline(100.0, "30s") == 100.0 + CLAIM_BUDGET
    assert request_deadline(100.0, "bogus") == 100.0 + CLAIM_BUDGET


class Fleet:
    def __init__(self, reads: Reads) -> None:
        self.claim = reads

    def cached_claim(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        return None  # the watch-fed cache holds nothing: every claim is a read

    def inventory(self) -> None:
        return None  # not synced: claims come only from reads

    def pending_pods(self, namespace: str, claim: str, *, timeout: float, limit: int) -> list[dict]:
        return []

    def pod(self, namespace: str, name: str, *, timeout: float) -> None:
        return None

    def stats(self) -> dict[str, int]:
        return {}


@pytest.fixture
def app_and_reads(tmp_path: Path):
    (tmp_path / "default.yaml").write_text((REPO / "policies" / "00-default.yaml").read_text())
    reads = Reads()
    app = create_app(policies=PolicyStore(tmp_path, interval=0), fleet=Fleet(reads))
    return app.test_client(), reads


def claims_pod(count: int) -> dict:
    pod = gpu_pod(1)
    pod["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimTemplateName": f"t{i}"} for i in range(count)]
    return pod


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_one_request_naming_many_claims_reads_only_a_few(app_and_reads, endpoint):
    client, reads = app_and_reads
    out = client.post(endpoint, data=json.dumps(review(claims_pod(32))), content_type="application/json")
    assert out.status_code == 200 and "allowed" in out.get_json()["response"]
    assert len(reads.keys) == MAX_CLAIM_READS  # was 32 reads (and 32 more at /validate)


def test_a_pod_naming_more_claims_than_any_real_one_is_refused_before_any_read(app_and_reads):
    client, reads = app_and_reads
    out = client.post("/mutate", data=json.dumps(review(claims_pod(3000))), content_type="application/json")
    response = out.get_json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert (
        "request.object.spec.resourceClaims: Too many: 3000: must have at most 32 items"
        in (response["status"]["message"])
    )
    assert reads.keys == []


def test_the_apiservers_timeout_ends_the_reads(app_and_reads):
    client, reads = app_and_reads
    client.post("/validate?timeout=0.5s", data=json.dumps(review(claims_pod(8))), content_type="application/json")
    assert reads.keys == []  # 0.5 s less the margin leaves no time to read


def test_a_claims_pod_reads_are_one_list_and_one_read_under_the_budget():
    """A ResourceClaim's CREATE reads pods (webhook/admission/claims.py claim_pods): one list, bounded, and its owner
    pod, each within what is left of the request's budget; none once it is spent."""
    calls: list[tuple] = []

    def list_pods(namespace: str, claim: str, *, timeout: float, limit: int) -> list[dict]:
        calls.append(("list", namespace, claim, limit, timeout))
        return [{"metadata": {"name": "p"}}]

    def get_pod(namespace: str, name: str, *, timeout: float) -> dict:
        calls.append(("get", namespace, name, timeout))
        return {"metadata": {"name": name}}

    pods = RequestPods(list_pods, get_pod, deadline=time.monotonic() + 60)
    assert pods.pending("ml", "train") == [{"metadata": {"name": "p"}}]
    assert pods.pod("ml", "p") == {"metadata": {"name": "p"}}
    assert pods.pending("ml", "again") is None  # a third read: never
    assert [c[:4] for c in calls] == [("list", "ml", "train", POD_LIMIT), ("get", "ml", "p", 1.0)]
    assert calls[0][4] == POD_TIMEOUT
    spent = RequestPods(list_pods, get_pod, deadline=time.monotonic() - 0.1)
    assert spent.pending("ml", "train") is None and spent.pod("ml", "p") is None and len(calls) == 2
