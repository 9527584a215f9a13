"""webhook/policy/model.py: the index behind PolicySet.governing returns what a scan of every policy in order returns."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.labels import LabelSelector, Requirement
from webhook.policy.model import (
    BUILTIN,
    Match,
    NamespaceLabelsUnavailable,
    Policy,
    PolicySet,
    _scan,
)

NAMES = ["a", "ab", "b-1", "team-x", "team-y", "prod"]
KEYS = ["team", "env"]
VALUES = ["x", "y"]

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)
requirements = st.builds(
    Requirement,
    key=st.sampled_from(KEYS),
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    values=st.lists(st.sampled_from(VALUES), max_size=2).map(tuple),
)
selectors = st.builds(
    LabelSelector, match_labels=labels, match_expressions=st.lists(requirements, max_size=2).map(tuple)
)
matches = st.builds(
    Match,
    namespaces=st.lists(st.sampled_from(["*", "a*", "team-*", "prod", "b-?", "x"]), max_size=2).map(tuple),
    namespace_selector=st.none() | selectors,
    pod_selector=st.none() | selectors,
)
policy_lists = st.lists(st.tuples(st.integers(0, 3), matches), max_size=8).map(
    lambda specs: [Policy(name=f"p{i}", priority=priority, match=match) for i, (priority, match) in enumerate(specs)]
)


def outcome(decide: Callable[..., Policy], **kwargs: Any) -> object:
    try:
        return decide(**kwargs)
    except NamespaceLabelsUnavailable as err:
        return ("unavailable", err.namespace)


@settings(max_examples=400)
@given(policy_lists, st.lists(st.tuples(st.sampled_from(NAMES), labels, st.none() | labels), min_size=1, max_size=6))
def test_the_index_governs_as_the_scan_does(policies: list[Policy], requests: list[Any]) -> None:
    policy_set = PolicySet.of(policies)
    for namespace, pod_labels, namespace_labels in requests * 2:  # twice: the second time from the index
        request = {
            "namespace": namespace,
            "pod_labels": pod_labels,
            "namespace_labels": lambda found=namespace_labels: found,
        }
        indexed = outcome(policy_set.governing, **request)
        scanned = outcome(functools.partial(_scan, policy_set.policies), **request)
        assert indexed == scanned, (namespace, pod_labels, namespace_labels)


def test_the_index_is_bounded(monkeypatch: Any) -> None:
    from webhook.policy import model

    monkeypatch.setattr(model, "INDEX_LIMIT", 3)
    policy_set = PolicySet.of([Policy(name="p", match=Match(namespaces=("team-*",)))])
    for i in range(10):
        assert policy_set.governing(namespace=f"team-{i}", pod_labels={}, namespace_labels=dict).name == "p"
        assert policy_set.governing(namespace=f"other-{i}", pod_labels={}, namespace_labels=dict) is BUILTIN
    assert len(policy_set._by_namespace) <= 3
