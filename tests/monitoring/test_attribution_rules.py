"""The attribution recording rules: promtool checks them and runs their unit tests on input series."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/monitoring/gpugate-attribution.rules.yaml"
PROMETHEUS_RULE = ROOT / "deploy/monitoring/prometheusrule.yaml"
UNIT_TESTS = Path(__file__).with_name("attribution_test.yaml")
TOOLS_CACHE = Path(os.environ.get("GPUGATE_TOOLS_CACHE", Path.home() / ".cache/gpugate-tools"))

PROMETHEUS_RULE_HEADER = """\
# gpugate's recording rules for the prometheus-operator (kubectl apply -f this file into the namespace
# your Prometheus watches for rules; adjust metadata.labels to its ruleSelector).
# GENERATED from gpugate-attribution.rules.yaml, the source of truth: edit that file, then run
#   .venv/bin/python -m tests.monitoring.test_attribution_rules
# to rewrite this one (tests/monitoring fails while the two differ).
"""


def find_promtool() -> str:
    """promtool from PATH, else from the cache scripts/install-tools fills; skip or fail without it."""
    found = shutil.which("promtool") or next(
        iter(sorted(glob.glob(str(TOOLS_CACHE / "promtool-*/promtool")), reverse=True)), None
    )
    if found:
        return found
    message = (
        "PROMTOOL NOT FOUND: the recording rules in deploy/monitoring are NOT being checked. "
        "Run scripts/install-tools (it extracts promtool from Debian's 'prometheus' package into "
        f"{TOOLS_CACHE}) or put promtool on PATH."
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def promtool() -> str:
    return find_promtool()


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_rule_file_is_valid(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(RULES), cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout + result.stderr


def test_recorded_values_match_the_unit_tests(promtool: str) -> None:
    # rule_files in the unit-test file are relative to it, hence cwd.
    result = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_unit_tests_cover_every_recorded_series() -> None:
    recorded = {rule["record"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    text = UNIT_TESTS.read_text()
    # gpu:gpu_utilisation:attributed is checked through count(); the others by their samples.
    assert {name for name in recorded if name not in text} == set()


class _LiteralDumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_LiteralDumper.add_representer(str, _str)


def render_prometheus_rule() -> str:
    """The PrometheusRule that wraps the plain rule file, exactly as it is committed."""
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpugate-attribution",
            "labels": {"app.kubernetes.io/name": "gpugate", "app.kubernetes.io/component": "monitoring"},
        },
        "spec": yaml.safe_load(RULES.read_text()),
    }
    return PROMETHEUS_RULE_HEADER + yaml.dump(document, Dumper=_LiteralDumper, sort_keys=False, width=200)


def test_prometheus_rule_wraps_the_same_groups() -> None:
    wrapper = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert wrapper["kind"] == "PrometheusRule"
    assert wrapper["spec"] == yaml.safe_load(RULES.read_text())
    assert PROMETHEUS_RULE.read_text() == render_prometheus_rule(), (
        "deploy/monitoring/prometheusrule.yaml is stale: run .venv/bin/python -m tests.monitoring.test_attribution_rules"
    )


if __name__ == "__main__":
    PROMETHEUS_RULE.write_text(render_prometheus_rule())
    print(f"wrote {PROMETHEUS_RULE.relative_to(ROOT)}", file=sys.stderr)
