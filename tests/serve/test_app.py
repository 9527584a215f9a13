"""The HTTP layer through the Flask test client: the AdmissionReview contract on every path."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import FIXTURES, REPO, STANDARD, apply, gpu_pod, pod, review, schema_check
from webhook.policy.keys import API_VERSION
from webhook.serve.app import MAX_BODY, create_app
from webhook.serve.policies import PolicyStore

POLICY = (REPO / "policies" / "00-default.yaml").read_text()


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    (tmp_path / "default.yaml").write_text(POLICY)
    return tmp_path


@pytest.fixture
def client(policy_dir):
    app = create_app(
        policies=PolicyStore(policy_dir, interval=0),
        namespace_labels=lambda ns: {"team": "vision"} if ns == "default" else {},
    )
    return app.test_client()


def post(client, path, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **kw)


def test_mutate_returns_a_base64_json_patch_that_reproduces_the_mutated_pod(client):
    obj = gpu_pod(1)
    resp = post(client, "/mutate", review(obj, uid="abc-123"))
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    body = resp.get_json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "abc-123" and body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"
    result = apply(obj, json.loads(base64.b64decode(body["response"]["patch"])))
    schema_check(result)
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert result["metadata"]["labels"]["gpugate.io/team"] == "vision"


def test_a_denial_is_a_200_review_with_status_and_message(client):
    resp = post(client, "/mutate", review(gpu_pod("500m"), uid="u-1"))
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "u-1" and out["allowed"] is False
    assert out["status"]["code"] == 403 and out["status"]["status"] == "Failure"
    assert "must be an integer" in out["status"]["message"]
    assert "patch" not in out and "patchType" not in out


def test_validate_never_returns_a_patch(client):
    out = post(client, "/validate", review(gpu_pod(1))).get_json()["response"]
    assert "patch" not in out and "patchType" not in out and out["allowed"] is False


def test_subresource_reviews_are_read_as_the_pod_or_binding_they_carry(client):
    """pods/status sends the Pod (k/k podStatusStrategy keeps its labels writable); a Binding is its own kind."""
    created = apply(
        gpu_pod(1),
        json.loads(base64.b64decode(post(client, "/mutate", review(gpu_pod(1))).get_json()["response"]["patch"])),
    )
    rewritten = json.loads(json.dumps(created))
    rewritten["metadata"]["labels"]["gpugate.io/team"] = "someone-else"
    out = post(
        client, "/validate", review(rewritten, operation="UPDATE", old=created, sub_resource="status")
    ).get_json()
    assert out["response"]["allowed"] is False and out["response"]["status"]["code"] == 403
    assert "a status update cannot change gpugate's label gpugate.io/team" in out["response"]["status"]["message"]
    report = json.loads(json.dumps(created))
    report["status"] = {"phase": "Running"}
    out = post(client, "/validate", review(report, operation="UPDATE", old=created, sub_resource="status")).get_json()
    assert out["response"]["allowed"] is True
    bind = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "default", "labels": {"gpugate.io/team": "x"}},
        "target": {"kind": "Node", "name": "n1"},
    }
    out = post(client, "/validate", review(bind, sub_resource="binding")).get_json()
    assert out["response"]["allowed"] is False and "a Binding cannot set" in out["response"]["status"]["message"]


def test_v1beta1_reviews_are_answered_in_v1beta1(client):
    body = review(pod())
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    assert post(client, "/mutate", body).get_json()["apiVersion"] == "admission.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"not json", "not JSON"),
        (b"[1,2]", "not a JSON object"),
        ({"kind": "Pod", "apiVersion": "v1"}, "expected kind AdmissionReview"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v2"}, "unsupported AdmissionReview apiVersion"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}, "has no request"),
        (
            {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"operation": "CREATE"}},
            "no uid",
        ),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_bodies_that_are_not_admission_reviews_get_http_400(client, body, words):
    resp = post(client, "/mutate", body)
    assert resp.status_code == 400
    assert resp.get_json()["kind"] == "Status" and words in resp.get_json()["message"]


def test_a_malformed_request_with_a_uid_gets_a_review_with_code_400(client):
    body = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {"uid": "u-2", "operation": "CREATE", "kind": {"kind": "Pod"}, "object": "nope"},
    }
    resp = post(client, "/mutate", body)
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "u-2" and out["allowed"] is False and out["status"]["code"] == 400
    assert "object is not an object" in out["status"]["message"]


def test_a_crash_inside_a_rule_becomes_allowed_false_code_500_with_the_uid(client, monkeypatch):
    from webhook.rules import registry

    def boom(editor, ctx):
        raise RuntimeError("rule bug")

    from webhook.rules.base import Touch

    broken = registry.Registry()
    field = Touch("runtimeClassName", "spec.runtimeClassName", in_place=False, describe=lambda before, after: [])
    broken.rule("boom", order=1, reads={"spec.runtimeClassName": str}, touches=[field]).mutator(pods="gpu")(boom)
    monkeypatch.setattr(registry, "REGISTRY", broken)
    resp = post(client, "/mutate", review(gpu_pod(1), uid="u-3"))
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "u-3" and out["allowed"] is False and out["status"]["code"] == 500
    assert "rule bug" not in out["status"]["message"] and "gpugate's logs" in out["status"]["message"]


def test_huge_bodies_are_refused_with_413_not_a_crash(client):
    resp = post(client, "/mutate", b"x" * (MAX_BODY + 1))
    assert resp.status_code == 413 and resp.get_json()["code"] == 413


def test_unknown_paths_and_methods_get_json_status(client):
    assert client.get("/mutate").status_code == 405
    assert client.get("/nope").get_json()["code"] == 404


def test_delete_and_connect_are_allowed_without_a_patch(client):
    out = post(client, "/mutate", review(None, operation="DELETE", old=gpu_pod(1))).get_json()["response"]
    assert out == {"uid": "0b1c-uid", "allowed": True}


def test_dry_run_changes_nothing_observable(client):
    body = review(gpu_pod(1))
    body["request"]["dryRun"] = True
    first = post(client, "/mutate", body).get_json()
    body["request"]["dryRun"] = False
    assert post(client, "/mutate", body).get_json() == first


def sample(client, name, **labels):
    """The value of one sample in /metrics (0 when absent). Metrics are process-wide: compare before/after."""
    want = {k: str(v) for k, v in labels.items()}
    for family in text_string_to_metric_families(client.get("/metrics").get_data(as_text=True)):
        for s in family.samples:
            if s.name == name and s.labels == want:
                return s.value
    return 0.0


def test_health_readiness_and_metrics(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    denied = {"decision": "denied", "endpoint": "mutate", "kind": "Pod", "operation": "CREATE"}
    violations = {"action": "denied", "policy": "default", "rule": "gpu-quantity"}
    before = (
        sample(client, "gpugate_admission_requests_total", **denied),
        sample(client, "gpugate_violations_total", **violations),
        sample(client, "gpugate_admission_duration_seconds_count", endpoint="mutate"),
    )
    post(client, "/mutate", review(gpu_pod("500m")))
    after = (
        sample(client, "gpugate_admission_requests_total", **denied),
        sample(client, "gpugate_violations_total", **violations),
        sample(client, "gpugate_admission_duration_seconds_count", endpoint="mutate"),
    )
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]
    assert sample(client, "gpugate_policy_generation") == 1
    assert sample(client, "gpugate_policy_last_reload_ok") == 1


def test_invented_kinds_do_not_become_label_values(client):
    body = review(gpu_pod(1))
    body["request"]["kind"]["kind"] = "Pod-" + "x" * 40
    before = sample(
        client,
        "gpugate_admission_requests_total",
        decision="patched",
        endpoint="mutate",
        kind="other",
        operation="CREATE",
    )
    assert post(client, "/mutate", body).get_json()["response"]["allowed"]
    assert (
        sample(
            client,
            "gpugate_admission_requests_total",
            decision="patched",
            endpoint="mutate",
            kind="other",
            operation="CREATE",
        )
        == before + 1
    )
    assert "xxxx" not in client.get("/metrics").get_data(as_text=True)


def test_readyz_reports_a_missing_certificate(policy_dir):
    app = create_app(policies=PolicyStore(policy_dir), tls_ready=lambda: False)
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503 and b"certificate" in resp.data


def test_readyz_reports_every_problem_the_certificate_first(policy_dir):
    """A broken policy edit alone leaves the replica ready; it must not hide an unusable certificate."""
    app = create_app(policies=PolicyStore(policy_dir, interval=0), tls_ready=lambda: False)
    (policy_dir / "default.yaml").write_text("spec: [broken")
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503
    text = resp.get_data(as_text=True)
    assert text.startswith("not ready: the serving certificate")
    assert "policy edit ignored" in text and "default.yaml" in text


def test_a_broken_policy_edit_alone_leaves_the_replica_ready_and_says_so(client, policy_dir):
    (policy_dir / "default.yaml").write_text("spec: [broken")
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert resp.get_data(as_text=True).startswith("ok (policy edit ignored, the last good policies stay in force:")


def test_a_policy_edit_is_picked_up_and_a_broken_edit_keeps_the_last_good_set(client, policy_dir):
    before = post(client, "/mutate", review(gpu_pod(1))).get_json()["response"]
    assert before["allowed"]
    generation = sample(client, "gpugate_policy_generation")
    (policy_dir / "default.yaml").write_text(POLICY.replace("runtimeClassName: nvidia", "runtimeClassName: nvidia-cdi"))
    patch = json.loads(base64.b64decode(post(client, "/mutate", review(gpu_pod(1))).get_json()["response"]["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia-cdi"} in patch
    assert sample(client, "gpugate_policy_generation") == generation + 1
    errors = sample(client, "gpugate_policy_reload_errors_total")
    (policy_dir / "default.yaml").write_text("spec: [broken")
    patch = json.loads(base64.b64decode(post(client, "/mutate", review(gpu_pod(1))).get_json()["response"]["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia-cdi"} in patch
    assert sample(client, "gpugate_policy_reload_errors_total") == errors + 1
    assert sample(client, "gpugate_policy_last_reload_ok") == 0
    assert sample(client, "gpugate_policy_generation") == generation + 1
    assert b"policy edit ignored" in client.get("/readyz").data
    (policy_dir / "default.yaml").write_text(POLICY)
    assert post(client, "/mutate", review(gpu_pod(1))).get_json()["response"]["allowed"]
    assert sample(client, "gpugate_policy_last_reload_ok") == 1
    assert sample(client, "gpugate_policy_reload_errors_total") == errors + 1


def test_a_broken_edit_counts_once_however_many_workers_see_it(policy_dir):
    """Each worker has its own store and notices the edit on its own; the counter counts the edit."""
    workers = [create_app(policies=PolicyStore(policy_dir, interval=0)).test_client() for _ in range(3)]
    errors = sample(workers[0], "gpugate_policy_reload_errors_total")
    (policy_dir / "default.yaml").write_text("spec: [broken")
    for worker in workers * 2:
        assert worker.get("/readyz").status_code == 200
    assert sample(workers[1], "gpugate_policy_reload_errors_total") == errors + 1
    (policy_dir / "default.yaml").write_text("spec: [broken again")
    for worker in workers:
        worker.get("/readyz")
    assert sample(workers[2], "gpugate_policy_reload_errors_total") == errors + 2


def test_claims_are_exclusive_in_the_metrics_directory(tmp_path, monkeypatch):
    from webhook.serve import metrics

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics.claim("edit-1") is True
    assert metrics.claim("edit-1") is False
    assert metrics.claim("edit-2") is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claim-edit-1", "claim-edit-2"]


@pytest.mark.fuzzer_fixture
def test_the_every_field_upstream_pod_keeps_every_field(client):
    """kubernetes/api testdata: every field populated. Given a GPU limit, /mutate must only add."""
    original = json.loads((FIXTURES / "v1.36.0" / "core.v1.Pod.json").read_text())
    original["metadata"]["namespace"] = "default"
    for c in original["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    for c in original["spec"].get("initContainers", []):
        c["resources"] = {}
    original["spec"].pop("resources", None)
    for c in original["spec"].get("ephemeralContainers", []):
        c.pop("resources", None)
    original["spec"].pop("runtimeClassName", None)
    body = review(original)
    out = post(client, "/mutate", body).get_json()["response"]
    assert out["allowed"], out
    result = apply(original, json.loads(base64.b64decode(out["patch"])))

    def leaves(node, path=()):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from leaves(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from leaves(v, (*path, i))
        else:
            yield path, node

    def at(node, path):
        for key in path:
            node = node[key]
        return node

    for path, value in leaves(original):
        assert at(result, path) == value, path
    assert result["spec"]["runtimeClassName"] == "nvidia"


def test_namespace_cache_state_is_exported(policy_dir):
    class Cache:
        def synced(self):
            return True

        def stats(self):
            return {"relists": 2, "lookup_failures": 1, "namespaces": 7}

    app = create_app(policies=PolicyStore(policy_dir), namespace_cache=Cache())
    client = app.test_client()
    assert sample(client, "gpugate_namespace_cache_synced") == 1
    assert sample(client, "gpugate_namespace_cache_events", event="relists") == 2
    assert sample(client, "gpugate_namespace_cache_events", event="lookup_failures") == 1
    assert sample(client, "gpugate_namespace_cache_namespaces") == 7
    assert sample(client, "gpugate_namespace_cache_events", event="namespaces") == 0  # a size, not an event


@pytest.fixture
def attributed_policy_dir(tmp_path: Path) -> Path:
    (tmp_path / "attributed.yaml").write_text(
        json.dumps(
            {
                "apiVersion": API_VERSION,
                "kind": "GPUPolicy",
                "metadata": {"name": "attributed"},
                "spec": STANDARD,
            }
        )
    )
    return tmp_path


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_unknown_namespace_labels_are_a_503_not_a_guess(attributed_policy_dir, endpoint):
    """When the namespace cache cannot say what a namespace's labels are, gpugate must not guess the team
    ("unassigned") nor let the pod through: it answers 503 so the apiserver's failurePolicy applies."""
    app = create_app(policies=PolicyStore(attributed_policy_dir), namespace_labels=lambda ns: None)
    resp = app.test_client().post(
        endpoint, data=json.dumps(review(gpu_pod(1), uid="u-503")), content_type="application/json"
    )
    out = resp.get_json()["response"]
    assert resp.status_code == 200 and out["uid"] == "u-503"
    assert out["allowed"] is False and out["status"]["code"] == 503
    assert out["status"]["reason"] == "ServiceUnavailable"
    assert 'labels of namespace "default"' in out["status"]["message"]
    assert "patch" not in out
