"""webhook.serve.reloading.Follower with an injected clock and fake files: when it checks, what it puts in force,
what it reports, and a version that changed while it was read."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import pytest

from webhook.serve.reloading import UNREADABLE, Follower


class Files:
    """Fake files: a version, the content it loads to, and a hook that runs while they are read."""

    def __init__(self) -> None:
        self.version: Any = 1
        self.content: Any = "one"
        self.while_reading: Any = None
        self.loads = 0

    def fingerprint(self) -> Hashable:
        if self.version is None:
            raise FileNotFoundError(2, "No such file or directory", "tls.crt")
        return self.version

    def load(self) -> str:
        self.loads += 1
        if self.while_reading:
            self.while_reading()
            self.while_reading = None
        if self.content is None:
            raise ValueError("broken")
        return str(self.content)


@pytest.fixture
def files() -> Files:
    return Files()


def follow(files: Files, events: list[Any], now: list[float]) -> Follower[str]:
    return Follower(
        "one",
        version=1,
        fingerprint=files.fingerprint,
        load=files.load,
        errors=(ValueError,),
        interval=1.0,
        clock=lambda: now[0],
        loaded=lambda previous, value: events.append(("loaded", previous, value)),
        failed=lambda version, error: events.append(("failed", version, str(error))),
        recovered=lambda: events.append(("recovered",)),
        log=logging.getLogger("test"),
        name="test",
    )


def test_files_are_checked_at_most_once_per_interval(files: Files) -> None:
    events: list[Any] = []
    now = [0.0]
    follower = follow(files, events, now)
    files.version, files.content = 2, "two"
    now[0] = 0.5
    assert follower.current() == "one" and files.loads == 0
    now[0] = 1.0
    assert follower.current() == "two" and events == [("loaded", "one", "two")]


def test_a_broken_version_is_reported_once_and_the_last_good_value_stays(files: Files) -> None:
    events: list[Any] = []
    now = [0.0]
    follower = follow(files, events, now)
    files.version, files.content = 2, None
    for step in range(1, 4):
        now[0] = float(step)
        assert follower.current() == "one"
    assert events == [("failed", 2, "broken")] and files.loads == 1  # not re-read until the files change
    files.version = 1  # back to the version in force
    now[0] = 5.0
    assert follower.current() == "one" and events[-1] == ("recovered",)


def test_a_version_that_changes_while_it_is_read_is_not_put_in_force(files: Files) -> None:
    events: list[Any] = []
    now = [0.0]
    follower = follow(files, events, now)
    files.version, files.content = 2, "two-half-written"

    def swap() -> None:  # kubelet swaps the ..data link while gpugate reads the files
        files.version, files.content = 3, "three"

    files.while_reading = swap
    now[0] = 1.0
    assert follower.current() == "one" and events == []
    now[0] = 2.0
    assert follower.current() == "three" and events == [("loaded", "one", "three")]


def test_unreadable_files_are_reported_once(files: Files) -> None:
    events: list[Any] = []
    now = [0.0]
    follower = follow(files, events, now)
    files.version = None
    for step in (1.0, 2.0):
        now[0] = step
        assert follower.current() == "one"
    assert [e[:2] for e in events] == [("failed", UNREADABLE)] and "No such file" in events[0][2]
