"""gpugate's own version, as installed (the wheel's metadata), for `--version` and the build-info metric."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version


def gpugate_version() -> str:
    """The installed distribution's version; "unknown" when run from a source tree that was never installed."""
    try:
        return version("gpugate")
    except PackageNotFoundError:
        return "unknown"


def describe() -> str:
    """One line for `gpugate --version`: what runs, and on which Python."""
    return f"gpugate {gpugate_version()} (Python {platform.python_version()})"
