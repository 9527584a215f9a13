"""Hostile AdmissionReviews through the Flask app: wrong JSON types in every field gpugate reads, deep and
huge objects. Each gets a 4xx (an HTTP 400 Status without a uid, a review with code 400 with one) or
the correct answer; none reaches a rule as a crash (code 500)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, gpu_pod, review
from webhook.serve.app import create_app
from webhook.serve.policies import PolicyStore

POLICY = (REPO / "policies" / "00-default.yaml").read_text()
WRONG = [["x"], {"a": 1}, 7, 1.5, True, "s", [{"a": None}]]


@pytest.fixture
def client(tmp_path: Path):
    (tmp_path / "default.yaml").write_text(POLICY)
    app = create_app(policies=PolicyStore(tmp_path, interval=0), namespace_labels=lambda ns: {"team": "vision"})
    return app.test_client()


def post(client, body, path="/mutate"):
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json")


def at(body, path):
    node = body
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def expected_type(value) -> str:
    return {list: "list", dict: "object", str: "string", bool: "boolean"}.get(type(value), "number")


# Every field gpugate reads, with the JSON types kube-apiserver sends for it.
FIELDS = {
    ("request", "namespace"): str,
    ("request", "name"): str,
    ("request", "dryRun"): bool,
    ("request", "object", "apiVersion"): str,
    ("request", "object", "kind"): str,
    ("request", "object", "metadata"): dict,
    ("request", "object", "metadata", "name"): str,
    ("request", "object", "metadata", "namespace"): str,
    ("request", "object", "metadata", "labels"): dict,
    ("request", "object", "metadata", "labels", "app"): str,
    ("request", "object", "metadata", "annotations"): dict,
    ("request", "object", "metadata", "ownerReferences"): list,
    ("request", "object", "spec"): dict,
    ("request", "object", "spec", "containers"): list,
    ("request", "object", "spec", "containers", 0): dict,
    ("request", "object", "spec", "containers", 0, "name"): str,
    ("request", "object", "spec", "containers", 0, "env"): list,
    ("request", "object", "spec", "containers", 0, "resources"): dict,
    ("request", "object", "spec", "containers", 0, "resources", "limits"): dict,
    ("request", "object", "spec", "containers", 0, "resources", "requests"): dict,
    ("request", "object", "spec", "tolerations"): list,
    ("request", "object", "spec", "nodeSelector"): dict,
    ("request", "object", "spec", "affinity"): dict,
    ("request", "object", "spec", "runtimeClassName"): str,
}


def hostile_bodies():
    for path, kind in FIELDS.items():
        for value in WRONG:
            if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
                continue
            if kind is dict and isinstance(value, dict):
                continue
            body = review(gpu_pod(1, labels={"app": "x"}))
            body["request"]["object"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "b"}]
            node, key = at(body, path)
            node[key] = copy.deepcopy(value)
            yield pytest.param(body, path, id=".".join(map(str, path)) + "=" + json.dumps(value))


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize(("body", "path"), list(hostile_bodies()))
def test_a_wrong_type_in_a_field_gpugate_reads_is_a_400_naming_the_field(client, endpoint, body, path):
    resp = post(client, body, endpoint)
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["uid"] == "0b1c-uid" and out["allowed"] is False
    assert out["status"]["code"] == 400 and out["status"]["reason"] == "BadRequest", out
    shown = ".".join(str(k) for k in path[:-1] if not isinstance(k, int))
    assert shown in out["status"]["message"].replace("[0]", ""), out["status"]["message"]


@pytest.mark.parametrize("quantity", [1, 2.0, "1"])
def test_numbers_are_quantities_too(client, quantity):
    """resource.Quantity decodes a JSON number as well as a string, so a number is not hostile."""
    out = post(client, review(gpu_pod(quantity))).get_json()["response"]
    assert out["allowed"] is True and out["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("request", "userInfo"), "root"),
        (("request", "userInfo"), {"username": 7, "groups": "system:masters"}),
        (("request", "resource"), ["pods"]),
        (("request", "options"), 3),
        (("request", "object", "status"), "Running"),
        (("request", "object", "spec", "containers", 0, "ports"), "8080"),
    ],
)
@pytest.mark.fuzzer_fixture  # the objects are not schema-valid on purpose; the answer is compared instead
def test_wrong_types_in_fields_gpugate_never_reads_get_the_normal_answer(client, path, value):
    expected = post(client, review(gpu_pod(1))).get_json()
    body = review(gpu_pod(1))
    node, key = at(body, path)
    node[key] = value
    assert post(client, body).get_json() == expected


def test_a_body_nested_deeper_than_json_can_parse_is_a_400(client):
    body = (
        b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}"
    )
    resp = post(client, body)
    assert resp.status_code == 400
    assert resp.get_json()["kind"] == "Status" and "nested too deeply" in resp.get_json()["message"]


@pytest.mark.fuzzer_fixture  # no schema accepts this securityContext; the answer is compared instead
def test_an_object_nested_deep_where_gpugate_does_not_read_gets_the_normal_answer(client):
    expected = post(client, review(gpu_pod(1))).get_json()
    body = review(gpu_pod(1))
    deep: dict = {}
    node = deep
    for _ in range(900):  # json's C scanner parses this; Python code recursing over it would not get far
        node["x"] = {}
        node = node["x"]
    body["request"]["object"]["spec"]["containers"][0]["securityContext"] = deep
    assert post(client, body).get_json() == expected


def test_a_recursion_error_while_deciding_is_a_400_review(client, monkeypatch):
    import webhook.serve.app

    def deep(request, env):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(webhook.serve.app, "mutate", deep)
    app = create_app(policies=PolicyStore(REPO / "policies"))
    out = post(app.test_client(), review(gpu_pod(1), uid="u-9")).get_json()["response"]
    assert out["uid"] == "u-9" and out["allowed"] is False and out["status"]["code"] == 400
    assert "nested too deeply" in out["status"]["message"]


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_a_pod_with_more_containers_than_any_real_one_is_refused_at_once(client, endpoint):
    """20,000 containers cost about a second of CPU in every call before the cap; now the count is refused in
    the apiserver's words before anything walks them."""
    pod = gpu_pod(1)
    pod["spec"]["containers"] *= 2000
    pod["spec"]["initContainers"] = [dict(pod["spec"]["containers"][0])]
    for index, container in enumerate(pod["spec"]["containers"]):
        container["name"] = f"c{index}"
    out = post(client, review(pod), endpoint).get_json()["response"]
    assert out["uid"] == "0b1c-uid" and out["allowed"] is False and out["status"]["code"] == 400
    assert (
        "request.object.spec.containers: Too many: 2001: must have at most 256 items (containers, init and "
        "ephemeral containers together)"
    ) in out["status"]["message"]


def test_a_pod_at_the_container_cap_is_judged_as_usual(client):
    pod = gpu_pod(1)
    pod["spec"]["containers"] *= 256
    for index, container in enumerate(pod["spec"]["containers"]):
        container["name"] = f"c{index}"
    out = post(client, review(pod)).get_json()["response"]
    assert out["uid"] == "0b1c-uid" and out["allowed"] is True


def test_thousands_of_wrong_fields_are_reported_briefly(client):
    body = review(gpu_pod(1))
    body["request"]["object"]["metadata"]["labels"] = {f"k{i}": i for i in range(5000)}
    message = post(client, body).get_json()["response"]["status"]["message"]
    assert "and 4990 more" in message and len(message) < 2000


def test_a_workload_crd_template_with_a_wrong_type_is_a_400_naming_the_field(client):
    """Custom resources reach a mutating webhook before their schema is checked, so this can even come from
    an apiserver: the answer names the field instead of crashing on it."""
    template = {
        "metadata": {"labels": {"app": "ray"}},
        "spec": {"containers": [{"name": "w", "image": "ray", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    broken: dict[str, Any] = copy.deepcopy(template)
    broken["spec"]["containers"] = {"w": {"image": "ray"}}
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "default"},
        "spec": {
            "headGroupSpec": {"template": template},
            "workerGroupSpecs": [{"template": template}, {"template": broken}],
        },
    }
    body = review(gpu_pod(1))
    body["request"]["kind"] = {"group": "ray.io", "version": "v1", "kind": "RayCluster"}
    body["request"]["object"] = cluster
    out = post(client, body).get_json()["response"]
    assert out["allowed"] is False and out["status"]["code"] == 400
    assert (
        "request.object.spec.workerGroupSpecs[1].template.spec.containers: expected a list" in out["status"]["message"]
    )


NUMBER_BODIES = {
    # where the number is -> the raw JSON it replaces; each is a 400 Status, never a 500
    "an integer of 5000 digits in the pod": b'"terminationGracePeriodSeconds":' + b"9" * 5000,
    "an integer of 5000 digits in a GPU limit": b'"gpuLimit":' + b"1" * 5000,
    "NaN": b'"terminationGracePeriodSeconds":NaN',
    "Infinity": b'"terminationGracePeriodSeconds":-Infinity',
}


@pytest.mark.parametrize("where", list(NUMBER_BODIES))
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_numbers_no_kubernetes_object_holds_are_a_400(client, endpoint, where):
    body = review(gpu_pod(1))
    body["request"]["object"]["spec"]["terminationGracePeriodSeconds"] = 30
    raw = json.dumps(body).encode()
    if "GPU limit" in where:
        raw = raw.replace(b'"nvidia.com/gpu": 1', b'"nvidia.com/gpu": ' + b"1" * 5000)
    else:
        raw = raw.replace(b'"terminationGracePeriodSeconds": 30', NUMBER_BODIES[where].replace(b":", b": ", 1))
    assert raw != json.dumps(body).encode()
    resp = post(client, raw, path=endpoint)
    assert resp.status_code == 400, resp.get_data()[:300]
    assert resp.get_json()["kind"] == "Status" and "is not JSON" in resp.get_json()["message"]


@pytest.mark.parametrize("quantity", [1e300, 1e308 * 10, "100e4998", "1e999999999"])
def test_hostile_json_quantities_are_denied_not_failed(client, quantity):
    body = json.dumps(review(gpu_pod(quantity))).replace("Infinity", "1e99999").encode()
    out = post(client, body).get_json()["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403, out
    assert "failed to evaluate" not in out["status"]["message"]


def test_a_large_body_of_more_json_values_than_any_pod_holds_is_a_413(client):
    from webhook.serve.app import MAX_VALUES

    body = review(gpu_pod(1))
    body["request"]["object"]["spec"]["x"] = [{} for _ in range(MAX_VALUES)]
    resp = post(client, json.dumps(body).encode())
    assert resp.status_code == 413, resp.get_data()[:300]
    assert f"more than the {MAX_VALUES}" in resp.get_json()["message"]


def test_a_large_body_within_the_value_budget_gets_its_answer(client):
    body = review(gpu_pod(1))
    body["request"]["object"]["metadata"]["annotations"] = {"big": "x" * 1_000_000}
    out = post(client, json.dumps(body).encode()).get_json()["response"]
    assert out["uid"] == "0b1c-uid" and out["allowed"] is True


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_null_containers_are_read_as_empty_ones_not_a_crash(client, endpoint):
    """Found by tests/fuzz: a JSON null in initContainers reached the GPU count as None (a 500-coded review)."""
    body = review(gpu_pod(1))
    body["request"]["object"]["spec"]["initContainers"] = [None]
    out = post(client, body, path=endpoint).get_json()["response"]
    assert "failed to evaluate" not in (out.get("status") or {}).get("message", "")
    assert (out.get("status") or {}).get("code", 200) < 500
