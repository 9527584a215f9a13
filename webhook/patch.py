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

import jsonpatch

Operation = dict[str, Any]


class PatchError(RuntimeError):
    """The computed patch does not reproduce the mutated object: a bug, never the user's fault."""


def _pointer(parts: list[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b and canonical(a) == canonical(b))


def _diff(a: Any, b: Any, path: list[str], ops: list[Operation]) -> None:
    if a is b:
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": _pointer([*path, key])})
        for key, value in b.items():
            if key not in a:
                ops.append({"op": "add", "path": _pointer([*path, key]), "value": value})
            else:
                _diff(a[key], value, [*path, key], ops)
        return
    pairs = list(zip(a, b, strict=True)) if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) else []
    if pairs and all(isinstance(x, Mapping) and isinstance(y, Mapping) for x, y in pairs):
        # Same length, objects edited in place (a workload CRD's pod templates, spec.workerGroupSpecs[0]):
        # indices do not move, so each element is diffed on its own.
        for index, (x, y) in enumerate(pairs):
            _diff(x, y, [*path, str(index)], ops)
        return
    if isinstance(a, list) and isinstance(b, list) and len(b) >= len(a) and all(
        _same(x, y) for x, y in zip(a, b, strict=False)
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


def _copy_along(doc: Mapping[str, Any], ops: list[Operation]) -> dict[str, Any]:
    """A copy of ``doc`` in which every container on an op's path is fresh, the rest shared."""
    root = dict(doc)
    fresh = {id(root)}
    for op in ops:
        node: Any = root
        for part in _parts(op["path"])[:-1]:
            key: Any = int(part) if isinstance(node, list) else part
            child = node[key]
            if id(child) not in fresh:
                child = dict(child) if isinstance(child, Mapping) else list(child)
                node[key] = child
                fresh.add(id(child))
            node = child
    return root


def make_patch(original: Mapping[str, Any], mutated: Mapping[str, Any]) -> list[Operation]:
    """The JSON Patch that turns ``original`` into ``mutated``; raises PatchError if it would not."""
    ops: list[Operation] = []
    _diff(original, mutated, [], ops)
    if ops:
        applied = jsonpatch.JsonPatch(ops).apply(_copy_along(original, ops), in_place=True)
        same = applied == mutated and all(
            canonical(_resolve(applied, path)) == canonical(_resolve(mutated, path))
            for op in ops if op["op"] != "remove" and (path := _parts(op["path"]))
        )
        if not same:
            raise PatchError(f"patch does not reproduce the mutated object: {canonical(ops)[:500]}")
    return ops
