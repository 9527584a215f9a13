"""The audit's table: the report dict as aligned columns for a terminal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..terminal import columns


def _gpus_text(gpus: Mapping[str, str]) -> str:
    return ", ".join(f"{r}: {n}" for r, n in gpus.items()) or "-"


# Over 60 lines: the table's sections in the order they print, each a few lines.
def render_table(report: Mapping[str, Any]) -> str:
    """The report for a person: findings (or differences), then the namespace and team summaries."""
    lines: list[str] = []
    totals = report["totals"]
    source = report["policies"]["source"]
    if "differences" in report:
        lines.append(f"Policy change preview: {source} -> {report['proposed']['source']}")
        diffs = report["differences"]
        if not diffs:
            lines.append("No object changes verdict or injections.")
        for d in diffs:
            where = f"{d['kind']} {d['namespace']}/{d['name']}"
            lines.append(
                f"{where}: {d['verdict']['from']} -> {d['verdict']['to']}"
                + (
                    f" (policy {d['policy']['from']} -> {d['policy']['to']})"
                    if d["policy"]["from"] != d["policy"]["to"]
                    else ""
                )
            )
            for key, sign in (
                ("newViolations", "+ violation"),
                ("resolvedViolations", "- violation"),
                ("newChanges", "+ adds"),
                ("droppedChanges", "- no longer adds"),
            ):
                lines += [f"    {sign}: {item}" for item in d.get(key, [])]
        lines.append("")
    else:
        lines.append(f"Policies: {source} ({', '.join(report['policies']['names']) or 'none'})")
        findings = report["findings"]
        if findings:
            rows = [["NAMESPACE", "KIND", "NAME", "VERDICT", "POLICY"]]
            rows += [
                [
                    f["namespace"],
                    f["kind"],
                    f["name"],
                    f["verdict"].upper() if f["verdict"] == "refused" else f["verdict"],
                    f["policy"],
                ]
                for f in findings
            ]
            header, *body = columns(rows)
            lines.append(header)
            for finding, row in zip(findings, body, strict=True):
                lines.append(row)
                if finding.get("error"):
                    lines.append(f"    error: {finding['error']}")
                for v in finding.get("violations", []):
                    how = "refused" if v["enforced"] else "violation"
                    lines.append(f"    {how}: {v['message']}")
                for c in finding.get("wouldAdd", []):
                    lines.append(f"    lacks: {c['change']}")
                for c in finding.get("podsWillGet", []):
                    lines.append(f"    pods will get: {c['change']}")
                if finding.get("note"):
                    lines.append(f"    note: {finding['note']}")
        else:
            lines.append("No findings.")
        lines.append("")
    for title, key in (("NAMESPACE", "namespaces"), ("TEAM", "teams")):
        table = report[key]
        if not table:
            continue
        rows = [[title, "GPU PODS", "GPUS", "MISSING LABELS", "REFUSED", "WARNED", "CHANGED", "FINE"]]
        rows += [
            [
                name or "-",
                str(t["gpuPods"]),
                _gpus_text(t["gpus"]),
                str(t["missingAttributionLabels"]),
                str(t["refused"]),
                str(t["warned"]),
                str(t["changed"]),
                str(t["fine"]),
            ]
            for name, t in table.items()
        ]
        lines += [*columns(rows), ""]
    listed = ", ".join(f"{n} {k}" for k, n in totals["listed"].items()) or "nothing"
    lines.append(
        f"Listed {listed}; audited {totals['audited']}: {totals['refused']} refused, {totals['warned']} "
        f"warned, {totals['changed']} changed, {totals['fine']} fine"
        + (f", {totals['error']} errors" if totals["error"] else "")
        + f" ({totals['skippedOwned']} owned workloads and {totals['skippedFinished']} finished pods "
        "skipped)."
    )
    return "\n".join(lines) + "\n"
