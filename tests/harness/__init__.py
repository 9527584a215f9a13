"""Shared test machinery: child processes, free ports, polling, and a throw-away control plane with a
gpugate server. Used by tests/ and bench/."""
