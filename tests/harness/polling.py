"""Polling for state that changes asynchronously."""

from __future__ import annotations

import time
from typing import Any


def eventually(probe: Any, *, timeout: float = 15.0, interval: float = 0.5) -> Any:
    """Call `probe()` until it returns a truthy value or `timeout` passes; return the last value.
    For state that propagates asynchronously (gpugate's namespace cache, policy reload): the test
    then asserts on the returned value, never on how long it took."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
