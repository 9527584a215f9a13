"""``gpugate fleet``: the cluster's GPU fleet by pool, a snapshot of it, and ``gpugate policy init
--from-cluster``, a policy's devices and classes written for what the fleet has.

The fleet comes from the cluster (``--kubeconfig``, else the in-cluster service account, else $KUBECONFIG or
~/.kube/config, as kubectl) or from a snapshot file (``--fleet``). Read-only: Nodes, RuntimeClasses,
DeviceClasses and ResourceSlices, the kinds gpugate's RBAC grants.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import yaml

from .inventory.model import Inventory
from .inventory.pools import class_documents, drift, pools
from .inventory.snapshot import SnapshotError, load_snapshot
from .policy.files import load_policies
from .policy.loader import PolicyError
from .policy.model import BUILTIN, Policy, PolicySet
from .policy.vendors import MODEL_LABELS
from .terminal import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK


def _source(command: argparse.ArgumentParser) -> None:
    command.add_argument("--kubeconfig", help="the cluster to read (default: in-cluster, else $KUBECONFIG)")
    command.add_argument("--context", help="kubeconfig context")
    command.add_argument("--fleet", metavar="FILE", help="read a fleet snapshot instead of a cluster")


def add_arguments(fleet: argparse.ArgumentParser) -> None:
    _source(fleet)
    fleet.add_argument("--policies", help="policy directory: its device profiles name the vendors, and drift is shown")
    fleet.add_argument("-o", "--output", choices=("table", "json"), default="table")
    fleet.set_defaults(run=show)
    sub = fleet.add_subparsers(dest="fleet_command")
    snapshot = sub.add_parser("snapshot", help="write the fleet (trimmed objects) as a Kubernetes List in YAML")
    _source(snapshot)
    snapshot.add_argument("-o", "--output", metavar="FILE", default="-", help="file to write (default: stdout)")
    snapshot.set_defaults(run=write_snapshot)


def add_policy_init(policy_sub: Any) -> None:
    """``gpugate policy init --from-cluster``, registered under ``policy`` by the dispatcher."""
    init = policy_sub.add_parser("init", help="write a policy's devices and classes for what a cluster has")
    init.add_argument("--from-cluster", action="store_true", required=True, help="read the cluster's fleet")
    _source(init)
    init.add_argument("--name", default="fleet", help="the policy's name (default: fleet)")
    init.set_defaults(run=init_policy)


def _objects(args: argparse.Namespace) -> list[dict[str, Any]]:
    from .kube.cluster import ClusterError, api_client
    from .kube.inventory import read_fleet

    try:
        return read_fleet(api_client(args.kubeconfig, context=args.context))
    except ClusterError:
        raise
    except Exception as exc:  # the client's errors: unreachable, forbidden
        raise ClusterError(f"cannot read the fleet: {exc}") from exc


def _inventory(args: argparse.Namespace) -> Inventory:
    if args.fleet:
        return load_snapshot(args.fleet)
    return Inventory.of(_objects(args))


def _labelled() -> Policy:
    """The built-in device profiles with each vendor's model label: what a fleet is read with by default."""
    devices = {n: dataclasses.replace(d, model_label=MODEL_LABELS.get(n)) for n, d in BUILTIN.devices.items()}
    return Policy(name="built-in", devices=devices)


def _policies(args: argparse.Namespace) -> PolicySet:
    return load_policies(args.policies) if getattr(args, "policies", None) else PolicySet.of([_labelled()])


def show(args: argparse.Namespace) -> int:
    from .kube.cluster import ClusterError

    try:
        policies = _policies(args)
        fleet = _inventory(args)
    except (PolicyError, SnapshotError, ClusterError) as err:
        print(f"gpugate fleet: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    governing = policies.policies[-1] if policies.policies else _labelled()
    found = pools(fleet, governing)
    findings = drift(fleet, policies) if getattr(args, "policies", None) else []
    tier = None if args.fleet else _tier(args)
    if args.output == "json":
        print(json.dumps({"pools": [p.as_dict() for p in found], "drift": findings, "admissionTier": tier}, indent=2))
    else:
        _table(found)
        for finding in findings:
            print(f"drift: {finding}")
        if tier:
            print(f"admission tier: {tier}")
    return EXIT_FOUND if findings else EXIT_OK


def _tier(args: argparse.Namespace) -> str:
    """Which admission tier the cluster has (webhook only, or native + webhook and whose objects)."""
    from .kube.cluster import ClusterError, api_client
    from .kube.native import tier_in_force

    try:
        return tier_in_force(api_client(args.kubeconfig, context=args.context))
    except ClusterError as err:
        return f"unknown: {err}"


def _table(found: list[Any]) -> None:
    head = ("VENDOR", "PRODUCT", "MEMORY", "SHARING", "MIG", "STACK", "NODES", "ALLOCATABLE PER NODE")
    rows = [
        (
            p.vendor,
            p.product,
            p.memory or "-",
            p.sharing,
            p.mig or "-",
            p.stack,
            str(len(p.nodes)),
            ", ".join(f"{v} × {r}" for r, v in p.allocatable.items())
            if p.stack != "dra"
            else f"{p.allocatable.get('devices', '0')} devices ({', '.join(p.resources)})",
        )
        for p in found
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def write_snapshot(args: argparse.Namespace) -> int:
    from .kube.cluster import ClusterError

    try:
        objects = load_snapshot_objects(args) if args.fleet else _objects(args)
    except (SnapshotError, ClusterError) as err:
        print(f"gpugate fleet snapshot: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}, sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"{args.output}: {len(objects)} objects", file=sys.stderr)
    return EXIT_OK


def load_snapshot_objects(args: argparse.Namespace) -> list[dict[str, Any]]:
    from .inventory.snapshot import trimmed

    with open(args.fleet, encoding="utf-8") as stream:
        documents = [d for d in yaml.safe_load_all(stream) if d]
    items = [i for d in documents for i in (d.get("items") or [] if str(d.get("kind", "")).endswith("List") else [d])]
    return [trimmed(i) for i in items]


def init_policy(args: argparse.Namespace) -> int:
    from .kube.cluster import ClusterError

    try:
        fleet = _inventory(args)
    except (SnapshotError, ClusterError) as err:
        print(f"gpugate policy init: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    profiles = _labelled()
    found = [p for p in pools(fleet, profiles) if p.stack == "dra" or p.labelled]
    if not found:
        print("gpugate policy init: no GPU nodes in the fleet (no GPU resource, no GPU DRA driver)", file=sys.stderr)
        return EXIT_BAD_INPUT
    devices: dict[str, Any] = {}
    for pool in found:
        device = profiles.devices[pool.vendor]
        profile = devices.setdefault(pool.vendor, {"resources": list(device.resources)})
        if device.auxiliary_resources:
            profile["auxiliaryResources"] = list(device.auxiliary_resources)
        profile["tolerations"] = [{"key": device.resources[0], "operator": "Exists", "effect": "NoSchedule"}]
        profile.setdefault("modelLabel", MODEL_LABELS.get(pool.vendor, MODEL_LABELS["nvidia"]))
        if pool.vendor == "nvidia" and pool.stack == "device-plugin" and "nvidia" in fleet.runtime_classes:
            profile["runtimeClassName"] = "nvidia"
    models = class_documents(found, profiles)
    models["default"] = next(iter(models["classes"]))
    document = {
        "apiVersion": "gpugate.io/v1",
        "kind": "GPUPolicy",
        "metadata": {"name": args.name},
        "spec": {"devices": devices, "models": models},
    }
    print("# Written by gpugate policy init --from-cluster: one class per GPU pool of the fleet.")
    sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    return EXIT_OK
