"""Reading ``spec.devices``: each vendor's device profile, over the built-in one of the same name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .labels import is_dns_subdomain, is_label_key, is_label_value
from .model import Device, builtin_devices
from .reader import Doc, tolerations
from .vendors import RUNTIME_CLASS_PODS

DEVICE_FIELDS = (
    "resources",
    "auxiliaryResources",
    "runtimeClassName",
    "tolerations",
    "modelLabel",
    "modelAliases",
    "choiceAnnotations",
    "draDrivers",
    "deviceClasses",
    "runtimeClassPods",
)


def parse_devices(doc: Doc, value: Any, path: str) -> dict[str, Device]:
    """``spec.devices``: vendor profiles laid over the built-in ones (which inject nothing)."""
    devices = builtin_devices()
    for name, raw in doc.mapping(value, path, None).items():
        dpath = f"{path}.{name}"
        if not isinstance(name, str) or not is_label_value(name) or not name:
            doc.fail(dpath, f"device name {name!r} must be a short name such as nvidia, amd or intel")
            continue
        d = doc.mapping(raw, dpath, DEVICE_FIELDS)
        base = devices.get(name)
        resources = doc.strings(d.get("resources"), f"{dpath}.resources")
        if resources == () or (resources is None and base is None):
            doc.fail(
                f"{dpath}.resources", "must list the resources that count as this vendor's GPUs (e.g. [amd.com/gpu])"
            )
            continue
        auxiliary = doc.strings(d.get("auxiliaryResources"), f"{dpath}.auxiliaryResources")
        devices[name] = Device(
            name=name,
            resources=resources if resources is not None else base.resources,  # type: ignore[union-attr]
            auxiliary_resources=auxiliary if auxiliary is not None else (base.auxiliary_resources if base else ()),
            runtime_class_name=doc.string(
                d.get("runtimeClassName"), f"{dpath}.runtimeClassName", check=is_dns_subdomain, what="RuntimeClass name"
            ),
            tolerations=tolerations(doc, d.get("tolerations"), f"{dpath}.tolerations"),
            model_label=doc.string(
                d.get("modelLabel"), f"{dpath}.modelLabel", check=is_label_key, what="node label key"
            ),
            model_aliases=doc.strings(
                d.get("modelAliases"), f"{dpath}.modelAliases", check=is_label_key, what="node label key"
            )
            or (),
            choice_annotations=doc.strings(
                d.get("choiceAnnotations"), f"{dpath}.choiceAnnotations", check=is_label_key, what="annotation key"
            )
            or (),
            **_dra_fields(doc, d, dpath, base),
        )
    # Put the policy's own devices first: a resource both name (a legacy glob) belongs to the policy's.
    own = [n for n in doc.mapping(value, path, None) if n in devices]
    return {n: devices[n] for n in [*own, *(n for n in devices if n not in own)]}


def _dra_fields(doc: Doc, d: Mapping[str, Any], dpath: str, base: Device | None) -> dict[str, Any]:
    """A device profile's DRA drivers, DeviceClasses and runtime-class pods (the built-in profile's if unset)."""
    drivers = doc.strings(d.get("draDrivers"), f"{dpath}.draDrivers", check=is_dns_subdomain, what="DRA driver name")
    classes = doc.strings(d.get("deviceClasses"), f"{dpath}.deviceClasses")
    pods = doc.strings(d.get("runtimeClassPods"), f"{dpath}.runtimeClassPods")
    for i, kind in enumerate(pods or ()):
        if kind not in RUNTIME_CLASS_PODS:
            doc.fail(f"{dpath}.runtimeClassPods[{i}]", f"{kind!r} is not one of {', '.join(RUNTIME_CLASS_PODS)}")
    return {
        "dra_drivers": drivers if drivers is not None else (base.dra_drivers if base else ()),
        "device_classes": classes if classes is not None else (base.device_classes if base else ()),
        "runtime_class_pods": tuple(p for p in pods if p in RUNTIME_CLASS_PODS)
        if pods is not None
        else RUNTIME_CLASS_PODS,
    }
