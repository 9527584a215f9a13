"""gpugate report next to OpenCost's GPU formula, per workload, on the synthetic week of tests/report.

Run: .venv/bin/python bench/report_opencost.py
Prints the markdown table in docs/report.md. OpenCost's side runs OpenCost's own PromQL
(opencost/opencost pkg/costmodel/allocation.go: queryFmtGPUsRequested, queryFmtGPUsUsageAvg) against the
same Prometheus and applies its arithmetic (allocation_helpers.go applyGPUsAllocated: GPUHours =
request x running hours; core/pkg/opencost/allocation.go GPUEfficiency = GPUUsageAverage /
GPURequestAverage). OpenCost takes a container's running time from kube_pod_container_status_running;
the synthetic week has no such series, so the hours kube_pod_status_phase{phase="Running"} was 1 stand in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.report.conftest import backfill, start_prometheus  # noqa: E402
from tests.report.synthetic import END, small_fleet  # noqa: E402
from webhook.report.prometheus import Prometheus  # noqa: E402

WINDOW = "168h"
REQUESTED = (
    'avg(avg_over_time(kube_pod_container_resource_requests{resource="nvidia_com_gpu", container!="",'
    f'container!="POD", node!=""}}[{WINDOW}])) by (container, pod, namespace, node)'
)
USAGE = f'avg(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{container!=""}}[{WINDOW}])) by (container, pod, namespace)'
RUNNING_HOURS = (
    f'sum by (namespace, pod) (count_over_time((kube_pod_status_phase{{phase="Running"}} == 1)[{WINDOW}:1m])) / 60'
)


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        prometheus = start_prometheus(backfill(small_fleet(), directory), directory)
        try:
            client = Prometheus(prometheus.url)
            requested = {
                (s.labels["namespace"], s.labels["pod"]): next(iter(s.samples.values()))
                for s in client.query(REQUESTED, at=END)
            }
            usage = {
                (s.labels["namespace"], s.labels["pod"]): next(iter(s.samples.values()))
                for s in client.query(USAGE, at=END)
            }
            running = {
                (s.labels["namespace"], s.labels["pod"]): next(iter(s.samples.values()))
                for s in client.query(RUNNING_HOURS, at=END)
            }
            result = subprocess.run(
                [
                    str(Path(sys.executable).with_name("gpugate")),
                    "report",
                    "--prometheus",
                    prometheus.url,
                    "--end",
                    str(END),
                    "--group",
                    "workload",
                    "--top",
                    "20",
                    "-o",
                    "json",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            ours = {row["group"]: row for row in json.loads(result.stdout)["groups"]}
        finally:
            prometheus.process.terminate()
            prometheus.process.wait(timeout=30)
    print(
        "| workload | gpugate: GPU-h | idle GPU-h | avg util | OpenCost: GPUHours | GPUUsageAverage "
        "| GPUEfficiency | GPUHours x (1 - efficiency) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    pods = {
        "ml-vision/Deployment/trainer": ("ml-vision", "trainer-0"),
        "ml-nlp/Deployment/serve": ("ml-nlp", "serve-0"),
        "ml-nlp/Job/finetune": ("ml-nlp", "finetune-x7k2p"),
        "research/StatefulSet/notebook": ("research", "notebook-0"),
        "research/Job/batch": ("research", "batch-0"),
        "ml-dev/Deployment/nb-alice": ("ml-dev", "nb-alice"),
        "ml-dev/Deployment/nb-bob": ("ml-dev", "nb-bob"),
        "legacy/Pod/old-render-0": ("legacy", "old-render-0"),
        "(finished) ml-nlp/Job eval-1": ("ml-nlp", "eval-1"),
    }
    for workload, pod in pods.items():
        row = ours.get(workload)
        request = requested.get(pod, 0.0)
        use = usage.get(pod, 0.0)
        hours = request * running.get(pod, 0.0)
        efficiency = use / request if request > 0 and use > 0 else 0.0
        mine = (
            f"{row['allocated_gpu_hours']:.1f} | {row['idle_gpu_hours']:.1f} | {100 * row['avg_utilisation']:.0f}%"
            if row
            else "0 | 0 | -"
        )
        print(
            f"| {workload} | {mine} | {hours:.1f} | {100 * use:.1f}% | {100 * efficiency:.1f}% "
            f"| {hours * (1 - efficiency):.1f} |"
        )


if __name__ == "__main__":
    main()
