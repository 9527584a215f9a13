"""GPU placement: GPU resources only where Kubernetes allows them.

Guards ``spec.resources`` (pod-level resources support only cpu, memory and hugepages-*:
validatePodResourceRequirements) and ``spec.ephemeralContainers[*].resources`` ("cannot be set for an
Ephemeral Container": allowedEphemeralContainerFields). Both are refused by the apiserver anyway, so these
checks need no policy and are always enforced (``refused_by_apiserver``); they only add a clear message
and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pods.fields import RESOURCES
from ..pods.gpus import counts_as_gpu
from ..pods.objects import container_label
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "gpu-placement"
record = rule(RULE, order=20, reads={"spec.resources": RESOURCES, "container.resources": RESOURCES}, module=__name__)


@record.validator(pods="any", needs_policy=False)
def require_gpus_in_containers(pod: PodView, ctx: PodContext) -> list[Violation]:
    spec = pod.spec
    violations = []
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, Mapping):
        for section in ("requests", "limits"):
            for resource in pod_resources.get(section) or {}:
                if counts_as_gpu(resource, ctx.policy):
                    violations.append(
                        Violation(
                            RULE,
                            ctx.spec_field(f"resources.{section}[{resource}]"),
                            "pod",
                            f'Unsupported value: "{resource}": extended resources are not allowed in pod-level '
                            "resources",
                            f"move {resource} into the resources of the container that uses it",
                            refused_by_apiserver=True,
                        )
                    )
    for index, container in enumerate(spec.get("ephemeralContainers") or []):
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources")
        if isinstance(resources, Mapping) and any(
            counts_as_gpu(r, ctx.policy) for section in ("requests", "limits") for r in resources.get(section) or {}
        ):
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"ephemeralContainers[{index}].resources"),
                    container_label("ephemeralContainers", container),
                    "Forbidden: cannot be set for an Ephemeral Container",
                    "ephemeral containers cannot get GPUs; debug a GPU pod with a new pod that requests one",
                    refused_by_apiserver=True,
                )
            )
    return violations
