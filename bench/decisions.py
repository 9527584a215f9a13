"""Microbenchmark of the decision path without HTTP: microseconds per mutate/validate call.

Run: .venv/bin/python bench/decisions.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import FIXTURES, env, gpu_pod, request  # noqa: E402
from webhook.admission import mutate, validate  # noqa: E402
from webhook.policy.loader import load_policies  # noqa: E402


def every_field_pod() -> dict:
    pod = json.loads((FIXTURES / "v1.36.0" / "core.v1.Pod.json").read_text())
    pod["metadata"]["namespace"] = "default"
    for c in pod["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    pod["spec"]["initContainers"] = []
    pod["spec"]["ephemeralContainers"] = []
    pod["spec"].pop("resources", None)
    pod["spec"].pop("runtimeClassName", None)
    return pod


def main() -> None:
    environment = env(load_policies(REPO / "policies"), {"default": {"team": "ml"}})
    big = every_field_pod()
    print(f"every-field pod: {len(json.dumps(big))} bytes of JSON")
    for name, obj in (("small GPU pod", gpu_pod(1)), ("every-field pod", big)):
        req = request(obj)
        for fn in (mutate, validate):
            n = 2000
            started = time.perf_counter()
            for _ in range(n):
                fn(req, environment)
            per_call = (time.perf_counter() - started) / n
            print(f"{name:16s} {fn.__name__:8s} {per_call * 1e6:7.1f} µs/call")


if __name__ == "__main__":
    main()
