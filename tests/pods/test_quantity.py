"""Kubernetes quantities (webhook/pods/quantity.py), parsed exactly as the apiserver parses and stores them, in
bounded work however large the exponent."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.budget import python_bounded
from webhook.pods.quantity import INT64_MAX, NANO, QuantityError, parse_quantity


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


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9223372036854775807", INT64_MAX),
        ("7Ei", 7 * 2**60),
        ("0.99999999999999999999", 1),  # inf.Dec.Round(Nano, RoundUp): the apiserver stores 1
        ("1.0000000001", Fraction(1_000_000_001, 10**9)),
        ("1e-99", NANO),
        ("0." + "0" * 5000 + "1", NANO),
        ("1" + "0" * 18 + "e-18", 1),
        ("0.5Ki", 512),
        (2**63 - 1, INT64_MAX),
    ],
)
def test_values_at_the_edges_are_read_as_apimachinery_stores_them(text, value):
    assert parse_quantity(text) == value


BEYOND_INT64 = ["9223372036854775808", "8Ei", "10E", "100e4998", "1e999999999", "-1e999999999", "1" * 5000]


def _outcomes(values: str, error: str) -> list[str]:
    """Parse each of ``values`` (Python source) in a child with 10 s of CPU: "parsed" or ``error``'s name."""
    code = f"""
import json
from webhook.pods.quantity import {error}, parse_quantity
out = []
for text in {values}:
    try:
        parse_quantity(text)
        out.append("parsed")
    except {error}:
        out.append("{error}")
print(json.dumps(out))
"""
    return list(python_bounded(code, cpu_seconds=10))


def test_quantities_beyond_int64_are_refused_without_computing_them():
    """Old code computed 10**999999999 exactly and never returned."""
    outcomes = _outcomes(f"{BEYOND_INT64!r} + [2**63, 10**5000]", "QuantityTooLarge")
    assert outcomes == ["QuantityTooLarge"] * (len(BEYOND_INT64) + 2)


def test_tiny_values_with_huge_negative_exponents_round_up_to_nano_in_bounded_cpu_time():
    code = """
import json
from webhook.pods.quantity import parse_quantity
print(json.dumps([str(parse_quantity(t)) for t in ["-1e-999999999", "0e999999999", "1e-2147483648"]]))
"""
    assert python_bounded(code, cpu_seconds=10) == ["-1/1000000000", "0", "1/1000000000"]


def test_exponents_kubernetes_would_wrap_and_absurd_digits_are_not_quantities():
    """apimachinery narrows the exponent with int32(), so these would silently read as something else."""
    values = '["1e4294967296", "1e-2147483649", "1e" + "9" * 400, "0." + "3" * 70 + "Ki", float("inf")]'
    assert _outcomes(values, "QuantityError") == ["QuantityError"] * 5
