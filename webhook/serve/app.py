"""The HTTP layer: flask routes for /mutate, /validate, /healthz, /readyz and /metrics; reading the body, asking
the decision, writing the answer. What /readyz and /metrics report is ``status``; the wiring that feeds the
routes policies, namespace labels and the fleet is ``wiring``."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..admission import Decision, Environment, errored, mutate, validate
from ..pods.objects import BUILTIN_WORKLOADS, workload_kinds
from . import metrics
from .lookups import RequestLookups, RequestPods, request_deadline
from .policies import PolicyStore
from .review import RequestError, ReviewError, parse_review, response_review
from .status import Status

log = logging.getLogger("gpugate")

# kube-apiserver refuses request bodies over 3 MiB (MaxRequestBodyBytes, k8s.io/apiserver pkg/server/config.go),
# and an AdmissionReview carries the object at most twice (UPDATE) plus the request's own fields. So
# controller-runtime (pkg/webhook/admission/http.go, maxRequestSize) reads at most 7 MiB and answers anything
# larger with 413 "request entity is too large; limit is 7340032 bytes". gpugate does the same.
MAX_BODY = 7 * 1024 * 1024
# An oversized body is read and dropped, up to this much, before the 413 is sent: a client that is still
# sending when the server closes gets a TCP reset (an SSLEOFError) instead of the answer. Beyond this the
# connection is closed after the 413 -- reading gigabytes to be polite would be the attack.
DRAIN_LIMIT = 4 * MAX_BODY
# Memory: json.loads turns a body of many tiny values ({} or [] three bytes apart) into 25 times its size
# in Python objects (a 7 MiB body of "{}," grew a process by 175 MiB), and every thread of every worker may
# hold one. So a body over LARGE_BODY must hold at most MAX_VALUES JSON values (counted as "{", "[" and
# "," bytes, strings included: an over-estimate) and is parsed and decided one at a time per worker;
# ordinary pods (5-25 KiB) never wait. tests/serve/test_memory.py holds the chart's limit against it.
LARGE_BODY = 256 * 1024
MAX_VALUES = 200_000
# How long a large body waits for the one before it; beyond, 429 (no Retry-After: the apiserver does not
# retry, the webhook's failurePolicy decides).
LARGE_WAIT = 5.0
KNOWN_KINDS = frozenset(workload.kind for workload in BUILTIN_WORKLOADS)

Decide = Callable[[Mapping[str, Any], Environment], Decision]
NamespaceLabels = Callable[[str], Mapping[str, str] | None]


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def _status(code: int, message: str) -> Response:
    """A metav1.Status body, for requests that are not AdmissionReviews (no uid to answer with)."""
    reason = {
        400: "BadRequest",
        404: "NotFound",
        405: "MethodNotAllowed",
        413: "RequestEntityTooLarge",
        429: "TooManyRequests",
    }
    return _json(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason.get(code, "InternalError"),
            "code": code,
        },
        code,
    )


# Over 60 lines: the routes are closures over one app's environment and its large-body semaphore.
def create_app(
    *,
    policies: PolicyStore,
    namespace_labels: NamespaceLabels | None = None,
    tls_ready: Callable[[], bool] | None = None,
    namespace_cache: Any = None,
    fleet: Any = None,
    status: Status | None = None,
) -> Flask:
    """The WSGI app: routes, body, answer. Tests inject a PolicyStore over a temp dir; ``build_app`` wires the
    real cluster and hands in the worker's ``status`` (else one is made over ``policies``, ``namespace_cache``,
    ``fleet`` and ``tls_ready``), which /metrics and /readyz ask."""
    app = Flask("gpugate")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    labels_of: NamespaceLabels = namespace_labels or (lambda _name: {})
    if status is None:
        status = Status(policies, namespace_cache=namespace_cache, fleet=fleet, tls_ready=tls_ready)
    status.refresh()

    def environment() -> Environment:
        # The gauges are kept current by /metrics, /readyz and build_app's refresh loop, not by requests.
        if fleet is None:
            return Environment(policies=policies.current(), namespace_labels=labels_of)
        # One request's claim reads: the watch-fed cache first, then a few reads, within a budget that ends
        # before the apiserver stops waiting.
        deadline = request_deadline(time.monotonic(), request.args.get("timeout"))
        claims = RequestLookups(fleet.claim, deadline=deadline, cached=fleet.cached_claim)
        # A ResourceClaim's CREATE: the pods that name it (one list) or its owner pod (one read), same budget.
        pods = RequestPods(fleet.pending_pods, fleet.pod, deadline=deadline)
        return Environment(
            policies=policies.current(),
            namespace_labels=labels_of,
            fleet=fleet.inventory,
            claims=claims,
            pending_pods=pods.pending,
            pod=pods.pod,
        )

    large = threading.BoundedSemaphore(1)

    def answer(endpoint: str, decide: Decide) -> Response:
        started = time.perf_counter()
        body = _body()
        if len(body) <= LARGE_BODY:
            return answer_body(endpoint, decide, body, started)
        values = body.count(b",") + body.count(b"{") + body.count(b"[")
        if values > MAX_VALUES:
            metrics.REQUESTS.labels(endpoint, "", "", "bad-request").inc()
            return _status(
                413,
                f"gpugate {endpoint}: request body holds about {values} JSON values, more than the {MAX_VALUES} "
                f"gpugate reads in a body over {LARGE_BODY} bytes (no Pod or workload holds this many)",
            )
        if not large.acquire(timeout=LARGE_WAIT):
            metrics.REQUESTS.labels(endpoint, "", "", "busy").inc()
            return _status(429, f"gpugate {endpoint}: another large request is being decided; try again")
        try:
            return answer_body(endpoint, decide, body, started)
        finally:
            large.release()

    def answer_body(endpoint: str, decide: Decide, body: bytes, started: float) -> Response:
        env = environment()
        try:
            # The type guard reads every kind the decision will read, the policies' own kinds included.
            review = parse_review(body, workloads=workload_kinds(env.policies.workloads))
        except RecursionError:
            # json.loads recurses once per nesting level; no Pod or workload nests anywhere near this deep.
            metrics.REQUESTS.labels(endpoint, "", "", "bad-request").inc()
            return _status(400, f"gpugate {endpoint}: request body is nested too deeply to be an AdmissionReview")
        except ReviewError as err:
            metrics.REQUESTS.labels(endpoint, "", "", "bad-request").inc()
            return _status(400, f"gpugate {endpoint}: {err}")
        except RequestError as err:
            decision = errored(str(err), code=400, reason="BadRequest")
            metrics.REQUESTS.labels(endpoint, "", "", "bad-request").inc()
            return _json(response_review(decision, uid=err.uid, api_version=err.api_version))
        req = review["request"]
        kind = req["kind"]["kind"]
        try:
            decision = decide(req, env)
        except RecursionError:  # parsed, but too deep to copy or diff: not an object any apiserver sends
            decision = errored(
                f"this {kind} (uid {req['uid']}) is nested too deeply to be a Kubernetes object",
                code=400,
                reason="BadRequest",
            )
        except Exception:  # a bug in a rule must never become a 500 page to the apiserver
            log.exception("gpugate failed on %s %s uid=%s", req.get("operation"), kind, req["uid"])
            decision = errored(
                f"gpugate failed to evaluate this {kind} (uid {req['uid']}); "
                "the cause is in gpugate's logs. Please report it to the platform team."
            )
        _record(endpoint, req, decision)
        answered = _json(response_review(decision, uid=req["uid"], api_version=review["apiVersion"]))
        metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        return answered

    @app.post("/mutate")
    def mutate_endpoint() -> Response:
        return answer("mutate", mutate)

    @app.post("/validate")
    def validate_endpoint() -> Response:
        return answer("validate", validate)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        problems, notes = status.readiness()
        if problems:
            return Response("not ready: " + "; ".join(problems + notes) + "\n", status=503, mimetype="text/plain")
        return Response("ok" + "".join(f" ({note})" for note in notes) + "\n", mimetype="text/plain")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        status.refresh()
        body, content_type = metrics.render(*status.state())
        return Response(body, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        code = err.code or 500
        if code == 413:
            answer = _status(
                413,
                f"request entity is too large; limit is {MAX_BODY} bytes "
                "(kube-apiserver never sends an AdmissionReview this large)",
            )
            if not _drain(request.environ.get("wsgi.input"), limit=DRAIN_LIMIT):
                answer.headers["Connection"] = "close"
            return answer
        return _status(code, f"{err.name}: {request.method} {request.path}")

    return app


def _body() -> bytes:
    """The request body, at most MAX_BODY bytes (413 beyond), with or without a Content-Length."""
    if request.content_length is not None:
        return request.get_data()  # werkzeug refuses a Content-Length over MAX_CONTENT_LENGTH up front
    # Chunked: read it ourselves, as werkzeug's bounded stream stops short of the limit on gunicorn's
    # chunked reader and hands back a truncated body. kube-apiserver always sends a Content-Length.
    stream = request.environ["wsgi.input"]
    chunks, size = [], 0
    while chunk := stream.read(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY:
            raise RequestEntityTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def _drain(stream: Any, *, limit: int) -> bool:
    """Read and drop the rest of a request body, at most ``limit`` bytes; True when it was all read."""
    if stream is None:
        return True
    read = 0
    try:
        while read <= limit:
            chunk = stream.read(64 * 1024)
            if not chunk:
                return True
            read += len(chunk)
    except (OSError, ValueError):  # the client went away, or was too slow (see webhook.serve.tls)
        pass
    return False


def _record(endpoint: str, req: Mapping[str, Any], decision: Decision) -> None:
    kind = req["kind"]["kind"]
    # A label value per kind any client cares to invent would grow the metrics without bound.
    label = kind if kind in KNOWN_KINDS else "other"
    metrics.REQUESTS.labels(endpoint, req.get("operation", ""), label, decision.verdict).inc()
    action = "denied" if not decision.allowed else ("warned" if decision.mode == "warn" else "audited")
    for violation in decision.violations:
        metrics.VIOLATIONS.labels(
            violation.rule, decision.policy, "denied" if violation.refused_by_apiserver else action
        ).inc()
    if decision.violations or not decision.allowed:
        obj = req.get("object") or {}
        meta = obj.get("metadata") or {}
        name = req.get("name") or meta.get("name") or meta.get("generateName", "")
        log.info(
            "%s %s %s %s/%s uid=%s policy=%s mode=%s dryRun=%s: %s",
            endpoint,
            decision.verdict,
            kind,
            req.get("namespace", ""),
            name,
            req["uid"],
            decision.policy,
            decision.mode,
            bool(req.get("dryRun")),
            "; ".join(v.message() for v in decision.violations) or decision.message,
        )
