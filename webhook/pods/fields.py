"""The JSON types of pod fields, as kube-apiserver sends them: the vocabulary rules declare their reads in.

A schema is a type (str, bool, int), QUANTITY, ANY_OBJECT, a dict of field -> schema (the fields read), a
one-element list [item schema], or MapOf(value schema). A read is declared as a path relative to the pod
(``metadata.labels``, ``spec.nodeSelector``) or to each of its containers (``container.env``); the type guard
(``admission.shapes``) checks the union of what ``pods`` itself reads (``BASE_READS``) and what every
registered rule declares.
"""

from __future__ import annotations

from typing import Any


class MapOf:
    """A JSON object whose keys are free and whose values all follow one schema."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MapOf) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("MapOf", repr(self.value)))


QUANTITY = "quantity"  # a resource.Quantity: the apiserver sends a string; a JSON number also decodes
ANY_OBJECT = "object"  # read, but only its presence matters

STRINGS = MapOf(str)
QUANTITIES = MapOf(QUANTITY)
RESOURCES = {"limits": QUANTITIES, "requests": QUANTITIES}
SELECTOR_REQUIREMENT = {"key": str, "operator": str, "values": [str]}
NODE_SELECTOR_TERM = {"matchExpressions": [SELECTOR_REQUIREMENT], "matchFields": [SELECTOR_REQUIREMENT]}
#: A container's ``env`` as the NVIDIA-variable rules read it (one declaration: the type guard merges reads).
ENV = [{"name": str, "value": str, "valueFrom": {"configMapKeyRef": {"name": str, "key": str}}}]
TOLERATION = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}

#: A container's ``resources.claims`` and a pod's ``spec.resourceClaims`` (one declaration: rules share them).
CLAIM_REFERENCES = [{"name": str, "request": str}]
POD_RESOURCE_CLAIMS = [{"name": str, "resourceClaimName": str, "resourceClaimTemplateName": str}]

#: The container lists of a pod spec; a ``container.<field>`` read applies to each container of each.
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

#: What finding the pods, their policy and their GPUs reads (``pods.objects``, ``pods.gpus``).
BASE_READS: dict[str, Any] = {
    "metadata.name": str,
    "metadata.namespace": str,
    "metadata.generateName": str,
    "metadata.labels": STRINGS,
    "metadata.annotations": STRINGS,
    "spec.schedulerName": str,
    "container.name": str,
    "container.restartPolicy": str,
    "container.resources": RESOURCES,
}
