"""One release version: pyproject.toml is the source; the chart, the image tags deploy/ pins, and the version
the installed package reports must all say the same."""

from __future__ import annotations

import tomllib

import yaml

from tests.support import REPO
from webhook.version import gpugate_version

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_chart_and_its_app_carry_the_package_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "gpugate" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)


def test_the_kustomize_bases_pin_the_image_of_this_version() -> None:
    for base in ("base", "audit-cronjob"):
        kustomization = yaml.safe_load((REPO / "deploy" / base / "kustomization.yaml").read_text())
        tags = {image["name"]: image["newTag"] for image in kustomization["images"]}
        assert tags == {"gpugate": VERSION}, base


def test_the_installed_package_reports_the_version_of_the_source_tree() -> None:
    # `make venv` reinstalls when pyproject.toml changes; a stale install would report the old release.
    assert gpugate_version() == VERSION


def test_the_changelog_has_a_section_for_the_version() -> None:
    headings = [line for line in (REPO / "CHANGES.md").read_text().splitlines() if line.startswith("## ")]
    assert headings[0] == "## Unreleased"
    assert f"## {VERSION}" in headings
