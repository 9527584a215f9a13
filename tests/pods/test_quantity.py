"""Kubernetes quantities (webhook/pods/quantity.py), parsed exactly as the apiserver parses them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from webhook.pods.quantity import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("1000m", 1),
        ("2e0", 2),
        ("0.5", 0.5),
        ("500m", 0.5),
        ("1Ki", 1024),
        ("+2", 2),
        ("-1", -1),
        ("1E3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("2k", 2000),
        ("1Mi", 1024**2),
        (".5", 0.5),
        (3, 3),
    ],
)
def test_quantities_parse_exactly_as_kubernetes_does(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", " 1", "1 ", "1\n", "e3", ".", "1KB", "1ki", True, None, [1]])
def test_non_quantities_are_refused(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)
