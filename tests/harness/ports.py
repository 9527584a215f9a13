"""A free TCP port on 127.0.0.1, for a server a test or benchmark starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (the kernel picks it); the caller binds it soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
