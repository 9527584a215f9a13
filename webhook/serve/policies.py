"""The policy set in force: reloaded when the directory changes, the last good set kept when an edit is broken."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Hashable
from pathlib import Path

from ..policy.files import load_policies, policy_files
from ..policy.loader import PolicyError
from ..policy.model import PolicySet
from .reloading import Follower

log = logging.getLogger("gpugate.policy")


class PolicyStore:
    """The policy set in force, reloaded when the directory changes; a broken edit keeps the last good set.

    Checks are lazy (on access, at most every ``interval`` seconds), so no thread is needed per worker
    while nothing changes. With ``background``, the check and any reload run in a short-lived thread and
    ``current()`` answers with the set in force meanwhile, so no request waits for a reload (1,000 policies
    take a good part of a second to parse); without it, the call that notices the change does the reload.
    The files are followed by ``webhook.serve.reloading``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
        fallback: PolicySet | None = None,
        settle: float = 0.0,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        """Load ``directory``; if it is invalid, start from ``fallback`` (a last good set) when given, else raise.

        ``settle``: an edit whose newest file was written less than this many seconds ago (by ``wallclock``, the
        clock file times are in) is read at a later check, not now: a writer that truncates a file and then writes
        it (an editor, ``>``, ``Path.write_text``) leaves it empty for a moment, and an empty file is a valid
        directory of no policies, which would be put in force. A file time in the future (another host's clock)
        does not hold a reload back."""
        self.directory = Path(directory)
        self._settle_ns = int(settle * 1e9)
        self._wallclock = wallclock
        self.generation = 1
        self.reload_errors = 0
        self.last_error: str | None = None
        #: Names the files behind ``last_error`` (a hash of their names, sizes, times and inodes): equal in
        #: every process that read the same broken edit, so the edit can be counted once, not once per worker.
        self.last_error_id: str | None = None
        version = self._fingerprint()
        error: PolicyError | None = None
        try:
            policies = load_policies(self.directory)
        except PolicyError as err:
            if fallback is None:
                raise
            policies, error = fallback, err
        self._files = Follower(
            policies,
            version=version if error is None else None,
            fingerprint=self._fingerprint,
            load=lambda: load_policies(self.directory),
            errors=(PolicyError,),
            interval=interval,
            clock=clock,
            background=background,
            loaded=self._loaded,
            failed=self._failed,
            recovered=self._recovered,
            settled=self._settled,
            log=log,
            name="gpugate-policy-reload",
        )
        if error is not None:
            self._files.fail(version, error)
        else:
            _log_notes(policies)

    @property
    def interval(self) -> float:
        return self._files.interval

    @property
    def background(self) -> bool:
        return self._files.background

    def current(self) -> PolicySet:
        return self._files.current()

    def _settled(self, version: Hashable) -> bool:
        if self._settle_ns <= 0 or not isinstance(version, tuple):
            return True
        now = int(self._wallclock() * 1e9)
        return not any(0 <= now - entry[1] < self._settle_ns for entry in version)

    def _fingerprint(self) -> tuple[tuple[str, int, int, int], ...]:
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

    def _loaded(self, previous: PolicySet, policies: PolicySet) -> None:
        if policies.digest != previous.digest:
            self.generation += 1
            log.info(
                "policies reloaded: generation %d, %d policies, digest %s",
                self.generation,
                len(policies.policies),
                policies.digest,
            )
        self.last_error = self.last_error_id = None
        if policies.digest != previous.digest:
            _log_notes(policies)

    def _recovered(self) -> None:
        self.last_error = self.last_error_id = None

    def _failed(self, version: Hashable, err: Exception) -> None:
        self.reload_errors += 1
        self.last_error = str(err)
        self.last_error_id = hashlib.sha256(repr((str(self.directory), version)).encode()).hexdigest()[:16]
        log.error("policy reload failed; the last good policies (%s) stay in force\n%s", self._files.value.digest, err)


def _log_notes(policies: PolicySet) -> None:
    for note in policies.notes:
        log.warning("policy file in a deprecated form (it loads): %s", note)
