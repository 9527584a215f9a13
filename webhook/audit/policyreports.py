"""The audit as wgpolicyk8s.io/v1alpha2 PolicyReports, one per audited namespace."""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

REPORT_NAME = "gpugate-audit"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpugate-audit"}
#: Results kept per report: etcd refuses objects over 1.5 MiB (its --max-request-bytes default), and a result is
#: up to about 1 KB. The summary still counts every result.
MAX_RESULTS = 1000
_SEVERITY = {"refused": "high", "warned": "medium", "changed": "medium", "error": "high"}
_RESULT = {"refused": "fail", "warned": "warn", "changed": "fail", "error": "error"}


# Over 60 lines: one PolicyReport literal per namespace, field for field as the CRD lays it out.
def policy_reports(report: Mapping[str, Any], *, now: datetime.datetime) -> list[dict[str, Any]]:
    """One wgpolicyk8s.io/v1alpha2 PolicyReport per audited namespace (the shape Kyverno and Policy Reporter
    read; schema: kubernetes-sigs/wg-policy-prototypes policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml).

    A result for each finding; objects without one count as `pass` in the summary only, which keeps a report
    of a namespace with thousands of pods well under the apiserver's object size limit.
    """
    stamp = {"seconds": int(now.timestamp()), "nanos": 0}
    by_namespace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in report["findings"]:
        resource = {k: finding[k] for k in ("apiVersion", "kind", "namespace", "name", "uid") if finding.get(k)}
        base = {
            "source": "gpugate",
            "policy": finding["policy"] or "built-in",
            "category": "GPU",
            "severity": _SEVERITY[finding["verdict"]],
            "timestamp": stamp,
            "resources": [resource],
            "scored": True,
        }
        results = by_namespace[finding["namespace"]]
        for v in finding.get("violations", []):
            results.append(
                {
                    **base,
                    "rule": v["rule"],
                    "result": "fail" if v["enforced"] else "warn",
                    "message": v["message"],
                    "properties": {"path": v["path"]},
                }
            )
        if finding.get("wouldAdd"):
            changes = "; ".join(c["change"] for c in finding["wouldAdd"])
            results.append(
                {
                    **base,
                    "rule": "not-mutated",
                    "result": "fail",
                    "message": f"lacks what gpugate's mutating webhook adds: {changes}. {finding['note']}",
                }
            )
        if finding.get("error"):
            results.append({**base, "rule": "error", "result": "error", "message": finding["error"]})
    out = []
    for namespace, tally in report["namespaces"].items():
        results = by_namespace.get(namespace, [])
        summary = Counter(r["result"] for r in results)
        if len(results) > MAX_RESULTS:
            left_out = len(results) - MAX_RESULTS + 1
            results = [
                *results[: MAX_RESULTS - 1],
                {
                    "source": "gpugate",
                    "policy": "gpugate-audit",
                    "rule": "truncated",
                    "result": "skip",
                    "timestamp": stamp,
                    "message": f"{left_out} more results left out (the summary counts them): "
                    f"run gpugate audit -n {namespace} for all of them",
                },
            ]
        out.append(
            {
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport",
                "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
                "summary": {
                    "pass": tally["fine"],
                    "fail": summary["fail"],
                    "warn": summary["warn"],
                    "error": summary["error"],
                    "skip": 0,
                },
                "results": results,
            }
        )
    return out
