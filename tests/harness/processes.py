"""Child processes for tests and benchmarks: each in its own process group, logging to a file, stopped
by its id only, killed by the kernel if the test process dies; and HTTPS probes against them."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.harness.pki import KeyPair

# Loopback only: make sure no proxy setting ever routes a request of ours elsewhere.
LOOPBACK_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
for _name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    LOOPBACK_ENV[_name] = ""


def _exited(pid: int) -> bool:
    """Has child `pid` exited? Without reaping it (WNOWAIT), so its id stays ours."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _die_with_parent() -> None:
    """Linux: SIGKILL the child when the test process dies without tearing down (kill -9, OOM)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class Process:
    """A child process in its own process group, logging to a file; stopped by its id only."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self.env = {**os.environ, **LOOPBACK_ENV, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        log.write(f"\n==== start: {' '.join(self.argv)}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: gunicorn workers die with their master
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not _exited(self.proc.pid)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace`. The leader is reaped
        only after the group is killed, so its id cannot have been reused by then."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while not _exited(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers (e.g. workers) and a stuck leader
            proc.wait(timeout=grace)
        else:
            # Reaped earlier (it died on its own): a surviving group member keeps the id reserved.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"({self.log_path} does not exist)"
        return "\n".join(text[-lines:])

    def describe_failure(self, what: str) -> str:
        code = self.proc.poll() if self.proc and _exited(self.proc.pid) else None
        state = f"exited with code {code}" if code is not None else "still running"
        return f"{self.name} {what} ({state}); last log lines from {self.log_path}:\n{self.log_tail()}"


def wait_for_https(
    url: str,
    *,
    process: Process,
    ca: Path,
    client: KeyPair | None = None,
    timeout: float = 90.0,
) -> None:
    """Poll `url` until it answers 200; fail early, with the process's log, if the process dies."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        if not process.running:
            raise RuntimeError(process.describe_failure(f"died before {url} answered"))
        try:
            with opener.open(url, timeout=5) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}: {e.read()[:300]!r}"
        except (OSError, ssl.SSLError) as e:
            last = repr(e)
        if time.monotonic() > deadline:
            raise RuntimeError(process.describe_failure(f"not ready at {url} after {timeout:.0f}s: {last}"))
        time.sleep(0.3)


def https_get(url: str, *, ca: Path, timeout: float = 10.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
