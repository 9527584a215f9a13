"""``gpugate report``: its flags, the price table file, progress on a terminal, and the exit code."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from datetime import datetime

import yaml

from ..terminal import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK, Progress
from .compute import BUCKETS, DEFAULT_THRESHOLD, GROUPS, Integrator, Prices, Report
from .prometheus import Prometheus, PrometheusError
from .queries import ReportError, iso, memory_peaks, node_prices, preflight, stream_inputs
from .recommend import recommend
from .render import FORMATS, render

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration(text: str, *, flag: str) -> int:
    """A Prometheus duration (``5m``, ``1h30m``, ``7d``) in whole seconds, at least one."""
    if not re.fullmatch(r"(?:\d+(?:ms|s|m|h|d|w|y))+", text):
        raise ReportError(f"{flag} {text!r}: expected a duration such as 30s, 5m, 1h30m or 7d")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION.findall(text))
    if seconds < 1:
        raise ReportError(f"{flag} {text!r}: must be at least 1s")
    return int(seconds)


def parse_time(text: str | None, *, now: float) -> int:
    """``--end``: RFC 3339 (``2026-11-30T00:00:00Z``), or unix seconds; the default is now."""
    if text is None:
        return int(now)
    try:
        return int(float(text))
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ReportError(f"--end {text!r}: expected an RFC 3339 time such as 2026-11-30T00:00:00Z") from None
    if parsed.tzinfo is None:
        raise ReportError(f"--end {text!r}: give a time zone, e.g. 2026-11-30T00:00:00Z")
    return int(parsed.timestamp())


def load_prices(path: str) -> Prices:
    """The price table (docs/report.md): ``currency``; ``perHour: {model | profile | model/profile | default: N}``;
    optionally ``byNodeLabel: {label, perHour: {value: N}}`` and ``nodePriceSeries: <metric>``."""
    document = _read_price_file(path)
    unknown = set(document) - {"currency", "perHour", "byNodeLabel", "nodePriceSeries"}
    if unknown:
        raise ReportError(
            f"--prices {path}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; expected currency, "
            "perHour, byNodeLabel and nodePriceSeries"
        )
    currency = document.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise ReportError(f"--prices {path}: currency must be a string such as USD")
    by_label = document.get("byNodeLabel") or {}
    if not isinstance(by_label, dict) or set(by_label) - {"label", "perHour"}:
        raise ReportError(
            f"--prices {path}: byNodeLabel: expected {{label: <node label>, perHour: {{<value>: <price>}}}}"
        )
    label = by_label.get("label")
    if by_label and (not isinstance(label, str) or not label):
        raise ReportError(
            f"--prices {path}: byNodeLabel.label: expected a node label such as node.kubernetes.io/instance-type"
        )
    series = document.get("nodePriceSeries")
    if series is not None and (not isinstance(series, str) or not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", series)):
        raise ReportError(
            f"--prices {path}: nodePriceSeries {series!r}: expected a metric name such as node_gpu_hourly_cost"
        )
    return Prices(
        per_hour=_price_map(path, "perHour", document.get("perHour")),
        currency=currency,
        node_label=label,
        per_label_value=_price_map(path, "byNodeLabel.perHour", by_label.get("perHour", {})) if by_label else {},
        node_series=series,
    )


def _read_price_file(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except OSError as err:
        raise ReportError(f"--prices {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ReportError(f"--prices {path}: not YAML: {where}{getattr(err, 'problem', None) or err}") from None
    if not isinstance(document, dict) or not isinstance(document.get("perHour"), dict):
        raise ReportError(
            f"--prices {path}: expected a mapping with 'perHour: {{<GPU model or MIG profile>: "
            "<price per hour>}}' (and optionally 'currency: USD')"
        )
    return document


def _price_map(path: str, where: str, table: object) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ReportError(f"--prices {path}: {where}: expected a mapping of names to prices per hour")
    out: dict[str, float] = {}
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise ReportError(f"--prices {path}: {where}[{key!r}] = {value!r}: expected a price per hour >= 0")
        out[str(key)] = float(value)
    return out


def parse_fail_above(text: str | None) -> tuple[float, bool] | None:
    """``30%`` (idle share of a group's GPU-hours with telemetry) or ``100`` (idle GPU-hours of a group)."""
    if text is None:
        return None
    share = text.endswith("%")
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise ReportError(
            f"--fail-above {text!r}: expected idle GPU-hours (e.g. 100) or an idle share (e.g. 30%)"
        ) from None
    return value, share


def findings(report: Report, limit: tuple[float, bool]) -> list[str]:
    value, share = limit
    out = []
    for row in report.rows:
        measured = 100 * row.idle_share if share else row.idle_hours
        if measured > value:
            what = f"{measured:.0f}% idle" if share else f"{measured:,.1f} idle GPU-hours"
            out.append(f"{row.group}: {what} (limit {value:g}{'%' if share else ''})")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # long: one call per flag, in the order --help lists them
    parser.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://127.0.0.1:9090"
    )
    parser.add_argument("--window", default="7d", help="length of the report window (default 7d)")
    parser.add_argument("--end", metavar="TIME", help="end of the window, RFC 3339 (default: now)")
    parser.add_argument(
        "--step",
        default="5m",
        help="integration step (default 5m); long windows are split into queries of at most 10,000 steps",
    )
    parser.add_argument(
        "--prices",
        metavar="FILE",
        help="price table (YAML): currency, perHour by GPU model or MIG profile; see docs/report.md",
    )
    parser.add_argument(
        "--group",
        choices=GROUPS,
        default="team",
        help="rows by team (default), cost-center, workload, namespace or pod (with its workload)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        metavar="PERCENT",
        help=f"a GPU below this utilisation during a step is idle (default {DEFAULT_THRESHOLD:g})",
    )
    parser.add_argument(
        "--fail-above",
        metavar="HOURS|PERCENT%",
        help="exit 1 when a group's idle GPU-hours (100) or idle share (30%%) is above this",
    )
    parser.add_argument(
        "--bucket",
        choices=sorted(BUCKETS),
        help="also give the figures per day (1d) or hour (1h), in -o json and -o csv",
    )
    parser.add_argument(
        "--recommend",
        action="store_true",
        help="per workload, the smallest class of the fleet its p95 utilisation and peak memory fit, what it "
        "would save, and the GPUPolicy that steers it there (docs/report.md)",
    )
    parser.add_argument(
        "--policies-out",
        metavar="DIR",
        help="with --recommend: also write each recommended GPUPolicy to DIR/<policy name>.yaml, for "
        "gpugate audit --compare-to DIR",
    )
    parser.add_argument(
        "--weight-by-use",
        action="store_true",
        help="split a time-sliced or MPS GPU's held part between its pods by their use (dcgm-exporter's per-pod "
        "DCGM_FI_DEV_GPU_UTIL, 4.5.3-4.8.2 or later with --kubernetes-virtual-gpus) instead of by replicas held; "
        "a step without per-pod figures is split by replicas (docs/report.md)",
    )
    parser.add_argument("--top", type=int, default=10, help="how many idle workloads to list (default 10)")
    parser.add_argument("-o", "--output", choices=FORMATS, default="table", help="table (default), csv, json, html")
    parser.add_argument("--out", metavar="FILE", help="write the report to FILE instead of standard output")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each query (default 120)")


class _Steps:
    """The report's way through its window, on the progress line every command shares (``terminal.Progress``)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.started = time.monotonic()

    def __call__(self, done: int, total: int, what: str) -> None:
        line = (
            f"gpugate report: {100 * done // max(1, total)}% of {total} steps, {what} "
            f"({time.monotonic() - self.started:.0f} s)"
        )
        self.progress.show(line[:150], force=done >= total)  # a wrapped line would not overwrite itself


def _compute(args: argparse.Namespace, progress: _Steps) -> Report:
    """Flags -> preflight -> the window streamed chunk by chunk through the integrator -> the report."""
    window = parse_duration(args.window, flag="--window")
    step = parse_duration(args.step, flag="--step")
    end = parse_time(args.end, now=time.time())
    if step > window:
        raise ReportError(f"--step {args.step} is longer than --window {args.window}")
    if not 0 <= args.threshold <= 100:
        raise ReportError(f"--threshold {args.threshold:g}: expected a percentage from 0 to 100")
    if args.top < 0:
        raise ReportError(f"--top {args.top}: expected 0 or more")
    if args.policies_out and not args.recommend:
        raise ReportError("--policies-out needs --recommend (the policies are the recommendations')")
    if args.policies_out and not os.path.isdir(args.policies_out):
        raise ReportError(
            f"--policies-out {args.policies_out}: not a directory (create it, or copy the policies in force there)"
        )
    bucket = BUCKETS[args.bucket] if args.bucket else None
    if bucket and bucket % step:
        raise ReportError(f"--bucket {args.bucket} is not a whole number of --step {args.step}")
    prices = load_prices(args.prices) if args.prices else None
    # Whole steps only: the window starts `window` rounded down to a multiple of `step` before the end.
    start = end - (window // step) * step
    prometheus = Prometheus(args.prometheus, timeout=args.timeout)
    notes = preflight(prometheus, start=start, end=end)
    if prices is not None and (prices.node_label or prices.node_series):
        prices = node_prices(prometheus, prices, start=start, end=end, notes=notes)
    integrator = Integrator(
        step=step,
        group_by=args.group,
        threshold=args.threshold,
        prices=prices,
        top=args.top,
        bucket=bucket,
        weight_by_use=args.weight_by_use,
    )
    for chunk in stream_inputs(prometheus, start=start, end=end, step=step, progress=progress):
        integrator.add(chunk)
    if not integrator.workloads:
        raise ReportError(f"empty window: no pod held a GPU between {iso(start)} and {iso(end)}")
    integrator.memory(memory_peaks(prometheus, start=start, end=end, notes=notes))
    report = integrator.finish()
    report.notes[:0] = notes
    if args.recommend:
        report.recommendations = recommend(report, prices=prices)
    return report


def write_policies(report: Report, directory: str) -> list[str]:
    """--policies-out: each recommended GPUPolicy as DIR/<its name>.yaml (replacing an earlier run's)."""
    written = []
    for r in report.recommendations or []:
        if not r["policy"]:
            continue
        path = os.path.join(directory, f"{yaml.safe_load(r['policy'])['metadata']['name']}.yaml")
        try:
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(r["policy"])
        except OSError as err:
            raise ReportError(f"--policies-out {directory}: {path}: {err.strerror or err}") from None
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    line = Progress(sys.stderr)
    progress = _Steps(line)
    try:
        limit = parse_fail_above(args.fail_above)
        report = _compute(args, progress)
        text = render(report, output=args.output)
        written = write_policies(report, args.policies_out) if args.policies_out else []
    except (ReportError, PrometheusError) as err:
        line.clear()
        print(f"gpugate report: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    line.clear()
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as stream:
                stream.write(text)
        except OSError as err:
            print(f"gpugate report: --out {args.out}: {err.strerror or err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"gpugate report: wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    for path in written:
        print(f"gpugate report: wrote {path}", file=sys.stderr)
    for note in report.notes if args.output != "table" else []:
        print(f"gpugate report: note: {note}", file=sys.stderr)
    found = findings(report, limit) if limit else []
    for finding in found:
        print(f"gpugate report: over --fail-above: {finding}", file=sys.stderr)
    return EXIT_FOUND if found else EXIT_OK
