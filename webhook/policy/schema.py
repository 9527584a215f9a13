"""A JSON Schema for policy files, built from the loader's own field lists so the two cannot drift.

Editors that speak the YAML language server protocol complete and check policy files with it (the shipped
policies point at it on their first line). It describes shape and vocabulary; the loader remains the
authority for what a schema cannot say (a class whose resources belong to no device, a default that is
not a class, duplicate names across files). ``gpugate policy schema`` prints it; a test keeps the shipped
copy equal to it and checks it against the loader on valid and invalid files.
"""

from __future__ import annotations

from typing import Any

from . import devices, loader, reader
from .keys import API_VERSION, LEGACY_API_VERSION
from .model import KIND, NODE_POOL_KIND, WORKLOAD_KIND
from .vendors import NVIDIA_DEVICE_VARIABLES

SCHEMA_ID = "https://gpugate.io/schemas/gpugate-policy.schema.json"
#: The current apiVersion, and the deprecated one that still loads (``policy.legacy``).
API_VERSIONS = {
    "enum": [API_VERSION, LEGACY_API_VERSION],
    "description": f"{API_VERSION}; {LEGACY_API_VERSION} is deprecated (policies/README.md, Migrating policy files)",
}
_STRING: dict[str, Any] = {"type": "string", "minLength": 1}
_STRINGS: dict[str, Any] = {"type": "array", "items": _STRING}
_LABEL_VALUE: dict[str, Any] = {
    "type": "string",
    "maxLength": 63,
    "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
}


def _object(properties: dict[str, Any], *, required: tuple[str, ...] = (), description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def _only(fields: tuple[str, ...], properties: dict[str, Any]) -> dict[str, Any]:
    """``properties`` for exactly the loader's ``fields``: a field missing on either side is a bug."""
    missing, extra = set(fields) - set(properties), set(properties) - set(fields)
    if missing or extra:
        raise AssertionError(f"schema and loader disagree: missing {sorted(missing)}, extra {sorted(extra)}")
    return {f: properties[f] for f in fields}


# Over 60 lines: one JSON Schema literal.
def policy_schema() -> dict[str, Any]:
    toleration = _object(
        _only(
            reader.TOLERATION_FIELDS,
            {
                "key": _STRING,
                "operator": {"enum": ["Exists", "Equal"]},
                "value": {"type": "string"},
                "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                "tolerationSeconds": {"type": "integer"},
            },
        )
    )
    selector = _object(
        {
            "matchLabels": {"type": "object", "additionalProperties": _LABEL_VALUE},
            "matchExpressions": {
                "type": "array",
                "items": _object(
                    {
                        "key": _STRING,
                        "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": _STRINGS,
                    },
                    required=("key", "operator"),
                ),
            },
        }
    )
    device = _object(
        _only(
            devices.DEVICE_FIELDS,
            {
                "resources": {**_STRINGS, "minItems": 1, "description": "GPU count resources (exact names or globs)"},
                "auxiliaryResources": {**_STRINGS, "description": "make a pod a GPU pod, never counted as GPUs"},
                "runtimeClassName": _STRING,
                "tolerations": {"type": "array", "items": toleration},
                "modelLabel": {**_STRING, "description": "the node label naming the GPU model"},
                "modelAliases": {**_STRINGS, "description": "other node labels a pod may choose its hardware with"},
                "choiceAnnotations": {**_STRINGS, "description": "scheduler annotations that choose the hardware"},
                "draDrivers": {**_STRINGS, "description": "DRA drivers whose devices are this vendor's GPUs"},
                "deviceClasses": {**_STRINGS, "description": "DeviceClass names (globs) that are this vendor's GPUs"},
                "runtimeClassPods": {
                    "type": "array",
                    "items": {"enum": ["device-plugin", "fractional"]},
                    "description": "which GPU pods get runtimeClassName (never DRA-served ones)",
                },
            },
        ),
        description="a vendor's device profile",
    )
    model_class = {
        "oneOf": [
            _object(
                _only(
                    loader.CLASS_FIELDS,
                    {
                        "values": {
                            **_STRINGS,
                            "minItems": 1,
                            "description": "node label values, exactly as nodes carry them",
                        },
                        "resources": {**_STRINGS, "minItems": 1, "description": "the GPU resources its nodes offer"},
                        "device": _STRING,
                        "aliases": {"type": "object", "additionalProperties": _STRINGS},
                        "deviceClasses": {**_STRINGS, "description": "DeviceClasses of the class's DRA pools"},
                        "nodeSelector": {
                            "type": "object",
                            "additionalProperties": _LABEL_VALUE,
                            "description": "node labels of the class's pools, added as they are",
                        },
                    },
                ),
                required=("resources",),
            ),
            {**_STRINGS, "minItems": 1, "description": "0.1 form: node label values (with spec.models.nodeLabel)"},
        ]
    }
    spec = _object(
        _only(
            loader.SPEC_FIELDS,
            {
                "priority": {"type": "integer"},
                "mode": {"enum": ["enforce", "warn", "audit"]},
                "match": _object({"namespaces": _STRINGS, "namespaceSelector": selector, "podSelector": selector}),
                "devices": {"type": "object", "additionalProperties": device},
                "limits": _object(
                    {
                        "maxPerContainer": {"type": "integer", "minimum": 1},
                        "maxPerPod": {"type": "integer", "minimum": 1},
                    }
                ),
                "models": _object(
                    {
                        "default": {"oneOf": [_STRING, _STRINGS]},
                        "classes": {"type": "object", "minProperties": 1, "additionalProperties": model_class},
                        "nodeLabel": {**_STRING, "description": "0.1 form: move to spec.devices.<vendor>.modelLabel"},
                    },
                    required=("classes",),
                ),
                "gpuHolders": _object(
                    {
                        "resourceClaims": {"type": "boolean"},
                        "annotations": _STRINGS,
                        "annotationSchedulers": _STRINGS,
                        "annotationDevice": {"type": ["string", "null"]},
                    }
                ),
                "attribution": _object(
                    {
                        "labels": {
                            "type": "object",
                            "additionalProperties": _object(
                                {"fromNamespaceLabel": _STRING, "value": _LABEL_VALUE, "default": _LABEL_VALUE}
                            ),
                        }
                    }
                ),
                "gpuRuntimeClasses": {
                    **_STRINGS,
                    "description": "runtime classes that can expose GPUs (default: the GPU Operator's nvidia, "
                    "nvidia-cdi, nvidia-legacy and k3s's nvidia-experimental); each device's runtimeClassName counts "
                    "too, and so does any RuntimeClass whose handler is a GPU runtime's",
                },
                "nonGPUPods": _object(
                    {
                        "gpuTolerations": {"enum": ["deny", "strip", "allow"]},
                        "gpuRuntimeClass": {"enum": ["deny", "allow"]},
                    }
                ),
                "security": _object(
                    {
                        "visibleDevicesOverride": {"enum": ["deny", "allow"]},
                        "attributionEdits": {"enum": ["deny", "allow"]},
                        "sharedGPUContainers": _STRINGS,
                        "visibleDevicesEnvFrom": {"enum": ["deny", "allow"]},
                        "cdiAnnotations": {"enum": ["deny", "allow"]},
                        "privilegedGPUContainers": {"enum": ["deny", "allow"]},
                        "deviceVariables": {
                            "type": "array",
                            "items": {"enum": list(NVIDIA_DEVICE_VARIABLES)},
                            "description": "NVIDIA toolkit device variables this policy's pods may set (one opt-in "
                            "per feature, e.g. NVIDIA_GDS)",
                        },
                    }
                ),
                "initOnlyGPUs": {"enum": ["deny", "warn", "allow"]},
                "mutateTemplates": {"type": "boolean"},
                "gpuResources": {
                    **_STRINGS,
                    "minItems": 1,
                    "description": "0.1 form: use spec.devices.<vendor>.resources",
                },
                "runtimeClassName": {**_STRING, "description": "0.1 form: use spec.devices.<vendor>.runtimeClassName"},
                "tolerations": {
                    "type": "array",
                    "items": toleration,
                    "description": "0.1 form: use spec.devices.<vendor>.tolerations",
                },
            },
        )
    )
    dns_name = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    metadata = _object(
        {
            "name": {"type": "string", "pattern": dns_name},
            "labels": {"type": "object"},
            "annotations": {"type": "object"},
        },
        required=("name",),
    )
    workload = _object(
        {
            "group": _STRING,
            "kind": _STRING,
            "plural": _STRING,
            "versions": _STRINGS,
            "podTemplates": {**_STRINGS, "minItems": 1},
            "podSpecs": {
                "type": "array",
                "minItems": 1,
                "items": _object({"path": _STRING, "podMetadata": _STRING}, required=("path",)),
            },
        },
        required=("group", "kind"),
    )
    workload["anyOf"] = [{"required": ["podTemplates"]}, {"required": ["podSpecs"]}]
    node_pool = _object(
        {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "taints": {
                "type": "array",
                "items": _object(
                    {
                        "key": _STRING,
                        "value": {"type": "string"},
                        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    },
                    required=("key", "effect"),
                ),
            },
            "allocatable": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
            "maxNodes": {"type": "integer", "minimum": 1},
        },
        required=("allocatable",),
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "gpugate policy file (GPUPolicy, GPUWorkloadKind, GPUNodePool)",
        "description": "Generated by `gpugate policy schema`; fields are described in policies/README.md.",
        "oneOf": [
            _object(
                {"apiVersion": API_VERSIONS, "kind": {"const": KIND}, "metadata": metadata, "spec": spec},
                required=("apiVersion", "kind", "metadata"),
            ),
            _object(
                {
                    "apiVersion": API_VERSIONS,
                    "kind": {"const": WORKLOAD_KIND},
                    "metadata": metadata,
                    "spec": workload,
                },
                required=("apiVersion", "kind", "metadata", "spec"),
            ),
            _object(
                {
                    "apiVersion": {"const": "gpugate.io/v2"},
                    "kind": {"const": NODE_POOL_KIND},
                    "metadata": metadata,
                    "spec": node_pool,
                },
                required=("apiVersion", "kind", "metadata", "spec"),
            ),
        ],
    }
