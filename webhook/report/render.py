"""The report as a terminal table, CSV, JSON, or one self-contained HTML page with inline SVG charts."""

from __future__ import annotations

from .model import Report
from .render_cells import (
    _cells,
    _columns,
    _grid,
    _hours,
    _memory,
    _money,
    _pct,
    _workload_cells,
    _workload_columns,
    summary,
)
from .render_html import to_html
from .render_records import to_csv, to_json

FORMATS = ("table", "csv", "json", "html")


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
    seen = "dcgm-exporter reported or nodes advertised"
    if "gpugate_dra_gpu_device" in capacity.sources:
        seen = "dcgm-exporter reported, nodes advertised or ResourceSlices published"
    title = f"Capacity (GPUs {seen}): {share:.0f}% of GPU-hours unallocated"
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


def render(report: Report, *, output: str) -> str:
    return {"table": to_table, "csv": to_csv, "json": to_json, "html": to_html}[output](report)
