"""YAML documents read in bounded work: policy files and the manifests ``gpugate check`` reads.

PyYAML builds aliases as shared references, so a few hundred bytes of nested anchors (``&a [*b, *b, ...]``)
become a document whose every reader (a deep copy, a JSON dump, a rule walking it) visits billions of
nodes; a recursive anchor never ends; a plain integer of thousands of digits makes Python's ``int()``
raise ``ValueError`` (its 4300-digit limit), not a YAML error. Each document's node graph is therefore
measured before it is built, in one pass over its nodes:

- nesting deeper than :data:`MAX_DEPTH` is refused (Kubernetes objects nest a few dozen levels);
- aliases may expand a document to at most :data:`ALIAS_RATIO` times its own node count (as go-yaml v3,
  which kubectl uses, refuses "excessive aliasing"), and never into itself;
- an integer of more than :data:`MAX_INT_DIGITS` characters is refused.

Every refusal is a :class:`yaml.MarkedYAMLError`, reported like any other YAML mistake, with its place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

MAX_DEPTH = 128
ALIAS_RATIO = 10
#: Below this many nodes aliases may expand freely: small documents stay small whatever they do.
ALIAS_FREE = 10_000
MAX_INT_DIGITS = 64
_INT_TAG = "tag:yaml.org,2002:int"

#: libyaml's parser under PyYAML's own safe constructor: the same documents as yaml.safe_load_all, about ten
#: times faster. PyYAML wheels ship libyaml; without it the pure-Python loader is used.
FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentTooLarge(yaml.MarkedYAMLError):
    """A document beyond gpugate's bounds: too deep, aliased too much, or a number too long."""

    def __init__(self, problem: str, node: yaml.Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def check_node(root: yaml.Node) -> None:
    """Raise :class:`DocumentTooLarge` if the document under ``root`` is beyond the bounds; linear in its nodes."""
    expanded: dict[int, int] = {}  # node id -> node count with its aliases expanded
    open_ids: set[int] = {id(root)}
    stack: list[tuple[yaml.Node, Iterator[yaml.Node]]] = [(root, iter(_children(root)))]
    while stack:
        node, pending = stack[-1]
        child = next(pending, None)
        if child is None:
            stack.pop()
            open_ids.discard(id(node))
            expanded[id(node)] = 1 + sum(expanded[id(c)] for c in _children(node))
            continue
        if id(child) in expanded:
            continue  # an alias of a node already measured: counted again in its parent, not walked again
        if id(child) in open_ids:
            raise DocumentTooLarge("an alias refers to a node that contains it (a recursive anchor)", child)
        if len(stack) >= MAX_DEPTH:
            raise DocumentTooLarge(f"nested more than {MAX_DEPTH} levels deep", child)
        if isinstance(child, yaml.ScalarNode) and child.tag == _INT_TAG and len(child.value) > MAX_INT_DIGITS:
            raise DocumentTooLarge(f"an integer of more than {MAX_INT_DIGITS} digits", child)
        open_ids.add(id(child))
        stack.append((child, iter(_children(child))))
    if isinstance(root, yaml.ScalarNode) and root.tag == _INT_TAG and len(root.value) > MAX_INT_DIGITS:
        raise DocumentTooLarge(f"an integer of more than {MAX_INT_DIGITS} digits", root)
    size, total = len(expanded), expanded[id(root)]
    if total > max(ALIAS_FREE, ALIAS_RATIO * size):
        raise DocumentTooLarge(
            f"aliases expand this document of {size} nodes to {total} (more than {ALIAS_RATIO} times its size)", root
        )


def _load(stream: str | bytes, loader_class: Any) -> list[Any]:
    loader = loader_class(stream)
    try:
        documents = []
        while loader.check_node():
            node = loader.get_node()
            check_node(node)
            documents.append(loader.construct_document(node))
        return documents
    finally:
        loader.dispose()


def load_all(stream: str | bytes) -> list[Any]:
    """Every document of a YAML stream, within the bounds; a :class:`yaml.YAMLError` when it is not valid
    YAML or beyond them."""
    try:
        return _load(stream, FAST_LOADER)
    except DocumentTooLarge:
        raise
    except yaml.YAMLError as err:
        if FAST_LOADER is yaml.SafeLoader or "nesting depth" in str(getattr(err, "problem", "")):
            raise  # libyaml's own depth limit (1000): the pure-Python composer would recurse that deep, slowly
        try:  # the pure-Python parser words and places mistakes better (policy/files.py _yaml_error)
            return _load(stream, yaml.SafeLoader)
        except RecursionError:  # its composer recurses per level; libyaml stops at 1000 levels
            raise err from None
