"""Fuzzing, bounded in time: generated AdmissionReviews through the Flask app and generated policy files
through the loader and the store. Every input gets an answer within a CPU budget, a 2xx or 4xx (never a
5xx, never "failed to evaluate"), no exception escapes, and the worker answers /healthz and an ordinary
pod correctly afterwards. Examples are fixed per run (derandomized) so a failure reproduces."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import REPO, container, gpu_pod, pod, review
from webhook.inventory.model import claim_of
from webhook.inventory.snapshot import load_snapshot
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError
from webhook.serve.app import create_app
from webhook.serve.policies import PolicyStore

CPU_BUDGET = 2.0  # seconds of CPU for one input; an ordinary review takes well under a millisecond
FUZZ = settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None
)
POLICY = (REPO / "policies" / "00-default.yaml").read_text()
pytestmark = pytest.mark.fuzzer_fixture  # generated objects are not schema-valid; answers are checked instead

QUANTITIES = st.one_of(
    st.sampled_from(["1", "0", "-1", "500m", "1e3", "100e4998", "1e999999999", "1e-999999999", "8Ei", "1e4294967296"]),
    st.from_regex(r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12}|Ki|Mi|Ei|m|k|E)?\Z", fullmatch=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), QUANTITIES)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
#: Well-typed values for the fields the security rules read, so that generated pods reach those rules (a wrong
#: type stops at the type guard): device variables, envFrom prefixes, capabilities in every spelling.
NAMES = st.sampled_from(
    ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_GDS", "NVIDIA_NVSWITCH"]
) | st.text(max_size=24)
SHAPED: dict[Any, Any] = {
    "env": st.lists(
        st.fixed_dictionaries({"name": NAMES}, optional={"value": st.text(max_size=12) | st.just("enabled")}),
        max_size=4,
    )
    | VALUES,
    "envFrom": st.lists(
        st.fixed_dictionaries(
            {"configMapRef": st.fixed_dictionaries({"name": st.text(max_size=8)})},
            optional={"prefix": st.sampled_from(["", "NV", "NVIDIA_", "APP_"]) | st.text(max_size=8)},
        ),
        max_size=3,
    )
    | VALUES,
    "add": st.lists(st.sampled_from(["SYS_ADMIN", "cap_sys_admin", "all", "NET_ADMIN"]) | st.text(max_size=12))
    | VALUES,
    "resourceClaims": st.lists(
        st.fixed_dictionaries(
            {"name": st.text(max_size=8)},
            optional={"resourceClaimTemplateName": st.text(max_size=8), "resourceClaimName": st.text(max_size=8)},
        ),
        max_size=300,
    )
    | VALUES,
}
PATHS = [
    ("metadata",),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "env"),
    ("spec", "containers", 0, "envFrom"),
    ("spec", "containers", 0, "securityContext"),
    ("spec", "containers", 0, "securityContext", "capabilities"),
    ("spec", "containers", 0, "securityContext", "capabilities", "add"),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "limits"),
    ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"),
    ("spec", "initContainers"),
    ("spec", "ephemeralContainers"),
    ("spec", "tolerations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "runtimeClassName"),
    ("spec", "resourceClaims"),
    ("spec", "schedulerName"),
]


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    node = obj
    for key in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(key, {})
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)):
        node[path[-1]] = value


@st.composite
def reviews(draw: Any) -> bytes:
    base = draw(
        st.sampled_from(
            [
                gpu_pod(1),
                gpu_pod(2, labels={"gpugate.io/team": "x"}),
                gpu_pod(
                    1,
                    labels={"gpugate.io/claims-pending": "c"},
                    resourceClaims=[{"name": "a", "resourceClaimName": "c"}],
                ),
                pod(container()),
            ]
        )
    )
    body = review(base, operation=draw(st.sampled_from(["CREATE", "UPDATE"])), old=copy.deepcopy(base))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(PATHS))
        value = draw(QUANTITIES if path[-1] == "nvidia.com/gpu" else SHAPED.get(path[-1], VALUES))
        _set(body["request"]["object"], path, value)
    if draw(st.booleans()):
        body["request"]["subResource"] = draw(st.sampled_from(["status", "ephemeralcontainers", "binding", "x"]))
    raw = json.dumps(body, allow_nan=True).encode()
    cut = draw(st.one_of(st.none(), st.integers(0, len(raw))))
    return raw if cut is None else raw[:cut]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("policies")
    (directory / "default.yaml").write_text(POLICY)
    app = create_app(policies=PolicyStore(directory, interval=0), namespace_labels=lambda ns: {"team": "vision"})
    return app.test_client()


def _healthy(client: Any) -> None:
    assert client.get("/healthz").status_code == 200
    out = client.post("/mutate", data=json.dumps(review(gpu_pod(1))), content_type="application/json").get_json()
    assert out["response"]["allowed"] is True and out["response"].get("patch")


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_every_generated_review_gets_a_2xx_or_4xx_within_the_cpu_budget(client: Any, endpoint: str) -> None:
    @FUZZ
    @given(body=reviews())
    def answer(body: bytes) -> None:
        started = time.process_time()
        resp = client.post(endpoint, data=body, content_type="application/json")
        spent = time.process_time() - started
        assert resp.status_code < 500, resp.get_data()[:500]
        assert spent < CPU_BUDGET, f"{spent:.2f} s of CPU for one review"
        answer_ = resp.get_json()
        if resp.status_code == 200:
            status = answer_["response"].get("status") or {}
            assert status.get("code", 200) < 500 and "failed to evaluate" not in status.get("message", ""), status

    answer()
    _healthy(client)


# ---- DRA claims: generated ResourceClaims and templates, and pods naming claims a fleet knows ---------------

CLASSES = st.sampled_from(["gpu.nvidia.com", "dra.cpu", "missing.example.com"]) | st.text(max_size=12)
COUNTS = st.integers(min_value=-(2**64), max_value=2**64) | st.sampled_from([0, 1, 8, 16, 10**30]) | VALUES
ALTERNATIVE = st.fixed_dictionaries(
    {"deviceClassName": CLASSES | VALUES},
    optional={
        "name": st.text(max_size=8) | VALUES,
        "count": COUNTS,
        "allocationMode": st.sampled_from(["All", "ExactCount", "x"]) | VALUES,
        "adminAccess": st.booleans() | VALUES,
    },
)
REQUEST = st.fixed_dictionaries(
    {"name": st.text(max_size=8) | VALUES},
    optional={
        "exactly": ALTERNATIVE | VALUES,
        "firstAvailable": st.lists(ALTERNATIVE, max_size=8) | VALUES,
        # v1beta1 kept the fields on the request itself
        "deviceClassName": CLASSES,
        "count": COUNTS,
        "allocationMode": st.sampled_from(["All", "ExactCount"]),
    },
)
CLAIM_PATHS: list[tuple[Any, ...]] = [
    ("metadata",),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "devices"),
    ("spec", "devices", "requests"),
    ("spec", "devices", "requests", 0),
    ("spec", "devices", "requests", 0, "exactly"),
    ("spec", "devices", "requests", 0, "exactly", "count"),
    ("spec", "devices", "requests", 0, "firstAvailable"),
    ("spec", "spec"),
    ("spec", "spec", "devices", "requests"),
    ("spec", "spec", "devices", "requests", 0),
]
KNOWN_CLAIMS = {
    "sixteen": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 16}}],
    "all": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}],
    "pick": [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 2},
                {"name": "b", "deviceClassName": "dra.cpu", "count": 64},
            ],
        }
    ],
    "cpu": [{"name": "cpu", "exactly": {"deviceClassName": "dra.cpu", "count": 4}}],
}


def _claim_object(kind: str, name: str, requests: Any) -> dict[str, Any]:
    devices = {"devices": {"requests": requests}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": devices} if kind == "ResourceClaimTemplate" else devices,
    }


class ClaimsFleet:
    """The fleet snapshot's inventory, and the KNOWN_CLAIMS as both claims and templates."""

    def __init__(self) -> None:
        self.snapshot = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")

    def inventory(self) -> Any:
        return self.snapshot

    def claim(self, kind: str, namespace: str, name: str) -> Any:
        requests = KNOWN_CLAIMS.get(name)
        return claim_of(_claim_object(kind, name, requests)) if requests is not None else None

    cached_claim = claim

    def pending_pods(self, namespace: str, claim: str, *, timeout: float, limit: int) -> list[dict[str, Any]]:
        """Pods labelled for the claim being created (gpugate.io/claims-pending), naming it beside known claims."""
        return [_waiting(claim, "sixteen"), _waiting(claim, "pick"), {"spec": None}, {"metadata": 3}]

    def pod(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
        """The owner pod of a claim made from a template (its entry "a")."""
        made = _waiting("x", "all")
        made["spec"]["resourceClaims"][0] = {"name": "a", "resourceClaimTemplateName": "t"}
        return made

    def stats(self) -> dict[str, int]:
        return {}

    def synced(self) -> bool:
        return True


def _waiting(claim: str, other: str) -> dict[str, Any]:
    entries = [{"name": "a", "resourceClaimName": claim}, {"name": "b", "resourceClaimTemplateName": other}]
    waiting = gpu_pod(1, labels={"gpugate.io/claims-pending": claim}, resourceClaims=entries)
    waiting["spec"]["containers"][0]["resources"]["claims"] = [{"name": "a"}, {"name": "b"}]
    return waiting


#: What kube-controller-manager writes on a claim it makes from a template for one pod (admission/claims.py).
MADE_FOR_A_POD = {
    "annotations": {"resource.kubernetes.io/pod-claim-name": "a"},
    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}],
}


@st.composite
def claim_reviews(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["ResourceClaim", "ResourceClaimTemplate"]))
    base = _claim_object(kind, "c", [draw(REQUEST)])
    if draw(st.booleans()):
        base["metadata"].update(copy.deepcopy(MADE_FOR_A_POD))
    body = review(base, operation=draw(st.sampled_from(["CREATE", "UPDATE"])), old=copy.deepcopy(base))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(CLAIM_PATHS))
        value = draw(
            {"requests": st.lists(REQUEST, max_size=6), "count": COUNTS}.get(path[-1], REQUEST)
            if isinstance(path[-1], int) or path[-1] in ("requests", "count")
            else VALUES
        )
        _set(body["request"]["object"], path, value)
    return json.dumps(body, allow_nan=True).encode()


@st.composite
def claiming_pods(draw: Any) -> bytes:
    names = st.sampled_from([*KNOWN_CLAIMS, "unknown"])
    entries = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["a", "b", "c"])},
                optional={"resourceClaimTemplateName": names, "resourceClaimName": names},
            ),
            max_size=5,
        )
    )
    refs = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["a", "b", "x"])}, optional={"request": st.text(max_size=4)}
            ),
            max_size=3,
        )
        | VALUES
    )
    base = gpu_pod(draw(st.sampled_from([0, 1, 8])), resourceClaims=entries)
    base["spec"]["containers"][0]["resources"]["claims"] = refs
    return json.dumps(review(base, operation="CREATE"), allow_nan=True).encode()


@pytest.fixture(scope="module")
def claims_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("policies")
    (directory / "default.yaml").write_text(POLICY)
    app = create_app(policies=PolicyStore(directory, interval=0), fleet=ClaimsFleet())
    return app.test_client()


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_every_generated_claim_and_claiming_pod_gets_a_2xx_or_4xx_within_the_cpu_budget(
    claims_client: Any, endpoint: str
) -> None:
    @settings(FUZZ, max_examples=300)
    @given(body=claim_reviews() | claiming_pods())
    def answer(body: bytes) -> None:
        started = time.process_time()
        resp = claims_client.post(endpoint, data=body, content_type="application/json")
        spent = time.process_time() - started
        assert resp.status_code < 500, resp.get_data()[:500]
        assert spent < CPU_BUDGET, f"{spent:.2f} s of CPU for one review"
        if resp.status_code == 200:
            status = resp.get_json()["response"].get("status") or {}
            assert status.get("code", 200) < 500 and "failed to evaluate" not in status.get("message", ""), status

    answer()
    _healthy(claims_client)
    sixteen = _claim_object("ResourceClaimTemplate", "sixteen", KNOWN_CLAIMS["sixteen"])
    out = claims_client.post("/validate", data=json.dumps(review(sixteen)), content_type="application/json")
    assert out.get_json()["response"]["allowed"] is False  # still judged after the run


YAML_VALUES = st.one_of(
    st.sampled_from(
        [
            "[" * 2000 + "]" * 2000,
            "&a [*a]",
            "9" * 5000,
            "!!python/object:os.system x",
            "{a: &x [1, 2], b: *x, c: *x}",
            "[*undefined]",
            "'unterminated",
            "1e999999999",
            "-.inf",
            ".nan",
        ]
    ),
    st.text(max_size=40).map(json.dumps),
    st.integers().map(str),
)
FIELDS = [
    "mode",
    "priority",
    "match",
    "devices",
    "limits",
    "limits.maxPerContainer",
    "models",
    "models.default",
    "gpuHolders",
    "attribution",
    "attribution.labels",
    "nonGPUPods",
    "security",
    "initOnlyGPUs",
    "mutateTemplates",
    "unknownField",
]


@st.composite
def policy_files(draw: Any) -> str:
    field = draw(st.sampled_from(FIELDS))
    value = draw(YAML_VALUES)
    head, _, leaf = field.rpartition(".")
    snippet = f"  {head}:\n    {leaf}: {value}\n" if head else f"  {leaf}: {value}\n"
    text = f"apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {{name: fuzz}}\nspec:\n  priority: 5\n{snippet}"
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


def test_every_generated_policy_file_is_loaded_or_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "00-default.yaml").write_text(POLICY)
    store = PolicyStore(tmp_path, interval=0)
    good = store.current().digest

    @FUZZ
    @given(text=policy_files())
    def load(text: str) -> None:
        (tmp_path / "50-fuzz.yaml").write_text(text)
        started = time.process_time()
        try:
            load_policies(tmp_path)
        except PolicyError as err:
            assert all(issue.file in ("50-fuzz.yaml", "00-default.yaml") for issue in err.issues)
            assert any(issue.file == "50-fuzz.yaml" for issue in err.issues), str(err)
        current = store.current()  # the store notices the edit: a broken one keeps the good set
        assert store.last_error is None or current.digest == good or "50-fuzz.yaml" in store.last_error
        assert time.process_time() - started < CPU_BUDGET

    load()
    (tmp_path / "50-fuzz.yaml").unlink()
    assert store.current().digest == good and store.last_error is None
