"""Scenario 3: Deployments and Jobs with GPU pod templates get the verdict at apply time —
warnings say what each pod will receive, templates are left alone (no policy sets
mutateTemplates), and a bad template is refused before any pod exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.gpugate import Stack

from .objects import container, deployment, gpu_pod, gpugate_denial, job, pod

pytestmark = pytest.mark.e2e

WORKLOADS: dict[str, Callable[[str, str, dict[str, Any]], dict[str, Any]]] = {
    "deployment": deployment,
    "job": job,
}


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_dry_run_of_a_gpu_workload_shows_verdict_and_warnings(stack: Stack, namespace: str, kind: str) -> None:
    sent = WORKLOADS[kind]("train", namespace, gpu_pod("x", namespace, gpus="1"))

    dry = stack.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=sent)

    assert dry.warnings, f"expected `Warning:` lines on stderr telling what the pods will receive:\n{dry}"
    said = "\n".join(dry.warnings)
    # What each pod will receive: runtime class, GPU toleration, model selector.
    for words in ("nvidia", "nvidia.com/gpu", "NVIDIA-L4"):
        assert words in said, f"{words!r} missing from the warnings:\n{said}"
    template = dry.json()["spec"]["template"]
    assert "runtimeClassName" not in template["spec"], "templates are not mutated without mutateTemplates"
    assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


BAD_TEMPLATES = {
    "fractional": (pod("x", "", container("cuda", gpus="500m")), ["cuda", "must be an integer"]),
    "disallowed-model": (
        pod("x", "", container("cuda", gpus="1"), labels={"gpugate.io/model": "a100"}),
        ["a100", "l4", "h100"],
    ),
}


@pytest.mark.parametrize("kind", list(WORKLOADS))
@pytest.mark.parametrize("bad", list(BAD_TEMPLATES))
def test_a_bad_gpu_template_is_refused_at_apply_time(stack: Stack, namespace: str, kind: str, bad: str) -> None:
    template_pod, wording = BAD_TEMPLATES[bad]
    sent = WORKLOADS[kind]("train", namespace, template_pod)

    result = stack.kubectl("apply", "-f", "-", stdin=sent, check=False)

    assert not result.ok, f"the {kind} was admitted:\n{result}"
    message = gpugate_denial(result.stderr)
    assert message is not None, f"expected a gpugate denial:\n{result}"
    for words in wording:
        assert words in message, f"{words!r} missing from: {message}"
    gone = stack.kubectl("get", kind, "train", "-n", namespace, check=False)
    assert "NotFound" in gone.stderr, gone
