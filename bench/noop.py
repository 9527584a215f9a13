"""A no-op admission endpoint on the same stack, for bench/serving.py: parses the review, answers allowed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request


def build_app(policies_dir: str, *, kubeconfig: str | None = None, tls_ready: Callable[[], bool] | None = None,
              **_: Any) -> Flask:
    app = Flask("noop")

    @app.post("/mutate")
    def mutate() -> Response:
        review = json.loads(request.get_data())
        body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True}}
        return Response(json.dumps(body), mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response("ok\n")

    return app
