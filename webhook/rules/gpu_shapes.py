"""GPU shapes the apiserver accepts but that are wrong: zero GPUs, GPUs only in init containers, whole
GPUs mixed with MIG slices, and GPUs of several vendors in one pod.

Guards ``resources`` of containers and init containers. A quantity of ``0`` still attracts the built-in
ExtendedResourceToleration toleration (k/k plugin/pkg/admission/extendedresourcetoleration), so the pod may
squat on a GPU node. GPUs held only by init containers stay allocated for the pod's whole life (the
scheduler reserves the maximum of init and app containers, KEP-753): right for a short validation pod (the
GPU Operator's plugin validator requests its GPU in an init container), wasteful for a long-running one, so
``initOnlyGPUs`` decides (deny, warn, allow; long-running pods are warned about even under allow).
``nvidia.com/gpu`` together with ``nvidia.com/mig-*`` asks one node for whole GPUs and MIG slices at once,
which no MIG strategy offers; GPUs of two vendors in one pod need two runtimes and two node pools at once.
"""

from __future__ import annotations

from ..pods.fields import RESOURCES
from ..pods.gpus import gpu_amounts
from ..pods.objects import container_label, containers, is_sidecar
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "gpu-shape"
record = rule(RULE, order=30, reads={"container.restartPolicy": str, "container.resources": RESOURCES}, module=__name__)
#: Kinds whose pods run until deleted; a pod's own restartPolicy says the same for bare pods.
LONG_RUNNING = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "LeaderWorkerSet", "RayCluster", "RayService"}
)


def _long_running(pod: PodView, ctx: PodContext) -> bool:
    if ctx.shape.kind in LONG_RUNNING:
        return True
    return ctx.shape.kind in ("Pod", "PodTemplate") and pod.spec.get("restartPolicy", "Always") == "Always"


@record.validator(pods="any")
def require_sensible_gpu_shapes(pod: PodView, ctx: PodContext) -> list[Violation]:
    spec = pod.spec
    violations = []
    in_app, init_users = False, []
    used: dict[str, str] = {}
    for fld, index, container in containers(spec):
        if fld == "ephemeralContainers":
            continue
        for resource, amount in gpu_amounts(container, ctx.counts_as_gpu).items():
            if amount == 0:
                violations.append(
                    Violation(
                        RULE,
                        ctx.spec_field(f"{fld}[{index}].resources"),
                        container_label(fld, container),
                        f"requests 0 {resource}",
                        f"remove {resource}: a zero GPU request still attracts GPU-node tolerations",
                    )
                )
                continue
            if amount < 0:
                continue
            used.setdefault(resource, ctx.spec_field(f"{fld}[{index}].resources"))
            if fld == "initContainers" and not is_sidecar(container):
                init_users.append(container_label(fld, container))
            else:
                in_app = True
    if init_users and not in_app:
        violations += _init_only(pod, ctx, ", ".join(dict.fromkeys(init_users)))
    whole = sorted(r for r in used if r in ("nvidia.com/gpu", "nvidia.com/gpu.shared"))
    mig = sorted(r for r in used if r.startswith("nvidia.com/mig-"))
    if whole and mig:
        violations.append(
            Violation(
                RULE,
                used[mig[0]],
                "pod",
                f"mixes {', '.join(whole)} with MIG slices ({', '.join(mig)})",
                "request either whole GPUs or MIG slices in one pod; no node offers both at once",
            )
        )
    if len(ctx.gpu.devices) > 1:
        vendors = ", ".join(d.name for d in ctx.gpu.devices)
        violations.append(
            Violation(
                RULE,
                ctx.spec_field("containers"),
                "pod",
                f"requests GPUs of several vendors ({vendors})",
                "request one vendor's GPUs per pod: each needs its own runtime, tolerations and node pool",
            )
        )
    return violations


def _init_only(pod: PodView, ctx: PodContext, who: str) -> list[Violation]:
    choice = ctx.policy.init_only_gpus
    long_running = _long_running(pod, ctx)
    if choice == "allow" and not long_running:
        return []
    idle = (
        "they stay allocated and idle while the app containers run"
        if long_running
        else "they stay allocated until the pod ends (the GPU validation-step pattern of the GPU Operator)"
    )
    return [
        Violation(
            RULE,
            ctx.spec_field("initContainers"),
            who,
            f"only init containers request GPUs: {idle}",
            "request the GPUs in the container that uses them, or run the GPU step as its own Job",
            advisory=choice != "deny",
        )
    ]
