"""Microbenchmark of the decision path (no HTTP): µs per mutate/validate call. Run: .venv/bin/python bench/decisions.py"""
import json
import sys
import time

sys.path.insert(0, '.')
from tests.support import FIXTURES, env, gpu_pod, request
from webhook.admission import mutate, validate
from webhook.policy import load_policies

ps = load_policies(str(__import__('pathlib').Path(__file__).resolve().parent.parent / 'policies'))
e = env(ps, {"default": {"team": "ml"}})
big = json.loads((FIXTURES / "v1.36.0" / "core.v1.Pod.json").read_text())
big["metadata"]["namespace"] = "default"
for c in big["spec"]["containers"]:
    c["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
big["spec"]["initContainers"] = []; big["spec"].pop("resources", None); big["spec"]["ephemeralContainers"] = []; big["spec"].pop("runtimeClassName")
print("every-field pod JSON bytes:", len(json.dumps(big)))
for name, obj in [("small gpu pod", gpu_pod(1)), ("every-field pod", big)]:
    req = request(obj)
    for fn in (mutate, validate):
        n = 2000
        t = time.perf_counter()
        for _ in range(n): fn(req, e)
        dt = (time.perf_counter() - t) / n
        print(f"{name:16s} {fn.__name__:8s} {dt*1e6:7.1f} µs/call")
