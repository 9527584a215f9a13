"""The policy set in force: reloaded when the directory changes, the last good set kept when an edit is broken."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .loader import PolicyError, load_policies, policy_files
from .model import PolicySet

log = logging.getLogger("gpugate.policy")


class PolicyStore:
    """The policy set in force, reloaded when the directory changes; a broken edit keeps the last good set.

    Checks are lazy (on access, at most every ``interval`` seconds), so no thread is needed per worker.
    """

    def __init__(self, directory: str | os.PathLike[str], *, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._fingerprint = self._stat()
        self._policies = load_policies(self.directory)
        self._checked = clock()
        self.generation = 1
        self.reload_errors = 0
        self.last_error: str | None = None

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
            try:
                self._checked = now
                self._reload_if_changed()
            finally:
                self._lock.release()
        return self._policies

    def _reload_if_changed(self) -> None:
        fingerprint = self._stat()
        if fingerprint == self._fingerprint:
            return
        self._fingerprint = fingerprint
        try:
            policies = load_policies(self.directory)
        except PolicyError as err:
            self.reload_errors += 1
            self.last_error = str(err)
            log.error("policy reload failed; the last good policies (%s) stay in force\n%s",
                      self._policies.digest, err)
            return
        if policies.digest != self._policies.digest:
            self._policies = policies
            self.generation += 1
            log.info("policies reloaded: generation %d, %d policies, digest %s",
                     self.generation, len(policies.policies), policies.digest)
        self.last_error = None
