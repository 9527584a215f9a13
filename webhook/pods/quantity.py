"""Parse Kubernetes resource quantities as k8s.io/apimachinery's resource.ParseQuantity does, in bounded work.

Upstream (kubernetes/apimachinery ``pkg/api/resource/quantity.go`` and ``suffix.go``):

- the grammar is ``<signedNumber><suffix>``; the suffix is binary SI (Ki..Ei), decimal SI (n, u, m, "",
  k, M, G, T, P, E) or a decimal exponent ``e``/``E`` followed by a signed integer;
- the exponent is read with ``strconv.ParseInt(..., 64)`` and then narrowed with ``int32(parsed)``;
- a value that needs more than the int64 fast path is held in an ``inf.Dec`` and rounded *up* (away from
  zero) to nano precision; only binary-SI values are capped at 2^63-1, a decimal exponent is not, so
  ``100e4998`` is a valid Quantity to the apiserver and reaches a webhook.

gpugate never builds such a number: it reads the order of magnitude from the digit counts first and
refuses anything beyond int64 (:class:`QuantityTooLarge`), so the work is linear in the text's length
whatever the exponent. Exponents outside int32 (which apimachinery silently wraps) and binary-SI values
with more significant digits than :data:`MAX_DIGITS` are refused as well.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

INT64_MAX = 2**63 - 1  # apimachinery quantity.go: "no quantity may represent a number greater than 2^63-1"
_INT32 = range(-(2**31), 2**31)
NANO = Fraction(1, 10**9)  # the precision apimachinery rounds up to (inf.RoundUp to Nano)
#: Binary-SI values with a fraction are computed exactly; beyond this many significant digits they are refused.
MAX_DIGITS = 64


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity gpugate reads."""


class QuantityTooLarge(QuantityError):
    """The value is beyond int64, the largest quantity Kubernetes stores without capping or overflow."""


def parse_quantity(raw: object) -> Fraction:
    """Return the value of a quantity such as ``"1"``, ``"500m"``, ``"2e0"`` or ``"1Ki"``, rounded up to
    nano precision as apimachinery rounds it. Raises :class:`QuantityTooLarge` beyond int64.

    Quantities arrive as JSON strings from the apiserver; YAML manifests read offline may hold numbers.
    """
    if isinstance(raw, str):
        return _parse_short(raw) if len(raw) <= 32 else _parse_text(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise QuantityError(f"{raw!r} is not a quantity")
    if isinstance(raw, int):
        if abs(raw) > INT64_MAX:  # decided before any text conversion of a number of any size
            raise QuantityTooLarge(f"{raw.bit_length()}-bit number is beyond int64")
        return Fraction(raw)
    if not math.isfinite(raw):
        raise QuantityError(f"{raw!r} is not a quantity")
    return _parse_text(repr(raw))


@functools.lru_cache(maxsize=1024)
def _parse_short(text: str) -> Fraction:
    """The same few spellings ("1", "2", "500m") arrive on every request; only short ones are kept."""
    return _parse_text(text)


def _exponent(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 10 or sign * int(digits) not in _INT32:
        # apimachinery narrows it with int32(): 1e4294967296 would silently read as 1
        raise QuantityError(f"exponent {text[:12]}... is outside what Kubernetes reads (a 32-bit integer)")
    return sign * int(digits)


def _parse_text(text: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"{text[:40]!r} is not a quantity (expected e.g. 1, 2, 500m, 1e3)")
    frac = match["frac"] or ""
    suffix = match["suffix"] or ""
    power10 = _DECIMAL.get(suffix, 0)
    power1024 = _BINARY.get(suffix, 0)
    if suffix and suffix not in _DECIMAL and suffix not in _BINARY:
        power10 = _exponent(suffix[1:])
    digits = ((match["int"] or "") + frac).lstrip("0")
    significant = digits.rstrip("0")
    if not significant:
        return Fraction(0)
    # value = int(significant) * 10**point * 1024**power1024, and 10**(magnitude-1) <= |value| / 1024**power1024
    point = power10 - len(frac) + (len(digits) - len(significant))
    magnitude = len(significant) + point
    if magnitude - 1 + 3 * power1024 >= 19:  # at least 10**19 (1024 > 10**3): beyond int64
        raise QuantityTooLarge(f"{text[:40]!r} is beyond int64")
    if magnitude + 4 * power1024 <= -9:  # below 10**-9 (1024 < 10**4): apimachinery rounds it up to 1n
        value = NANO
    elif point >= -9:  # no digit below nano: exact, and small (magnitude < 19 bounds the digits)
        value = Fraction(int(significant) * 1024**power1024 * 10 ** (point + 9), 10**9)
    elif not power1024:
        # digits below nano are dropped and the value rounded up, as inf.Dec.Round(Nano, RoundUp) does;
        # ``significant`` ends in a non-zero digit, so something is always dropped
        kept = significant[: len(significant) + point + 9] or "0"
        value = Fraction(int(kept) + 1, 10**9)
    elif len(significant) > MAX_DIGITS:
        raise QuantityError(f"{text[:40]!r} has more than {MAX_DIGITS} significant digits")
    else:
        exact = Fraction(int(significant) * 1024**power1024, 10**-point)
        value = Fraction(math.ceil(exact * 10**9), 10**9)
    if value > INT64_MAX:
        raise QuantityTooLarge(f"{text[:40]!r} is beyond int64")
    return -value if match["sign"] == "-" else value


def format_quantity(value: Fraction) -> str:
    """Render a value the short way: ``2``, ``0.5``."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):g}"
