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

``securityContext.capabilities.add`` with ``SYS_ADMIN`` or ``ALL`` counts the same: the toolkit's
``IsPrivileged`` is CAP_SYS_ADMIN in the bounding set (internal/config/image/privileged.go), and ``ALL`` puts it
there. The runtimes read the names in any case and with or without ``CAP_``: containerd's CRI plugin upper-cases
a name and gives it ``CAP_``, and takes ``all`` in any case for every capability (``setOCICapabilities``); CRI-O
compares them case-insensitively (internal/config/capabilities). So ``sys_admin``, ``CAP_SYS_ADMIN`` and ``all``
are refused alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..pods.objects import container_label, containers
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "privileged-gpu-container"
record = rule(
    RULE,
    order=97,
    reads={"container.securityContext": {"privileged": bool, "capabilities": {"add": [str]}}},
    module=__name__,
)
#: Capabilities (upper-cased, without ``CAP_``) that make a container privileged to the NVIDIA toolkit.
PRIVILEGED_CAPABILITIES = frozenset({"SYS_ADMIN", "ALL"})


def privileged_capabilities(container: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The ``capabilities.add`` entries (index, as written) that give the container CAP_SYS_ADMIN."""
    context = container.get("securityContext")
    caps = context.get("capabilities") if isinstance(context, Mapping) else None
    added = caps.get("add") if isinstance(caps, Mapping) else None
    out = []
    for index, name in enumerate(added if isinstance(added, list) else []):
        if not isinstance(name, str):
            continue
        normal = name.strip().upper()
        normal = normal[len("CAP_") :] if normal.startswith("CAP_") else normal
        if normal in PRIVILEGED_CAPABILITIES:
            out.append((index, name))
    return out


_EXCEPTION = (
    "node tooling the platform team trusts belongs in a namespace whose policy sets "
    "spec.security.privilegedGPUContainers: allow"
)


# Runs with or without a governing policy, like the visible-devices check: a container seeing GPUs the pod
# did not request is never right, and a privileged one sees them all.
@record.validator(pods="gpu", needs_policy=False)
def forbid_privileged_gpu_containers(pod: PodView, ctx: PodContext) -> list[Violation]:
    if ctx.policy.privileged_gpu_containers == "allow":
        return []
    violations = []
    for fld, index, container in containers(pod.spec):
        context = container.get("securityContext")
        if isinstance(context, Mapping) and context.get("privileged") is True:
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].securityContext.privileged"),
                    container_label(fld, container),
                    "is privileged in a GPU pod, so it sees every GPU of its node, not only the ones the pod requested",
                    "remove securityContext.privileged (add the capabilities it needs to securityContext.capabilities "
                    f"instead); {_EXCEPTION}",
                    security=True,
                )
            )
        for cap, name in privileged_capabilities(container):
            violations.append(
                Violation(
                    RULE,
                    ctx.spec_field(f"{fld}[{index}].securityContext.capabilities.add[{cap}]"),
                    container_label(fld, container),
                    f"adds the capability {name} in a GPU pod: with CAP_SYS_ADMIN the NVIDIA Container Toolkit treats "
                    "it as privileged, so it sees every GPU of its node, not only the ones the pod requested",
                    f"add only the capabilities it needs, never SYS_ADMIN or ALL; {_EXCEPTION}",
                    security=True,
                )
            )
    return violations
