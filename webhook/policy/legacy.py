"""The deprecated forms policy files still load in, and the note that says what to change.

``gpugate.io/v1`` is the apiVersion of 0.1, whose field layout put one device's fields at the top of the spec
(``gpuResources``, ``runtimeClassName``, ``tolerations``, ``models.nodeLabel``, classes as value lists).
``gpugate.io/v2`` is the current layout (``spec.devices``), and only that. A v1 file loads in either layout,
with a deprecation note naming what to change (policies/README.md, "Versions, and migrating policy files").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .keys import API_VERSION, LEGACY_API_VERSION
from .labels import is_dns_subdomain, is_label_key
from .model import Device
from .reader import Doc, tolerations
from .vendors import BUILTIN_DEVICE_RESOURCES, BUILTIN_DRA

MIGRATING = 'policies/README.md, "Versions, and migrating policy files"'


def check_api_version(doc: Doc, top: Mapping[str, Any], spec: Mapping[str, Any], *, layout: bool) -> bool:
    """Whether the document is in the deprecated ``gpugate.io/v1``; a wrong apiVersion, or the 0.1 fields in a
    v2 document (``layout``: a GPUPolicy, whose layout changed), is an issue."""
    version = top.get("apiVersion")
    if version == LEGACY_API_VERSION:
        return True
    if version != API_VERSION:
        doc.fail("apiVersion", f"must be {API_VERSION} (or the deprecated {LEGACY_API_VERSION}), got {version!r}")
    elif layout:
        for field in legacy_fields(spec):
            doc.fail(
                f"spec.{field}",
                f"is the 0.1 field layout, which {API_VERSION} does not read: move it into spec.devices.<vendor> "
                f"({MIGRATING})",
            )
    return False


def legacy_fields(spec: Mapping[str, Any]) -> list[str]:
    """The 0.1 fields a spec uses."""
    models = spec.get("models")
    found = [f for f in LEGACY_FIELDS if f in spec]
    if isinstance(models, dict) and "nodeLabel" in models:
        found.append("models.nodeLabel")
    return found


def deprecation(kind: str, spec: Mapping[str, Any]) -> str:
    """What a ``gpugate.io/v1`` document should change to be current."""
    fields = legacy_fields(spec) if kind == "GPUPolicy" else []
    if not fields:
        return f"apiVersion {LEGACY_API_VERSION} is deprecated: set apiVersion: {API_VERSION} (nothing else changes)"
    return (
        f"apiVersion {LEGACY_API_VERSION} and the 0.1 field layout are deprecated: move {', '.join(fields)} into "
        f"spec.devices.<vendor>, give model classes as {{values, resources}}, and set apiVersion: {API_VERSION} "
        f"({MIGRATING})"
    )


LEGACY_FIELDS = ("gpuResources", "runtimeClassName", "tolerations")


def legacy_device(doc: Doc, spec: Mapping[str, Any], models: Any) -> Device | None:
    """The 0.1 format's one device: ``gpuResources``, ``runtimeClassName``, ``tolerations`` and
    ``models.nodeLabel`` at the top of the spec. Without ``gpuResources`` it is NVIDIA's."""
    node_label = models.get("nodeLabel") if isinstance(models, dict) else None
    if not any(f in spec for f in LEGACY_FIELDS) and node_label is None:
        return None
    if "devices" in spec:
        for f in (*LEGACY_FIELDS, "models.nodeLabel"):
            if f in spec or (f == "models.nodeLabel" and node_label is not None):
                doc.fail(
                    f"spec.{f}",
                    "cannot be combined with spec.devices: move it into "
                    'spec.devices.<vendor> (see policies/README.md, "Migrating policy files")',
                )
        return None
    resources = doc.strings(spec.get("gpuResources"), "spec.gpuResources")
    if resources == ():
        doc.fail("spec.gpuResources", "must not be empty (omit it for the defaults)")
    nvidia_resources, nvidia_auxiliary = BUILTIN_DEVICE_RESOURCES["nvidia"]
    return Device(
        name="nvidia" if not resources else "gpu",
        resources=resources or nvidia_resources,
        auxiliary_resources=nvidia_auxiliary
        if not resources
        else tuple(a for _, aux in BUILTIN_DEVICE_RESOURCES.values() for a in aux),
        runtime_class_name=doc.string(
            spec.get("runtimeClassName"), "spec.runtimeClassName", check=is_dns_subdomain, what="RuntimeClass name"
        ),
        tolerations=tolerations(doc, spec.get("tolerations"), "spec.tolerations"),
        model_label=doc.string(node_label, "spec.models.nodeLabel", check=is_label_key, what="node label key"),
        dra_drivers=BUILTIN_DRA["nvidia"][0] if not resources else (),
        device_classes=BUILTIN_DRA["nvidia"][1] if not resources else (),
    )
