"""A small client for Prometheus' HTTP API (``/api/v1/query``, ``/api/v1/query_range``), standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .series import Labels, Series

__all__ = ["MAX_POINTS_PER_SERIES", "Labels", "Prometheus", "PrometheusError", "Series", "TooManySamples"]

# Prometheus refuses a range query whose result would hold more than 11,000 points per series
# (web/api/v1/api.go: "exceeded maximum resolution of 11,000 points per timeseries").
MAX_POINTS_PER_SERIES = 11_000


class PrometheusError(Exception):
    """Prometheus could not be reached, or refused or failed a query; the message is for people."""


class TooManySamples(PrometheusError):
    """The query would load more samples than the server's --query.max-samples; a shorter range may pass."""


class Prometheus:
    """Queries one Prometheus server; every failure becomes a :class:`PrometheusError` naming the URL."""

    def __init__(self, url: str, *, timeout: float = 120.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusError(
                f"--prometheus {url!r}: expected an http:// or https:// URL, e.g. http://prometheus:9090"
            )
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(address, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            # Prometheus answers 400/422/503 with a JSON body that says what went wrong.
            try:
                detail = json.load(err)
                message = f"{detail.get('errorType', 'error')}: {detail.get('error', '')}"
            except (ValueError, OSError):
                message = f"HTTP {err.code} {err.reason}"
            if "too many samples" in message:
                raise TooManySamples(f"Prometheus at {self.url}: {message}") from None
            raise PrometheusError(f"Prometheus at {self.url} refused a query ({message})") from None
        except urllib.error.URLError as err:
            raise PrometheusError(
                f"cannot reach Prometheus at {self.url}: {err.reason} (check --prometheus; "
                "port-forward with 'kubectl -n monitoring port-forward svc/prometheus 9090')"
            ) from None
        except TimeoutError:
            raise PrometheusError(
                f"Prometheus at {self.url} did not answer within {self.timeout:g} s (raise --timeout, or use a "
                "larger --step)"
            ) from None
        except (OSError, ValueError) as err:
            raise PrometheusError(f"Prometheus at {self.url}: unreadable answer ({err})") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url}: query failed ({body.get('error', body)!r})")
        return body["data"]

    def query(self, promql: str, *, at: float) -> list[Series]:
        """An instant query evaluated at unix time ``at``."""
        data = self._get("/api/v1/query", {"query": promql, "time": _fmt(at)})
        if data.get("resultType") == "scalar":
            return [Series({}, {float(data["result"][0]): float(data["result"][1])})]
        return [
            Series(dict(item["metric"]), {float(item["value"][0]): float(item["value"][1])})
            for item in data.get("result", [])
        ]

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> list[Series]:
        """A range query; the caller keeps (end - start) / step below :data:`MAX_POINTS_PER_SERIES`."""
        data = self._get(
            "/api/v1/query_range", {"query": promql, "start": _fmt(start), "end": _fmt(end), "step": _fmt(step)}
        )
        return [
            Series(dict(item["metric"]), {float(t): float(v) for t, v in item["values"]})
            for item in data.get("result", [])
        ]

    def series(self, match: str, *, start: float, end: float) -> list[Labels]:
        """Label sets of the series matching ``match`` in [start, end], from the index only."""
        data = self._get("/api/v1/series", {"match[]": match, "start": _fmt(start), "end": _fmt(end)})
        return [dict(item) for item in data or []]

    def label_values(self, name: str, *, match: str, start: float | None = None, end: float | None = None) -> list[str]:
        """Values of label ``name`` on series matching ``match``, from the index only (cheap over any range)."""
        params = {"match[]": match}
        if start is not None and end is not None:
            params |= {"start": _fmt(start), "end": _fmt(end)}
        data = self._get(f"/api/v1/label/{urllib.parse.quote(name)}/values", params)
        return [str(value) for value in data or []]


def _fmt(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
