"""The AdmissionReview wire format: parse what the apiserver sends, build what it accepts back."""

from __future__ import annotations

import base64
import json
from typing import Any, NotRequired, TypedDict

from ..admission.decision import Decision
from ..admission.shapes import Workloads, request_problems

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class _NumberError(ValueError):
    pass


def _constant(text: str) -> Any:
    raise _NumberError(f"{text} is not JSON (RFC 8259 has no {text})")


# One decoder for every request (json.loads with arguments builds a new one each call). Integers keep the C
# scanner's own conversion: Python refuses those over 4300 digits with a plain ValueError, answered as a 400
# below; anything shorter but beyond int64 no apiserver sends, and gpugate's readers bound it (pods/quantity.py).
_DECODER = json.JSONDecoder(parse_constant=_constant)


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    operation: str
    namespace: NotRequired[str]
    name: NotRequired[str]
    subResource: NotRequired[str]
    object: NotRequired[Any]
    oldObject: NotRequired[Any]
    dryRun: NotRequired[bool]


class Review(TypedDict):
    apiVersion: str
    request: AdmissionRequest


class ReviewError(ValueError):
    """The body is not an AdmissionReview; answered with HTTP 400 (no uid to answer with)."""


class RequestError(ValueError):
    """An AdmissionReview with a uid whose request is malformed; answered as a 200 review with code 400."""

    def __init__(self, message: str, *, api_version: str, uid: str) -> None:
        super().__init__(message)
        self.api_version, self.uid = api_version, uid


def parse_review(body: bytes, *, workloads: Workloads | None = None) -> Review:
    """Parse and check an AdmissionReview body: kind, a known apiVersion and a request with a uid, and the JSON
    types of the object's fields gpugate reads for every kind in ``workloads`` (the policies' kinds included)."""
    try:
        review = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError, NaN/Infinity, an integer too long
        raise ReviewError(f"request body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise ReviewError("request body is not a JSON object: expected an AdmissionReview")
    if review.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected kind AdmissionReview, got {review.get('kind')!r}")
    api_version = review.get("apiVersion")
    if api_version not in VERSIONS:
        raise ReviewError(f"unsupported AdmissionReview apiVersion {api_version!r} (supported: {', '.join(VERSIONS)})")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("AdmissionReview request has no uid")
    problems = []
    if request.get("operation") not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        problems.append(f"operation {request.get('operation')!r} is not CREATE, UPDATE, DELETE or CONNECT")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        problems.append("kind is missing")
    for key in ("object", "oldObject"):
        if request.get(key) is not None and not isinstance(request[key], dict):
            problems.append(f"{key} is not an object")
    if request.get("operation") in ("CREATE", "UPDATE") and not isinstance(request.get("object"), dict):
        problems.append(f"{request.get('operation')} request has no object")
    if not problems:
        problems = request_problems(request, workloads=workloads)
    if problems:
        raise RequestError(
            "malformed AdmissionReview request: " + "; ".join(problems), api_version=str(api_version), uid=uid
        )
    return review  # type: ignore[return-value]


def response_review(decision: Decision, *, uid: str, api_version: str = VERSIONS[0]) -> dict[str, Any]:
    """The AdmissionReview the apiserver accepts: same apiVersion, kind, the request's uid."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        status: dict[str, Any] = {"status": "Failure", "code": decision.code, "message": decision.message}
        if decision.reason:
            status["reason"] = decision.reason
        response["status"] = status
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch, separators=(",", ":")).encode()).decode()
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.audit_annotations:
        response["auditAnnotations"] = decision.audit_annotations
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
