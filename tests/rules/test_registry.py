"""The rule registry (webhook/rules/registry.py): what it accepts, what it refuses when the rules load, and
that the shipped rules pass its checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import webhook.rules
from tests.support import gpu_pod
from webhook.pods.objects import shape_of
from webhook.policy.model import BUILTIN
from webhook.rules import registry
from webhook.rules.base import Change, PodContext, PodEditor, Touch
from webhook.rules.registry import Registry, RegistryError

FIELD = Touch("runtimeClassName", "spec.runtimeClassName", in_place=False, describe=lambda before, after: [])


def nothing(pod: Any, ctx: Any) -> list[Any]:
    return []


def test_the_shipped_rules_are_all_registered_once_in_a_declared_order() -> None:
    rules = registry.REGISTRY.rules
    modules = {p.stem for p in Path(webhook.rules.__file__).parent.glob("*.py")} - {
        "__init__",
        *registry.INFRASTRUCTURE,
    }
    assert {r.module.rpartition(".")[2] for r in rules} == modules
    assert len({r.name for r in rules}) == len(rules) and len({r.order for r in rules}) == len(rules)
    assert all(r.reads and r.checks for r in rules)
    assert all(r.touches for r in rules if any(c.action == "mutate" for c in r.checks))
    # The order mutators run in is the records' order, not the order of the imports in rules/__init__.py.
    assert [c.name for c in registry.checks("mutate")] == [
        "runtime-class",
        "gpu-taint-toleration",
        "gpu-taint-toleration",
        "model-selection",
        "attribution",
        "attribution",  # gpugate.io/claims-pending
        "visible-devices",
    ]
    registry.REGISTRY.seal("webhook.rules", webhook.rules.__path__)


def test_a_second_rule_with_a_taken_name_is_refused() -> None:
    rules = Registry()
    rules.rule("runtime-class", order=1, reads={"spec.runtimeClassName": str}, module="a")
    with pytest.raises(RegistryError, match='the name "runtime-class" is already registered by a'):
        rules.rule("runtime-class", order=2, reads={"spec.runtimeClassName": str}, module="b")


def test_a_taken_order_and_a_rule_without_reads_are_refused() -> None:
    rules = Registry()
    rules.rule("first", order=1, reads={"spec.runtimeClassName": str})
    with pytest.raises(RegistryError, match='order 1 is already taken by rule "first"'):
        rules.rule("second", order=1, reads={"spec.runtimeClassName": str})
    with pytest.raises(RegistryError, match="declares no fields it reads"):
        rules.rule("third", order=3, reads={})


def test_unknown_pods_an_update_meaning_a_check_cannot_have_and_a_mutator_without_touches_are_refused() -> None:
    rules = Registry()
    reads = {"spec.runtimeClassName": str}
    with pytest.raises(RegistryError, match="unknown pods 'gpus'"):
        rules.rule("a", order=1, reads=reads).validator(pods="gpus")(nothing)  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="on_update 'skip' for a validate check"):
        rules.rule("b", order=2, reads=reads).validator(pods="any", on_update="skip")(nothing)
    with pytest.raises(RegistryError, match="a mutator, but the rule declares no touches"):
        rules.rule("c", order=3, reads=reads).mutator(pods="gpu")(nothing)


def test_a_mutator_changing_a_field_it_did_not_declare_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = Registry()

    def sneaky(editor: PodEditor, ctx: PodContext) -> list[Change]:
        return [Change("nodeSelector", "nodeSelector a=b")]

    rules.rule("sneaky", order=1, reads={"spec.nodeSelector": str}, touches=[FIELD]).mutator(pods="any")(sneaky)
    monkeypatch.setattr(registry, "REGISTRY", rules)
    pod = gpu_pod(1)
    shape = shape_of(pod)
    assert shape is not None
    governing = dataclasses.replace(BUILTIN, name="governing")  # mutators run only under a policy
    ctx = PodContext(shape=shape, policy=governing, namespace="default")
    with pytest.raises(RegistryError, match="changed 'nodeSelector', which it does not declare"):
        registry.mutations(PodEditor(pod, shape), ctx)


def test_a_rule_module_that_registers_nothing_stops_the_package_from_loading(tmp_path: Path) -> None:
    package = tmp_path / "rules"
    package.mkdir()
    (package / "registered.py").write_text("")
    (package / "forgotten.py").write_text('"""A rule someone forgot to register."""\n')
    (package / "base.py").write_text("")  # infrastructure: exempt
    rules = Registry()
    rules.rule("registered", order=1, reads={"spec.runtimeClassName": str}, module="pkg.registered").validator(
        pods="any"
    )(nothing)
    with pytest.raises(RegistryError) as err:
        rules.seal("pkg", [str(package)])
    assert str(err.value) == "pkg.forgotten registers no rule (is it imported in pkg/__init__.py?)"


def test_a_registered_rule_without_any_check_is_refused_at_seal(tmp_path: Path) -> None:
    rules = Registry()
    rules.rule("idle", order=1, reads={"spec.runtimeClassName": str}, module="pkg.idle")
    (tmp_path / "idle.py").write_text("")
    with pytest.raises(RegistryError, match=r'rule "idle" \(pkg.idle\) has no validator or mutator'):
        rules.seal("pkg", [str(tmp_path)])


def test_the_import_contracts_name_every_rule_module() -> None:
    """pyproject.toml's "No rule imports another rule" and "The decision imports no rule" list the rule modules
    by hand (an independence contract takes no wildcard): a new rule module must be named there too."""
    import pathlib
    import tomllib

    from tests.support import REPO
    from webhook.rules.registry import INFRASTRUCTURE

    rules = {
        f"webhook.rules.{path.stem}"
        for path in pathlib.Path(REPO / "webhook" / "rules").glob("*.py")
        if path.stem != "__init__" and path.stem not in INFRASTRUCTURE
    }
    contracts = {
        c["name"]: c for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    }
    assert set(contracts["No rule imports another rule"]["modules"]) == rules
    decision = next(c for name, c in contracts.items() if name.startswith("The decision imports no rule"))
    assert set(decision["forbidden_modules"]) == rules
