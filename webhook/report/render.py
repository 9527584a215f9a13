"""The report as a terminal table, CSV, JSON, or one self-contained HTML page with inline SVG charts."""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .accounting import Bucket, Row, Workload
from .compute import Report

FORMATS = ("table", "csv", "json", "html")

# Colours for busy / idle / no telemetry, and for the utilisation lines (colour-blind-safe, Okabe-Ito).
BUSY, IDLE, UNKNOWN = "#0072b2", "#d55e00", "#bbbbbb"
# IDLE is not among the line colours: the dashed threshold line wears it.
LINES = ("#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#999933")


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _hours(value: float) -> str:
    return f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _memory(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024:.1f} GiB"


def allocation(row: Row) -> str:
    """``4 GPU, 2x1g.10gb, 1 shared``: the most of each kind held at once."""
    parts = [f"{row.whole_gpus} GPU"] if row.whole_gpus else []
    parts += [f"{count}x{profile}" for profile, count in sorted(row.mig_slices.items())]
    parts += [f"{row.shared} shared"] if row.shared else []
    return ", ".join(parts) or "-"


def _columns(report: Report) -> list[str]:
    columns = [
        report.group_by.upper(),
        "GPUS (PEAK)",
        "ALLOC GPU-H",
        "BUSY GPU-H",
        "IDLE GPU-H",
        "IDLE %",
        "NO TELEMETRY GPU-H",
        "AVG UTIL",
        "P95 UTIL",
        "PEAK MEM",
    ]
    if report.currency:
        columns += [f"COST {report.currency}", f"IDLE COST {report.currency}"]
    return [*columns, "UTILISATION FROM"]


def _cells(report: Report, row: Row) -> list[str]:
    cells = [
        row.group,
        allocation(row),
        _hours(row.allocated_hours),
        _hours(row.busy_hours),
        _hours(row.idle_hours),
        _pct(100 * row.idle_share if row.telemetry_hours else None),
        _hours(row.no_telemetry_hours),
        _pct(row.avg_utilisation),
        _pct(row.p95_utilisation),
        _memory(row.peak_memory_mib),
    ]
    if report.currency:
        cells += [_money(row.cost), _money(row.idle_cost)]
    return [*cells, row.source]


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for index, cells in enumerate([header, *rows]):
        lines.append(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _workload_cells(report: Report, workload: Workload) -> list[str]:
    cells = [
        workload.key,
        workload.team,
        _hours(workload.idle_hours),
        _hours(workload.allocated_hours),
        _pct(workload.avg_utilisation),
    ]
    return [*cells, _money(workload.idle_cost or 0.0)] if report.currency else cells


def _workload_columns(report: Report) -> list[str]:
    columns = ["WORKLOAD", "TEAM", "IDLE GPU-H", "ALLOC GPU-H", "AVG UTIL"]
    return [*columns, f"IDLE COST {report.currency}"] if report.currency else columns


def _capacity_lines(report: Report) -> list[str]:
    """capacity = allocated + unallocated, for the fleet and per GPU model, as the bill has them."""
    capacity = report.capacity
    if not capacity.hours:
        return []
    share = 100 * capacity.unallocated_hours / capacity.hours
    header = ["GPU MODEL", "CAPACITY GPU-H", "ALLOCATED GPU-H", "UNALLOCATED GPU-H"]
    if report.currency:
        header += [f"CAPACITY {report.currency}", f"ALLOCATED {report.currency}", f"UNALLOCATED {report.currency}"]
    rows = []
    for model, entry in [*sorted(capacity.by_model.items()), ("TOTAL", _capacity_entry(report))]:
        allocated, unallocated = entry.get("allocated_hours", 0.0), entry.get("unallocated_hours", 0.0)
        cells = [model, _hours(allocated + unallocated), _hours(allocated), _hours(unallocated)]
        if report.currency:
            a, u = entry.get("allocated_cost", 0.0), entry.get("unallocated_cost", 0.0)
            cells += [_money(a + u), _money(a), _money(u)]
        rows.append(cells)
    title = f"Capacity (GPUs dcgm-exporter reported): {share:.0f}% of GPU-hours unallocated"
    return ["", title, _grid(header, rows)]


def _recommendation_lines(report: Report) -> list[str]:
    """--recommend: the workloads that fit a smaller class first, then those that do not, and the policies."""
    if report.recommendations is None:
        return []
    header = ["WORKLOAD", "NOW", "RECOMMENDED", "GPU-H SAVED", "P95 UTIL", "PEAK MEM", "CONFIDENCE"]
    if report.currency:
        header.insert(4, f"SAVED {report.currency}")
    rows = []
    for r in report.recommendations:
        target = r["recommended"]
        cells = [
            r["workload"],
            f"{r['current']['class']} {r['current']['model']}",
            f"{target['class']} {target['model']}" if target else "-",
            _hours(r["gpu_hours_saved"]),
            _pct(None if r["p95_utilisation"] is None else 100 * r["p95_utilisation"]),
            _memory(r["peak_memory_mib"]),
            f"{r['confidence']['level']} ({100 * r['confidence']['coverage']:.0f}% coverage)",
        ]
        if report.currency:
            cells.insert(4, _money(r["cost_saved"]))
        rows.append(cells)
    out = ["", "Recommendations (--recommend)", _grid(header, rows)] if rows else []
    for r in report.recommendations:
        if r["policy"]:
            out += ["", f"# {r['workload']}: {r['reason']}", "---", r["policy"].rstrip()]
    return out


def _capacity_entry(report: Report) -> dict[str, float]:
    capacity = report.capacity
    return {
        "allocated_hours": capacity.allocated_hours,
        "unallocated_hours": capacity.unallocated_hours,
        "allocated_cost": capacity.allocated_cost,
        "unallocated_cost": capacity.unallocated_cost,
    }


def summary(report: Report) -> str:
    return (
        f"GPU-hours from {_time(report.start)} to {_time(report.end)} UTC, step {report.step:g} s; idle = "
        f"utilisation below {report.threshold:g}%; {100 * report.total.telemetry_share:.0f}% of allocated "
        "GPU-hours had telemetry"
    )


def to_table(report: Report) -> str:
    rows = [_cells(report, row) for row in report.rows]
    total = _cells(report, report.total)
    total[0] = "TOTAL"
    out = [summary(report), "", _grid(_columns(report), [*rows, total])]
    if report.workloads:
        out += [
            "",
            "Top idle workloads",
            _grid(_workload_columns(report), [_workload_cells(report, w) for w in report.workloads]),
        ]
    out += _capacity_lines(report)
    out += _recommendation_lines(report)
    out += [f"note: {note}" for note in report.notes]
    return "\n".join(out) + "\n"


SCHEMA_VERSION = "gpugate.io/report/v1"
ROW_FIELDS = (
    "allocated_gpu_hours",
    "busy_gpu_hours",
    "idle_gpu_hours",
    "no_telemetry_gpu_hours",
    "unpriced_gpu_hours",
    "idle_share",
    "telemetry_share",
    "avg_utilisation",
    "p95_utilisation",
    "peak_memory_mib",
    "cost",
    "idle_cost",
    "no_telemetry_cost",
)
BUCKET_FIELDS = (
    "allocated_gpu_hours",
    "busy_gpu_hours",
    "idle_gpu_hours",
    "no_telemetry_gpu_hours",
    "unallocated_gpu_hours",
    "cost",
    "idle_cost",
    "unallocated_cost",
)


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits) + 0.0


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else _r(percent / 100, 4)


def _row_dict(row: Row, *, priced: bool) -> dict[str, Any]:
    """One group's (or the fleet's) figures: GPU-hours to 3 decimals, ratios 0..1 to 4, money to 2."""

    def money(value: float | None) -> float | None:
        return _r(value, 2) if priced else None

    return {
        "group": row.group,
        "whole_gpus_peak": row.whole_gpus,
        "mig_slices_peak": dict(sorted(row.mig_slices.items())),
        "shared_peak": row.shared,
        "allocated_gpu_hours": _r(row.allocated_hours, 3),
        "busy_gpu_hours": _r(row.busy_hours, 3),
        "idle_gpu_hours": _r(row.idle_hours, 3),
        "no_telemetry_gpu_hours": _r(row.no_telemetry_hours, 3),
        "unpriced_gpu_hours": _r(row.unpriced_hours if priced else 0.0, 3),
        "idle_share": _r(row.idle_share, 4),
        "telemetry_share": _r(row.telemetry_share, 4),
        "avg_utilisation": _ratio(row.avg_utilisation),
        "p95_utilisation": _ratio(row.p95_utilisation),
        "peak_memory_mib": None if row.peak_memory_mib is None else round(row.peak_memory_mib),
        "cost": money(row.cost),
        "idle_cost": money(row.idle_cost),
        "no_telemetry_cost": money(row.no_telemetry_cost),
        "utilisation_source": row.source,
    }


def _capacity_dict(report: Report) -> dict[str, Any]:
    """capacity = allocated + unallocated, for the fleet, per GPU model and per resource (whole, shared, profile)."""
    capacity = report.capacity
    priced = report.currency is not None

    def money(value: float | None) -> float | None:
        return _r(value, 2) if priced else None

    def part(name: str, key: str, entry: dict[str, float]) -> dict[str, Any]:
        allocated, unallocated = entry.get("allocated_hours", 0.0), entry.get("unallocated_hours", 0.0)
        return {
            name: key,
            "capacity_gpu_hours": _r(allocated + unallocated, 3),
            "allocated_gpu_hours": _r(allocated, 3),
            "unallocated_gpu_hours": _r(unallocated, 3),
            "capacity_cost": money(entry.get("allocated_cost", 0.0) + entry.get("unallocated_cost", 0.0)),
            "allocated_cost": money(entry.get("allocated_cost", 0.0)),
            "unallocated_cost": money(entry.get("unallocated_cost", 0.0)),
        }

    return {
        "capacity_gpu_hours": _r(capacity.hours, 3),
        "allocated_gpu_hours": _r(capacity.allocated_hours, 3),
        "unallocated_gpu_hours": _r(capacity.unallocated_hours, 3),
        "unallocated_share": _r(capacity.unallocated_hours / capacity.hours if capacity.hours else 0.0, 4),
        "capacity_cost": money(capacity.cost),
        "allocated_cost": money(capacity.allocated_cost),
        "unallocated_cost": money(capacity.unallocated_cost),
        "no_telemetry_cost": money(capacity.no_telemetry_cost),
        "by_model": [part("model", k, v) for k, v in sorted(capacity.by_model.items())],
        "by_resource": [part("resource", k, v) for k, v in sorted(capacity.by_resource.items())],
    }


def _bucket_dict(bucket: Bucket, *, size: int, priced: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"start": _iso(bucket.start), "end": _iso(bucket.start + size)}
    for name in BUCKET_FIELDS:
        attribute = name.replace("_gpu_hours", "_hours")
        value = getattr(bucket, attribute)
        out[name] = _r(value, 3) if name.endswith("hours") else (_r(value, 2) if priced else None)
    return out


def _workload_dict(workload: Workload, *, priced: bool) -> dict[str, Any]:
    return {
        "workload": workload.key,
        "namespace": workload.namespace,
        "kind": workload.kind,
        "name": workload.name,
        "team": workload.team,
        "cost_center": workload.cost_center,
        "allocated_gpu_hours": _r(workload.allocated_hours, 3),
        "idle_gpu_hours": _r(workload.idle_hours, 3),
        "avg_utilisation": _ratio(workload.avg_utilisation),
        "cost": _r(workload.cost, 2) if priced else None,
        "idle_cost": _r(workload.idle_cost or 0.0, 2) if priced else None,
    }


def document(report: Report) -> dict[str, Any]:
    """The report as the versioned JSON document (webhook/report/report.schema.json, docs/report.md)."""
    priced = report.currency is not None
    buckets = None
    if report.bucket:
        size = report.bucket
        buckets = {
            "size_seconds": size,
            "fleet": [_bucket_dict(b, size=size, priced=priced) for b in report.buckets.get("fleet", [])],
            "groups": {
                name: [_bucket_dict(b, size=size, priced=priced) for b in found]
                for name, found in report.buckets.items()
                if name != "fleet"
            },
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "window": {"start": _iso(report.start), "end": _iso(report.end), "step_seconds": int(report.step)},
        "group_by": report.group_by,
        "idle_threshold": _r(report.threshold / 100, 4),
        "currency": report.currency,
        "capacity": _capacity_dict(report),
        "groups": [_row_dict(row, priced=priced) for row in report.rows],
        "total": _row_dict(report.total, priced=priced),
        "top_idle_workloads": [_workload_dict(w, priced=priced) for w in report.workloads],
        "buckets": buckets,
        "recommendations": report.recommendations,
        "notes": report.notes,
    }


def to_json(report: Report) -> str:
    return json.dumps(document(report), indent=2) + "\n"


def to_csv(report: Report) -> str:
    """The same figures as JSON, one record per line: ``record`` says which part (group, total, capacity by
    model or resource, top idle workload, bucket); columns a record lacks are empty."""
    doc = document(report)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = [
        "record",
        report.group_by,
        "start",
        "end",
        "whole_gpus_peak",
        "mig_slices_peak",
        "shared_peak",
        *ROW_FIELDS,
        "capacity_gpu_hours",
        "unallocated_gpu_hours",
        "capacity_cost",
        "allocated_cost",
        "unallocated_cost",
        "utilisation_source",
    ]
    writer.writerow(header)

    def write(record: str, name: str, values: dict[str, Any]) -> None:
        cells = dict(values, record=record)
        cells[report.group_by] = name
        if isinstance(cells.get("mig_slices_peak"), dict):
            cells["mig_slices_peak"] = " ".join(f"{p}={c}" for p, c in cells["mig_slices_peak"].items())
        writer.writerow(["" if cells.get(column) is None else cells.get(column) for column in header])

    for row in doc["groups"]:
        write("group", row["group"], row)
    write("total", "TOTAL", doc["total"])
    capacity = doc["capacity"]
    write("capacity", "FLEET", capacity)
    for entry in capacity["by_model"]:
        write("capacity_by_model", entry["model"], entry)
    for entry in capacity["by_resource"]:
        write("capacity_by_resource", entry["resource"], entry)
    for workload in doc["top_idle_workloads"]:
        write("top_idle_workload", workload["workload"], workload)
    if doc["buckets"]:
        for bucket in doc["buckets"]["fleet"]:
            write("bucket", "FLEET", bucket)
        for name, found in doc["buckets"]["groups"].items():
            for bucket in found:
                write("bucket", name, bucket)
    return buffer.getvalue()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- HTML ---------------------------------------------------------------------------------------

_CSS = "".join(
    (
        'body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;',
        "background:#fff;max-width:1180px}",
        "h1{font-size:22px;margin:0 0 4px}",
        "h2{font-size:17px;margin:28px 0 8px}",
        "p.sub{color:#555;margin:0 0 16px}",
        ".cards{display:flex;gap:12px;margin:8px 0 8px}",
        ".card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:150px}",
        ".card b{display:block;font-size:22px}",
        ".card span{color:#555;font-size:12px}",
        "table{border-collapse:collapse;font-size:12.5px;margin-top:6px}",
        "th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}",
        "td{white-space:nowrap}",
        "th{background:#f5f5f5}",
        "td:first-child,th:first-child{text-align:left}",
        ".legend span{display:inline-block;margin-right:14px;font-size:12px}",
        ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}",
        "svg text{font:11px system-ui,sans-serif;fill:#333}",
        ".note{color:#8a4b00}",
    )
)


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{colour}"></i>{html.escape(label)}</span>' for label, colour in items)
        + "</div>"
    )


def _bars(rows: Sequence[Row], *, width: int = 1100) -> str:
    """Stacked horizontal bars: busy, idle and no-telemetry GPU-hours per group."""
    label_width, bar_height, gap = 220, 22, 8
    scale_max = max((row.allocated_hours for row in rows), default=0.0) or 1.0
    plot = width - label_width - 230
    height = len(rows) * (bar_height + gap) + 10
    parts = [
        f'<svg id="idle-by-group" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="GPU-hours by group">'
    ]
    for index, row in enumerate(rows):
        y = 5 + index * (bar_height + gap)
        x = float(label_width)
        parts.append(f'<text x="{label_width - 8}" y="{y + 15}" text-anchor="end">{html.escape(row.group[:34])}</text>')
        for value, colour, what in (
            (row.idle_hours, IDLE, "idle"),
            (row.busy_hours, BUSY, "busy"),
            (row.no_telemetry_hours, UNKNOWN, "no telemetry"),
        ):
            w = plot * value / scale_max
            if w > 0:
                parts.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_height}" fill="{colour}">'
                    f"<title>{html.escape(row.group)}: {value:,.1f} GPU-h {what}</title></rect>"
                )
            x += w
        parts.append(
            f'<text x="{x + 6:.1f}" y="{y + 15}">{row.idle_hours:,.0f} idle / {row.allocated_hours:,.0f} GPU-h</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(t0: float, t1: float) -> list[tuple[float, str]]:
    """Midnights (UTC) for windows of two days or more, else seven even ticks."""
    day = 86400
    if t1 - t0 >= 2 * day:
        every = day * max(1, round((t1 - t0) / day / 10))
        first = (int(t0) // day + 1) * day
        return [
            (float(t), datetime.fromtimestamp(t, UTC).strftime("%a %b %d")) for t in range(first, int(t1) + 1, every)
        ]
    return [
        (t0 + (t1 - t0) * k / 7, datetime.fromtimestamp(t0 + (t1 - t0) * k / 7, UTC).strftime("%b %d %H:%M"))
        for k in range(8)
    ]


def _lines(report: Report, *, width: int = 1100, height: int = 300) -> str:
    """Utilisation over time, one line per group (the largest few), with the idle threshold dashed."""
    timeline = report.timeline
    names = [row.group for row in report.rows[: len(LINES) - 1]]
    left, right, top, bottom = 50, 20, 10, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    times = timeline.times
    t0, t1 = (times[0], times[-1]) if times else (0.0, 1.0)
    span = (t1 - t0) or 1.0

    def xy(t: float, value: float) -> str:
        return f"{left + plot_w * (t - t0) / span:.1f},{top + plot_h * (1 - value / 100):.1f}"

    parts = [
        f'<svg id="utilisation-over-time" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="utilisation over time">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for pct in (0, 25, 50, 75, 100):
        y = top + plot_h * (1 - pct / 100)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>'
        )
    for t, label in _ticks(t0, t1):
        x = left + plot_w * (t - t0) / span
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{height - 10}" '
            f'text-anchor="{"end" if x > left + plot_w - 40 else "middle"}">{label}</text>'
        )
    y = top + plot_h * (1 - report.threshold / 100)
    parts.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{IDLE}" stroke-dasharray="5,4"/>'
    )
    for name, colour in zip(names, LINES, strict=False):
        values = timeline.utilisation.get(name, [])
        # A gap in telemetry breaks the line rather than drawing through it.
        segments: list[list[str]] = [[]]
        for t, value in zip(times, values, strict=True):
            if value is None:
                segments.append([])
            else:
                segments[-1].append(xy(t, value))
        for segment in segments:
            if len(segment) > 1:
                parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(segment)}"/>'
                )
            elif segment:
                cx, cy = segment[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="1.5" fill="{colour}"/>')
    parts.append("</svg>")
    legend = _legend(
        [(name, colour) for name, colour in zip(names, LINES, strict=False)]
        + [(f"idle threshold {report.threshold:g}%", IDLE)]
    )
    return "".join(parts) + legend


def _offenders(workloads: Sequence[Workload], *, width: int = 1100) -> str:
    label_width, bar_height, gap = 360, 18, 6
    scale_max = max((w.allocated_hours for w in workloads), default=0.0) or 1.0
    plot = width - label_width - 260
    height = max(1, len(workloads)) * (bar_height + gap) + 10
    parts = [
        f'<svg id="top-offenders" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="top idle workloads">'
    ]
    for index, workload in enumerate(workloads):
        y = 5 + index * (bar_height + gap)
        idle_w = plot * workload.idle_hours / scale_max
        rest_w = plot * max(0.0, workload.allocated_hours - workload.idle_hours) / scale_max
        parts.append(
            f'<text x="{label_width - 8}" y="{y + 13}" text-anchor="end">'
            f"{html.escape(workload.key[:58])}</text>"
            f'<rect x="{label_width}" y="{y}" width="{idle_w:.1f}" height="{bar_height}" fill="{IDLE}"/>'
            f'<rect x="{label_width + idle_w:.1f}" y="{y}" width="{rest_w:.1f}" height="{bar_height}" '
            f'fill="#f3d3bf"/>'
            f'<text x="{label_width + idle_w + rest_w + 6:.1f}" y="{y + 13}">'
            f"{workload.idle_hours:,.0f} of {workload.allocated_hours:,.0f} GPU-h idle "
            f"({html.escape(workload.team)})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: Report) -> str:
    total = report.total
    cards = [
        ("allocated GPU-hours", _hours(total.allocated_hours)),
        ("idle GPU-hours", f"{_hours(total.idle_hours)} ({100 * total.idle_share:.0f}%)"),
        ("no telemetry GPU-hours", _hours(total.no_telemetry_hours)),
        ("mean utilisation", _pct(total.avg_utilisation)),
    ]
    if report.currency:
        cards.append((f"idle cost {report.currency}", _money(total.idle_cost)))
    rows = [_cells(report, row) for row in report.rows]
    total_cells = _cells(report, total)
    total_cells[0] = "TOTAL"
    notes = "".join(f'<p class="note">Note: {html.escape(note)}</p>' for note in report.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpugate report: idle GPU-hours by {html.escape(report.group_by)}</title>
<style>{_CSS}</style></head><body>
<h1>Allocated but idle GPUs, by {html.escape(report.group_by)}</h1>
<p class="sub">{html.escape(summary(report))}</p>
<div class="cards">{
        "".join(f"<div class='card'><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>" for k, v in cards)
    }</div>
{notes}
<h2>GPU-hours by {html.escape(report.group_by)}</h2>
{_legend([("idle", IDLE), ("busy", BUSY), ("no telemetry", UNKNOWN)])}
{_bars(report.rows)}
<h2>Utilisation over time</h2>
{_lines(report)}
<h2>Top idle workloads</h2>
{_offenders(report.workloads)}
<h2>Figures</h2>
{_html_table(_columns(report), [*rows, total_cells])}
<h2>Top idle workloads (table)</h2>
{_html_table(_workload_columns(report), [_workload_cells(report, w) for w in report.workloads])}
<p class="sub">Made by gpugate report from dcgm-exporter and kube-state-metrics series; see docs/report.md.</p>
</body></html>
"""


def render(report: Report, *, output: str) -> str:
    return {"table": to_table, "csv": to_csv, "json": to_json, "html": to_html}[output](report)
