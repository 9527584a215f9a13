"""One chunk of the window decoded once: its series regrouped by step, and per step the devices and the pods."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .model import ATTRIBUTION_KEYS, DeviceKey, Inputs, Pod, dcgm_label, ksm_label
from .series import Labels, Series


@dataclass(frozen=True)
class DeviceSeries:
    """What one dcgm-exporter series says besides its values; worked out once per chunk, not at every step."""

    key: DeviceKey
    profile: str
    model: str
    host: str
    pod: Pod | None
    vgpu: str  # dcgm-exporter --kubernetes-virtual-gpus: the replica of a time-sliced GPU, else ""
    attribution: dict[str, str] | None  # gpugate's labels copied by dcgm-exporter, if any
    dra: bool = False  # dcgm-exporter --kubernetes-enable-dra named a ResourceClaim: a DRA-allocated device


def _device_series(labels: Labels) -> DeviceSeries:
    # dcgm-exporter names the GPU's UUID label "UUID" ("uuid" with --use-old-namespace); a MIG
    # instance is the pair (parent UUID, GPU_I_ID) (internal/pkg/rendermetrics/render_metrics.go).
    key = (labels.get("UUID") or labels.get("uuid") or "", labels.get("GPU_I_ID", ""))
    pod = (labels.get("namespace", ""), labels.get("pod", "")) if labels.get("pod") else None
    return DeviceSeries(
        key=key,
        profile=labels.get("GPU_I_PROFILE", ""),
        model=labels.get("modelName", ""),
        host=host_of(labels),
        pod=pod,
        vgpu=labels.get("vgpu", ""),
        attribution=_attribution(labels, dcgm_label),
        dra=bool(labels.get("dra_claim_name")),
    )


def host_of(labels: Labels) -> str:
    """The node of a dcgm-exporter series: ``Hostname`` in its releases up to 4.5.3-4.8.2, ``hostname`` after
    NVIDIA/dcgm-exporter#655 (commit d5e5f510a1b6 on its main branch, in no release yet;
    internal/pkg/rendermetrics/render_metrics.go)."""
    return labels.get("Hostname") or labels.get("hostname") or ""


def _attribution(labels: Labels, name: object) -> dict[str, str] | None:
    """gpugate's labels on a series (kube_pod_labels' or dcgm-exporter's spelling), or None without a team."""
    spell = ksm_label if name is ksm_label else dcgm_label
    if not labels.get(spell("team")):
        return None
    return {key: labels.get(spell(key), "") for key in ATTRIBUTION_KEYS}


def pod_of(labels: Labels) -> Pod:
    return (labels.get("namespace", ""), labels.get("pod", ""))


def _index(series: Sequence[Series], steps: Mapping[float, int]) -> list[list[tuple[int, float]]]:
    """Samples regrouped by step index (Prometheus returns them per series), as (series number, value)."""
    out: list[list[tuple[int, float]]] = [[] for _ in steps]
    for number, one in enumerate(series):
        for t, value in one.samples.items():
            index = steps.get(t)
            if index is not None and not math.isnan(value):
                out[index].append((number, value))
    return out


@dataclass
class StepDevices:
    """What telemetry says about each device in one step."""

    prof: dict[DeviceKey, float] = field(default_factory=dict)  # the device's value (max over its copies)
    dev: dict[DeviceKey, float] = field(default_factory=dict)
    # Outside virtual-GPU mode one series is one pod's: in a hand-over step each pod keeps its own value.
    prof_of_pod: dict[tuple[DeviceKey, Pod], float] = field(default_factory=dict)
    dev_of_pod: dict[tuple[DeviceKey, Pod], float] = field(default_factory=dict)
    meta: dict[DeviceKey, DeviceSeries] = field(default_factory=dict)
    # (pod, replica) per device: a pod holding two replicas of one time-sliced GPU holds two of its shares.
    holders: dict[DeviceKey, set[tuple[Pod, str]]] = field(default_factory=lambda: defaultdict(set))
    dcgm_attribution: dict[Pod, dict[str, str]] = field(default_factory=dict)
    # Devices with a DCGM_FI_DEV_GPU_UTIL series of their own (no pod, or the exporter's) in the step. In
    # virtual-GPU mode dcgm-exporter keeps it beside the pods' only where it writes per-pod figures, since
    # NVIDIA/dcgm-exporter#594 (internal/pkg/transformation/kubernetes.go Process: "original device-level
    # metric"); before, or where NVML gave no per-process figures, the pods' series are copies of the device's.
    util_device_level: set[DeviceKey] = field(default_factory=set)


@dataclass(frozen=True)
class Claim:
    """A pod's share of one GPU by what it asked for, in one step: a KAI fraction or memory request, a HAMi
    memory/cores allocation, or a DRA claim's device that no telemetry maps to the pod."""

    pod: Pod
    uuid: str
    mode: str  # "kai", "hami" or "dra"
    share: float | None  # of the device; None when memory_mib says it
    memory_mib: float | None = None  # KAI gpu-memory, MiB: its share is this over the device's framebuffer
    node: str = ""
    instance: str = ""  # GPU_I_ID of a MIG instance (DRA)
    profile: str = ""
    model: str = ""
    shared: bool = False  # a DRA device several claims hold at once (KEP-5075): its peak is a fraction


@dataclass(frozen=True)
class DraDevice:
    """A DRA device as gpugate serve's series name it: its GPU (a MIG device's parent), MIG profile and model
    from the ResourceSlice that publishes it, and its node."""

    uuid: str
    parent: str  # a MIG device's parent GPU UUID, else ""
    profile: str
    model: str
    node: str
    name: str  # driver/pool/device: what names it when the slice states no uuid

    @property
    def gpu(self) -> str:
        """The physical GPU the device is (or is part of)."""
        return self.parent or self.uuid or self.name


def _dra_device(labels: Labels) -> DraDevice:
    name = "/".join(labels.get(k, "") for k in ("driver", "pool", "device"))
    return DraDevice(
        uuid=labels.get("uuid", ""),
        parent=labels.get("parent_uuid", ""),
        profile=labels.get("profile", ""),
        model=labels.get("model", ""),
        node=labels.get("node", ""),
        name=name,
    )


def _kai_groups(labels: Labels) -> tuple[str, ...]:
    """The GPU groups of a multi-GPU KAI fractional pod: the values of its runai-gpu-group/<group> labels, which
    kube-state-metrics exports as label_runai_gpu_group_<group> (the value is the group, as KAI sets it)."""
    return tuple(sorted({v for k, v in labels.items() if k.startswith("label_runai_gpu_group_") and v}))


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


@dataclass
class Chunk:
    """One chunk's series, decoded once and indexed by step."""

    steps: list[float]
    requests: list[list[tuple[int, float]]]
    labels: list[list[tuple[int, float]]]
    engine: list[list[tuple[int, float]]]
    util: list[list[tuple[int, float]]]
    non_gpu: list[list[tuple[int, float]]]
    engine_series: list[DeviceSeries]
    util_series: list[DeviceSeries]
    request_series: list[tuple[Pod, str, str]]  # pod, resource, node
    label_series: list[tuple[Pod, dict[str, str] | None]]
    non_gpu_series: list[Pod]
    hami: list[list[tuple[int, float]]] = field(default_factory=list)
    hami_series: list[tuple[Pod, str, str, str]] = field(default_factory=list)  # pod, device UUID, node, dimension
    kai: list[list[tuple[int, float]]] = field(default_factory=list)
    kai_series: list[tuple[Pod, str, float | None, float | None]] = field(default_factory=list)  # group, frac, MiB
    kai_multi: list[list[tuple[int, float]]] = field(default_factory=list)
    kai_multi_series: list[tuple[Pod, tuple[str, ...], float | None, float | None]] = field(default_factory=list)
    reservations: list[list[tuple[int, float]]] = field(default_factory=list)
    reservation_series: list[tuple[Pod, str, str]] = field(default_factory=list)  # pod, GPU group, GPU UUID
    dra: list[list[tuple[int, float]]] = field(default_factory=list)
    dra_series: list[tuple[Pod, str]] = field(default_factory=list)  # pod, ResourceClaim name
    dra_devices: Mapping[tuple[str, str], tuple[tuple[str, str, str, str, str], ...]] = field(default_factory=dict)
    capacity: list[list[tuple[int, float]]] = field(default_factory=list)
    capacity_series: list[tuple[str, str]] = field(default_factory=list)  # node, resource
    # gpugate serve's DRA series: a claim's device per pod it is reserved for, and the GPUs ResourceSlices publish
    allocated: list[list[tuple[int, float]]] = field(default_factory=list)
    allocated_series: list[tuple[Pod, str, DraDevice, str]] = field(default_factory=list)  # pod, claim, device, share
    published: list[list[tuple[int, float]]] = field(default_factory=list)
    published_series: list[DraDevice] = field(default_factory=list)

    @classmethod
    def of(cls, inputs: Inputs) -> Chunk:
        # long: one field per series kind, each decoded in place
        steps = list(inputs.steps)
        where = {t: i for i, t in enumerate(steps)}
        return cls(
            steps=steps,
            requests=_index(inputs.requests, where),
            labels=_index(inputs.pod_labels, where),
            engine=_index(inputs.engine_active, where),
            util=_index(inputs.gpu_util, where),
            non_gpu=_index(inputs.non_gpu_pods, where),
            engine_series=[_device_series(s.labels) for s in inputs.engine_active],
            util_series=[_device_series(s.labels) for s in inputs.gpu_util],
            request_series=[
                (pod_of(s.labels), s.labels.get("resource", ""), s.labels.get("node", "")) for s in inputs.requests
            ],
            label_series=[(pod_of(s.labels), _attribution(s.labels, ksm_label)) for s in inputs.pod_labels],
            non_gpu_series=[pod_of(s.labels) for s in inputs.non_gpu_pods],
            hami=_index(inputs.hami_shares, where),
            hami_series=[
                (
                    pod_of(s.labels),
                    s.labels.get("device_uuid", ""),
                    s.labels.get("node", ""),
                    s.labels.get("dimension", ""),
                )
                for s in inputs.hami_shares
            ],
            kai=_index(inputs.kai_pods, where),
            kai_series=[
                (
                    pod_of(s.labels),
                    s.labels.get("label_runai_gpu_group", ""),
                    _positive(s.labels.get("annotation_gpu_fraction", "")),
                    _positive(s.labels.get("annotation_gpu_memory", "")),
                )
                for s in inputs.kai_pods
            ],
            kai_multi=_index(inputs.kai_multi, where),
            kai_multi_series=[
                (
                    pod_of(s.labels),
                    _kai_groups(s.labels),
                    _positive(s.labels.get("annotation_gpu_fraction", "")),
                    _positive(s.labels.get("annotation_gpu_memory", "")),
                )
                for s in inputs.kai_multi
            ],
            reservations=_index(inputs.kai_reservations, where),
            reservation_series=[
                (
                    pod_of(s.labels),
                    s.labels.get("label_runai_gpu_group", ""),
                    s.labels.get("annotation_run_ai_reserve_for_gpu_index", ""),
                )
                for s in inputs.kai_reservations
            ],
            dra=_index(inputs.dra_claims, where),
            dra_series=[(pod_of(s.labels), s.labels.get("resourceclaim_name", "")) for s in inputs.dra_claims],
            dra_devices=inputs.dra_devices,
            capacity=_index(inputs.node_capacity, where),
            capacity_series=[(s.labels.get("node", ""), s.labels.get("resource", "")) for s in inputs.node_capacity],
            allocated=_index(inputs.dra_allocated, where),
            allocated_series=[
                (pod_of(s.labels), s.labels.get("claim_name", ""), _dra_device(s.labels), s.labels.get("share_id", ""))
                for s in inputs.dra_allocated
            ],
            published=_index(inputs.dra_capacity, where),
            published_series=[_dra_device(s.labels) for s in inputs.dra_capacity],
        )

    def devices(self, i: int, *, placeholders: set[Pod] | None = None) -> StepDevices:
        """Per device: the profiling value, the GPU_UTIL value, the pods (and replicas) holding it. Virtual-GPU
        mode copies each field to every pod sharing the GPU; the copies carry the same value (GPU_UTIL per
        process is lower and loses), so the device's value is their maximum."""
        found = StepDevices()
        exporters = {self.non_gpu_series[n] for n, _ in self.non_gpu[i]} | (placeholders or set())
        for samples, info, values, of_pod, scale, own in (
            (self.engine[i], self.engine_series, found.prof, found.prof_of_pod, 100.0, None),
            (self.util[i], self.util_series, found.dev, found.dev_of_pod, 1.0, found.util_device_level),
        ):
            for number, raw in samples:
                series = info[number]
                key, value = series.key, raw * scale
                if value > values.get(key, -1.0):
                    values[key] = value
                found.meta.setdefault(key, series)
                # A pod kube-state-metrics lists that requests no GPU is not the GPU's user: it is the
                # exporter's own pod, its labels added by the scrape (honorLabels on a series without them).
                if series.pod and series.pod not in exporters:
                    of_pod[key, series.pod] = value
                    found.holders[key].add((series.pod, series.vgpu))
                    if series.attribution:
                        found.dcgm_attribution[series.pod] = series.attribution
                elif own is not None:
                    own.add(key)
        return found

    def pods(self, i: int) -> tuple[dict[Pod, list[str]], dict[Pod, str], dict[Pod, dict[str, str] | None]]:
        """Per pod in one step: the units it requested (one entry per unit), its node, its gpugate labels."""
        requested: dict[Pod, list[str]] = defaultdict(list)
        nodes: dict[Pod, str] = {}
        for number, value in self.requests[i]:
            pod, resource, node = self.request_series[number]
            requested[pod].extend([resource] * round(value))
            nodes[pod] = node
        attribution: dict[Pod, dict[str, str] | None] = {}
        for number, _ in self.labels[i]:
            pod, labels = self.label_series[number]
            # A labelled series wins over an unlabelled one (a kube-state-metrics replica without the
            # allowlist during a rollout), as in deploy/monitoring's namespace_pod:gpugate_attribution:info.
            if labels or pod not in attribution:
                attribution[pod] = labels
        return requested, nodes, attribution

    def placeholders(self, i: int) -> set[Pod]:
        """KAI's reservation pods in one step: each holds a whole GPU for the fractional pods of its GPU group
        (KAI-Scheduler pkg/binder/binding/resourcereservation), so it is nobody's use: its GPU is billed to them."""
        return {self.reservation_series[n][0] for n, _ in self.reservations[i]} if self.reservations else set()

    def claims(self, i: int, held: Mapping[DeviceKey, set[Pod]]) -> list[Claim]:
        """Every share of a device a pod holds by what it asked for in one step. ``held``: the pods telemetry
        shows on each device, so that a DRA claim dcgm-exporter already maps is not billed twice."""
        out: list[Claim] = []
        hami: dict[tuple[Pod, str], Claim] = {}
        for number, value in self.hami[i] if self.hami else ():
            pod, uuid, node, _dimension = self.hami_series[number]
            # A pod is billed the larger of its memory and its cores share: the device is full when either is.
            found = hami.get((pod, uuid))
            if found is None or (found.share or 0.0) < value:
                hami[pod, uuid] = Claim(pod, uuid, "hami", max(0.0, min(1.0, value)), node=node)
        out.extend(hami[key] for key in sorted(hami))
        groups: dict[str, str] = {}
        for number, _ in self.reservations[i] if self.reservations else ():
            _pod, group, uuid = self.reservation_series[number]
            if group and uuid:
                groups[group] = uuid
        # A multi-GPU fractional pod (gpu-fraction-num-devices: N) holds its fraction of each of its N groups' GPUs
        # (KAI-Scheduler pkg/scheduler/api/pod_info/pod_info.go NewGpuResourceRequirementWithMultiFraction).
        fractional = [
            (pod, (group,), fraction, memory)
            for pod, group, fraction, memory in (self.kai_series[n] for n, _ in (self.kai[i] if self.kai else ()))
        ] + [self.kai_multi_series[n] for n, _ in (self.kai_multi[i] if self.kai_multi else ())]
        kai: set[tuple[Pod, str]] = set()  # a pod's label series per kube-state-metrics replica: one claim each
        for pod, pod_groups, fraction, memory in fractional:
            for group in pod_groups:
                reserved = groups.get(group)
                if not reserved or (fraction is None and memory is None) or (pod, reserved) in kai:
                    continue
                kai.add((pod, reserved))
                share = None if fraction is None else min(1.0, fraction)
                out.append(Claim(pod, reserved, "kai", share, memory_mib=None if share is not None else memory))
        out.extend(self._dra_claims(i, held))
        return out

    def _dra_claims(self, i: int, held: Mapping[DeviceKey, set[Pod]]) -> list[Claim]:
        """A DRA claim's devices, billed to its pods wherever telemetry does not map them there, and wherever the
        claim holds only a share of a device (several claims on one device, KEP-5075: gpugate's series say the
        share; dcgm-exporter would copy the device to every pod of every claim). What the claim holds and for
        whom: gpugate's own series of the allocation (the claim's status), else dcgm-exporter's claim labels seen
        anywhere in the window with kube-state-metrics' pod -> claim link. The devices are dcgm-exporter's where
        it named the claim (they carry the MIG instance telemetry is keyed by)."""
        out: list[Claim] = []
        sharing: dict[tuple[str, str], set[Pod]] = defaultdict(set)
        devices: dict[tuple[str, str], dict[str, DraDevice]] = defaultdict(dict)
        # The claim's share of each device: gpugate's series' value (1 unless several claims share the device,
        # KEP-5075), summed over the device's shares the claim holds (share_id); the claim's pods repeat it.
        parts: dict[tuple[str, str], dict[tuple[str, str], float]] = defaultdict(dict)
        for number, value in self.allocated[i] if self.allocated else ():
            pod, claim, device, share_id = self.allocated_series[number]
            sharing[pod[0], claim].add(pod)
            devices[pod[0], claim][device.uuid or device.name] = device
            parts[pod[0], claim][device.uuid or device.name, share_id] = max(0.0, min(1.0, value))
        for number, _ in self.dra[i] if self.dra else ():
            pod, claim = self.dra_series[number]
            if (pod[0], claim) in self.dra_devices and (pod[0], claim) not in devices:
                sharing[pod[0], claim].add(pod)
        for (namespace, claim), pods in sorted(sharing.items()):
            known = list(self.dra_devices.get((namespace, claim), ()))
            telemetry = {uuid for uuid, *_ in known}  # a MIG instance's series name its parent GPU
            mine = devices[namespace, claim]
            known += [
                (d.uuid or d.name, "", d.profile, d.model, d.node)
                for _, d in sorted(mine.items())
                if d.gpu not in telemetry
            ]
            share: dict[str, float] = defaultdict(float)
            for (name, _share_id), value in parts[namespace, claim].items():
                share[name] += value
            for d in mine.values():  # dcgm-exporter names a MIG instance by its parent GPU
                if d.parent and d.parent not in share:
                    share[d.parent] = share.get(d.uuid or d.name, 1.0)
            for uuid, instance, profile, model, host in known:
                whole = min(1.0, share.get(uuid, 1.0))
                if whole >= 1.0 - 1e-9 and any(pod in held.get((uuid, instance), ()) for pod in pods):
                    continue  # dcgm-exporter maps it, and the claim holds all of it: billed from telemetry
                for pod in sorted(pods):  # a claim shared by several pods: split evenly between them
                    out.append(
                        Claim(
                            pod,
                            uuid,
                            "dra",
                            whole / len(pods),
                            node=host,
                            instance=instance,
                            profile=profile,
                            model=model,
                            shared=whole < 1.0 - 1e-9,
                        )
                    )
        return out

    def advertised(self, i: int) -> dict[str, list[tuple[str, float]]]:
        """Per node in one step: the GPU resources it advertised and how many units of each. A node whose
        ResourceSlices publish GPUs has those (resource ``dra``, one per physical GPU: a MIG device is part of
        its parent), in place of its extended resources: a GPU is handed out by one of the two, and a
        DRA-backed extended resource (KEP-5004) is served from the slices' devices."""
        out: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for number, value in self.capacity[i] if self.capacity else ():
            node, resource = self.capacity_series[number]
            if node and value > 0:
                out[node].append((resource, value))
        for node, gpus in self.published_gpus(i).items():
            out[node] = [("dra", float(len(gpus)))]
        return out

    def published_gpus(self, i: int) -> dict[str, dict[str, str]]:
        """Per node in one step: the physical GPUs its ResourceSlices publish (GPU -> model)."""
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for number, _ in self.published[i] if self.published else ():
            device = self.published_series[number]
            if device.node:
                out[device.node][device.gpu] = device.model
        return out
