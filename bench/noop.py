"""A no-op admission endpoint on gpugate's stack (gunicorn, TLS, flask), for bench/serving.py and bench/apiserver.py.

It does what any admission webhook must: parse the whole review and encode an answer with the request's uid;
it decides nothing. One exception, so that bench/apiserver.py can tell that the apiserver calls this server
and not gpugate: an object annotated `bench.gpugate.io/deny: <endpoint>` is refused by that endpoint (two dict
lookups on the parsed review, invisible next to the parse).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

PROBE_ANNOTATION = "bench.gpugate.io/deny"
# A JSON patch for /mutate to answer with (bench/apiserver.py --noop-patch): what the apiserver's side of a
# mutation costs, without gpugate's decision.
PATCH = os.environ.get("BENCH_NOOP_PATCH", "")


def build_app(
    policies_dir: str, *, kubeconfig: str | None = None, tls_ready: Callable[[], bool] | None = None, **_: Any
) -> Flask:
    app = Flask("noop")

    def answer(endpoint: str) -> Response:
        review = json.loads(request.get_data())
        req = review["request"]
        response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
        annotations = ((req.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        if PATCH and endpoint == "mutate" and PROBE_ANNOTATION not in annotations:
            response.update(patchType="JSONPatch", patch=base64.b64encode(PATCH.encode()).decode())
        if annotations.get(PROBE_ANNOTATION) == endpoint:
            response = {
                "uid": req["uid"],
                "allowed": False,
                "status": {"code": 403, "message": f"no-op {endpoint} probe"},
            }
        body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
        return Response(json.dumps(body), mimetype="application/json")

    @app.post("/mutate")
    def mutate() -> Response:
        return answer("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return answer("validate")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response("ok\n")

    return app
