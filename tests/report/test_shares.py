"""Shared and DRA GPUs billed by share, against a real Prometheus over six hand-computed hours.

Series are shaped as their exporters write them: KAI-Scheduler's fractional pods (annotations ``gpu-fraction`` /
``gpu-memory``, label ``runai-gpu-group``) and its reservation pod (same label, annotation
``run.ai/reserve_for_gpu_index`` naming the GPU; NVIDIA/KAI-Scheduler pkg/common/constants/constants.go,
pkg/binder/binding/resourcereservation/resource_reservation.go) through kube-state-metrics' ``kube_pod_annotations``
and ``kube_pod_labels``; HAMi's scheduler metrics (Project-HAMi/HAMi cmd/scheduler/metrics.go:
``hami_vgpu_memory_allocated_bytes``, ``hami_vgpu_core_allocated_ratio`` per container and device,
``hami_gpu_memory_limit_bytes``, ``hami_gpu_core_limit_ratio`` per device); a time-sliced GPU in virtual-GPU
mode on a node whose GPU Feature Discovery label says 4 replicas; a DRA claim's GPU with dcgm-exporter's
``dra_*`` labels (NVIDIA/dcgm-exporter internal/pkg/transformation/const.go) and kube-state-metrics'
``kube_pod_resourceclaim_info`` (internal/store/pod.go).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.report.command import parse_time
from webhook.report.prometheus import Prometheus

from .conftest import RunningPrometheus, serving
from .schema import checked
from .synthetic import A100, HOUR, T4, Fleet, dcgm_labels
from .test_report import ROOT, gpugate

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
LENGTH = 6 * HOUR
INTERVAL = 300
END_ISO = "2026-11-02T06:00:00Z"
GIB = 1024**3
RESERVATION_NS = "kai-resource-reservation"


def team(name: str, workload: str) -> dict[str, str]:
    return {"team": name, "cost_center": "cc", "workload_kind": "Deployment", "workload_name": workload}


def shared_fleet() -> Fleet:
    fleet = Fleet(length=LENGTH)
    every = {"interval": INTERVAL, "end": LENGTH}

    def gpu(labels: dict[str, str], util: float, **window: int) -> None:
        fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, util / 100, **(every | window))
        fleet.add("DCGM_FI_DEV_GPU_UTIL", labels, util, **(every | window))

    def annotations(namespace: str, pod: str, values: dict[str, str], **window: int) -> None:
        labels = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
        fleet.add("kube_pod_annotations", labels | values, 1.0, **(every | window))

    g1 = {"label_runai_gpu_group": "g1"}

    # node-k, KAI: the reservation pod holds the A100 (dcgm-exporter maps the GPU to it, 40% busy); infer-a
    # asks gpu-fraction 0.5 all six hours, infer-b gpu-memory 20480 MiB (a quarter of 80 GiB) for the first 3 h.
    reservation = "gpu-reservation-node-k-x7k2p"
    fleet.pod(
        RESERVATION_NS,
        reservation,
        node="node-k",
        resources={"nvidia.com/gpu": 1},
        attribution=None,
        pod_labels=g1,
        interval=INTERVAL,
        end=LENGTH,
    )
    annotations(RESERVATION_NS, reservation, {"annotation_run_ai_reserve_for_gpu_index": "GPU-k-0"})
    gpu(dcgm_labels(gpu=0, uuid="GPU-k-0", model=A100, host="node-k", pod=(RESERVATION_NS, reservation)), 40.0)
    fleet.pod(
        "kai",
        "infer-a",
        node="node-k",
        resources={"cpu": 1},
        attribution=team("vision", "a"),
        pod_labels=g1,
        interval=INTERVAL,
        end=LENGTH,
    )
    annotations("kai", "infer-a", {"annotation_gpu_fraction": "0.5"})
    half = {"end": 3 * HOUR}
    nlp = team("nlp", "b")
    fleet.pod(
        "kai",
        "infer-b",
        node="node-k",
        resources={"cpu": 1},
        attribution=nlp,
        pod_labels=g1,
        interval=INTERVAL,
        end=3 * HOUR,
    )
    annotations("kai", "infer-b", {"annotation_gpu_memory": "20480"}, **half)

    # node-h, HAMi: a T4 of 16 GiB and 100 cores. hami-a: 4 GiB and 30 cores (the larger, 0.30); hami-b:
    # gpumem-percentage 50, which HAMi's scheduler turns into 8 GiB (0.50). dcgm-exporter maps no pod: 5% busy.
    device = {"node": "node-h", "device_uuid": "GPU-h-0", "device_index": "0", "device_type": "NVIDIA"}
    fleet.add("hami_gpu_memory_limit_bytes", device, 16.0 * GIB, **every)
    fleet.add("hami_gpu_core_limit_ratio", device, 100.0, **every)
    for pod, memory, cores, who in (("hami-a", 4, 30, "research"), ("hami-b", 8, 0, "platform")):
        fleet.pod(
            "hami",
            pod,
            node="node-h",
            resources={"nvidia.com/gpu": 1},
            attribution=team(who, pod),
            interval=INTERVAL,
            end=LENGTH,
        )
        container = {
            "namespace": "hami",
            "node": "node-h",
            "pod": pod,
            "container_index": "0",
            "device_uuid": "GPU-h-0",
        }
        fleet.add("hami_vgpu_memory_allocated_bytes", container, memory * GIB, **every)
        fleet.add("hami_vgpu_core_allocated_ratio", container, float(cores), **every)
    gpu(dcgm_labels(gpu=0, uuid="GPU-h-0", model=T4, host="node-h"), 5.0)

    # node-m, MPS/time-slicing with 4 replicas per GPU (GFD's nvidia.com/gpu.replicas): mps-x holds one
    # replica, mps-y two; dcgm-exporter in virtual-GPU mode, the device 60% busy. One replica nobody holds.
    fleet.add("kube_node_labels", {"node": "node-m", "label_nvidia_com_gpu_replicas": "4"}, 1.0, **every)
    shared = dcgm_labels(gpu=0, uuid="GPU-m-0", model=T4, host="node-m")
    gpu(shared, 60.0)
    for pod, replicas, who in (("mps-x", 1, "search"), ("mps-y", 2, "ads")):
        fleet.pod(
            "mps",
            pod,
            node="node-m",
            resources={"nvidia.com/gpu": replicas},
            attribution=team(who, pod),
            interval=INTERVAL,
            end=LENGTH,
        )
        for replica in range(replicas):
            vgpu = str(replica + (1 if pod == "mps-y" else 0))
            gpu(dcgm_labels(gpu=0, uuid="GPU-m-0", model=T4, host="node-m", pod=("mps", pod)) | {"vgpu": vgpu}, 60.0)

    # node-d, DRA: train-0's claim holds an H200; dcgm-exporter (--kubernetes-enable-dra) maps it for 3 h at
    # 80%, then the node's exporter is down. ext-0 asks nvidia.com/gpu through a DRA-backed extended
    # resource (no claim in its spec) and has no telemetry at all.
    fleet.pod(
        "dra",
        "train-0",
        node="node-d",
        resources={"cpu": 1},
        attribution=team("training", "train"),
        interval=INTERVAL,
        end=LENGTH,
    )
    claim = {"namespace": "dra", "pod": "train-0", "uid": "uid-train-0", "claim_name": "gpu"}
    fleet.add(
        "kube_pod_resourceclaim_info",
        claim | {"resourceclaim_name": "train-0-gpu-abc12", "resourceclaim_template_name": "one-gpu"},
        1.0,
        **every,
    )
    dra = {
        "dra_claim_name": "train-0-gpu-abc12",
        "dra_claim_namespace": "dra",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": "node-d",
        "dra_device_name": "gpu-0",
    }
    gpu(dcgm_labels(gpu=0, uuid="GPU-d-0", model=H200, host="node-d", pod=("dra", "train-0")) | dra, 80.0, **half)
    fleet.pod(
        "dra",
        "ext-0",
        node="node-d",
        resources={"nvidia.com/gpu": 1},
        attribution=team("infra", "ext"),
        interval=INTERVAL,
        end=LENGTH,
    )

    # gpugate serve's DRA series (webhook/serve/dra.py), scraped from two replicas (the scrape adds each one's
    # own namespace and pod: never the claim's): node-d's ResourceSlice publishes four H200; train-0's claim
    # holds gpu-0, ext-0's DRA-backed extended resource the scheduler's claim on gpu-1, hold-0's claim gpu-2
    # (dcgm-exporter never reports it; kube-state-metrics has no pod -> claim link for it); gpu-3 is nobody's.
    # hold-0 ends after 4 h while its claim still names it for 2 h more (not yet released): held 4 h.
    for gate in ("gpugate-5d8f-abcde", "gpugate-5d8f-fghij"):
        scrape = {"namespace": "gpugate", "pod": gate, "instance": f"{gate}:8443", "job": "gpugate"}
        for n in range(4):
            device = {"driver": "gpu.nvidia.com", "pool": "node-d", "device": f"gpu-{n}", "node": "node-d"}
            published = device | {"uuid": f"GPU-d-{n}", "parent_uuid": "", "profile": "", "model": H200}
            fleet.add("gpugate_dra_gpu_device", scrape | published, 1.0, **every)
            holders = {
                0: ("train-0", "train-0-gpu-abc12"),
                1: ("ext-0", "ext-0-gpu-q8r2t"),
                2: ("hold-0", "hold-0-gpu"),
            }
            if n in holders:
                holder, held = holders[n]
                allocation = {"claim_namespace": "dra", "claim_name": held, "claim_pod": holder, "request": "gpu"}
                fleet.add("gpugate_dra_gpu_allocated", scrape | published | allocation, 1.0, **every)
    fleet.pod(
        "dra",
        "hold-0",
        node="node-d",
        resources={"cpu": 1},
        attribution=team("batch", "hold"),
        interval=INTERVAL,
        end=4 * HOUR,
    )

    # node-k2, KAI multi-GPU fractions: multi-0 asks gpu-fraction 0.5 with gpu-fraction-num-devices 2, so KAI's
    # binder reserves a GPU per group for it and labels it runai-gpu-group/<group> per group, never
    # runai-gpu-group (NVIDIA/KAI-Scheduler pkg/binder/binding/resourcereservation/resource_reservation.go
    # updatePodGPUGroup; pkg/common/resources/gpu_sharing.go GetMultiFractionGpuGroupLabel). kube-state-metrics
    # (allowlist runai-gpu-group/*) writes each as label_runai_gpu_group_<group, sanitized>. Its first GPU is 60%
    # busy; its second 5% for 2 h, then 50%.
    multi_groups = {}
    for n, group in enumerate(("5f0c2b7e-1a2b-4c3d-9e8f-000000000002", "5f0c2b7e-1a2b-4c3d-9e8f-000000000003")):
        holder = f"gpu-reservation-node-k2-{n}q9zt"
        uuid = f"GPU-k2-{n}"
        fleet.pod(
            RESERVATION_NS,
            holder,
            node="node-k2",
            resources={"nvidia.com/gpu": 1},
            attribution=None,
            pod_labels={"label_runai_gpu_group": group},
            interval=INTERVAL,
            end=LENGTH,
        )
        annotations(RESERVATION_NS, holder, {"annotation_run_ai_reserve_for_gpu_index": uuid})
        labels = dcgm_labels(gpu=n, uuid=uuid, model=A100, host="node-k2", pod=(RESERVATION_NS, holder))
        if n == 0:
            gpu(labels, 60.0)
        else:  # the sample at 2 h still 5%: the step ending there is idle, the next one busy
            fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, lambda t: 0.05 if t <= 2 * HOUR else 0.5, **every)
            fleet.add("DCGM_FI_DEV_GPU_UTIL", labels, lambda t: 5.0 if t <= 2 * HOUR else 50.0, **every)
        multi_groups["label_runai_gpu_group_" + group.replace("-", "_")] = group
    fleet.pod(
        "kai",
        "multi-0",
        node="node-k2",
        resources={"cpu": 1},
        attribution=team("multi", "m"),
        pod_labels=multi_groups,
        interval=INTERVAL,
        end=LENGTH,
    )
    annotations("kai", "multi-0", {"annotation_gpu_fraction": "0.5", "annotation_gpu_fraction_num_devices": "2"})

    # node-c, DRA consumable capacity (KEP-5075): its ResourceSlice publishes two H100 with
    # allowMultipleAllocations. gpu-0 is shared by memory (NVIDIA's --consumable-shares=memory): share-a's claim
    # consumed 40Gi of 80Gi (gpugate's series: 0.5) all six hours, share-b's 20Gi (0.25) the first 3 h;
    # dcgm-exporter (--kubernetes-enable-dra) copies the 50%-busy device to both pods, each with its claim.
    # gpu-1 is time-sliced between two claims that consumed nothing (--consumable-shares=unlimited): gpugate
    # serve splits it, 0.5 each, and dcgm-exporter never reports it.
    for pod, claim_name, who, share, until in (
        ("share-a", "share-a-gpu", "genai", 0.5, LENGTH),
        ("share-b", "share-b-gpu", "eval", 0.25, 3 * HOUR),
        ("ts-x", "ts-x-gpu", "labs", 0.5, LENGTH),
        ("ts-y", "ts-y-gpu", "lab-two", 0.5, LENGTH),
    ):
        fleet.pod(
            "cc", pod, node="node-c", resources={"cpu": 1}, attribution=team(who, pod), interval=INTERVAL, end=until
        )
        n = 0 if pod.startswith("share") else 1
        device = {"driver": "gpu.nvidia.com", "pool": "node-c", "device": f"gpu-{n}", "node": "node-c"}
        published = device | {"uuid": f"GPU-c-{n}", "parent_uuid": "", "profile": "", "model": H100}
        allocation = {
            "claim_namespace": "cc",
            "claim_name": claim_name,
            "claim_pod": pod,
            "request": "gpu",
            "share_id": f"7d3a9c1e-0000-4000-8000-00000000{len(pod):04d}",
        }
        scrape = {"namespace": "gpugate", "pod": "gpugate-5d8f-abcde", "instance": "gpugate-5d8f-abcde:8443"}
        fleet.add("gpugate_dra_gpu_allocated", scrape | published | allocation, share, interval=INTERVAL, end=until)
        if n == 0:
            claimed = {
                "dra_claim_name": claim_name,
                "dra_claim_namespace": "cc",
                "dra_driver_name": "gpu.nvidia.com",
                "dra_pool_name": "node-c",
                "dra_device_name": "gpu-0",
            }
            labels = dcgm_labels(gpu=0, uuid="GPU-c-0", model=H100, host="node-c", pod=("cc", pod)) | claimed
            # node-c runs a dcgm-exporter built after NVIDIA/dcgm-exporter#655, which spells Hostname "hostname"
            labels["hostname"] = labels.pop("Hostname")
            gpu(labels, 50.0, end=until)
    for n in range(2):
        scrape = {"namespace": "gpugate", "pod": "gpugate-5d8f-abcde", "instance": "gpugate-5d8f-abcde:8443"}
        device = {"driver": "gpu.nvidia.com", "pool": "node-c", "device": f"gpu-{n}", "node": "node-c"}
        published = device | {"uuid": f"GPU-c-{n}", "parent_uuid": "", "profile": "", "model": H100}
        fleet.add("gpugate_dra_gpu_device", scrape | published, 1.0, **every)

    # What the nodes advertise (kube-state-metrics kube_node_status_capacity): node-d says three GPUs, but its
    # ResourceSlices publish four, and those count; node-x has two GPUs and no dcgm-exporter at all. node-m's
    # four nvidia.com/gpu are one GPU's four replicas; node-h's ten are HAMi's device-plugin split of one T4.
    for node, count in (("node-k", 1), ("node-m", 4), ("node-d", 3), ("node-x", 2), ("node-h", 10), ("node-k2", 2)):
        labels = {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
        fleet.add("kube_node_status_capacity", labels, float(count), **every)
    return fleet


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    with serving(shared_fleet(), tmp_path_factory.mktemp("shares-prometheus"), block="6h") as running:
        yield running


def report(prometheus: RunningPrometheus, *extra: str) -> dict[str, Any]:
    result = gpugate("report", "--prometheus", prometheus.url, "--end", END_ISO, "--window", "6h", "-o", "json", *extra)
    assert result.returncode == 0, result.stderr
    return checked(result.stdout)


@pytest.fixture(scope="module")
def by_team(shares: RunningPrometheus) -> dict[str, Any]:
    return report(shares, "--bucket", "1h")


# Hand-computed over six hours: (allocated, busy, idle, no telemetry) GPU-hours.
EXPECTED = {
    "vision": (0.5 * 6, 0.5 * 6, 0.0, 0.0),  # KAI gpu-fraction 0.5 of a 40% busy A100
    "nlp": (0.25 * 3, 0.25 * 3, 0.0, 0.0),  # KAI gpu-memory 20480 of 81920 MiB, 3 h
    "research": (0.30 * 6, 0.0, 0.30 * 6, 0.0),  # HAMi: max(4/16 memory, 30/100 cores) of a 5% T4
    "platform": (0.50 * 6, 0.0, 0.50 * 6, 0.0),  # HAMi: 8/16 GiB
    "search": (0.25 * 6, 0.25 * 6, 0.0, 0.0),  # one of 4 replicas
    "ads": (0.50 * 6, 0.50 * 6, 0.0, 0.0),  # two of 4 replicas
    "training": (6.0, 3.0, 0.0, 3.0),  # a DRA claim's H200: 3 h at 80%, 3 h without telemetry
    "infra": (6.0, 0.0, 0.0, 6.0),  # a DRA-backed extended resource, never any telemetry
    "batch": (4.0, 0.0, 0.0, 4.0),  # a claim's H200 that dcgm-exporter never reports: gpugate's series, 4 h
    # KAI gpu-fraction 0.5 x gpu-fraction-num-devices 2: half of each of two A100, one 60% busy, the other 5% for
    # 2 h (idle) and 50% after
    "multi": (0.5 * 6 + 0.5 * 6, 0.5 * 6 + 0.5 * 4, 0.5 * 2, 0.0),
    "genai": (0.5 * 6, 0.5 * 6, 0.0, 0.0),  # DRA consumable capacity: 40Gi of an 80Gi H100, 50% busy
    "eval": (0.25 * 3, 0.25 * 3, 0.0, 0.0),  # 20Gi of the same H100, 3 h
    "labs": (0.5 * 6, 0.0, 0.0, 0.5 * 6),  # one of two claims time-slicing an H100 no telemetry reports
    "lab-two": (0.5 * 6, 0.0, 0.0, 0.5 * 6),  # the other
}


def test_each_sharing_mode_is_billed_its_share(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    assert set(rows) == set(EXPECTED), "KAI's reservation pod is nobody's use: no unlabelled row"
    for name, (allocated, busy, idle, missing) in EXPECTED.items():
        row = rows[name]
        got = (row["allocated_gpu_hours"], row["busy_gpu_hours"], row["idle_gpu_hours"], row["no_telemetry_gpu_hours"])
        assert got == pytest.approx((allocated, busy, idle, missing), abs=1e-6), name


def test_claims_time_slicing_a_dra_device_are_shares_not_an_overcommitted_gpu(by_team: dict[str, Any]) -> None:
    # ts-x's and ts-y's claims hold half of node-c's gpu-1 each (gpugate's series), not the whole GPU twice
    assert not [note for note in by_team["notes"] if "more than the GPU" in note], by_team["notes"]


def test_the_peaks_say_what_was_held(by_team: dict[str, Any]) -> None:
    rows = {row["group"]: row for row in by_team["groups"]}
    assert rows["vision"]["fraction_gpus_peak"] == pytest.approx(0.5)
    assert rows["research"]["fraction_gpus_peak"] == pytest.approx(0.3)
    assert rows["ads"]["shared_peak"] == 2
    assert rows["training"]["whole_gpus_peak"] == 1
    assert rows["multi"]["fraction_gpus_peak"] == pytest.approx(1.0)  # 0.5 of each of two GPUs
    assert rows["genai"]["fraction_gpus_peak"] == pytest.approx(0.5)  # a DRA share is a fraction, not a GPU
    assert rows["genai"]["whole_gpus_peak"] == 0
    # the first three hours: KAI 0.5 + 0.25 + 2 x 0.5, HAMi 0.3 + 0.5, DRA shares 0.5 + 0.25 + 0.5 + 0.5
    assert by_team["total"]["fraction_gpus_peak"] == pytest.approx(1.75 + 0.8 + 1.75)


def test_the_unclaimed_rest_of_a_shared_gpu_is_unallocated(by_team: dict[str, Any]) -> None:
    resources = {entry["resource"]: entry for entry in by_team["capacity"]["by_resource"]}
    # KAI A100: 0.25 x 3 h + 0.5 x 3 h unclaimed; HAMi T4: 0.2 x 6 h. Two GPUs x 6 h in all.
    # KAI multi-GPU: half of each of two A100 claimed, the other halves unclaimed, 6 h.
    fraction = resources["fraction"]
    assert fraction["allocated_gpu_hours"] == pytest.approx(3.0 + 0.75 + 1.8 + 3.0 + 6.0, abs=1e-6)
    assert fraction["unallocated_gpu_hours"] == pytest.approx(0.75 + 1.5 + 1.2 + 6.0, abs=1e-6)
    assert fraction["capacity_gpu_hours"] == pytest.approx(24.0, abs=1e-6)
    shared = resources["shared"]
    assert (shared["allocated_gpu_hours"], shared["unallocated_gpu_hours"]) == pytest.approx((4.5, 1.5), abs=1e-6)
    # train-0's claim, ext-0's extended resource through the scheduler's claim, hold-0's claim for 4 h; node-c's
    # shares: 0.5 x 6 + 0.25 x 3 of gpu-0 (its rest, 0.25 x 3 + 0.5 x 3, unallocated), gpu-1 2 x 0.5 x 6
    dra = resources["dra"]
    assert dra["allocated_gpu_hours"] == pytest.approx(6.0 + 6.0 + 4.0 + 3.0 + 0.75 + 6.0, abs=1e-6)
    assert dra["unallocated_gpu_hours"] == pytest.approx(0.75 + 1.5, abs=1e-6)
    assert dra["capacity_gpu_hours"] == pytest.approx(16.0 + 12.0, abs=1e-6)
    # node-d's gpu-3 six hours and gpu-2 the two hours after hold-0; node-x's two GPUs six hours each
    assert resources["no-telemetry"]["unallocated_gpu_hours"] == pytest.approx(6.0 + 2.0 + 2 * 6.0, abs=1e-6)
    assert by_team["capacity"]["capacity_gpu_hours"] == pytest.approx(13 * 6.0, abs=1e-6)
    assert by_team["capacity"]["sources"] == ["dcgm-exporter", "gpugate_dra_gpu_device", "kube_node_status_capacity"]


def test_shares_and_unallocated_add_up_to_the_fleet_every_hour(by_team: dict[str, Any]) -> None:
    fleet = by_team["buckets"]["fleet"]
    assert len(fleet) == 6
    for bucket in fleet:
        # thirteen GPUs: KAI's A100, HAMi's T4, the time-sliced T4, node-d's four H200 as its ResourceSlice
        # publishes them (train-0's, ext-0's, hold-0's, nobody's), node-x's two, KAI multi-GPU's two A100 and
        # node-c's two shared H100
        assert bucket["allocated_gpu_hours"] + bucket["unallocated_gpu_hours"] == pytest.approx(13.0, abs=1e-6), bucket


def test_by_namespace_the_fractional_pods_pay_and_the_reservation_pod_does_not(shares: RunningPrometheus) -> None:
    rows = {row["group"]: row for row in report(shares, "--group", "namespace")["groups"]}
    assert RESERVATION_NS not in rows
    assert rows["kai"]["allocated_gpu_hours"] == pytest.approx(3.0 + 0.75 + 6.0, abs=1e-6)
    assert rows["hami"]["allocated_gpu_hours"] == pytest.approx(1.8 + 3.0, abs=1e-6)


def test_by_pod_the_most_idle_pods_come_first_with_their_workload(shares: RunningPrometheus) -> None:
    document = report(shares, "--group", "pod")
    rows = document["groups"]
    assert [row["group"] for row in rows[:2]] == ["hami/hami-b", "hami/hami-a"]
    assert [row["idle_gpu_hours"] for row in rows[:2]] == pytest.approx([3.0, 1.8], abs=1e-6)
    assert rows[0]["workload"] == "hami/Deployment/hami-b"
    assert {row["group"]: row["workload"] for row in rows}["kai/infer-b"] == "kai/Deployment/b"
    assert RESERVATION_NS + "/gpu-reservation-node-k-x7k2p" not in {row["group"] for row in rows}
    table = gpugate(
        "report", "--prometheus", shares.url, "--end", END_ISO, "--window", "6h", "--group", "pod", "--recommend"
    )
    assert table.returncode == 0, table.stderr
    header, _rule, first = table.stdout.splitlines()[2:5]
    assert header.split()[:2] == ["POD", "WORKLOAD"] and header.rstrip().endswith("RECOMMENDED")
    assert first.split()[:2] == ["hami/hami-b", "hami/Deployment/hami-b"]


def test_the_dashboards_hami_panel_gives_the_reports_shares(shares: RunningPrometheus) -> None:
    dashboard = json.loads((ROOT / "deploy/monitoring/gpugate-report-dashboard.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p["title"] == "GPU-hours held as HAMi shares by team"]
    client = Prometheus(shares.url)
    end = parse_time(END_ISO, now=0)
    got = {}
    for target in panel["targets"]:
        expr = target["expr"].replace("$__range", f"{LENGTH}s")
        got[target["refId"]] = {
            s.labels.get("team", ""): next(iter(s.samples.values())) for s in client.query(expr, at=end)
        }
    # within one 5-minute step, as the dashboard's other panels (its subquery also samples the range's start)
    step = INTERVAL / 3600
    assert got["held"] == pytest.approx({"research": 0.30 * 6, "platform": 0.50 * 6}, abs=step)
    assert got["unclaimed"] == pytest.approx({"": 0.2 * 6}, abs=step)


def test_by_pod_csv_and_html_carry_the_workload(shares: RunningPrometheus) -> None:
    window = ("report", "--prometheus", shares.url, "--end", END_ISO, "--window", "6h", "--group", "pod")
    csv_out = gpugate(*window, "-o", "csv")
    assert csv_out.returncode == 0, csv_out.stderr
    records = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    groups = {r["pod"]: r["workload"] for r in records if r["record"] == "group"}
    assert groups["hami/hami-b"] == "hami/Deployment/hami-b"
    assert float(next(r for r in records if r["pod"] == "kai/infer-a")["fraction_gpus_peak"]) == pytest.approx(0.5)
    html_out = gpugate(*window, "-o", "html")
    assert html_out.returncode == 0, html_out.stderr
    assert "<thead><tr><th>POD</th><th>WORKLOAD</th>" in html_out.stdout
    assert "<tr><td>hami/hami-b</td><td>hami/Deployment/hami-b</td>" in html_out.stdout


def test_the_dashboards_dra_panel_gives_the_reports_claims(shares: RunningPrometheus) -> None:
    dashboard = json.loads((ROOT / "deploy/monitoring/gpugate-report-dashboard.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p["title"] == "GPU-hours held through DRA claims by team"]
    client = Prometheus(shares.url)
    end = parse_time(END_ISO, now=0)
    got = {}
    for target in panel["targets"]:
        expr = target["expr"].replace("$__range", f"{LENGTH}s")
        got[target["refId"]] = {
            s.labels.get("team", ""): next(iter(s.samples.values())) for s in client.query(expr, at=end)
        }
    step = INTERVAL / 3600
    # the three claims' H200 and node-c's shares, as the report bills them (telemetry or not); unheld: gpu-3 all
    # along, gpu-2 after hold-0, and what node-c's shares leave of its gpu-0
    held = {"training": 6.0, "infra": 6.0, "batch": 4.0, "genai": 3.0, "eval": 0.75, "labs": 3.0, "lab-two": 3.0}
    assert got["held"] == pytest.approx(held, abs=step)
    # within a step per device: the subquery also samples the range's start (gpu-3 whole, a quarter of node-c's)
    assert got["unheld"] == pytest.approx({"": 6.0 + 2.0 + 0.75 + 1.5}, abs=2 * step)
