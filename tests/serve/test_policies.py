"""The policy set in force (webhook/serve/policies.py): reloaded when the directory changes, a broken edit
reported once while the last good set stays, a reload in the background that never holds up a request."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError
from webhook.policy.model import PolicySet
from webhook.serve.policies import PolicyStore

HEAD = "apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {name: p}\n"
POLICY = (REPO / "policies" / "00-default.yaml").read_text()
DEEP = "spec: " + "[" * 5000 + "]" * 5000 + "\n"  # libyaml stops at 1000 levels; PyYAML's composer recursed


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "default.yaml").write_text(POLICY)
    return directory


def test_store_reloads_on_change_and_keeps_the_last_good_set(tmp_path):
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 1}\n")
    now = [0.0]
    store = PolicyStore(tmp_path, interval=1.0, clock=lambda: now[0])
    assert store.current().policies[0].priority == 1 and store.generation == 1
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 2}\n")
    assert store.current().policies[0].priority == 1  # not yet: checked at most once a second
    now[0] = 1.5
    assert store.current().policies[0].priority == 2 and store.generation == 2
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: [}\n")
    now[0] = 3.0
    assert store.current().policies[0].priority == 2
    assert store.reload_errors == 1 and "p.yaml" in (store.last_error or "")
    (tmp_path / "p.yaml").write_text(HEAD + "spec: {priority: 3}\n")
    now[0] = 4.5
    assert store.current().policies[0].priority == 3 and store.last_error is None and store.generation == 3


def test_store_follows_configmap_symlink_swaps(tmp_path):
    """A ConfigMap volume: p.yaml -> ..data/p.yaml, ..data -> ..<timestamp>; an update swaps ..data."""
    root = tmp_path / "mount"
    root.mkdir()
    (root / "..v1").mkdir()
    (root / "..v1" / "p.yaml").write_text(HEAD + "spec: {priority: 1}\n")
    (root / "..data").symlink_to("..v1")
    (root / "p.yaml").symlink_to("..data/p.yaml")
    now = [0.0]
    store = PolicyStore(root, clock=lambda: now[0])
    (root / "..v2").mkdir()
    (root / "..v2" / "p.yaml").write_text(HEAD + "spec: {priority: 7}\n")
    (root / "..data_tmp").symlink_to("..v2")
    (root / "..data_tmp").rename(root / "..data")
    now[0] = 2.0
    assert store.current().policies[0].priority == 7


def test_a_background_reload_never_holds_up_the_policies_in_force(tmp_path: Any, monkeypatch: Any) -> None:
    import threading
    import time

    from webhook.serve import policies as store_module

    policy = "apiVersion: gpugate.io/v2\nkind: GPUPolicy\nmetadata: {{name: p}}\nspec: {{priority: {}}}\n"
    (tmp_path / "p.yaml").write_text(policy.format(1))
    store = PolicyStore(tmp_path, interval=0, background=True)
    parsing = threading.Event()
    release = threading.Event()
    real = load_policies

    def slow(directory: Any) -> PolicySet:
        parsing.set()
        release.wait(30)
        return real(directory)

    monkeypatch.setattr(store_module, "load_policies", slow)
    (tmp_path / "p.yaml").write_text(policy.format(22))
    assert store.current().policies[0].priority == 1
    assert parsing.wait(30)  # the reload is under way, and still:
    assert store.current().policies[0].priority == 1 and store.generation == 1
    release.set()
    deadline = time.monotonic() + 30
    while store.generation == 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.current().policies[0].priority == 22 and store.generation == 2


def test_a_store_over_broken_files_starts_from_the_fallback_and_reports_the_error(policy_dir):
    good = load_policies(policy_dir)
    (policy_dir / "default.yaml").write_text("spec: [broken")
    with pytest.raises(PolicyError):
        PolicyStore(policy_dir)
    store = PolicyStore(policy_dir, interval=0, fallback=good)
    assert store.current().digest == good.digest
    assert store.reload_errors == 1 and store.last_error and store.last_error_id
    (policy_dir / "default.yaml").write_text(POLICY)
    assert store.current().digest == good.digest
    assert store.last_error is None and store.last_error_id is None


def test_a_broken_edit_that_makes_yaml_recurse_is_reported_once_and_the_last_good_set_stays(policy_dir):
    store = PolicyStore(policy_dir, interval=0)
    good = store.current().digest
    (policy_dir / "default.yaml").write_text(DEEP)
    assert store.current().digest == good
    assert store.last_error and "default.yaml" in store.last_error and store.last_error_id
    assert store.reload_errors == 1
    store.current()
    assert store.reload_errors == 1, "the same broken edit is counted once"


def test_a_loader_bug_on_odd_input_is_a_broken_edit_too(policy_dir, monkeypatch):
    import webhook.policy.files

    def broken(*args, **kwargs):
        raise MemoryError()

    store = PolicyStore(policy_dir, interval=0)
    good = store.current().digest
    monkeypatch.setattr(webhook.policy.files, "parse_policy", broken)
    (policy_dir / "default.yaml").write_text(POLICY + "\n# edited\n")
    assert store.current().digest == good
    assert store.last_error and "default.yaml: cannot be loaded: MemoryError" in store.last_error


def test_a_file_caught_between_its_truncation_and_its_content_is_not_put_in_force(tmp_path: Path) -> None:
    """A writer that truncates and then writes (an editor, `>`, Path.write_text) leaves the file empty for a moment:
    read there, it is a valid directory of no policies, and every GPU pod would pass unformed. An edit younger than
    ``settle`` is read at a later check; the one that then rests is put in force. (Seen in tests/e2e/test_faults.py
    on a loaded machine: one worker served no policies.)"""
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + "spec: {priority: 1}\n")
    now, wall = [0.0], [0.0]
    store = PolicyStore(tmp_path, interval=1.0, clock=lambda: now[0], settle=0.5, wallclock=lambda: wall[0])
    assert store.current().policies[0].priority == 1

    def written(text: str, at: float) -> None:
        path.write_text(text)
        os.utime(path, ns=(int(at * 1e9), int(at * 1e9)))

    written("", at=100.0)  # truncated, not yet written
    wall[0], now[0] = 100.2, 1.5
    assert [p.priority for p in store.current().policies] == [1], "an empty file read mid-write was put in force"
    assert store.generation == 1 and store.reload_errors == 0 and store.last_error is None
    written(HEAD + "spec: {priority: 2}\n", at=100.25)
    wall[0], now[0] = 100.5, 3.0
    assert store.current().policies[0].priority == 1  # 0.25 s old: not yet
    wall[0], now[0] = 101.0, 4.5
    assert store.current().policies[0].priority == 2 and store.generation == 2
    # A file time ahead of this clock (another host's) does not hold a reload back.
    written(HEAD + "spec: {priority: 3}\n", at=500.0)
    now[0] = 6.0
    assert store.current().policies[0].priority == 3
    # Emptying a file on purpose, once it rests, removes its policies as before.
    written("", at=101.5)
    wall[0], now[0] = 103.0, 7.5
    assert store.current().policies == ()
