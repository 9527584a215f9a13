"""NVIDIA device variables: no container sets a variable the NVIDIA Container Toolkit reads to hand it devices
of its node, besides ``NVIDIA_VISIBLE_DEVICES`` (``visible_devices``).

Guards ``env`` of containers, init containers and ephemeral containers, of every pod gpugate sees (with GPUs or
without: where the NVIDIA runtime is a node's default handler, as the GPU Operator configures it, a pod without
GPUs meets the toolkit too). The variables and what they hand over (NVIDIA/nvidia-container-toolkit
internal/config/image/envvars.go, cuda_image.go ``ImexChannelRequests``; internal/modifier/gated.go and cdi.go
``gatedDevices``; cmd/nvidia-container-runtime-hook/container_config.go for the MIG ones):

- ``NVIDIA_IMEX_CHANNELS``: IMEX channels (``/dev/nvidia-caps-imex-channels/channel<N>``), the memory-export
  domain of a multi-node NVLink system, which NVIDIA's DRA driver otherwise allocates through ComputeDomains;
- ``NVIDIA_MIG_CONFIG_DEVICES`` / ``NVIDIA_MIG_MONITOR_DEVICES``: the capability to create and destroy, or to
  observe, the MIG instances of the GPUs (of every GPU of the node with ``all``);
- ``NVIDIA_GDS`` / ``NVIDIA_MOFED`` / ``NVIDIA_GDRCOPY`` / ``NVIDIA_NVSWITCH`` ``=enabled``: every nvidia-fs,
  InfiniBand (``/dev/infiniband/*``), gdrdrv and NVSwitch device node of the node.

An empty value, ``void`` and ``none`` hand over nothing (for the four feature gates, any value but ``enabled``).
A value from a reference (``valueFrom``) is not known at admission, so it counts as set. Refused in every mode,
with or without a governing policy; the legitimate users (GPUDirect Storage, multi-node NVLink jobs) get a
per-feature opt-in, ``spec.security.deviceVariables: [NVIDIA_GDS, ...]``. ``envFrom`` sources that can make
such a variable are ``visible_devices``' (it judges every ``NVIDIA_*`` name).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pods.fields import ENV
from ..pods.objects import container_label, containers
from ..policy.vendors import NVIDIA_DEVICE_VARIABLES
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "device-variables"
#: Values of a device-list variable that hand over no device (the toolkit's own "void" and "none").
EMPTY = frozenset({"", "void", "none"})

record = rule(RULE, order=92, reads={"container.env": ENV}, module=__name__)


def hands_over_devices(name: str, env: Mapping[str, object]) -> bool:
    """Whether this ``env`` entry of an NVIDIA device variable makes the toolkit hand the container devices."""
    if "valueFrom" in env:
        return True
    value = str(env.get("value") or "")
    trigger = NVIDIA_DEVICE_VARIABLES[name]
    return value == trigger if trigger is not None else value.strip().lower() not in EMPTY


# Runs with or without a governing policy: a device no scheduler allocated is never right.
@record.validator(pods="any", needs_policy=False)
def forbid_nvidia_device_variables(pod: PodView, ctx: PodContext) -> list[Violation]:
    allowed = ctx.policy.device_variables
    violations = []
    for fld, index, container in containers(pod.spec):
        for e, env in enumerate(container.get("env") or []):
            if not isinstance(env, Mapping):
                continue
            name = env.get("name")
            if name not in NVIDIA_DEVICE_VARIABLES or name in allowed or not hands_over_devices(str(name), env):
                continue
            shown = env.get("value") if "valueFrom" not in env else "<from a reference>"
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].env[{e}]"),
                    container_label(fld, container),
                    f"sets {name}={shown}, which makes the NVIDIA Container Toolkit hand it devices of the node that "
                    "no scheduler allocated",
                    f"remove {name}; for a namespace whose workloads need the feature, the policy's "
                    f"spec.security.deviceVariables: [{name}]",
                    security=True,
                )
            )
    return violations
