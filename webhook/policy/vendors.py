"""What gpugate knows about GPU vendors without any policy: their resources, DRA drivers and DeviceClasses,
and the annotations of the GPU-sharing schedulers it reads."""

from __future__ import annotations

#: GPU count resources of the vendors gpugate knows, and their auxiliary resources (which make a pod a GPU
#: pod but are never counted as GPUs). Sources: NVIDIA k8s-device-plugin (``nvidia.com/gpu``, renamed
#: time-sliced ``nvidia.com/gpu.shared``, MIG mixed ``nvidia.com/mig-<profile>``); ROCm/k8s-device-plugin
#: (``amd.com/gpu``); intel/intel-device-plugins-for-kubernetes (``gpu.intel.com/i915`` and ``xe``, with
#: ``millicores``, ``memory.max`` and ``tiles`` for GPU-aware scheduling); HAMi (``nvidia.com/gpumem``,
#: ``gpumem-percentage``, ``gpucores`` beside a real ``nvidia.com/gpu`` count).
BUILTIN_DEVICE_RESOURCES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nvidia": (
        ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"),
        ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"),
    ),
    # AMD's device plugin under its "mixed" naming strategy exposes each partition kind as its own resource,
    # amd.com/<compute>_<memory> (spx/dpx/qpx/cpx × nps1/nps4: ROCm/gpu-operator docs/device_plugin).
    "amd": (("amd.com/gpu", "amd.com/[sdqc]px_nps*"), ()),
    "intel": (
        ("gpu.intel.com/i915", "gpu.intel.com/xe"),
        ("gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles"),
    ),
}
#: The node label each vendor's GPU feature discovery puts the GPU product in (NVIDIA gpu-feature-discovery
#: ``nvidia.com/gpu.product``; ROCm/k8s-device-plugin's node labeller ``amd.com/gpu.product-name``; Intel's
#: GPU plugin with NFD ``gpu.intel.com/product``): what ``gpugate policy init`` and ``gpugate report
#: --recommend`` write as a device profile's ``modelLabel``.
MODEL_LABELS: dict[str, str] = {
    "nvidia": "nvidia.com/gpu.product",
    "amd": "amd.com/gpu.product-name",
    "intel": "gpu.intel.com/product",
}
#: DRA: the drivers whose devices are each vendor's GPUs, and the DeviceClasses their charts install, known
#: without a cluster (NVIDIA's DRA driver: ``gpu.nvidia.com``, ``mig.nvidia.com``, ``vfio.gpu.nvidia.com``;
#: its compute-domain classes are no GPUs. ROCm/k8s-gpu-dra-driver: ``gpu.amd.com``. Intel's resource
#: drivers: ``gpu.intel.com``).
BUILTIN_DRA: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nvidia": (("gpu.nvidia.com",), ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")),
    "amd": (("gpu.amd.com",), ("gpu.amd.com",)),
    "intel": (("gpu.intel.com",), ("gpu.intel.com",)),
}
#: Every DeviceClass can be requested as an extended resource of this prefix and its name (KEP-5004,
#: "Implicit Extended Resource Name"); the scheduler then makes the claim itself.
IMPLICIT_DRA_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Which of a vendor's GPU pods get its runtime class: those served by the device plugin, and those holding a
#: fraction through a GPU-sharing scheduler's annotation. DRA-served pods never do (the driver injects
#: devices through CDI).
RUNTIME_CLASS_PODS: tuple[str, ...] = ("device-plugin", "fractional")
#: Runtime classes under which a container can reach GPUs. NVIDIA's GPU Operator creates ``nvidia`` (its
#: ``operator.runtimeClass``) and, unless CDI is turned off (``cdi.enabled`` defaults to true:
#: api/nvidia/v1/clusterpolicy_types.go ``CDIConfigSpec.IsEnabled``), ``nvidia-cdi`` and ``nvidia-legacy``
#: (NVIDIA/gpu-operator assets/pre-requisites/0210_runtime_class_legacy.yaml and 0220_runtime_class_cdi.yaml,
#: created by controllers/object_controls.go ``RuntimeClasses``); k3s and RKE2 ship ``nvidia`` and
#: ``nvidia-experimental`` (k3s-io/k3s manifests/runtimes.yaml, commit c77d0b8: the runtime of the NVIDIA container
#: toolkit's ``nvidia-container-runtime.experimental`` binary). A policy's ``gpuRuntimeClasses`` replaces
#: this list; each device profile's own ``runtimeClassName`` always counts too.
DEFAULT_GPU_RUNTIME_CLASSES: tuple[str, ...] = ("nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental")
#: The CRI runtime handlers of those classes (each of them has the handler of its own name: gpu-operator
#: assets/pre-requisites/0210_runtime_class_legacy.yaml ``handler: "nvidia-legacy"``, 0220_runtime_class_cdi.yaml
#: ``handler: "nvidia-cdi"``; k3s manifests/runtimes.yaml ``handler: nvidia-experimental``). A RuntimeClass of any
#: name with one of these handlers runs its pods under the NVIDIA runtime, so it is a GPU runtime class too
#: (an alias ``my-gpu`` with ``handler: nvidia``: ``webhook.pods.runtime_classes``). Not a policy field: what a
#: handler does is the node's, not a team's, to say.
GPU_RUNTIME_HANDLERS: tuple[str, ...] = ("nvidia", "nvidia-cdi", "nvidia-legacy", "nvidia-experimental")
#: What counts as a GPU when a policy names no devices or ``gpuResources``.
DEFAULT_GPU_RESOURCES: tuple[str, ...] = tuple(r for res, _ in BUILTIN_DEVICE_RESOURCES.values() for r in res)
#: Pod annotations of fractional-GPU schedulers that hold a GPU without a GPU resource: KAI Scheduler's
#: ``gpu-fraction`` and ``gpu-memory`` (NVIDIA/KAI-Scheduler docs/gpu-sharing).
DEFAULT_HOLDER_ANNOTATIONS: tuple[str, ...] = ("gpu-fraction", "gpu-memory")
#: The schedulers that implement those annotations: a pod holds a GPU by annotation only when one of them places
#: it. KAI's ``kai-scheduler`` (NVIDIA/KAI-Scheduler pkg/common/constants/constants.go ``DefaultSchedulerName``);
#: its webhooks leave pods of any other scheduler alone (pkg/admission/webhook/v1alpha2/podhooks/pod_mutator.go),
#: and the default scheduler ignores the annotations, so such a pod gets no GPU at all.
DEFAULT_HOLDER_SCHEDULERS: tuple[str, ...] = ("kai-scheduler",)
#: HAMi's annotations that pin a pod's GPUs by UUID, per vendor (Project-HAMi/HAMi pkg/device/nvidia/device.go
#: ``GPUUseUUID``, a comma-separated list; pkg/device/devices.go ``CheckUUID`` lets the scheduler use no other
#: device, and an empty value constrains nothing). The pinned GPUs choose the hardware: gpugate adds no model
#: class constraint, which could only contradict them. Their opposite, ``nvidia.com/nouse-gpuuuid``, only
#: excludes cards and chooses no product, so it leaves the choice to the policy.
HAMI_UUID_ANNOTATIONS: dict[str, str] = {"nvidia": "nvidia.com/use-gpuuuid"}
#: What the apiserver fills into a pod spec that names no scheduler (k/k pkg/apis/core/v1/defaults.go).
DEFAULT_SCHEDULER = "default-scheduler"
#: The annotation in which KAI's webhook names the ConfigMap its binder writes NVIDIA_VISIBLE_DEVICES into
#: (KAI-Scheduler pkg/binder/common/gpusharingconfigmap): ``<name>-<container index>``, ``-i<index>`` for
#: init containers.
KAI_SHARED_CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"
#: The variables besides ``NVIDIA_VISIBLE_DEVICES`` that the NVIDIA Container Toolkit reads to hand a container
#: devices of its node, and the value that makes it do so (None: any value but an empty one, ``void`` or
#: ``none``). NVIDIA/nvidia-container-toolkit internal/config/image/envvars.go names the IMEX channels and the
#: MIG config/monitor devices (``cuda_image.go`` ``ImexChannelRequests``; the legacy hook passes the MIG ones to
#: nvidia-container-cli as ``--mig-config`` / ``--mig-monitor``: cmd/nvidia-container-runtime-hook/
#: container_config.go and main.go); internal/modifier/gated.go and cdi.go ``gatedDevices`` add every GPUDirect
#: Storage (nvidia-fs), InfiniBand (MOFED), gdrdrv and NVSwitch device node of the node for ``=enabled``.
NVIDIA_DEVICE_VARIABLES: dict[str, str | None] = {
    "NVIDIA_IMEX_CHANNELS": None,
    "NVIDIA_MIG_CONFIG_DEVICES": None,
    "NVIDIA_MIG_MONITOR_DEVICES": None,
    "NVIDIA_GDS": "enabled",
    "NVIDIA_MOFED": "enabled",
    "NVIDIA_GDRCOPY": "enabled",
    "NVIDIA_NVSWITCH": "enabled",
}
