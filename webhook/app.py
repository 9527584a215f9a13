"""The HTTP layer: flask routes for /mutate, /validate, /healthz, /readyz and /metrics. HTTP only."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import metrics
from .admission import Decision, Environment, errored, mutate, validate
from .policy.store import PolicyStore
from .review import RequestError, ReviewError, parse_review, response_review

log = logging.getLogger("gpugate")

# controller-runtime's webhook server caps bodies at 7 MiB: the apiserver's request limit is 3 MiB, and an
# AdmissionReview carries the object twice on UPDATE plus overhead.
MAX_BODY = 7 * 1024 * 1024

Decide = Callable[[Mapping[str, Any], Environment], Decision]
NamespaceLabels = Callable[[str], Mapping[str, str] | None]


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def _status(code: int, message: str) -> Response:
    """A metav1.Status body, for requests that are not AdmissionReviews (no uid to answer with)."""
    reason = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge"}
    return _json({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                  "reason": reason.get(code, "InternalError"), "code": code}, code)


def create_app(*, policies: PolicyStore, namespace_labels: NamespaceLabels | None = None,
               tls_ready: Callable[[], bool] | None = None, namespace_cache: Any = None) -> Flask:
    """The WSGI app. Tests inject a PolicyStore over a temp dir; ``build_app`` wires the real cluster."""
    app = Flask("gpugate")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    labels_of: NamespaceLabels = namespace_labels or (lambda _name: {})
    seen_reload_errors = [policies.reload_errors]
    metrics.POLICY_GENERATION.set(policies.generation)
    metrics.POLICY_VALID.set(1)

    def environment() -> Environment:
        current = policies.current()
        metrics.POLICY_GENERATION.set(policies.generation)
        if policies.reload_errors != seen_reload_errors[0]:
            metrics.POLICY_RELOAD_ERRORS.inc(policies.reload_errors - seen_reload_errors[0])
            seen_reload_errors[0] = policies.reload_errors
        metrics.POLICY_VALID.set(0 if policies.last_error else 1)
        return Environment(policies=current, namespace_labels=labels_of)

    def answer(endpoint: str, decide: Decide) -> Response:
        started = time.perf_counter()
        try:
            review = parse_review(request.get_data())
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
            decision = decide(req, environment())
        except Exception:  # a bug in a rule must never become a 500 page to the apiserver
            log.exception("gpugate failed on %s %s uid=%s", req.get("operation"), kind, req["uid"])
            decision = errored(f"gpugate failed to evaluate this {kind} (uid {req['uid']}); "
                               "the cause is in gpugate's logs. Please report it to the platform team.")
        _record(endpoint, req, decision)
        body = _json(response_review(decision, uid=req["uid"], api_version=review["apiVersion"]))
        metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        return body

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
        problems = []
        if tls_ready is not None and not tls_ready():
            problems.append("serving certificate not loaded")
        policies.current()
        if policies.last_error:
            # Still ready: the last good policies are in force. Said here so a person can see it.
            return Response(f"ok (policy edit ignored: {policies.last_error.splitlines()[0]})\n",
                            mimetype="text/plain")
        if problems:
            return Response("not ready: " + "; ".join(problems) + "\n", status=503, mimetype="text/plain")
        return Response("ok\n", mimetype="text/plain")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        environment()
        if namespace_cache is not None:
            metrics.NAMESPACE_CACHE_SYNCED.set(1 if namespace_cache.synced() else 0)
            for event, value in namespace_cache.stats().items():
                metrics.NAMESPACE_CACHE.labels(event).set(value)
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        code = err.code or 500
        if code == 413:
            return _status(413, f"request body larger than {MAX_BODY} bytes")
        return _status(code, f"{err.name}: {request.method} {request.path}")

    return app


def _record(endpoint: str, req: Mapping[str, Any], decision: Decision) -> None:
    kind = req["kind"]["kind"]
    metrics.REQUESTS.labels(endpoint, req.get("operation", ""), kind, decision.verdict).inc()
    action = "denied" if not decision.allowed else ("warned" if decision.mode == "warn" else "audited")
    for violation in decision.violations:
        metrics.VIOLATIONS.labels(violation.rule, decision.policy, "denied" if violation.builtin else action).inc()
    if decision.violations or not decision.allowed:
        obj = req.get("object") or {}
        meta = obj.get("metadata") or {}
        name = req.get("name") or meta.get("name") or meta.get("generateName", "")
        log.info("%s %s %s %s/%s uid=%s policy=%s mode=%s dryRun=%s: %s", endpoint, decision.verdict,
                 kind, req.get("namespace", ""), name, req["uid"], decision.policy, decision.mode,
                 bool(req.get("dryRun")), "; ".join(v.message() for v in decision.violations) or decision.message)


def build_app(policies_dir: str, *, kubeconfig: str | None = None,
              tls_ready: Callable[[], bool] | None = None) -> Flask:
    """The production app: policies hot-reloaded from ``policies_dir``, namespace labels from the cluster."""
    from . import kube

    store = PolicyStore(policies_dir)
    cache = kube.namespace_cache(kubeconfig)
    labels_of: NamespaceLabels | None = None
    if cache is not None:
        cache.start()
        labels_of = cache.labels
    else:
        log.warning("no cluster configuration (no --kubeconfig, not in a pod): namespace labels are treated as "
                    "empty, so namespaceSelector policies do not match and attribution uses defaults")
    return create_app(policies=store, namespace_labels=labels_of, tls_ready=tls_ready, namespace_cache=cache)
