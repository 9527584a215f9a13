"""The last good copy of the policy files: saved only when the files load to the set in force, and the set a
worker starts from while the files on disk are broken (instead of failing to boot and stopping gunicorn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO
from webhook.policy import lastgood
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError
from webhook.policy.store import PolicyStore

POLICY = (REPO / "policies" / "00-default.yaml").read_text()


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "default.yaml").write_text(POLICY)
    return directory


def test_a_saved_copy_loads_to_the_same_set(policy_dir, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    policies = load_policies(policy_dir)
    assert lastgood.save(policy_dir, policies, into=state)
    assert lastgood.load(from_=state).digest == policies.digest
    assert (state / lastgood.LINK).is_symlink()


def test_files_that_changed_since_they_loaded_are_not_saved(policy_dir, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    policies = load_policies(policy_dir)
    (policy_dir / "default.yaml").write_text("spec: [broken")
    assert not lastgood.save(policy_dir, policies, into=state)
    with pytest.raises((PolicyError, OSError)):
        lastgood.load(from_=state)
    assert [p.name for p in state.iterdir()] == []  # no staging left behind


def test_a_newer_copy_replaces_the_older(policy_dir, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    assert lastgood.save(policy_dir, load_policies(policy_dir), into=state)
    (policy_dir / "default.yaml").write_text(POLICY.replace("runtimeClassName: nvidia", "runtimeClassName: nvidia-cdi"))
    newer = load_policies(policy_dir)
    assert lastgood.save(policy_dir, newer, into=state)
    assert lastgood.load(from_=state).digest == newer.digest


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


def test_a_worker_starting_over_broken_files_uses_the_copy(policy_dir, tmp_path, monkeypatch):
    from webhook.serve import wiring

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(state))
    assert lastgood.save(policy_dir, load_policies(policy_dir), into=state)
    (policy_dir / "default.yaml").write_text("spec: [broken")
    store = wiring._policy_store(str(policy_dir))
    assert store.current().digest == lastgood.load(from_=state).digest and store.last_error


def test_without_a_copy_broken_files_still_stop_the_worker(policy_dir, tmp_path, monkeypatch):
    from webhook.serve import wiring

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    (policy_dir / "default.yaml").write_text("spec: [broken")
    with pytest.raises(PolicyError):
        wiring._policy_store(str(policy_dir))
