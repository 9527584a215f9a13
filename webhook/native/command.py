"""``gpugate policy compile DIR [--explain]``, and the same explanation after ``gpugate policy validate``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from ..policy.command import validate_directory
from ..policy.files import load_policies
from ..policy.loader import PolicyError
from ..terminal import EXIT_FOUND, EXIT_OK
from .compiler import Compiled, compile_policies, webhook_patch


def add_policy_compile(policy_sub: Any) -> None:
    """Add ``compile`` to the ``policy`` subcommands, and ``--explain`` (the native tier's account) to ``validate``."""
    compile_cmd = policy_sub.add_parser(
        "compile",
        help="print DIR as MutatingAdmissionPolicy/ValidatingAdmissionPolicy objects (Kubernetes 1.36+)",
    )
    compile_cmd.add_argument("directory")
    compile_cmd.add_argument(
        "--explain", action="store_true", help="say per policy and rule what compiles and what stays in the webhook"
    )
    compile_cmd.add_argument(
        "--webhook-patch",
        action="store_true",
        help="print the JSON patch that narrows gpugate's webhook configurations to what the objects leave them",
    )
    compile_cmd.set_defaults(run=compile_directory)
    validate = policy_sub.choices["validate"]
    validate.add_argument(
        "--explain", action="store_true", help="also say what the native tier decides (as policy compile --explain)"
    )
    validate.set_defaults(run=validate_and_explain)


def render(compiled: Compiled) -> str:
    """The objects as one multi-document YAML stream, the same bytes for the same policies."""
    return yaml.safe_dump_all(list(compiled.objects), sort_keys=True, default_flow_style=False, width=100)


def explanation(compiled: Compiled) -> str:
    return "\n".join(o.line() for o in compiled.outcomes)


def compile_directory(args: argparse.Namespace) -> int:
    try:
        policies = load_policies(args.directory)
    except PolicyError as err:
        # Nothing is printed to stdout: a pipeline into `kubectl apply` applies nothing, so the objects in
        # force stay as they are.
        print(err, file=sys.stderr)
        return EXIT_FOUND
    compiled = compile_policies(policies)
    if args.explain:
        print(explanation(compiled))
    elif getattr(args, "webhook_patch", False):
        sys.stdout.write(yaml.safe_dump(webhook_patch(compiled), sort_keys=True, default_flow_style=False, width=100))
    else:
        sys.stdout.write(render(compiled))
    return EXIT_OK


def validate_and_explain(args: argparse.Namespace) -> int:
    code = validate_directory(args)
    if code != EXIT_OK or not args.explain:
        return code
    print("native tier (gpugate policy compile):")
    print(explanation(compile_policies(load_policies(args.directory))))
    return EXIT_OK
