"""Where a pod spec lives in each admitted object, and read-only views of its containers and GPU requests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .quantity import QuantityError, parse_quantity

#: (apiGroup, kind) -> the keys from the object's root to its pod template (() for a Pod itself).
TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (),
    ("", "PodTemplate"): ("template",),
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}

CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


@dataclass(frozen=True)
class PodShape:
    """Where the pod (or pod template) sits inside an admitted object."""

    kind: str
    name: str
    template: tuple[str, ...]

    @property
    def is_template(self) -> bool:
        return self.kind != "Pod"

    @property
    def meta_keys(self) -> tuple[str, ...]:
        return (*self.template, "metadata") if self.template else ("metadata",)

    @property
    def spec_keys(self) -> tuple[str, ...]:
        return (*self.template, "spec")

    @property
    def spec_path(self) -> str:
        return ".".join(self.spec_keys)

    @property
    def meta_path(self) -> str:
        return ".".join(self.meta_keys)

    def describe(self) -> str:
        return f'{self.kind} "{self.name}"' if self.name else self.kind


def shape_of(obj: Mapping[str, Any], *, name: str = "") -> PodShape | None:
    """The pod shape of a Pod or workload object, or None for kinds gpugate does not look into."""
    api_version = obj.get("apiVersion") or ""
    kind = obj.get("kind") or ""
    keys = TEMPLATE_PATHS.get((group_of(str(api_version)), str(kind)))
    if keys is None:
        return None
    meta = obj.get("metadata") or {}
    display = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "") or name
    return PodShape(kind=str(kind), name=str(display), template=keys)


def dig(obj: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Every container with its field (initContainers, containers, ephemeralContainers) and index."""
    for fld in CONTAINER_FIELDS:
        items = spec.get(fld)
        if isinstance(items, list):
            for index, container in enumerate(items):
                if isinstance(container, Mapping):
                    yield fld, index, container


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container with ``restartPolicy: Always`` runs beside the app containers (KEP-753)."""
    return container.get("restartPolicy") == "Always"


def gpu_amounts(container: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, Fraction]:
    """GPU resource -> amount for one container: the limit, else the request; unparsable values skipped."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    out: dict[str, Fraction] = {}
    for section in ("requests", "limits"):  # limits last: they win, as scheduling uses request == limit
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for resource, raw in values.items():
            if is_gpu(resource):
                try:
                    out[resource] = parse_quantity(raw)
                except QuantityError:
                    continue
    return out


def requests_gpu(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> bool:
    """True when any container asks for a positive amount of a GPU resource."""
    return any(amount > 0 for _, _, c in containers(spec) for amount in gpu_amounts(c, is_gpu).values())


def gpu_resources_requested(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> set[str]:
    return {r for _, _, c in containers(spec) for r, amount in gpu_amounts(c, is_gpu).items() if amount > 0}


def container_label(fld: str, container: Mapping[str, Any]) -> str:
    kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}.get(fld, "container")
    return f'{kind} "{container.get("name", "?")}"'
