"""How long ``gpugate report`` takes, and how much memory, over a fleet's data served by a real Prometheus.

Run: .venv/bin/python bench/report_scale.py [--gpus 1000] [--hours 168] [--step 5m] [--outputs table,json,html]
     [--interval 60] [--writer promtool|tsdbgen] [--keep DIR] [--weight-by-use]
Generates the data (dcgm-exporter and kube-state-metrics every --interval s: per 8 GPUs a node with a
4-GPU and a 2-GPU pod that run throughout and two 1-GPU jobs recreated every day, 20 teams), writes it
as TSDB blocks (promtool's OpenMetrics backfill half a day at a time, since promtool 2.42 reads its whole
input into memory; or bench/tsdbgen, Prometheus' tsdb library writing day-long blocks directly, minutes
instead of hours for a month of 10,000 GPUs), starts Prometheus on 127.0.0.1 over it, waits until it has
compacted them, and times the report over the first --hours in each output format, with the report's own
peak RSS. With --keep DIR the TSDB is kept and reused by the next run (a shorter --hours reads the start
of a longer one). Not part of the test suite: it takes minutes and gigabytes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.report.conftest import find_tool, start_prometheus  # noqa: E402
from tests.report.synthetic import A100, END, HOUR, START, WEEK, Fleet, dcgm_labels  # noqa: E402

DAY = 24 * HOUR


def fleet(gpus: int, *, hours: int = 168, interval: int = 60) -> Fleet:
    length = hours * HOUR
    fleet = Fleet(length=length)
    for node in range(gpus // 8):
        host = f"node-{node:03d}"
        team = f"team-{node % 20:02d}"

        def attribution(kind: str, name: str, team: str = team, node: int = node) -> dict[str, str]:
            return {"team": team, "cost_center": f"cc-{node % 7}", "workload_kind": kind, "workload_name": name}

        def gpu(
            index: int,
            pod: tuple[str, str],
            util: float,
            *,
            begin: int = 0,
            end: int = length,
            host: str = host,
            node: int = node,
        ) -> None:
            labels = dcgm_labels(gpu=index, uuid=f"GPU-{node:03d}-{index}", model=A100, host=host, pod=pod)
            every = {"begin": begin, "end": end, "interval": interval}
            fleet.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, util / 100, **every)
            fleet.add("DCGM_FI_DEV_GPU_UTIL", labels, util, **every)
            fleet.add("DCGM_FI_DEV_FB_USED", labels, 1000 + 100 * index, **every)

        namespace = f"ns-{node % 40:02d}"
        train, serve = f"train-{node:03d}-0", f"serve-{node:03d}-0"
        fleet.pod(
            namespace,
            train,
            node=host,
            resources={"nvidia_com_gpu": 4},
            attribution=attribution("StatefulSet", f"train-{node:03d}"),
            phases=("Pending", "Running"),
            end=length,
            interval=interval,
        )
        for index in range(4):
            gpu(index, (namespace, train), 85.0 if node % 3 else 4.0)
        fleet.pod(
            namespace,
            serve,
            node=host,
            resources={"nvidia_com_gpu": 2},
            attribution=attribution("Deployment", f"serve-{node:03d}"),
            phases=("Pending", "Running"),
            end=length,
            interval=interval,
        )
        for index in (4, 5):
            gpu(index, (namespace, serve), 40.0 if node % 2 else 2.0)
        for day in range(-(-hours // 24)):
            for index in (6, 7):
                job = f"job-{node:03d}-{index}-{day}"
                fleet.pod(
                    namespace,
                    job,
                    node=host,
                    resources={"nvidia_com_gpu": 1},
                    attribution=attribution("Job", f"job-{node:03d}-{index}"),
                    begin=day * DAY,
                    end=min(length, (day + 1) * DAY),
                    phases=("Pending", "Running"),
                    interval=interval,
                )
                util = 60.0 if (day + index) % 2 else 1.0
                gpu(index, (namespace, job), util, begin=day * DAY, end=min(length, (day + 1) * DAY))
    return fleet


def backfill(gpus: int, directory: Path, *, hours: int = 168, interval: int = 60) -> tuple[int, float, float]:
    """Promtool reads its whole input into memory: one run per 12 hours of 1,000 GPUs (about 3.6 million
    samples, fewer hours for more GPUs), blocks of that length: bounded memory, no overlapping blocks."""
    promtool = find_tool("promtool")
    tsdb = directory / "tsdb"
    description = fleet(gpus, hours=hours, interval=interval)
    samples, generate, load = 0, 0.0, 0.0
    length = max(2, min(12, 12 * 1000 * interval // (60 * gpus)))  # promtool ignores blocks under 2 h
    parts = -(-hours // length)
    for part in range(parts):
        openmetrics = directory / "part.om"
        started = time.monotonic()
        with openmetrics.open("w") as stream:
            samples += description.write(stream, since=part * length * HOUR, until=(part + 1) * length * HOUR)
        generate += time.monotonic() - started
        started = time.monotonic()
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                f"--max-block-duration={length}h",
                str(openmetrics),
                str(tsdb),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        load += time.monotonic() - started
        openmetrics.unlink()
        print(f"  backfilled {part + 1}/{parts} parts of {length} h, {samples:,} samples", file=sys.stderr)
    return samples, generate, load


def write_blocks(gpus: int, directory: Path, *, hours: int, interval: int) -> tuple[int, float, float]:
    """The same series written as day-long TSDB blocks by bench/tsdbgen (Prometheus' tsdb library, no text):
    minutes where promtool takes hours. Each series is described once (labels, value, begin, end, interval)."""
    binary = directory / "tsdbgen"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=REPO / "bench" / "tsdbgen", check=True)
    started = time.monotonic()
    description = fleet(gpus, hours=hours, interval=interval)
    process = subprocess.Popen(
        [str(binary), "-out", str(directory / "tsdb"), "-block", "24h"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    for spec in description.series:
        end = min(spec.end, description.length)
        value = spec.value(spec.begin)
        assert value is not None and value == spec.value(end - 1), f"{spec.name}: tsdbgen takes constant series"
        labels = {"__name__": spec.name, **spec.labels}
        record = {"labels": labels, "value": value, "begin": START + spec.begin, "end": START + end}
        process.stdin.write(json.dumps({**record, "interval": spec.interval}) + "\n")
    process.stdin.close()
    generate = time.monotonic() - started
    summary = process.stdout.read()
    if process.wait() != 0:
        raise SystemExit(f"tsdbgen failed ({process.returncode})")
    samples = int(summary.split()[2])
    (directory / "tsdbgen-blocks").touch()  # day-long blocks, served uncompacted (main)
    return samples, generate, time.monotonic() - started - generate


def settle(process: subprocess.Popen[bytes], *, quiet: float = 1.0, every: float = 15.0) -> float:
    """Wait until Prometheus has finished compacting the written blocks (less than ``quiet`` s of CPU in
    ``every`` s), so that the report is not timed against its start-up work; returns the seconds waited."""
    started = time.monotonic()

    def cpu() -> float:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu()
    while True:
        time.sleep(every)
        now = cpu()
        if now - before < quiet:
            return time.monotonic() - started
        before = now


def _run_measured(command: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run the report; its own peak resident memory (KiB) from wait4's rusage, not the benchmark's."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
    return result, int(usage.ru_maxrss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--keep", type=Path, help="directory for the TSDB, reused when it exists")
    parser.add_argument("--step", default="5m")
    parser.add_argument("--hours", type=int, default=168, help="length of the data and of the window (default 168)")
    parser.add_argument("--outputs", default="table,json,html", help="comma-separated output formats to time")
    parser.add_argument("--interval", type=int, default=60, help="scrape interval of both exporters, s (default 60)")
    parser.add_argument(
        "--writer",
        choices=("promtool", "tsdbgen"),
        default="promtool",
        help="promtool's OpenMetrics backfill (default) or bench/tsdbgen, which writes blocks directly (needs go)",
    )
    parser.add_argument(
        "--weight-by-use",
        action="store_true",
        help="run the report with --weight-by-use (this fleet has no time-sliced GPU: its cost where none is)",
    )
    args = parser.parse_args()
    directory = args.keep or Path(os.environ.get("TMPDIR", "/tmp")) / f"gpugate-report-scale-{os.getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "tsdb").exists():
        write = write_blocks if args.writer == "tsdbgen" else backfill
        samples, generate, load = write(args.gpus, directory, hours=args.hours, interval=args.interval)
        print(
            f"data: {args.gpus} GPUs, {args.hours} h every {args.interval} s, {samples:,} samples; "
            f"generated in {generate:.0f} s, written by {args.writer} in {load:.0f} s"
        )
    # tsdbgen's day-long blocks are served as written (a Thanos sidecar's Prometheus keeps 2-hour ones): not
    # compacted into longer blocks while the report runs, which on 2 cores takes longer than the report.
    flags = ("--storage.tsdb.max-block-duration=24h",) if (directory / "tsdbgen-blocks").exists() else ()
    prometheus = start_prometheus(directory / "tsdb", directory, flags=flags)
    print(f"prometheus settled (compaction done) after {settle(prometheus.process):.0f} s", flush=True)
    try:
        end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(END - WEEK + args.hours * HOUR))
        for output in args.outputs.split(","):
            command = [
                str(Path(sys.executable).with_name("gpugate")),
                "report",
                "--prometheus",
                prometheus.url,
                "--end",
                end,
                "--window",
                f"{args.hours}h",
                "--step",
                args.step,
                "-o",
                output,
                *(["--weight-by-use"] if args.weight_by_use else []),
            ]
            started = time.monotonic()
            result, rss_kib = _run_measured(command)
            elapsed = time.monotonic() - started
            if result.returncode != 0:
                raise SystemExit(f"gpugate report failed ({result.returncode}): {result.stderr}")
            if output == "table":
                print(
                    "\n".join(
                        result.stdout.splitlines()[:3]
                        + ["  ..."]
                        + [line for line in result.stdout.splitlines() if line.startswith("TOTAL")]
                    )
                )
            print(
                f"-o {output}: {elapsed:.1f} s, max RSS {rss_kib / 1024:,.0f} MiB, {len(result.stdout):,} bytes "
                f"(gpugate report --window {args.hours}h --step {args.step}"
                f"{' --weight-by-use' if args.weight_by_use else ''} over {args.gpus} GPUs)",
                flush=True,
            )
    finally:
        prometheus.process.terminate()
        prometheus.process.wait(timeout=60)


if __name__ == "__main__":
    main()
