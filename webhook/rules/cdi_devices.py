"""CDI device annotations: no pod asks the container runtime for devices outside a resource request.

The Container Device Interface names devices ``vendor.com/class=name`` (``nvidia.com/gpu=all`` is every GPU of
the node) and lets them be requested by annotations: every key with the prefix ``cdi.k8s.io/`` holds a comma
separated list of device names (container-device-interface pkg/cdi/annotations.go, ``AnnotationPrefix``,
``ParseAnnotations``). Device plugins put such annotations on the container they allocate for, and containerd
and CRI-O inject what they name (containerd internal/cri/opts/spec_linux.go ``WithCDI``, CRI-O
internal/factory/container/device_linux.go ``SpecInjectCDIDevices``). A pod's own annotations reach a device
injector too: containerd passes the ones its runtime's ``pod_annotations`` list allows into the OCI spec
(internal/cri/server/container_create.go), where the NVIDIA Container Runtime in CDI mode reads the same prefix
(nvidia-container-toolkit internal/config/image/cuda_image.go, ``cdiDeviceRequestsFromAnnotations``), and the
NVIDIA toolkit's NRI plugin injects what the pod annotations ``nvidia.cdi.k8s.io/pod``,
``nvidia.cdi.k8s.io/container.<name>`` or ``nvidia.cdi.k8s.io`` name (cmd/nvidia-ctk-installer/container/
runtime/nri/plugin.go, with containerd/nri pkg/plugin ``GetEffectiveAnnotation``). Either way the devices
bypass the scheduler, the device plugin's accounting and every GPU rule, so no tenant pod may carry them: the
check runs on every pod gpugate sees, in every mode; ``spec.security.cdiAnnotations: allow`` makes an exception
for a namespace of trusted node tooling. Device plugins and DRA drivers give CDI devices through the CRI, not
through pod annotations, so nothing they do is refused.
"""

from __future__ import annotations

from ..pods.fields import STRINGS
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "cdi-devices"
#: container-device-interface's AnnotationPrefix, and the NVIDIA NRI plugin's annotation key.
CDI_PREFIX = "cdi.k8s.io/"
NVIDIA_NRI_KEY = "nvidia.cdi.k8s.io"

record = rule(RULE, order=95, reads={"metadata.annotations": STRINGS}, module=__name__)


def requests_cdi_devices(key: str) -> bool:
    """Whether a pod annotation key is one a container runtime or the NVIDIA NRI plugin reads CDI devices from."""
    return key.startswith(CDI_PREFIX) or key == NVIDIA_NRI_KEY or key.startswith(f"{NVIDIA_NRI_KEY}/")


def _cut(value: str, limit: int = 80) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


@record.validator(pods="any", needs_policy=False)
def forbid_cdi_device_annotations(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.cdi_annotations == "allow":
        return []
    return [
        Violation(
            RULE,
            ctx.meta_field(f"annotations[{key}]"),
            "pod",
            f'asks the container runtime for the CDI devices "{_cut(value)}" without any resource request: they '
            "would bypass the scheduler, the device plugin and every GPU policy",
            "remove the annotation and request GPUs with resources.limits or a DRA ResourceClaim (a namespace "
            "of trusted node tooling can be allowed with spec.security.cdiAnnotations: allow)",
            security=True,
        )
        for key, value in sorted(pod.annotations.items())
        if requests_cdi_devices(key)
    ]
