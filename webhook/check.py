"""``gpugate check``: offline verdicts for every object in a manifest, as the apiserver would get them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from .admission.offline import Result, check_objects
from .inventory.snapshot import SnapshotError, load_snapshot
from .policy.documents import load_all
from .policy.files import load_policies
from .policy.loader import PolicyError
from .terminal import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK


class ManifestError(ValueError):
    """A manifest document that is not a Kubernetes object."""


def objects_of(documents: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Every object in a stream of YAML documents, ``kind: List`` flattened; ManifestError for non-objects."""
    out: list[Mapping[str, Any]] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, Mapping) or not doc.get("kind") or not doc.get("apiVersion"):
            raise ManifestError(f"document {index} is not a Kubernetes object (needs apiVersion and kind)")
        if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
            out += objects_of(doc["items"])
        else:
            out.append(doc)
    return out


def add_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("--policies", required=True, help="policy directory")
    check.add_argument("-f", "--filename", required=True, help="manifest file, or - for standard input")
    check.add_argument("--namespace", default="default", help="namespace for objects that name none")
    check.add_argument(
        "--namespace-labels",
        action="append",
        default=[],
        metavar="NS=k=v,...",
        help="labels of a namespace, e.g. ml=team=vision,cost-center=cv (repeatable)",
    )
    check.add_argument(
        "--fleet",
        metavar="FILE",
        help="decide with this fleet snapshot (gpugate fleet snapshot, or kubectl get nodes,runtimeclasses,"
        "deviceclasses,resourceslices -o yaml): GPU pods no node could host are refused",
    )
    check.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "patch", "none"),
        default="yaml",
        help="print the objects as they would be stored (yaml, the default; json), the JSON "
        "patches (patch), or only the verdicts on stderr (none)",
    )


def _parse_namespace_labels(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """``NS=k=v,k2=v2`` (repeatable) -> {NS: {k: v, k2: v2}}."""
    out: dict[str, dict[str, str]] = {}
    for item in values:
        namespace, sep, rest = item.partition("=")
        if not sep or not namespace:
            raise ValueError(f"--namespace-labels {item!r}: expected NS=key=value[,key=value...]")
        labels = out.setdefault(namespace, {})
        for pair in filter(None, rest.split(",")):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"--namespace-labels {item!r}: {pair!r} is not key=value")
            labels[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    try:
        policies = load_policies(args.policies)
    except PolicyError as err:
        print(err, file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        namespace_labels = _parse_namespace_labels(args.namespace_labels)
    except ValueError as err:  # the flag's fault, not the manifest's: say so
        print(f"gpugate check: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.filename == "-":
            documents = load_all(getattr(sys.stdin, "buffer", sys.stdin).read())
        else:
            with open(args.filename, "rb") as stream:
                documents = load_all(stream.read())
        objects = objects_of(documents)
    except (OSError, yaml.YAMLError, ManifestError, ValueError) as err:
        print(f"gpugate check: {args.filename}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not objects:  # an empty file is a mistake (wrong path, failed render), never "all allowed"
        print(f"gpugate check: {args.filename}: no Kubernetes objects in it (empty, or only comments)", file=sys.stderr)
        return EXIT_BAD_INPUT
    fleet = None
    if args.fleet:
        try:
            fleet = load_snapshot(args.fleet)
        except SnapshotError as err:
            print(f"gpugate check: --fleet {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    results = check_objects(
        objects, policies=policies, namespace_labels=namespace_labels, namespace=args.namespace, fleet=fleet
    )
    for result in results:
        _report(result)
    _print_objects(results, args.output)
    return EXIT_OK if all(r.allowed for r in results) else EXIT_FOUND


def _report(result: Result) -> None:
    """One object's verdict, warnings and audit annotations on stderr."""
    decision = result.decision
    policy = f' (policy "{decision.policy}")' if decision.policy else ""
    if result.skipped:
        print(
            f"{result.describe()}: skipped: {result.obj.get('kind')} ({result.obj.get('apiVersion')}) is not a "
            "kind gpugate reads (add a GPUWorkloadKind to the policy directory if it has pod templates)",
            file=sys.stderr,
        )
    elif result.allowed:
        print(f"{result.describe()}: allowed{policy}", file=sys.stderr)
    else:
        print(
            f"{result.describe()}: DENIED{policy}\n  {decision.message.replace(chr(10), chr(10) + '  ')}",
            file=sys.stderr,
        )
    for warning in result.warnings:
        print(f"  Warning: {warning}", file=sys.stderr)
    for key, value in decision.audit_annotations.items():
        print(f"  audit {key}: {value}", file=sys.stderr)


def _print_objects(results: list[Result], output: str) -> None:
    """The objects as they would be stored (or their patches) on stdout. A refused object never reaches
    stdout, so `| kubectl apply -f -` cannot apply it."""
    if output == "patch":
        outputs: list[Any] = [r.patch for r in results]
    else:
        outputs = [r.mutated for r in results if r.allowed]
    if outputs and output == "json":
        print(
            json.dumps(
                outputs[0] if len(outputs) == 1 else {"apiVersion": "v1", "kind": "List", "items": outputs}, indent=2
            )
        )
    elif outputs and output == "patch":
        print(json.dumps(outputs[0] if len(outputs) == 1 else outputs, indent=2))
    elif outputs and output == "yaml":
        print(yaml.safe_dump_all(outputs, sort_keys=False), end="")
