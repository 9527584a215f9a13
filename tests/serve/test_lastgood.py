"""The last good copy of the policy files: saved only when the files load to the set in force, and the set a
worker starts from while the files on disk are broken (instead of failing to boot and stopping gunicorn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO
from webhook.policy.files import load_policies
from webhook.policy.loader import PolicyError
from webhook.serve import lastgood

POLICY = (REPO / "policies" / "00-default.yaml").read_text()
DEEP = "spec: " + "[" * 5000 + "]" * 5000 + "\n"  # libyaml stops at 1000 levels; PyYAML's composer recursed


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


def test_a_worker_starting_over_broken_files_uses_the_copy(policy_dir, tmp_path, monkeypatch):
    from webhook.serve import wiring

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(state))
    assert wiring.run_directory() == state  # what build_app hands the store
    assert lastgood.save(policy_dir, load_policies(policy_dir), into=state)
    (policy_dir / "default.yaml").write_text("spec: [broken")
    store = wiring._policy_store(str(policy_dir), last_good=state)
    assert store.current().digest == lastgood.load(from_=state).digest and store.last_error


def test_without_a_copy_broken_files_still_stop_the_worker(policy_dir, tmp_path, monkeypatch):
    from webhook.serve import wiring

    (policy_dir / "default.yaml").write_text("spec: [broken")
    with pytest.raises(PolicyError):
        wiring._policy_store(str(policy_dir), last_good=tmp_path)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert wiring.run_directory() is None
    with pytest.raises(PolicyError):
        wiring._policy_store(str(policy_dir), last_good=None)


def test_serve_starts_from_the_last_good_copy_or_stops_with_one_line(policy_dir, tmp_path, monkeypatch, capsys):
    from webhook.serve import command as serve

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(state))
    (policy_dir / "default.yaml").write_text(DEEP)
    with pytest.raises(ValueError) as caught:
        serve.check_policies(str(policy_dir), required=True, run_directory=str(state))
    assert "\n" not in str(caught.value) and "default.yaml" in str(caught.value)
    assert "no last good copy" in str(caught.value)

    (policy_dir / "default.yaml").write_text(POLICY)
    saved = load_policies(policy_dir)
    assert lastgood.save(policy_dir, saved, into=state)
    (state / "counter_1.db").write_bytes(b"stale")
    (policy_dir / "default.yaml").write_text(DEEP)
    assert serve.prepare_metrics_dir() is None  # a restart: the metrics go, the last good copy stays
    assert not (state / "counter_1.db").exists()
    serve.check_policies(str(policy_dir), required=True, run_directory=str(state))
    assert f"starting from the last good copy ({saved.digest})" in capsys.readouterr().err
