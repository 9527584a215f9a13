"""Device visibility: no container sets ``NVIDIA_VISIBLE_DEVICES`` itself.

Guards ``env`` of containers, init containers and ephemeral containers. Under the NVIDIA container
runtime that variable decides which GPUs a container sees; the device plugin sets it for the GPUs it
allocated. A user-set value (``all``, a device index or UUID) reaches GPUs the pod never requested.
``void`` and ``none`` expose no GPU and are allowed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pods import container_label, containers
from .base import PodContext, PodView, Violation
from .registry import validator

RULE = "visible-devices"
VARIABLE = "NVIDIA_VISIBLE_DEVICES"
HARMLESS = frozenset({"void", "none"})


# Runs with or without a governing policy: seeing GPUs a pod did not request is never right. Its violations
# still follow a governing policy's mode (warn, audit).
@validator(RULE, pods="any", builtin=True)
def forbid_visible_devices_override(pod: PodView, ctx: PodContext) -> list[Violation]:
    violations = []
    for fld, index, container in containers(pod.spec):
        for e, env in enumerate(container.get("env") or []):
            if not isinstance(env, Mapping) or env.get("name") != VARIABLE:
                continue
            if "valueFrom" not in env and str(env.get("value", "")) in HARMLESS:
                continue
            shown = env.get("value") if "valueFrom" not in env else "<from a reference>"
            violations.append(Violation(
                RULE, ctx.spec_field(f"{fld}[{index}].env[{e}]"), container_label(fld, container),
                f'sets {VARIABLE}={shown}, which would expose GPUs the pod did not request',
                f"remove {VARIABLE}; request GPUs with resources.limits and the device plugin sets it"))
    return violations
