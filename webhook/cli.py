"""The ``gpugate`` command: the parser only. Each subcommand's flags and body live in its own package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .version import describe


def parser() -> argparse.ArgumentParser:
    # Each product is imported here, not at the top: `gpugate check` should not pay for gunicorn or the
    # Kubernetes client.
    from . import certs, check, fleet
    from .audit import command as audit
    from .native import command as native
    from .policy import command as policy
    from .report import command as report
    from .serve import command as serve

    top = argparse.ArgumentParser(prog="gpugate", description="Admission webhook that forms GPU pods correctly.")
    top.add_argument("--version", action="version", version=describe())
    sub = top.add_subparsers(dest="command", required=True)
    commands = [
        ("serve", serve, "run the admission server (gunicorn, TLS)"),
        ("check", check, "offline verdict for every object in a manifest"),
        ("audit", audit, "what gpugate would say about what already runs in a cluster (read-only)"),
        ("policy", policy, "work with policy files"),
        ("certs", certs, "make a CA and a serving certificate for the webhook"),
        ("fleet", fleet, "the cluster's GPU fleet by pool (vendor, product, stack, nodes), and snapshots of it"),
        ("report", report, "allocated-but-idle GPU-hours by team, cost center or workload, from Prometheus"),
    ]
    for name, module, help_text in commands:
        command = sub.add_parser(name, help=help_text)
        added = module.add_arguments(command)
        if name == "policy":
            fleet.add_policy_init(added)  # `policy init --from-cluster` reads the cluster: fleet's to do
            native.add_policy_compile(added)  # `policy compile` and validate's explanation: the native tier's
        if hasattr(module, "run"):
            command.set_defaults(run=module.run)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
