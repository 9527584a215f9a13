"""The report as one self-contained HTML page with inline SVG charts."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

from .accounting import Row, Workload
from .model import Report
from .render_cells import _cells, _columns, _hours, _money, _pct, _workload_cells, _workload_columns, summary

# Colours for busy / idle / no telemetry, and for the utilisation lines (colour-blind-safe, Okabe-Ito).
BUSY, IDLE, UNKNOWN = "#0072b2", "#d55e00", "#bbbbbb"
# IDLE is not among the line colours: the dashed threshold line wears it.
LINES = ("#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#999933")


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
