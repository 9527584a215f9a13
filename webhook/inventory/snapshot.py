"""Fleet snapshot files: the objects an inventory is built from, as a Kubernetes ``List`` in YAML or JSON.

``gpugate fleet snapshot`` writes one from a cluster with only the fields the inventory reads; the output of
``kubectl get nodes,runtimeclasses,deviceclasses,resourceslices -o yaml`` is a snapshot too. ``gpugate check
--fleet FILE`` decides with it as the server does with its live inventory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..policy.documents import load_all
from .model import Inventory

KINDS = ("Node", "RuntimeClass", "DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "NodePool")


class SnapshotError(ValueError):
    """A fleet file that cannot be read as Kubernetes objects."""


def _objects(documents: Iterable[Any], source: str) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, Mapping) or not doc.get("kind"):
            raise SnapshotError(f"{source}: document {index} is not a Kubernetes object (needs kind)")
        if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
            out += _objects(doc["items"], source)
        else:
            out.append(doc)
    return out


def load_snapshot(path: str | Path) -> Inventory:
    """The inventory a snapshot file describes; SnapshotError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as stream:
            documents = list(load_all(stream.read()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise SnapshotError(f"{path}: {err}") from err
    objects = _objects(documents, str(path))
    if not any(o.get("kind") in KINDS for o in objects):
        raise SnapshotError(f"{path}: no {', '.join(KINDS[:4])} objects in it")
    return Inventory.of(objects)


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an object the inventory reads (what a snapshot keeps)."""
    meta = obj.get("metadata") or {}
    kept_meta = {k: meta[k] for k in ("name", "namespace", "labels") if meta.get(k)}
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept_meta}
    kind = obj.get("kind")
    if kind == "Node":
        spec = obj.get("spec") or {}
        out["spec"] = {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)}
        out["status"] = {"allocatable": (obj.get("status") or {}).get("allocatable") or {}}
    elif kind == "RuntimeClass":
        out["handler"] = obj.get("handler")
    elif kind == "NodePool":
        spec = obj.get("spec") or {}
        kept = {k: spec[k] for k in ("template", "limits") if spec.get(k)}
        template = kept.get("template") or {}
        if template:
            body = template.get("spec") or {}
            kept["template"] = {
                **(
                    {"metadata": {"labels": template["metadata"]["labels"]}}
                    if (template.get("metadata") or {}).get("labels")
                    else {}
                ),
                "spec": {k: body[k] for k in ("requirements", "taints") if body.get(k)},
            }
        out["spec"] = kept
    else:
        out["spec"] = obj.get("spec") or {}
    return out
