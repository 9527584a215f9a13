"""The last good copy of the policy files: saved only when the files load to the set in force, and the set a
worker starts from while the files on disk are broken (instead of failing to boot and stopping gunicorn)."""

from __future__ import annotations

import subprocess
import sys
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


# ---- any failure while loading is a broken edit ------------------------------------------------------

DEEP = "spec: " + "[" * 5000 + "]" * 5000 + "\n"  # libyaml stops at 1000 levels; PyYAML's composer recursed
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


@pytest.mark.parametrize("text", [DEEP, "spec: " + "[" * 500 + "]" * 500, LAUGHS, "a: &a [*a]\n", "n: " + "9" * 5000])
def test_a_policy_file_beyond_the_yaml_bounds_is_an_issue_naming_the_file(policy_dir, text):
    (policy_dir / "zz-hostile.yaml").write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policies(policy_dir)
    assert [issue.file for issue in caught.value.issues] == ["zz-hostile.yaml"]


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


def test_policy_validate_names_the_file_without_a_traceback(policy_dir):
    (policy_dir / "deep.yaml").write_text(DEEP)
    proc = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "policy", "validate", str(policy_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if "deep.yaml" in line], proc.stderr


def test_serve_starts_from_the_last_good_copy_or_stops_with_one_line(policy_dir, tmp_path, monkeypatch, capsys):
    from webhook.serve import command as serve

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(state))
    (policy_dir / "default.yaml").write_text(DEEP)
    with pytest.raises(ValueError) as caught:
        serve.check_policies(str(policy_dir), required=True)
    assert "\n" not in str(caught.value) and "default.yaml" in str(caught.value)
    assert "no last good copy" in str(caught.value)

    (policy_dir / "default.yaml").write_text(POLICY)
    saved = load_policies(policy_dir)
    assert lastgood.save(policy_dir, saved, into=state)
    (state / "counter_1.db").write_bytes(b"stale")
    (policy_dir / "default.yaml").write_text(DEEP)
    assert serve.prepare_metrics_dir() is None  # a restart: the metrics go, the last good copy stays
    assert not (state / "counter_1.db").exists()
    serve.check_policies(str(policy_dir), required=True)
    assert f"starting from the last good copy ({saved.digest})" in capsys.readouterr().err
