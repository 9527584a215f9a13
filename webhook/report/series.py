"""Time series as the report sees them: a label set and its samples (unix seconds -> value)."""

from __future__ import annotations

from dataclasses import dataclass

Labels = dict[str, str]


@dataclass(frozen=True)
class Series:
    """One time series of a query result."""

    labels: Labels
    samples: dict[float, float]
