"""The tests mirror the code: every module webhook/<package>/<module>.py has tests/<package>/test_<module>.py
(webhook/<module>.py: tests/test_<module>.py), as the README's layout says. The modules below do not yet: they
are tested through another module's file or a topic's (pods/objects.py in tests/admission/test_workload_crds.py,
the report's modules in tests/report/test_report.py and test_units.py, rules/choice.py in
tests/rules/test_model_selection.py, ...). The list may only shrink: a new module comes with its own test file,
and a module that gains one leaves the list."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO

#: Modules (relative to webhook/) without a test file of their own name yet.
UNMIRRORED = frozenset(
    {
        "admission/offline.py",
        "admission/patch.py",
        "audit/policyreports.py",
        "audit/render.py",
        "audit/tally.py",
        "check.py",
        "inventory/pools.py",
        "inventory/snapshot.py",
        "kube/client.py",
        "native/cel.py",
        "native/command.py",
        "pods/affinity.py",
        "pods/fields.py",
        "pods/gpus.py",
        "pods/objects.py",
        "pods/operated.py",
        "policy/classes.py",
        "policy/command.py",
        "policy/devices.py",
        "policy/keys.py",
        "policy/labels.py",
        "policy/reader.py",
        "policy/schema.py",
        "policy/vendors.py",
        "report/chunk.py",
        "report/command.py",
        "report/compute.py",
        "report/model.py",
        "report/prometheus.py",
        "report/queries.py",
        "report/render.py",
        "report/render_cells.py",
        "report/render_html.py",
        "report/render_records.py",
        "report/series.py",
        "report/totals.py",
        "rules/choice.py",
        "serve/command.py",
        "serve/metrics.py",
        "serve/wiring.py",
    }
)


def mirror_of(module: Path) -> Path:
    """tests/<package>/test_<module>.py for webhook/<package>/<module>.py."""
    relative = module.relative_to(REPO / "webhook")
    return REPO / "tests" / relative.parent / f"test_{relative.name}"


def unmirrored() -> set[str]:
    modules = (p for p in (REPO / "webhook").rglob("*.py") if p.name != "__init__.py")
    return {p.relative_to(REPO / "webhook").as_posix() for p in modules if not mirror_of(p).is_file()}


def test_every_module_has_its_test_file_but_the_listed_ones() -> None:
    missing = unmirrored()
    assert missing - UNMIRRORED == set(), "add tests/<package>/test_<module>.py for these new modules"
    assert UNMIRRORED - missing == set(), "these now have their own test file: remove them from UNMIRRORED"


def test_the_mirror_names_the_file_beside_its_package() -> None:
    assert mirror_of(REPO / "webhook" / "kube" / "informer.py") == REPO / "tests" / "kube" / "test_informer.py"
    assert mirror_of(REPO / "webhook" / "check.py") == REPO / "tests" / "test_check.py"
