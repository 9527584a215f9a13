"""The ``gpugate audit`` command: reads a live cluster through `webhook.kube`, judges it with `webhook.audit`."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ..policy.files import load_policies
from ..policy.keys import TEAM_LABEL
from ..policy.loader import PolicyError
from ..policy.model import PolicySet
from ..terminal import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK, Progress
from . import evaluation, policyreports, render, tally

#: The namespaces the webhooks in deploy/base never see (their namespaceSelector): nothing there was admitted
#: by gpugate, so nothing there is judged by it.
DEFAULT_EXCLUDED = ("kube-system", "gpugate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the "
        "in-cluster service account when run in a pod)",
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--policies",
        metavar="DIR",
        help="judge with these policies (default: the installed gpugate's, from its ConfigMap)",
    )
    parser.add_argument(
        "--compare-to",
        metavar="DIR",
        help="preview a policy change: list the objects whose verdict or injections differ "
        "between the installed (or --policies) policies and these",
    )
    parser.add_argument("--namespace", "-n", help="audit this namespace only (default: all)")
    parser.add_argument(
        "--exclude-namespace",
        action="append",
        metavar="NS",
        help="skip this namespace (repeatable; default: "
        + ", ".join(DEFAULT_EXCLUDED)
        + ", which gpugate's webhooks exclude)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml", "none"),
        default="table",
        help="table (default), json or yaml on stdout; none prints nothing (with --report)",
    )
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 when something is found (a scheduled run whose reports say what); bad input "
        "and cluster errors still exit 2",
    )
    parser.add_argument(
        "--report",
        choices=("policyreports",),
        help="also write the results as wgpolicyk8s.io/v1alpha2 PolicyReports, one per namespace",
    )
    parser.add_argument("--gpugate-namespace", default="gpugate", help="where gpugate is installed")
    parser.add_argument("--gpugate-deployment", default="gpugate", help="gpugate's Deployment")
    parser.add_argument(
        "--policies-configmap",
        metavar="NAME",
        help="read the installed policies from this ConfigMap instead of the one the Deployment mounts",
    )
    parser.add_argument("--team-label", default=TEAM_LABEL, help="the pod label that names a team")
    parser.add_argument("--page-size", type=int, default=500, help="objects per list request")


def _load(directory: str, what: str) -> PolicySet:
    if not Path(directory).is_dir():
        raise ValueError(f"{what} {directory}: not a directory")
    return load_policies(directory)


def _installed(client: Any, args: argparse.Namespace) -> tuple[str, PolicySet]:
    from ..kube import cluster as kube

    source, files = kube.installed_policies(
        client, namespace=args.gpugate_namespace, deployment=args.gpugate_deployment, configmap=args.policies_configmap
    )
    with tempfile.TemporaryDirectory(prefix="gpugate-audit-") as tmp:
        for name, text in files.items():
            if "/" not in name and not name.startswith("."):
                (Path(tmp) / name).write_text(text, encoding="utf-8")
        try:
            return source, load_policies(tmp)
        except PolicyError as err:
            raise ValueError(f"installed policies ({source}): {str(err).replace(tmp + '/', '')}") from err


def run(args: argparse.Namespace) -> int:
    from ..kube import cluster as kube  # imported here: the Kubernetes client takes most of a second to import

    try:
        return _run(args)
    except (ValueError, PolicyError, kube.ClusterError) as err:
        print(f"gpugate audit: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _fleet_drift(client: Any, policies: PolicySet) -> list[str]:
    """Where the policies and the cluster's GPU fleet disagree (classes no node carries, GPU nodes no class
    covers); empty, with a note, when the fleet cannot be read (the auditor's RBAC may not grant it)."""
    from ..inventory.model import Inventory
    from ..inventory.pools import drift
    from ..kube.inventory import read_fleet

    try:
        fleet = Inventory.of(read_fleet(client))
    except Exception as exc:  # forbidden, unreachable: the audit of the objects stands on its own
        print(
            f"gpugate audit: the GPU fleet was not read ({str(exc).splitlines()[0][:200]}); no drift shown",
            file=sys.stderr,
        )
        return []
    return drift(fleet, policies)


# Over 60 lines: the command's steps in order (policies, cluster reads, judging, reports, output), each short.
def _run(args: argparse.Namespace) -> int:
    from ..kube import cluster as kube

    if args.page_size < 1:
        raise ValueError("--page-size must be at least 1")
    # Local files first: a typo in a policy directory should not wait for the cluster.
    chosen = _load(args.policies, "--policies") if args.policies else None
    proposed = _load(args.compare_to, "--compare-to") if args.compare_to else None
    client = kube.api_client(args.kubeconfig, context=args.context)
    if chosen is None:
        source, policies = _installed(client, args)
    else:
        source, policies = args.policies, chosen
    progress = Progress(sys.stderr)
    progress.show("gpugate audit: listing namespaces", force=True)
    labels = kube.namespace_labels(client)
    if args.namespace and args.namespace not in labels:
        raise ValueError(f"--namespace {args.namespace}: no such namespace")
    excluded = set(args.exclude_namespace if args.exclude_namespace is not None else DEFAULT_EXCLUDED)
    excluded.discard(args.namespace)  # a namespace asked for by name is audited
    run = tally.Audit(policies, namespace_labels=labels, compare_to=proposed, team_label=args.team_label)
    served = kube.served_kinds(
        client, wanted=[(w.group, w.kind, w.plural, w.versions) for w in evaluation.audited_kinds(policies, proposed)]
    )
    if ("", "Pod") not in served:  # discovery that finds no pods is a broken answer, not an empty cluster
        raise kube.ClusterError("API discovery (GET /api/v1) lists no pods resource: is this a Kubernetes apiserver?")
    listed = 0
    for (group, kind), (version, plural) in served.items():
        for obj in kube.list_objects(
            client,
            group=group,
            version=version,
            plural=plural,
            kind=kind,
            namespace=args.namespace,
            page_size=args.page_size,
        ):
            listed += 1
            if (obj.get("metadata") or {}).get("namespace") not in excluded:
                run.add(obj)
            progress.show(
                f"gpugate audit: {kind}: {listed} objects listed, {run.counts['audited']} audited, "
                f"{len(run.findings)} findings"
            )
    progress.clear()
    report = run.report(policies_source=source, proposed_source=args.compare_to)
    report["fleetDrift"] = _fleet_drift(client, policies)
    for finding in report["fleetDrift"]:
        print(f"gpugate audit: fleet drift: {finding}", file=sys.stderr)
    if args.output == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")  # one write: json.dump makes one per token
    elif args.output == "yaml":
        yaml.safe_dump(report, sys.stdout, sort_keys=False)
    elif args.output == "table":
        sys.stdout.write(render.render_table(report))
    if args.report == "policyreports":
        reports = policyreports.policy_reports(report, now=datetime.datetime.now(datetime.UTC))
        selector = ",".join(f"{k}={v}" for k, v in policyreports.MANAGED_BY.items())
        written, deleted = kube.replace_policy_reports(
            client, reports, label_selector=selector, namespace=args.namespace
        )
        print(
            f"gpugate audit: wrote {written} PolicyReports ({policyreports.REPORT_NAME}), deleted {deleted} stale ones",
            file=sys.stderr,
        )
    return EXIT_FOUND if run.found and not args.exit_zero else EXIT_OK
