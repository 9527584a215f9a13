"""The report's figures as text: the cells and columns the table and the HTML page both show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from .accounting import Row, Workload
from .model import Report


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
    parts += [f"{row.fraction:.2f} in fractions"] if row.fraction else []
    return ", ".join(parts) or "-"


def _recommended(report: Report, row: Row) -> str:
    """What --recommend gives the workload of a pod row: its class, or '-' (kept, or no recommendation)."""
    for found in report.recommendations or []:
        if found.get("workload") == row.workload and found.get("recommended"):
            return f"{found['recommended']['class']} {found['recommended']['model']}"
    return "-"


def _columns(report: Report) -> list[str]:
    columns = [
        report.group_by.upper(),
        *(["WORKLOAD"] if report.group_by == "pod" else []),
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
    recommended = ["RECOMMENDED"] if report.group_by == "pod" and report.recommendations is not None else []
    return [*columns, "UTILISATION FROM", *recommended]


def _cells(report: Report, row: Row) -> list[str]:
    cells = [
        row.group,
        *([row.workload or ""] if report.group_by == "pod" else []),
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
    recommended = [_recommended(report, row)] if report.group_by == "pod" and report.recommendations is not None else []
    return [*cells, row.source, *recommended]


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


def summary(report: Report) -> str:
    return (
        f"GPU-hours from {_time(report.start)} to {_time(report.end)} UTC, step {report.step:g} s; idle = "
        f"utilisation below {report.threshold:g}%; {100 * report.total.telemetry_share:.0f}% of allocated "
        "GPU-hours had telemetry"
        + ("; time-sliced and MPS GPUs split by use (--weight-by-use)" if report.shared_gpus_split_by == "use" else "")
    )
