"""Follow files on disk: check at most every N seconds, fingerprint them, load on change, keep the last good
value, re-check after reading, report a broken version once.

Used by the policy store (a directory of YAML files) and the serving certificate (a certificate and key).
Checks are lazy: on access, at most once per ``interval``, by one thread at a time; the others get the
value in force meanwhile. A version that fails to load is reported once and not retried until the files
change again. A version whose fingerprint changed while it was read (a ConfigMap or Secret update in
progress: kubelet swaps a symlink, so a reader can see old and new files) is not put in force; the next
check reads it again. So is a version that is not ``settled`` yet (files written a moment ago, which a writer
that truncates and then writes may not have finished: an empty file read there parses as no policies at all).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
#: A fingerprint that no files have: what ``fingerprint`` raising OSError stands for.
UNREADABLE = ("unreadable",)


class Follower(Generic[T]):
    """The value loaded from some files, reloaded when their fingerprint changes.

    ``fingerprint()`` names the files' current version (names, sizes, times, inodes) and raises OSError when
    they cannot be looked at; ``load()`` reads them, raising one of ``errors`` for a broken version.
    ``loaded(previous, value)`` is called for each version put in force, ``failed(fingerprint, error)`` once for each
    broken one, ``recovered()`` when the files return to the version in force after a broken one. A version for
    which ``settled(fingerprint)`` is false is neither loaded nor reported: the next check looks again.
    """

    def __init__(
        self,
        value: T,
        *,
        version: Hashable | None,
        fingerprint: Callable[[], Hashable],
        load: Callable[[], T],
        errors: tuple[type[Exception], ...],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
        loaded: Callable[[T, T], None] = lambda _previous, _value: None,
        failed: Callable[[Hashable, Exception], None] = lambda _version, _error: None,
        recovered: Callable[[], None] = lambda: None,
        settled: Callable[[Hashable], bool] = lambda _version: True,
        log: logging.Logger,
        name: str,
    ) -> None:
        """``value``: what is in force now, loaded from the files at ``version`` (None: not from these files)."""
        self.value = value
        self.interval = interval
        self.background = background
        self._version = version
        self._failed: Hashable | None = None
        self._fingerprint, self._load, self._errors = fingerprint, load, errors
        self._loaded, self._on_failure, self._recovered = loaded, failed, recovered
        self._settled = settled
        self._clock = clock
        self._checked = clock()
        self._lock = threading.Lock()
        self._log, self._name = log, name

    def current(self) -> T:
        """The value in force, after a check of the files if one is due (in a short-lived thread with
        ``background``, so the caller never waits for a reload)."""
        now = self._clock()
        if now - self._checked >= self.interval and self._lock.acquire(blocking=False):
            self._checked = now
            if self.background:
                threading.Thread(target=self._check_and_release, name=self._name, daemon=True).start()
            else:
                self._check_and_release()
        return self.value

    def fail(self, version: Hashable, error: Exception) -> None:
        """Record that the files at ``version`` are broken (as a check that found them so would)."""
        if version == self._failed:
            return
        self._failed = version
        self._on_failure(version, error)

    def _check_and_release(self) -> None:
        try:
            self.check()
        except Exception:  # never let a reload bug take the lock with it; the value in force stays
            self._log.exception("%s: checking the files failed; what is in force stays", self._name)
        finally:
            self._lock.release()

    def check(self) -> None:
        """Load the files if their version is neither the one in force nor a known broken one."""
        try:
            version = self._fingerprint()
        except OSError as err:
            self.fail(UNREADABLE, err)
            return
        if version == self._version:
            if self._failed is not None:
                self._failed = None
                self._recovered()
            return
        if version == self._failed or not self._settled(version):
            return
        try:
            value = self._load()
        except self._errors as err:
            self.fail(version, err)
            return
        try:
            unchanged = self._fingerprint() == version
        except OSError:
            unchanged = False
        if not unchanged:
            return  # the files changed while they were read: read them again at the next check
        previous, self.value, self._version, self._failed = self.value, value, version, None
        self._loaded(previous, value)
