"""Microbenchmark of the decision path without HTTP: microseconds per mutate/validate call.

`/validate` is timed on what the apiserver sends it after `/mutate`: the object with gpugate's patch applied.
Each figure is the median of 7 timed batches, in CPU time (time.process_time): on a shared machine, wall
time would also count the moments other processes hold the core.

Run: .venv/bin/python bench/decisions.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import FIXTURES, apply, env, gpu_pod, request  # noqa: E402
from webhook.admission import mutate, validate  # noqa: E402
from webhook.policy.files import load_policies  # noqa: E402


def every_field_pod() -> dict[str, Any]:
    pod = json.loads((FIXTURES / "v1.36.0" / "core.v1.Pod.json").read_text())
    pod["metadata"]["namespace"] = "default"
    for c in pod["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    pod["spec"]["initContainers"] = []
    pod["spec"]["ephemeralContainers"] = []
    pod["spec"].pop("resources", None)
    pod["spec"].pop("runtimeClassName", None)
    for c in pod["spec"]["containers"]:  # a privileged GPU container is refused: time an admitted pod
        c.setdefault("securityContext", {})["privileged"] = False
    return pod


def per_call(fn: Callable[[], object], *, calls: int) -> float:
    batch = max(1, calls // 7)
    samples = []
    for _ in range(7):
        started = time.process_time()
        for _ in range(batch):
            fn()
        samples.append((time.process_time() - started) / batch)
    return statistics.median(samples)


def measure(*, calls: int = 2000) -> dict[str, dict[str, float]]:
    """Seconds per call: {pod: {"mutate": ..., "validate": ..., "validate unmutated": ...}}."""
    environment = env(load_policies(REPO / "policies"), {"default": {"team": "ml"}})
    out: dict[str, dict[str, float]] = {}
    for name, obj in (("small GPU pod", gpu_pod(1)), ("every-field pod", every_field_pod())):
        req = request(obj)
        mutated = request(apply(obj, mutate(req, environment).patch))
        out[name] = {
            "mutate": per_call(partial(mutate, req, environment), calls=calls),
            "validate": per_call(partial(validate, mutated, environment), calls=calls),
            "validate unmutated": per_call(partial(validate, req, environment), calls=calls),
        }
    return out


def breakdown(obj: dict[str, Any], *, calls: int = 300) -> list[tuple[str, float]]:
    """Where one mutate + validate of ``obj`` spends its time: each registered rule, finding the pods and
    their policies, and the patch; seconds per mutate + validate, largest first. Each part is timed by a
    wrapper (time.process_time), so the parts add up to slightly more than the whole."""
    import dataclasses

    from webhook.admission import engine as admission
    from webhook.rules import registry

    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - started

        return run

    environment = env(load_policies(REPO / "policies"), {"default": {"team": "ml"}})
    req = request(obj)
    mutated = request(apply(obj, mutate(req, environment).patch))
    rules = registry.REGISTRY.rules
    saved = ([list(r.checks) for r in rules], admission._subjects, admission.make_patch)  # type: ignore[attr-defined]
    try:
        for r in rules:
            r.checks[:] = [dataclasses.replace(c, run=timed(f"rule {c.name} ({c.action})", c.run)) for c in r.checks]
        registry.REGISTRY.invalidate()
        admission._subjects = timed("finding the pods and their policies", admission._subjects)
        admission.make_patch = timed("the JSON patch (diff and check)", admission.make_patch)  # type: ignore[attr-defined]
        started = time.process_time()
        for _ in range(calls):
            mutate(req, environment)
            validate(mutated, environment)
        whole = time.process_time() - started
    finally:
        checks, admission._subjects, admission.make_patch = saved  # type: ignore[attr-defined]
        for r, kept in zip(rules, checks, strict=True):
            r.checks[:] = kept
        registry.REGISTRY.invalidate()
    parts = sorted(((name, seconds / calls) for name, seconds in spent.items()), key=lambda p: -p[1])
    return [*parts, ("the rest of mutate and validate", max(0.0, whole / calls - sum(s for _, s in parts)))]


def main() -> None:
    print(f"every-field pod: {len(json.dumps(every_field_pod()))} bytes of JSON")
    for name, calls in measure().items():
        line = "  ".join(f"{what} {seconds * 1e6:6.1f} µs" for what, seconds in calls.items())
        print(f"{name:16s} {line}  (mutate + validate {(calls['mutate'] + calls['validate']) * 1e6:.1f} µs)")
    print("\nevery-field pod, mutate + validate, by part:")
    for part, seconds in breakdown(every_field_pod()):
        print(f"  {seconds * 1e6:6.1f} µs  {part}")


if __name__ == "__main__":
    main()
