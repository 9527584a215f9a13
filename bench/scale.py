"""What 1,000 policies cost against one: per decision, per reload, and in each worker's memory.

The 1,000 policies select namespaces the ways teams write them: name globs (`team-0421-*`), exact names, and
namespaceSelectors (`matchLabels: {team: team-0421}`), some narrowed further by a podSelector; they sit at
priorities above the fallback policy from policies/00-default.yaml. Two pods are decided: one in a namespace
only the fallback governs (every policy is looked at and passed over: the worst case of a scan), and one
governed by a policy in the middle of the priority order.

Run: .venv/bin/python bench/scale.py [--policies 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import STANDARD, gpu_pod, policy_yaml, request  # noqa: E402
from webhook.admission import Environment, mutate, validate  # noqa: E402
from webhook.policy.files import load_policies  # noqa: E402
from webhook.serve.policies import PolicyStore  # noqa: E402

FALLBACK = (REPO / "policies" / "00-default.yaml").read_text()


def policy_document(i: int) -> str:
    """Team i's policy: the standard test policy (tests/support.py) with up to 8 GPUs, matched by a glob, a
    name or a namespace label, every fourth one also by a pod label."""
    if i % 3 == 0:
        match: dict[str, Any] = {"namespaces": [f"team-{i:04d}-*"]}
    elif i % 3 == 1:
        match = {"namespaces": [f"project-{i:04d}"]}
    else:
        match = {"namespaceSelector": {"matchLabels": {"team": f"team-{i:04d}"}}}
    if i % 4 == 0:
        match["podSelector"] = {"matchLabels": {"app": f"app-{i:04d}"}}
    limits = {"maxPerContainer": 8, "maxPerPod": 8}
    return policy_yaml(f"team-{i:04d}", priority=10 + i, mode="enforce", match=match, **{**STANDARD, "limits": limits})


def write_policies(directory: Path, count: int) -> None:
    """`count` policies in files of 50 (as a ConfigMap would carry them), plus the fallback."""
    (directory / "00-default.yaml").write_text(FALLBACK)
    for start in range(0, count, 50):
        docs = [policy_document(i) for i in range(start, min(count, start + 50))]
        (directory / f"teams-{start // 50:03d}.yaml").write_text("---\n".join(docs))


NAMESPACE_LABELS = {"default": {"team": "ml"}, "team-0501-serving": {"team": "none"}}


def labels_of(namespace: str) -> Mapping[str, str] | None:
    return NAMESPACE_LABELS.get(namespace, {"team": "other"})


def per_decision(environment: Environment, req: Mapping[str, Any], *, seconds: float) -> float:
    """CPU seconds per mutate + validate (time.process_time: other tenants' load does not count), median of
    at least 5 timed batches."""
    batch, samples = 200, list[float]()
    deadline = time.perf_counter() + seconds
    while len(samples) < 5 or time.perf_counter() < deadline:
        started = time.process_time()
        for _ in range(batch):
            mutate(req, environment)
            validate(req, environment)
        samples.append((time.process_time() - started) / batch)
    return statistics.median(samples)


@dataclass
class Scale:
    count: int
    decisions: dict[str, tuple[float, float]] = field(default_factory=dict)  # case -> (1 policy, N policies)
    governing: dict[str, str] = field(default_factory=dict)
    load_seconds: float = 0.0
    reload_seconds: float = 0.0
    worst_request_during_reload: float = 0.0
    worst_request_before_reload: float = 0.0
    rss_mb: list[float] = field(default_factory=list)


def measure(count: int, *, seconds: float = 1.0, rss: bool = True) -> Scale:
    result = Scale(count)
    with tempfile.TemporaryDirectory(prefix="gpugate-scale-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        one.mkdir()
        many.mkdir()
        write_policies(one, 0)
        write_policies(many, count)
        started = time.process_time()
        many_set = load_policies(many)
        result.load_seconds = time.process_time() - started
        one_set = load_policies(one)
        middle = count // 2 - count // 2 % 12  # a namespace-glob policy with a podSelector
        cases = {
            "fallback (every policy passed over)": request(gpu_pod(1, namespace="default")),
            f"policy {middle} of {count}": request(
                gpu_pod(1, namespace=f"team-{middle:04d}-x", labels={"app": f"app-{middle:04d}"})
            ),
        }
        for case, req in cases.items():
            env_one = Environment(policies=one_set, namespace_labels=labels_of)
            env_many = Environment(policies=many_set, namespace_labels=labels_of)
            decided = mutate(req, env_many)
            result.governing[case] = decided.policy
            result.decisions[case] = (
                per_decision(env_one, req, seconds=seconds),
                per_decision(env_many, req, seconds=seconds),
            )
        result.reload_seconds, result.worst_request_before_reload, result.worst_request_during_reload = (
            reload_under_load(many, cases["fallback (every policy passed over)"])
        )
        if rss:
            result.rss_mb = worker_rss(many)
    return result


def reload_under_load(directory: Path, req: Mapping[str, Any]) -> tuple[float, float, float]:
    """Edit one file while a thread keeps deciding; return the reload's duration and the slowest decision
    before and during it (a reload that runs on the request path shows up in the latter)."""
    store = PolicyStore(directory, interval=0.05, background=True)  # as build_app runs it
    slowest: list[float] = []
    stop = threading.Event()
    phase = [0]
    worst = [0.0, 0.0]

    def decide() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            environment = Environment(policies=store.current(), namespace_labels=labels_of)
            mutate(req, environment)
            validate(req, environment)
            elapsed = time.perf_counter() - started
            worst[phase[0]] = max(worst[phase[0]], elapsed)
            slowest.append(elapsed)

    thread = threading.Thread(target=decide, daemon=True)
    thread.start()
    time.sleep(0.5)
    generation = store.generation
    phase[0] = 1
    edited = directory / "teams-000.yaml"
    edited.write_text(edited.read_text().replace("priority: 10\n", "priority: 9\n", 1))
    started = time.perf_counter()
    while store.generation == generation and time.perf_counter() - started < 30:
        time.sleep(0.001)
    reloaded = time.perf_counter() - started
    time.sleep(0.2)
    stop.set()
    thread.join()
    return reloaded, worst[0], worst[1]


def worker_rss(policies: Path) -> list[float]:
    """VmRSS of each `gpugate serve` worker with these policies, after 200 admission requests."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench.serving import GPUGATE, load, start

    body = (REPO / "policies" / "examples" / "review-gpu-pod.json").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        subprocess.run(
            [str(GPUGATE), "certs", "--service", "gpugate", "--namespace", "gpugate", "--out", tmp, "--force"],
            check=True,
            capture_output=True,
        )
        proc, port = start(certs, "--policies", str(policies))
        try:
            load(port, certs, body, requests=200, clients=4)
            out = []
            for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out.append(int(line.split()[1]) / 1024)
            return out
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def report(result: Scale, *, rss: list[float] | None = None) -> str:
    """The tables; ``rss``: worker RSS measured elsewhere (bench/apiserver.py: with the cluster connection)."""
    lines: list[str] = []
    w: Callable[[str], None] = lines.append
    w(f"| decision (mutate + validate, small GPU pod) | 1 policy | {result.count:,} policies | ratio | target |")
    w("| --- | --- | --- | --- | --- |")
    for case, (one, many) in result.decisions.items():
        ratio = many / one
        w(
            f"| {case}: governed by `{result.governing[case]}` | {one * 1e6:.0f} µs | {many * 1e6:.0f} µs | "
            f"{ratio:.2f}× | ≤ 1.2× {'met' if ratio <= 1.2 else '**not met**'} |"
        )
    w("")
    w("| reload | measured | target |")
    w("| --- | --- | --- |")
    w(
        f"| a reload of {result.count:,} policies: read, parse and validate (CPU time) | {result.load_seconds:.2f} s | "
        f"< 1 s {'met' if result.load_seconds < 1 else '**not met**'} |"
    )
    w(
        f"| from the edit until the new set is in force, while a thread decides without pause in the same process "
        f"(wall time: the reload thread shares the GIL and the machine) | {result.reload_seconds:.2f} s | (shown) |"
    )
    # A request that waited for the reload would take about as long as the reload itself.
    blocked = result.worst_request_during_reload > result.reload_seconds / 2
    w(
        f"| slowest decision while the reload runs (before it: {result.worst_request_before_reload * 1e3:.1f} ms; "
        f"one that waited for the reload would take ~{result.reload_seconds:.1f} s) | "
        f"{result.worst_request_during_reload * 1e3:.1f} ms | never blocked: {'**not met**' if blocked else 'met'} |"
    )
    rss = rss or result.rss_mb
    if rss:
        w(
            f"| RSS per `gpugate serve` worker with {result.count:,} policies, after 400 reviews | "
            f"{', '.join(f'{v:.0f}' for v in rss)} MB | < 100 MB {'met' if max(rss) < 100 else '**not met**'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--no-rss", action="store_true", help="skip starting gpugate serve for the RSS figure")
    args = parser.parse_args()
    print(report(measure(args.policies, rss=not args.no_rss)))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
