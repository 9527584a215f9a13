"""Shared pytest configuration: hypothesis profiles, and the schema check every produced patch passes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def every_patch_yields_a_valid_object(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every patch the admission code produces in any test is applied with RFC 6902 semantics (python-json-patch)
    to the original, and the result must validate against the newest upstream schema, strictly.

    Tests marked ``fuzzer_fixture`` feed the upstream every-field objects, whose placeholder values no schema
    accepts; they assert field preservation instead.
    """
    if request.node.get_closest_marker("fuzzer_fixture"):
        yield
        return
    from tests.support import apply, schema_check
    from webhook.admission import engine as admission
    from webhook.admission.patch import make_patch as real

    produced: list[Any] = []

    def checked(original: Any, mutated: Any) -> Any:
        ops = real(original, mutated)
        produced.append((original, ops))
        return ops

    monkeypatch.setattr(admission, "make_patch", checked)
    yield
    for original, ops in produced:
        schema_check(apply(original, ops))
