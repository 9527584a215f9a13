"""The reference fleet (policies/README.md) as Kubernetes objects: kwok Nodes for every pool, labelled the way
each vendor's node software labels them, with their taints and the capacity/allocatable of each resource; and
one DRA pool, whose devices are ResourceSlices published the way NVIDIA's DRA driver publishes them, with the
driver's DeviceClasses.

Pure data: nothing here talks to a cluster. `fleet_objects(counts)` gives every object to create (Nodes,
DeviceClasses, ResourceSlices, the GPU Operator's RuntimeClasses); `pool_of(node_name)` names the pool of a node.
`make demo`, the scheduled tests (tests/scheduling) and the scale bench (bench/fleet_scale.py) all build their
cluster from this module; `tests.harness.scheduling.FleetCluster` creates the objects and waits for kwok to
report the Nodes Ready.

Where the facts come from (upstream source, not guessed):

- NVIDIA GPU Feature Discovery, NVIDIA/k8s-device-plugin `internal/lm/resource.go` (labels
  `<resource>.product|count|replicas|sharing-strategy|memory|family|compute.major|compute.minor`; `-SHARED` is
  appended to the product only for time-sliced resources that are not renamed; MIG profiles are `-MIG-<profile>`),
  `internal/lm/mig-strategy.go` (mixed: the parent product stays on `nvidia.com/gpu.product`, every profile gets
  `nvidia.com/mig-<profile>.*`; single: slices are `nvidia.com/gpu` and the product names the profile; MIG-enabled
  GPUs are labelled without sharing, so `replicas` is 0), `internal/lm/nvml.go` (`nvidia.com/cuda.*`,
  `nvidia.com/mig.capable`), `internal/lm/machine-type.go` (`nvidia.com/gpu.machine`),
  `internal/resource/nvml-mig-device.go` (per-profile `memory`, `multiprocessors`, `slices.gi`, `slices.ci`).
- AMD ROCm/k8s-device-plugin node labeller and Intel's NFD rules: tests/fixtures/vendor-labels.md (keys, values
  and source paths). Neither vendor taints nodes; the `amd.com/gpu` and `gpu.intel.com/i915` NoSchedule taints are
  this fleet's admin's choice, as for NVIDIA's `nvidia.com/gpu`.
- GKE: GPU nodes carry `cloud.google.com/gke-accelerator` and GKE's own taint `nvidia.com/gpu=present:NoSchedule`
  (cloud.google.com/kubernetes-engine/docs/how-to/gpus); with GKE-managed drivers no GFD runs, so the pool has
  no `nvidia.com/gpu.*` labels.
- NVIDIA DRA driver, kubernetes-sigs/dra-driver-nvidia-gpu: one pool per node named after the node, driver
  `gpu.nvidia.com`, devices `gpu-<minor>` with attributes `type`, `uuid`, `productName`, `brand`,
  `architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`,
  `resource.kubernetes.io/pciBusID`, `resource.kubernetes.io/pcieRoot` and capacity `memory`
  (`cmd/gpu-kubelet-plugin/deviceinfo.go`, `site/content/docs/reference/resourceslice-attributes.md`); DeviceClasses
  `gpu.nvidia.com` (selector on `type == 'gpu'`, `extendedResourceName: nvidia.com/gpu` on resource.k8s.io/v1) and
  `mig.nvidia.com` (`deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-{gpu,mig}.yaml`). A DRA pool's
  nodes advertise no `nvidia.com/gpu` themselves: with `DRAExtendedResource` (beta, on by default in Kubernetes
  1.36, pkg/features/kube_features.go) the scheduler serves such a request from the DeviceClass that declares it.
- The non-GPU DRA driver kubernetes-sigs/dra-driver-cpu (DeviceClass `dra.cpu`), so that a claim is not
  automatically a GPU.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Every Node carries these so that kwok (started with the same selector) plays its kubelet and nobody else's.
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# Which pool a node belongs to, for `kubectl get nodes -L fleet.gpugate.io/pool`. No policy or example selects on
# it; pool_of() reads the node name instead.
POOL_LABEL = "fleet.gpugate.io/pool"

DRA_API = "resource.k8s.io/v1"  # GA since Kubernetes 1.34; the 1.36 apiserver serves it by default
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
CPU_DRA_DRIVER = "dra.cpu"

NVIDIA_TAINT = {"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"}
GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "value": "", "effect": "NoSchedule"}
INTEL_TAINT = {"key": "gpu.intel.com/i915", "value": "", "effect": "NoSchedule"}

# One NVIDIA driver for the whole fleet: GFD's nvidia.com/cuda.* labels (internal/lm/nvml.go) and the DRA
# driver's driverVersion/cudaDriverVersion attributes agree.
DRIVER_VERSION = "580.126.20"  # as in the DRA driver's attribute reference
CUDA_VERSION = (13, 0)


@dataclass(frozen=True)
class Pool:
    """One node pool: every node of it is alike."""

    name: str
    model_class: str | None  # the GPU model class of policies/00-default.yaml its nodes serve; None: no class
    stack: str  # "device-plugin" (+ GFD or GKE labels), "dra" (NVIDIA's DRA driver), "none" (CPU nodes)
    cpu: str
    memory: str
    labels: Mapping[str, str]
    resources: Mapping[str, str] = field(default_factory=dict)  # extended resources, capacity == allocatable
    taints: tuple[Mapping[str, str], ...] = ()
    dra_gpus: int = 0  # devices in the node's ResourceSlice (driver gpu.nvidia.com)
    dra_product: str = ""
    dra_memory: str = ""
    dra_architecture: str = ""
    dra_compute_capability: str = ""
    note: str = ""
    #: The kubelet's ephemeral-storage capacity: the root volume (500Gi) unless the instance's local NVMe holds
    #: the kubelet's directory, as EKS nodes with instance store set up as RAID0 do (nodeadm ``localStorage``).
    ephemeral_storage: str = "500Gi"


def _gfd(
    product: str,
    *,
    count: int,
    replicas: int,
    strategy: str,
    memory_mib: int,
    family: str,
    compute: tuple[int, int],
    machine: str,
    mig_capable: bool,
    resource: str = "nvidia.com/gpu",
) -> dict[str, str]:
    """The labels GPU Feature Discovery puts on a node with `count` GPUs of one product."""
    major, minor = DRIVER_VERSION.split(".")[:2]
    rev = DRIVER_VERSION.split(".")[2]
    return {
        f"{resource}.product": product,
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": strategy,
        f"{resource}.memory": str(memory_mib),
        f"{resource}.family": family,
        f"{resource}.compute.major": str(compute[0]),
        f"{resource}.compute.minor": str(compute[1]),
        "nvidia.com/gpu.machine": machine,
        "nvidia.com/mig.capable": "true" if mig_capable else "false",
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": DRIVER_VERSION,
        "nvidia.com/cuda.runtime-version.major": str(CUDA_VERSION[0]),
        "nvidia.com/cuda.runtime-version.minor": str(CUDA_VERSION[1]),
        "nvidia.com/cuda.runtime-version.full": f"{CUDA_VERSION[0]}.{CUDA_VERSION[1]}",
    }


def _mig_profile(parent: str, profile: str, *, count: int, memory_mib: int, sms: int, gi: int) -> dict[str, str]:
    """GFD's labels for one MIG profile under the mixed strategy (resource nvidia.com/mig-<profile>)."""
    resource = f"nvidia.com/mig-{profile}"
    return {
        f"{resource}.product": f"{parent}-MIG-{profile}",
        f"{resource}.count": str(count),
        f"{resource}.replicas": "1",
        f"{resource}.sharing-strategy": "none",
        f"{resource}.memory": str(memory_mib),
        f"{resource}.multiprocessors": str(sms),
        f"{resource}.slices.gi": str(gi),
        f"{resource}.slices.ci": str(gi),
    }


def _eks(instance_type: str) -> dict[str, str]:
    return {"node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/region": "us-east-1"}


def _amd_labeller(
    product: str, *, count: int, device_id: str, family: str, cu: int, simd: int, vram: str
) -> dict[str, str]:
    """ROCm k8s-node-labeller on a homogeneous node: `amd.com/gpu.<kind>` and `beta.amd.com/gpu.<kind>` plus the
    beta counter `beta.amd.com/gpu.<kind>.<value>` (tests/fixtures/vendor-labels.md)."""
    values = {
        "product-name": product,
        "device-id": device_id,
        "family": family,
        "cu-count": str(cu),
        "simd-count": str(simd),
        "vram": vram,
    }
    labels = {"feature.node.kubernetes.io/amd-gpu": "true"}
    for kind, value in values.items():
        labels[f"amd.com/gpu.{kind}"] = value
        labels[f"beta.amd.com/gpu.{kind}"] = value
        labels[f"beta.amd.com/gpu.{kind}.{value}"] = str(count)
    return labels


def _intel_nfd(
    product: str, family: str, pci: str, *, count: int, millicores: int, memory_max: int, tiles: int
) -> dict[str, str]:
    """Intel's NFD platform-labeling rules and the GPU plugin's labeler (tests/fixtures/vendor-labels.md)."""
    return {
        "intel.feature.node.kubernetes.io/gpu": "true",
        f"gpu.intel.com/device-id.{pci}.present": "true",
        f"gpu.intel.com/device-id.{pci}.count": str(count),
        "gpu.intel.com/product": product,
        "gpu.intel.com/family": family,
        "gpu.intel.com/device.count": str(count),
        "gpu.intel.com/millicores": str(millicores),
        "gpu.intel.com/memory.max": str(memory_max),
        "gpu.intel.com/tiles": str(tiles),
    }


GIB = 1024**3
#: p5.48xlarge and p5en.48xlarge carry 8 x 3.84 TB of local NVMe (AWS EC2 Instance Types guide, accelerated
#: computing, instance store specifications); set up as RAID0 for the kubelet, that is its ephemeral storage.
P5_INSTANCE_STORE = "30720G"

# The pools, in the order of policies/README.md. Node shapes are the cloud instances the shipped policies name.
POOLS: tuple[Pool, ...] = (
    Pool(
        "cpu",
        None,
        "none",
        "16",
        "64Gi",
        _eks("m6i.4xlarge"),
        note="no GPUs, no taint: where CPU pods go",
    ),
    Pool(
        "l4",
        "l4",
        "device-plugin",
        "48",
        "192Gi",
        {
            **_eks("g6.12xlarge"),
            **_gfd(
                "NVIDIA-L4",
                count=4,
                replicas=1,
                strategy="none",
                memory_mib=23034,
                family="ada-lovelace",
                compute=(8, 9),
                machine="g6.12xlarge",
                mig_capable=False,
            ),
        },
        {"nvidia.com/gpu": "4"},
        (NVIDIA_TAINT,),
        note="4 x L4, exclusive",
    ),
    Pool(
        "t4",
        "t4",
        "device-plugin",
        "48",
        "192Gi",
        {
            **_eks("g4dn.12xlarge"),
            **_gfd(
                "Tesla-T4-SHARED",
                count=4,
                replicas=4,
                strategy="time-slicing",
                memory_mib=15360,
                family="turing",
                compute=(7, 5),
                machine="g4dn.12xlarge",
                mig_capable=False,
            ),
        },
        {"nvidia.com/gpu": "16"},
        (NVIDIA_TAINT,),
        note="4 x T4 time-sliced x 4, not renamed",
    ),
    Pool(
        "a10g",
        "a10g",
        "device-plugin",
        "48",
        "192Gi",
        {
            **_eks("g5.12xlarge"),
            **_gfd(
                "NVIDIA-A10G",
                count=4,
                replicas=4,
                strategy="time-slicing",
                memory_mib=23028,
                family="ampere",
                compute=(8, 6),
                machine="g5.12xlarge",
                mig_capable=False,
            ),
        },
        {"nvidia.com/gpu.shared": "16"},
        (NVIDIA_TAINT,),
        note="4 x A10G time-sliced x 4, renamed nvidia.com/gpu.shared",
    ),
    Pool(
        "a100",
        "a100",
        "device-plugin",
        "96",
        "1152Gi",
        {
            **_eks("p4de.24xlarge"),
            **_gfd(
                "NVIDIA-A100-SXM4-80GB",
                count=8,
                replicas=0,
                strategy="none",
                memory_mib=81920,
                family="ampere",
                compute=(8, 0),
                machine="p4de.24xlarge",
                mig_capable=True,
            ),
            "nvidia.com/mig.strategy": "mixed",
            **_mig_profile("NVIDIA-A100-SXM4-80GB", "1g.10gb", count=14, memory_mib=9728, sms=14, gi=1),
            **_mig_profile("NVIDIA-A100-SXM4-80GB", "3g.40gb", count=4, memory_mib=40192, sms=42, gi=3),
            **_mig_profile("NVIDIA-A100-SXM4-80GB", "7g.80gb", count=4, memory_mib=80896, sms=98, gi=7),
        },
        {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4", "nvidia.com/mig-7g.80gb": "4"},
        (NVIDIA_TAINT,),
        note="8 x A100 80GB in MIG mixed: 14 x 1g.10gb, 4 x 3g.40gb, 4 x 7g.80gb",
    ),
    Pool(
        "h100",
        "h100",
        "device-plugin",
        "192",
        "2048Gi",
        {
            **_eks("p5.48xlarge"),
            **_gfd(
                "NVIDIA-H100-80GB-HBM3",
                count=8,
                replicas=1,
                strategy="none",
                memory_mib=81559,
                family="hopper",
                compute=(9, 0),
                machine="p5.48xlarge",
                mig_capable=True,
            ),
        },
        {"nvidia.com/gpu": "8"},
        (NVIDIA_TAINT,),
        note="8 x H100, exclusive (EKS p5.48xlarge)",
        ephemeral_storage=P5_INSTANCE_STORE,
    ),
    Pool(
        "h100-gke",
        "h100",
        "device-plugin",
        "208",
        "1872Gi",
        {
            "node.kubernetes.io/instance-type": "a3-highgpu-8g",
            "cloud.google.com/machine-family": "a3",
            "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
            "cloud.google.com/gke-gpu": "true",
            "cloud.google.com/gke-nodepool": "h100-pool",
        },
        {"nvidia.com/gpu": "8"},
        (GKE_GPU_TAINT,),
        note="8 x H100 on GKE a3-highgpu-8g: GKE's labels and taint, no GFD",
    ),
    Pool(
        "h100-mig",
        "h100-mig",
        "device-plugin",
        "192",
        "2048Gi",
        {
            **_eks("p5.48xlarge"),
            **_gfd(
                "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                count=56,
                replicas=1,
                strategy="none",
                memory_mib=9856,
                family="hopper",
                compute=(9, 0),
                machine="p5.48xlarge",
                mig_capable=True,
            ),
            "nvidia.com/mig.strategy": "single",
        },
        {"nvidia.com/gpu": "56"},
        (NVIDIA_TAINT,),
        note="8 x H100 in MIG single 1g.10gb: 56 nvidia.com/gpu (also p5.48xlarge)",
        ephemeral_storage=P5_INSTANCE_STORE,
    ),
    Pool(
        "mi300x",
        "mi300x",
        "device-plugin",
        "96",
        "1850Gi",
        _amd_labeller(
            "AMD_Instinct_MI300X_OAM", count=8, device_id="74a1", family="AI", cu=304, simd=1216, vram="192G"
        ),
        {"amd.com/gpu": "8"},
        (AMD_TAINT,),
        note="8 x MI300X (ROCm device plugin + node labeller)",
    ),
    Pool(
        "intel-max",
        "intel-max",
        "device-plugin",
        "112",
        "1024Gi",
        _intel_nfd("Max_1550", "Max_Series", "0380-0bd5", count=4, millicores=4000, memory_max=4 * 128 * GIB, tiles=8),
        # The auxiliary resources are what the NFD rule of Intel's plugin up to v0.32 made of the labeler's labels.
        {
            "gpu.intel.com/i915": "4",
            "gpu.intel.com/millicores": "4000",
            "gpu.intel.com/memory.max": str(4 * 128 * GIB),
            "gpu.intel.com/tiles": "8",
        },
        (INTEL_TAINT,),
        note="4 x Max 1550 (Intel GPU plugin + NFD rules)",
    ),
    Pool(
        "h200",
        None,
        "dra",
        "192",
        "2048Gi",
        _eks("p5en.48xlarge"),
        {},
        (NVIDIA_TAINT,),
        dra_gpus=8,
        dra_product="NVIDIA H200",
        dra_memory="143771Mi",
        dra_architecture="Hopper",
        dra_compute_capability="9.0.0",
        note="8 x H200 through NVIDIA's DRA driver: a ResourceSlice, no device plugin, no GFD",
        ephemeral_storage=P5_INSTANCE_STORE,
    ),
)
POOLS_BY_NAME = {p.name: p for p in POOLS}

DEFAULT_COUNTS: Mapping[str, int] = {p.name: 2 for p in POOLS}


def pool_of(node_name: str) -> str:
    """The pool of a node of this fleet (nodes are named `<pool>-<n>`)."""
    pool, _, index = node_name.rpartition("-")
    if pool not in POOLS_BY_NAME or not index.isdigit():
        raise ValueError(f"{node_name!r} is not a node of the reference fleet")
    return pool


def node_names(counts: Mapping[str, int] | None = None) -> list[str]:
    counts = DEFAULT_COUNTS if counts is None else counts
    return [f"{pool.name}-{i}" for pool in POOLS for i in range(counts.get(pool.name, 0))]


def node(pool: Pool, index: int) -> dict[str, Any]:
    """The Node object of node `index` of `pool`, status included (kwok keeps what the object says)."""
    name = f"{pool.name}-{index}"
    resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110", "ephemeral-storage": pool.ephemeral_storage}
    resources.update(pool.resources)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool.name,
        **pool.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
        "spec": {"taints": [dict(t) for t in pool.taints]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def resource_slice(pool: Pool, index: int) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA kubelet plugin publishes for node `index` of a DRA pool: one pool named
    after the node, one device `gpu-<minor>` per GPU."""
    name = f"{pool.name}-{index}"
    devices = []
    for minor in range(pool.dra_gpus):
        bus = f"0000:{0x18 + 0x10 * minor:02x}:00.0"
        devices.append(
            {
                "name": f"gpu-{minor}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": _uuid(f"{name}/{minor}")},
                    "productName": {"string": pool.dra_product},
                    "brand": {"string": "Nvidia"},
                    "architecture": {"string": pool.dra_architecture},
                    "cudaComputeCapability": {"version": pool.dra_compute_capability},
                    "driverVersion": {"version": DRIVER_VERSION},
                    "cudaDriverVersion": {"version": f"{CUDA_VERSION[0]}.{CUDA_VERSION[1]}.0"},
                    "resource.kubernetes.io/pciBusID": {"string": bus},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x10 + 0x10 * minor:02x}"},
                },
                "capacity": {"memory": {"value": pool.dra_memory}},
            }
        )
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{NVIDIA_DRA_DRIVER}"},
        "spec": {
            "driver": NVIDIA_DRA_DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_classes() -> list[dict[str, Any]]:
    """NVIDIA's DRA DeviceClasses (as its Helm chart renders them on resource.k8s.io/v1) and the CPU driver's."""

    def device_class(name: str, cel: str, extended: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": cel}}]}
        if extended:
            spec["extendedResourceName"] = extended
        return {"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}

    return [
        device_class(
            "gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            "nvidia.com/gpu",
        ),
        device_class(
            "mig.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
        ),
        device_class(CPU_DRA_DRIVER, f"device.driver == '{CPU_DRA_DRIVER}'"),
    ]


#: What NVIDIA's GPU Operator creates with CDI on, its default: nvidia, nvidia-cdi and nvidia-legacy
#: (NVIDIA/gpu-operator assets/pre-requisites/0210_runtime_class_legacy.yaml, 0220_runtime_class_cdi.yaml).
RUNTIME_CLASSES = [
    {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
    for name in ("nvidia", "nvidia-cdi", "nvidia-legacy")
]


#: Karpenter's NodePool CRD (kubernetes-sigs/karpenter pkg/apis/crds/karpenter.sh_nodepools.yaml, provenance in
#: tests/fixtures/karpenter/README.md), gzipped byte for byte as published.
KARPENTER_CRD = Path(__file__).resolve().parents[1] / "fixtures" / "karpenter" / "karpenter.sh_nodepools.yaml.gz"

#: The pools that scale from zero and have no node now (policies/README.md, "Pools that scale"): the `l40s`
#: Karpenter NodePool of g6e instances (1, 4 or 8 L40S per node: g6e.xlarge-16xlarge, 12xlarge/24xlarge,
#: 48xlarge), read live by gpugate. Its requirements use the AWS provider's instance labels
#: (aws/karpenter-provider-aws pkg/apis/v1/labels.go); the GPU taint is the fleet admin's, as on every
#: NVIDIA pool. The `a100-gke` GKE pool is declared in policies/05-node-pools.yaml instead: its template is
#: in GKE's API, which no cluster object shows.
NODEPOOLS: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "l40s"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g6e"]},
                        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["l40s"]},
                        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1", "4", "8"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                }
            },
            "limits": {"nvidia.com/gpu": "32"},
        },
    },
)


def karpenter_crd() -> bytes:
    return gzip.decompress(KARPENTER_CRD.read_bytes())


def fleet_objects(counts: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Every object of the fleet: the RuntimeClasses, the DeviceClasses, then per pool its Nodes and (DRA pools)
    their ResourceSlices. `counts` gives the nodes per pool (default: 2 each; a pool left out has none)."""
    counts = DEFAULT_COUNTS if counts is None else counts
    unknown = set(counts) - set(POOLS_BY_NAME)
    if unknown:
        raise ValueError(f"no such pools: {', '.join(sorted(unknown))}; pools: {', '.join(POOLS_BY_NAME)}")
    objects: list[dict[str, Any]] = [*RUNTIME_CLASSES, *device_classes()]
    for pool in POOLS:
        for i in range(counts.get(pool.name, 0)):
            objects.append(node(pool, i))
            if pool.dra_gpus:
                objects.append(resource_slice(pool, i))
    return objects


def scaled_counts(total_nodes: int, pools: Iterable[str] | None = None) -> dict[str, int]:
    """`total_nodes` spread evenly over `pools` (default: every pool), the remainder to the first ones."""
    names = list(pools) if pools is not None else [p.name for p in POOLS]
    base, extra = divmod(total_nodes, len(names))
    return {name: base + (1 if i < extra else 0) for i, name in enumerate(names)}


def describe(counts: Mapping[str, int] | None = None) -> str:
    """A table of the pools for people (make demo prints it)."""
    counts = DEFAULT_COUNTS if counts is None else counts
    rows = []
    for pool in POOLS:
        n = counts.get(pool.name, 0)
        if not n:
            continue
        offers = ", ".join(f"{k}={v}" for k, v in pool.resources.items()) or (
            f"{pool.dra_gpus} x DRA {NVIDIA_DRA_DRIVER}" if pool.dra_gpus else "-"
        )
        rows.append(f"  {pool.name:<10} {n:>3} node(s)  {offers:<55} {pool.note}")
    return "\n".join(rows)
