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


def _device_series(labels: Labels) -> DeviceSeries:
    # dcgm-exporter names the GPU's UUID label "UUID" ("uuid" with --use-old-namespace); a MIG
    # instance is the pair (parent UUID, GPU_I_ID) (internal/pkg/rendermetrics/render_metrics.go).
    key = (labels.get("UUID") or labels.get("uuid") or "", labels.get("GPU_I_ID", ""))
    pod = (labels.get("namespace", ""), labels.get("pod", "")) if labels.get("pod") else None
    return DeviceSeries(
        key=key,
        profile=labels.get("GPU_I_PROFILE", ""),
        model=labels.get("modelName", ""),
        host=labels.get("Hostname", ""),
        pod=pod,
        vgpu=labels.get("vgpu", ""),
        attribution=_attribution(labels, dcgm_label),
    )


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

    @classmethod
    def of(cls, inputs: Inputs) -> Chunk:
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
        )

    def devices(self, i: int) -> StepDevices:
        """Per device: the profiling value, the GPU_UTIL value, the pods (and replicas) holding it. Virtual-GPU
        mode copies each field to every pod sharing the GPU; the copies carry the same value (GPU_UTIL per
        process is lower and loses), so the device's value is their maximum."""
        found = StepDevices()
        exporters = {self.non_gpu_series[n] for n, _ in self.non_gpu[i]}
        for samples, info, values, of_pod, scale in (
            (self.engine[i], self.engine_series, found.prof, found.prof_of_pod, 100.0),
            (self.util[i], self.util_series, found.dev, found.dev_of_pod, 1.0),
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
