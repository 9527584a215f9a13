"""GPU shapes the apiserver accepts but that are wrong: zero GPUs, GPUs only in init containers, whole
GPUs mixed with MIG slices in one pod.

Guards ``resources`` of containers and init containers. A quantity of ``0`` still attracts the built-in
ExtendedResourceToleration toleration (k/k plugin/pkg/admission/extendedresourcetoleration), so the pod may
squat on a GPU node; GPUs held only by init containers stay allocated and idle for the pod's whole life
(the scheduler reserves the maximum of init and app containers, KEP-753); ``nvidia.com/gpu`` together with
``nvidia.com/mig-*`` asks one node for whole GPUs and MIG slices at once, which no MIG strategy offers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..pods import container_label, containers, gpu_amounts, is_sidecar
from .base import PodContext, Violation

RULE = "gpu-shape"


def require_sensible_gpu_shapes(spec: Mapping[str, Any], ctx: PodContext) -> list[Violation]:
    violations = []
    in_app, init_users = False, []
    used: dict[str, str] = {}
    for fld, index, container in containers(spec):
        if fld == "ephemeralContainers":
            continue
        for resource, amount in gpu_amounts(container, ctx.policy.counts_as_gpu).items():
            if amount == 0:
                violations.append(Violation(
                    RULE, ctx.spec_field(f"{fld}[{index}].resources"), container_label(fld, container),
                    f"requests 0 {resource}",
                    f"remove {resource}: a zero GPU request still attracts GPU-node tolerations"))
                continue
            if amount < 0:
                continue
            used.setdefault(resource, ctx.spec_field(f"{fld}[{index}].resources"))
            if fld == "initContainers" and not is_sidecar(container):
                init_users.append(container_label(fld, container))
            else:
                in_app = True
    if init_users and not in_app:
        violations.append(Violation(
            RULE, ctx.spec_field("initContainers"), ", ".join(dict.fromkeys(init_users)),
            "only init containers request GPUs; they stay allocated and idle while the app containers run",
            "request the GPUs in the container that uses them, or run the GPU step as its own Job"))
    whole = sorted(r for r in used if r in ("nvidia.com/gpu", "nvidia.com/gpu.shared"))
    mig = sorted(r for r in used if r.startswith("nvidia.com/mig-"))
    if whole and mig:
        violations.append(Violation(
            RULE, used[mig[0]], "pod", f"mixes {', '.join(whole)} with MIG slices ({', '.join(mig)})",
            "request either whole GPUs or MIG slices in one pod; no node offers both at once"))
    return violations
