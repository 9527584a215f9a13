"""The report as records: the JSON document (webhook/report/report.schema.json) and CSV."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any

from .accounting import Bucket, Row, Workload
from .model import Report


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


SCHEMA_VERSION = "gpugate.io/report/v1.4"
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
        "fraction_gpus_peak": round(row.fraction, 4),
        "workload": row.workload,
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
        "sources": sorted(capacity.sources),
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
        "shared_gpus_split_by": report.shared_gpus_split_by,
        "shared_gpu_steps": dict(report.shared_gpu_steps),
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
        "workload",
        "start",
        "end",
        "whole_gpus_peak",
        "mig_slices_peak",
        "shared_peak",
        "fraction_gpus_peak",
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
