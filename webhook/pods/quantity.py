"""Parse Kubernetes resource quantities exactly, as k8s.io/apimachinery's resource.ParseQuantity does."""

from __future__ import annotations

import functools
import re
from fractions import Fraction

# apimachinery pkg/api/resource/quantity.go: <signedNumber><suffix>, where the suffix is a binary SI
# suffix (Ki..Ei), a decimal SI suffix (n, u, m, "", k, M, G, T, P, E) or a decimal exponent (e/E<int>).
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_quantity(raw: object) -> Fraction:
    """Return the exact value of a quantity such as ``"1"``, ``"500m"``, ``"2e0"`` or ``"1Ki"``.

    Quantities arrive as JSON strings from the apiserver; YAML manifests read offline may hold numbers.
    """
    if isinstance(raw, str):
        return _parse_short(raw) if len(raw) <= 32 else _parse_text(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise QuantityError(f"{raw!r} is not a quantity")
    return _parse_text(repr(raw))


@functools.lru_cache(maxsize=1024)
def _parse_short(text: str) -> Fraction:
    """The same few spellings ("1", "2", "500m") arrive on every request; only short ones are kept."""
    return _parse_text(text)


def _parse_text(text: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. 1, 2, 500m, 1e3)")
    digits = (match["int"] or "") + (match["frac"] or "")
    value = Fraction(int(digits), 10 ** len(match["frac"] or ""))
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix:
        value *= Fraction(10) ** int(suffix[1:])
    return -value if match["sign"] == "-" else value


def format_quantity(value: Fraction) -> str:
    """Render an exact value the short way: ``2``, ``0.5``."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):g}"
