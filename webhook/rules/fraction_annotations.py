"""Fraction annotations: a GPU-sharing scheduler's annotation holds a GPU only for the scheduler that
implements it.

Guards the policy's ``gpuHolders.annotations`` (KAI Scheduler's ``gpu-fraction`` and ``gpu-memory``) on pods
whose ``schedulerName`` is not one of ``gpuHolders.annotationSchedulers`` (``kai-scheduler``). KAI's
webhooks leave such a pod alone (NVIDIA/KAI-Scheduler pkg/admission/webhook/v1alpha2/podhooks/pod_mutator.go)
and the scheduler that places it ignores the annotation, so the pod gets no GPU: gpugate gives it nothing
either (no runtime class, no GPU toleration; ``pods.gpus``), and this check says why. A violation, governed by
the mode like the other shapes that cannot get what they ask for: the pod would start without the GPU it asks
for. A pod that holds a GPU otherwise (a GPU resource, a claim) is left alone: the annotation is only noise.

The same holds for a pod created with ``spec.nodeName`` (or a template that sets it): the apiserver stores it
bound, no scheduler places it, so KAI's scheduler never allocates its fraction, whatever ``schedulerName`` says,
while the image's ``NVIDIA_VISIBLE_DEVICES=all`` under the NVIDIA runtime would show it every GPU of the node.
"""

from __future__ import annotations

from ..pods.fields import STRINGS
from ..pods.gpus import scheduler_of
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "fraction-annotation"
record = rule(
    RULE,
    order=35,
    reads={"metadata.annotations": STRINGS, "spec.schedulerName": str, "spec.nodeName": str},
    module=__name__,
)


@record.validator(pods="non-gpu")
def require_the_annotations_scheduler(pod: PodView, ctx: PodContext) -> list[Violation]:
    implementers = ctx.policy.holders.annotation_schedulers
    first = f"set spec.schedulerName: {implementers[0]}" if implementers else "remove the annotation"
    fix = (
        f"{first}, or request whole GPUs in resources.limits and remove the annotation; if your GPU-sharing "
        "scheduler runs under another name, add it to spec.gpuHolders.annotationSchedulers"
    )
    scheduler = ctx.gpu.scheduler or scheduler_of(pod.spec)
    counted_for = ", ".join(implementers) or "no scheduler"
    if ctx.gpu.bound:
        return [
            Violation(
                RULE,
                ctx.meta_field(f"annotations[{annotation}]"),
                "pod",
                f"asks for part of a GPU with the annotation {annotation}, but it is created bound to the node "
                f'"{pod.spec.get("nodeName")}" (spec.nodeName), so no scheduler places it and no fraction is ever '
                "allocated: the pod would get no GPU",
                f"remove spec.nodeName and let {implementers[0] if implementers else 'the scheduler'} place the pod "
                "(select the node with nodeSelector or affinity instead)",
            )
            for annotation in ctx.gpu.ignored_annotations
        ]
    return [
        Violation(
            RULE,
            ctx.meta_field(f"annotations[{annotation}]"),
            "pod",
            f'asks for part of a GPU with the annotation {annotation}, but its schedulerName "{scheduler}" does not '
            f'implement it (policy "{ctx.policy.name}" counts it for {counted_for}), so the pod would get no GPU',
            fix,
        )
        for annotation in ctx.gpu.ignored_annotations
    ]


# A pod's GPU resources, claims and scheduler are fixed once it exists, but its annotations are not: an UPDATE of a
# pending kai-scheduler pod that adds one would make it a GPU holder that /mutate never saw (no attribution, no
# void, no runtime class). Refused in every mode, with or without a governing policy; a template is not a pod (its
# pods are judged when they are created).
@record.validator(pods="gpu", needs_policy=False, on_update="all")
def forbid_becoming_a_gpu_holder_on_update(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.old is None or ctx.shape.is_template or not ctx.gpu.fractional:
        return []
    before = ctx.old.annotations
    added = [a for a in ctx.policy.holders.annotations if a in pod.annotations and a not in before]
    if any(a in before for a in ctx.policy.holders.annotations):
        return []
    return [
        Violation(
            RULE,
            ctx.meta_field(f"annotations[{annotation}]"),
            "pod",
            f"an update cannot add the annotation {annotation}: it would make an existing pod hold part of a GPU "
            "that gpugate never admitted it for (no attribution labels, no runtime class)",
            "delete the pod and create it again with the annotation",
            security=True,
        )
        for annotation in added
    ]
