"""Privileged containers of GPU pods: a privileged container sees every GPU of its node, whatever the pod
requested.

Guards ``securityContext.privileged`` of the containers, init containers and ephemeral containers of pods
that hold GPUs. The device plugin hands a container only the GPUs it allocated, but a privileged container
gets every device of the host from the container runtime, and the NVIDIA Container Toolkit honours
``NVIDIA_VISIBLE_DEVICES`` (``all`` in CUDA images) for privileged containers even where it is set to ignore
it from unprivileged ones (NVIDIA/nvidia-container-toolkit internal/config/image/cuda_image.go
``VisibleDevices``: ``isPrivileged || acceptEnvvarUnprivileged``). HAMi's webhook refuses privileged containers
in pods with its GPU resources for the same reason (Project-HAMi/HAMi pkg/scheduler/webhook.go). Judged at
``/validate``, on the final object after every mutating webhook, in every mode; only
``spec.security.privilegedGPUContainers: allow`` makes an exception (node tooling the platform team trusts).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pods.objects import container_label, containers
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "privileged-gpu-container"
record = rule(RULE, order=97, reads={"container.securityContext": {"privileged": bool}}, module=__name__)


# Runs with or without a governing policy, like the visible-devices check: a container seeing GPUs the pod
# did not request is never right, and a privileged one sees them all.
@record.validator(pods="gpu", needs_policy=False)
def forbid_privileged_gpu_containers(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.privileged_gpu_containers == "allow":
        return []
    return [
        Violation(
            RULE,
            ctx.spec_field(f"{fld}[{index}].securityContext.privileged"),
            container_label(fld, container),
            "is privileged in a GPU pod, so it sees every GPU of its node, not only the ones the pod requested",
            "remove securityContext.privileged (add the capabilities it needs to securityContext.capabilities "
            "instead); node tooling the platform team trusts belongs in a namespace whose policy sets "
            "spec.security.privilegedGPUContainers: allow",
            security=True,
        )
        for fld, index, container in containers(pod.spec)
        if isinstance(container.get("securityContext"), Mapping)
        and container["securityContext"].get("privileged") is True
    ]
