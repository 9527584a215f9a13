"""``gpugate policy validate|schema``: check a policy directory, print the JSON Schema of policy files."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..terminal import EXIT_FOUND, EXIT_OK
from .files import load_policies
from .loader import PolicyError
from .schema import policy_schema


def add_arguments(policy: argparse.ArgumentParser) -> Any:
    """The ``policy`` subcommands; returns the subparsers, which the dispatcher adds ``init`` to."""
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    validate = policy_sub.add_parser("validate", help="exit 0 when every policy in DIR is valid")
    validate.add_argument("directory")
    validate.set_defaults(run=validate_directory)
    schema = policy_sub.add_parser("schema", help="print the JSON Schema of policy files (for editors)")
    schema.set_defaults(run=print_schema)
    return policy_sub


def print_schema(args: argparse.Namespace) -> int:
    print(json.dumps(policy_schema(), indent=2))
    return EXIT_OK


def validate_directory(args: argparse.Namespace) -> int:
    try:
        policies = load_policies(args.directory)
    except PolicyError as err:
        print(err, file=sys.stderr)
        return EXIT_FOUND
    names = ", ".join(p.name for p in policies.policies) or "none"
    print(f"{args.directory}: {len(policies.policies)} valid policies ({names})")
    for pool in policies.pools:  # what feasibility counts on beside the nodes there are
        gpus = ", ".join(f"{n} × {r}" for r, n in pool.allocatable)
        most = f", at most {pool.max_nodes} nodes" if pool.max_nodes else ""
        print(f"{args.directory}: node pool {pool.name!r} scales up: {gpus} a node{most} ({pool.source})")
    for note in policies.notes:  # they load, but say what to change
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK
