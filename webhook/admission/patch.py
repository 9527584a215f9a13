"""JSON Patch (RFC 6902) from the original and the mutated object, verified before it is sent.

The mutated object shares every untouched subtree with the original (see rules.base.PodEditor), so the
diff walks only what changed. Lists are only ever appended to or replaced whole: python-json-patch's list
diff can emit patches that do not apply (its issue #138), and insertions shift indices under other
webhooks' feet. The result is applied with the jsonpatch library to the original and compared as
canonical JSON (which tells ``1`` from ``true``) before anyone sees it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Operation = dict[str, Any]


class PatchError(RuntimeError):
    """The computed patch does not reproduce the mutated object: a bug, never the user's fault."""


def _pointer(parts: list[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b and canonical(a) == canonical(b))


_MISSING = object()


def _diff(a: Any, b: Any, path: list[str], ops: list[Operation]) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": _pointer([*path, key])})
        for key, value in b.items():
            old = a.get(key, _MISSING)
            if old is _MISSING:
                ops.append({"op": "add", "path": _pointer([*path, key]), "value": value})
            elif old is not value:  # untouched subtrees are shared: most keys end here, without a call
                _diff(old, value, [*path, key], ops)
        return
    pairs = list(zip(a, b, strict=True)) if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) else []
    if pairs and all(isinstance(x, Mapping) and isinstance(y, Mapping) for x, y in pairs):
        # Same length, objects edited in place (a workload CRD's pod templates, spec.workerGroupSpecs[0]):
        # indices do not move, so each element is diffed on its own.
        for index, (x, y) in enumerate(pairs):
            _diff(x, y, [*path, str(index)], ops)
        return
    if (
        isinstance(a, list)
        and isinstance(b, list)
        and len(b) >= len(a)
        and all(_same(x, y) for x, y in zip(a, b, strict=False))
    ):
        for index in range(len(a), len(b)):
            ops.append({"op": "add", "path": _pointer([*path, str(index)]), "value": b[index]})
        return
    if not _same(a, b):
        ops.append({"op": "replace", "path": _pointer(path), "value": b})


def _parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _copy_along(doc: Mapping[str, Any], paths: list[list[str]]) -> dict[str, Any]:
    """A copy of ``doc`` in which every container on one of ``paths`` is fresh, the rest shared."""
    root = dict(doc)
    fresh = {id(root)}
    for parts in paths:
        node: Any = root
        for part in parts[:-1]:
            key: Any = int(part) if isinstance(node, list) else part
            child = node[key]
            if id(child) not in fresh:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[key] = child
                fresh.add(id(child))
            node = child
    return root


def _apply(doc: Mapping[str, Any], ops: list[Operation], paths: list[list[str]]) -> dict[str, Any]:
    """RFC 6902 add, remove and replace (all the differ emits) on a copy of ``doc``; written apart from the
    differ so that it checks it. (The tests apply every patch with python-json-patch as well.)"""
    root = _copy_along(doc, paths)
    for op, parts in zip(ops, paths, strict=True):
        parent = _resolve(root, parts[:-1])
        key = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if key == "-" else int(key)
            if op["op"] == "add":
                parent.insert(index, op["value"])
            elif op["op"] == "replace":
                parent[index] = op["value"]
            else:
                del parent[index]
        elif op["op"] == "add":
            parent[key] = op["value"]
        elif op["op"] == "replace":
            if key not in parent:
                raise KeyError(key)
            parent[key] = op["value"]
        else:
            del parent[key]
    return root


def make_patch(original: Mapping[str, Any], mutated: Mapping[str, Any]) -> list[Operation]:
    """The JSON Patch that turns ``original`` into ``mutated``; raises PatchError if it would not."""
    ops: list[Operation] = []
    _diff(original, mutated, [], ops)
    if ops:
        paths = [_parts(op["path"]) for op in ops]
        try:
            applied = _apply(original, ops, paths)
        except (KeyError, IndexError, ValueError, TypeError) as err:
            raise PatchError(f"patch does not apply ({err!r}): {canonical(ops)[:500]}") from None
        same = applied == mutated and all(
            (a := _resolve(applied, path)) is (b := _resolve(mutated, path)) or canonical(a) == canonical(b)
            for op, path in zip(ops, paths, strict=True)
            if op["op"] != "remove"
        )
        if not same:
            raise PatchError(f"patch does not reproduce the mutated object: {canonical(ops)[:500]}")
    return ops
