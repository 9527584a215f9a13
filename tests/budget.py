"""Run Python code in a child process under a CPU-time limit: work that never ends is killed, not waited for.

The limit is CPU time (RLIMIT_CPU, with an address-space cap beside it), not wall-clock time, so a busy shared machine slows the child down
without failing it; only code that keeps the CPU busy past the budget is stopped (SIGXCPU).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any

from tests.support import REPO

#: Address space for the child: work that explodes in memory fails there instead of on the machine.
MEMORY = 2 * 1024**3


def _limit(cpu_seconds: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    return apply


def run_bounded(args: list[str], *, cpu_seconds: int, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` as a child process limited to ``cpu_seconds`` of CPU; a generous wall-clock guard backs it."""
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=_limit(cpu_seconds),
        timeout=60 * cpu_seconds,
    )


def python_bounded(code: str, *, cpu_seconds: int) -> Any:
    """Run ``code`` (which prints one JSON value last) in a child Python; the value, or an assertion error
    that says the budget was spent (killed by SIGXCPU) or what the child raised."""
    proc = run_bounded([sys.executable, "-c", code], cpu_seconds=cpu_seconds)
    assert proc.returncode != -24, f"more than {cpu_seconds} s of CPU (killed by SIGXCPU): {proc.stderr[-2000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])
