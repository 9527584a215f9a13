"""Reading a policy directory: which files count, YAML parsing (libyaml when present), where a YAML error is,
and the whole directory loaded into one PolicySet."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from ..terminal import yaml_error
from .documents import load_all
from .loader import PolicyError, PolicyIssue, parse_node_pool, parse_policy, parse_workload_kind
from .model import NODE_POOL_KIND, WORKLOAD_KIND, NodePoolDecl, Policy, PolicySet, WorkloadKind

log = logging.getLogger("gpugate.policy")


def policy_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``*.yaml``/``*.yml`` files directly in ``directory`` (ConfigMap mounts: the ``..data`` links)."""
    root = Path(directory)
    return sorted(
        p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )


def load_policies(directory: str | os.PathLike[str]) -> PolicySet:
    """Load and validate every policy in ``directory`` as a whole; raise :class:`PolicyError` if any is wrong."""
    root = Path(directory)
    if not root.exists():
        raise PolicyError([PolicyIssue(str(root), None, "", "does not exist")])
    if not root.is_dir():
        raise PolicyError(
            [PolicyIssue(str(root), None, "", "is not a directory (give the directory that holds the policy files)")]
        )
    issues: list[PolicyIssue] = []
    notes: list[PolicyIssue] = []
    policies: list[Policy] = []
    workloads: list[WorkloadKind] = []
    pools: list[NodePoolDecl] = []
    seen: dict[str, str] = {}
    digest = hashlib.sha256()
    files = policy_files(root)
    if not files:
        raise PolicyError(
            [
                PolicyIssue(
                    str(root),
                    None,
                    "",
                    "holds no policy files (*.yaml, *.yml); without a "
                    "policy gpugate injects nothing (policies/README.md)",
                )
            ]
        )
    for path in files:
        try:
            text = path.read_bytes()
        except OSError as err:
            issues.append(PolicyIssue(path.name, None, "", f"cannot be read: {err.strerror}"))
            continue
        digest.update(path.name.encode() + b"\0" + text + b"\0")
        try:
            documents = load_all(text)
        except yaml.YAMLError as err:
            issues.append(PolicyIssue(path.name, None, "", yaml_error(err)))
            continue
        except Exception as err:  # any failure to read a file is a broken edit, never a crash
            issues.append(PolicyIssue(path.name, None, "", f"cannot be loaded: {_one_line(err)}"))
            continue
        try:
            _parse_documents(path.name, documents, issues, notes, policies, workloads, seen, pools)
        except Exception as err:  # a loader bug on odd input: the file is reported, the last good set stays
            log.exception("policy file %s could not be parsed", path.name)
            issues.append(PolicyIssue(path.name, None, "", f"cannot be loaded: {_one_line(err)}"))
    if issues:
        raise PolicyError(issues)
    return PolicySet.of(policies, digest.hexdigest()[:12], workloads, notes=[str(n) for n in notes], pools=pools)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())[:200]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _parse_documents(
    name: str,
    documents: list[Any],
    issues: list[PolicyIssue],
    notes: list[PolicyIssue],
    policies: list[Policy],
    workloads: list[WorkloadKind],
    seen: dict[str, str],
    pools: list[NodePoolDecl] | None = None,
) -> None:
    for index, document in enumerate(documents):
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == WORKLOAD_KIND:
            workload = parse_workload_kind(document, file=name, index=index, issues=issues, notes=notes)
            if workload is not None:
                workloads.append(workload)
            continue
        if isinstance(document, dict) and document.get("kind") == NODE_POOL_KIND:
            pool = parse_node_pool(document, file=name, index=index, issues=issues)
            if pool is not None and pools is not None:
                if any(p.name == pool.name for p in pools):
                    issues.append(
                        PolicyIssue(name, index, "metadata.name", f"node pool {pool.name!r} is declared twice")
                    )
                else:
                    pools.append(pool)
            continue
        policy = parse_policy(document, file=name, index=index, issues=issues, notes=notes)
        if policy is None:
            continue
        if policy.name in seen:
            issues.append(
                PolicyIssue(name, index, "metadata.name", f"{policy.name!r} is already defined in {seen[policy.name]}")
            )
            continue
        seen[policy.name] = f"{name} document {index}"
        policies.append(policy)
