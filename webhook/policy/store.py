"""The policy set in force: reloaded when the directory changes, the last good set kept when an edit is broken."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .files import load_policies, policy_files
from .loader import PolicyError
from .model import PolicySet

log = logging.getLogger("gpugate.policy")


class PolicyStore:
    """The policy set in force, reloaded when the directory changes; a broken edit keeps the last good set.

    Checks are lazy (on access, at most every ``interval`` seconds), so no thread is needed per worker
    while nothing changes. With ``background``, the check and any reload run in a short-lived thread and
    ``current()`` answers with the set in force meanwhile, so no request waits for a reload (1,000 policies
    take a good part of a second to parse); without it, the call that notices the change does the reload.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
        fallback: PolicySet | None = None,
    ) -> None:
        """Load ``directory``; if it is invalid, start from ``fallback`` (a last good set) when given, else raise."""
        self.directory = Path(directory)
        self.interval = interval
        self.background = background
        self._clock = clock
        self._lock = threading.Lock()
        self._fingerprint = self._stat()
        self._checked = clock()
        self.generation = 1
        self.reload_errors = 0
        self.last_error: str | None = None
        #: Names the files behind ``last_error`` (a hash of their names, sizes, times and inodes): equal in
        #: every process that read the same broken edit, so the edit can be counted once, not once per worker.
        self.last_error_id: str | None = None
        try:
            self._policies = load_policies(self.directory)
        except PolicyError as err:
            if fallback is None:
                raise
            self._policies = fallback
            self._failed(err, self._fingerprint)

    def _stat(self) -> tuple[tuple[str, int, int, int], ...]:
        try:
            files = policy_files(self.directory)
        except OSError:
            return ()
        out = []
        for path in files:
            try:
                st = path.stat()  # follows the ConfigMap's ..data symlinks
            except OSError:
                continue
            out.append((path.name, st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def current(self) -> PolicySet:
        now = self._clock()
        if now - self._checked >= self.interval and self._lock.acquire(blocking=False):
            self._checked = now
            if self.background:
                threading.Thread(target=self._check, name="gpugate-policy-reload", daemon=True).start()
            else:
                self._check()
        return self._policies

    def _check(self) -> None:
        """Reload if the files changed; called with ``_lock`` held, which it releases."""
        try:
            self._reload_if_changed()
        except Exception:  # never let a reload bug take the thread's lock with it
            log.exception("policy reload check failed; the policies in force stay")
        finally:
            self._lock.release()

    def _reload_if_changed(self) -> None:
        fingerprint = self._stat()
        if fingerprint == self._fingerprint:
            return
        self._fingerprint = fingerprint
        try:
            policies = load_policies(self.directory)
        except PolicyError as err:
            self._failed(err, fingerprint)
            return
        if policies.digest != self._policies.digest:
            self._policies = policies
            self.generation += 1
            log.info(
                "policies reloaded: generation %d, %d policies, digest %s",
                self.generation,
                len(policies.policies),
                policies.digest,
            )
        self.last_error = self.last_error_id = None

    def _failed(self, err: PolicyError, fingerprint: tuple[tuple[str, int, int, int], ...]) -> None:
        self.reload_errors += 1
        self.last_error = str(err)
        self.last_error_id = hashlib.sha256(repr((str(self.directory), fingerprint)).encode()).hexdigest()[:16]
        log.error("policy reload failed; the last good policies (%s) stay in force\n%s", self._policies.digest, err)
