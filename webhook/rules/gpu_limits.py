"""GPU limits: at most ``limits.maxPerContainer`` GPUs in a container and ``limits.maxPerPod`` in a pod.

Guards the GPU resources of containers and init containers. A pod's count is what the scheduler reserves
(KEP-753, k8s.io/component-helpers resource.PodRequests): the sum over app containers and sidecars
(init containers with ``restartPolicy: Always``), or, if larger, any one init container plus the sidecars
started before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..pods.fields import RESOURCES
from ..pods.gpus import gpu_amounts, scheduled_gpus
from ..pods.objects import container_label, containers
from ..pods.quantity import format_quantity
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "gpu-limits"
record = rule(RULE, order=40, reads={"container.restartPolicy": str, "container.resources": RESOURCES}, module=__name__)


def pod_gpu_count(spec: Mapping[str, Any], ctx: PodContext) -> Fraction:
    """GPUs the scheduler reserves for the pod, all GPU resources of the policy added up."""
    return sum(scheduled_gpus(spec, ctx.counts_as_gpu).values(), Fraction(0))


@record.validator(pods="gpu")
def limit_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    spec = pod.spec
    limits = ctx.policy.limits
    violations = []
    if limits.max_per_container is not None:
        for fld, index, container in containers(spec):
            amount = sum(gpu_amounts(container, ctx.counts_as_gpu).values(), Fraction(0))
            if amount > limits.max_per_container:
                violations.append(
                    Violation(
                        RULE,
                        ctx.spec_field(f"{fld}[{index}].resources.limits"),
                        container_label(fld, container),
                        f"requests {format_quantity(amount)} GPUs, more than the {limits.max_per_container} per "
                        f'container that policy "{ctx.policy.name}" allows',
                        f"request at most {limits.max_per_container}, or split the work across pods",
                    )
                )
    if limits.max_per_pod is not None:
        total = pod_gpu_count(spec, ctx)
        if total > limits.max_per_pod:
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field("containers"),
                    "pod",
                    f"requests {format_quantity(total)} GPUs in all, more than the {limits.max_per_pod} per pod "
                    f'that policy "{ctx.policy.name}" allows',
                    f"request at most {limits.max_per_pod} GPUs per pod",
                )
            )
    return violations
