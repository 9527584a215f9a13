"""bench/fleet_scale.py on a small scale (20 kwok nodes, 200 GPU pods through Deployments and Jobs): every pod placed on
a pool of its class, with gpugate registered (gpugate injecting what the templates leave out), without it (the
templates carrying it), with bench/cel-equivalent.yaml and with bench/in-process-floor.yaml over the same templates,
the figures the published run reports measured, and `gpugate audit` finding nothing wrong. No timing is asserted; the
full run's numbers are in docs/development/performance.md."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bench import fleet_scale
from tests.harness.controlplane import BinariesMissing
from tests.harness.scheduling import find_scheduling_binaries

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def binaries() -> None:
    try:
        find_scheduling_binaries()
    except BinariesMissing as e:
        if os.environ.get("CI") or shutil.which("go"):
            pytest.fail(f"{e}: run tests/e2e/build.sh (or `make tools`)", pytrace=False)
        pytest.skip(f"!!! FLEET SCALE TEST SKIPPED: {e}")


def test_audited_creates_are_the_namespaces_pod_creates_each_timed_from_its_own_timestamps(tmp_path: Path) -> None:
    def event(verb: str, resource: str, namespace: str, received: str, done: str, **extra: object) -> str:
        ref = {"resource": resource, "namespace": namespace, **extra}
        return json.dumps(
            {"stage": "ResponseComplete", "verb": verb, "objectRef": ref, "requestReceivedTimestamp": received,
             "stageTimestamp": done}
        )  # fmt: skip

    log = tmp_path / "audit.jsonl"
    log.write_text(
        "\n".join(
            [
                event("create", "pods", "bench", "2026-12-07T08:00:00.000100Z", "2026-12-07T08:00:00.003100Z"),
                event("create", "pods", "bench", "2026-12-07T08:00:01.999000Z", "2026-12-07T08:00:02.071000Z"),
                event("create", "pods", "other", "2026-12-07T08:00:00.000000Z", "2026-12-07T08:00:09.000000Z"),
                event("update", "pods", "bench", "2026-12-07T08:00:00.000000Z", "2026-12-07T08:00:09.000000Z"),
                event("create", "pods", "bench", "2026-12-07T08:00:00.000000Z", "2026-12-07T08:00:09.000000Z",
                      subresource="binding"),
            ]
        )
        + "\n"
    )  # fmt: skip

    latencies = fleet_scale.audited_creates(log, "bench", settle=0.0)

    assert latencies == pytest.approx([0.003, 0.072])
    # Each with its arrival, seconds after the first create's, in arrival order.
    timed = fleet_scale.audited_create_times(log, "bench", settle=0.0)
    assert [t for t, _ in timed] == pytest.approx([0.0, 1.9989]) and [x for _, x in timed] == latencies
    assert fleet_scale.exact_quantile(latencies, 0.5) == pytest.approx(0.003)
    assert fleet_scale.exact_quantile(latencies, 0.99) == pytest.approx(0.072)
    assert fleet_scale.exact_quantile([], 0.99) is None
    # A create arriving while earlier ones are still being served finds them in flight.
    assert fleet_scale.in_flight([(0.0, 0.5), (0.1, 0.1), (0.3, 0.3), (0.55, 0.1), (2.0, 0.1)]) == [0, 1, 1, 1, 0]
    # Slow creates that arrived within a second of each other are one stall of the apiserver.
    run = [(0.0, 0.2), (0.5, 0.01), (0.9, 0.3), (3.0, 0.25), (3.1, 0.01), (9.0, 0.2)]
    assert fleet_scale.stalls(run, 0.2) == 3 and fleet_scale.stalls(run, 0.26) == 1 and fleet_scale.stalls(run, 1) == 0
    assert fleet_scale.exact_quantile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_class_pods_fill_the_classes_within_their_pools() -> None:
    counts = fleet_scale.pool_counts(40)
    share = fleet_scale.class_pods(400, counts)
    assert sum(share.values()) == 400
    for cls, n in share.items():
        assert n <= 0.9 * counts[cls] * fleet_scale.GPUS_PER_NODE[cls], (cls, n, counts)
    with pytest.raises(SystemExit, match="do not fit"):
        fleet_scale.class_pods(10_000, counts)


@pytest.mark.parametrize("mode", ["gpugate", "none", "CEL", "floor"])
def test_small_fleet_places_every_pod_on_its_class(binaries: None, mode: str, tmp_path: Path) -> None:
    result = fleet_scale.run(mode, nodes=20, pods=200, workdir=tmp_path, timeout=300)

    assert result.pods_wanted == 200
    assert (result.pods_placed, result.wrong_placements) == (200, 0), result.wrong_examples
    assert result.pod_create_p50_ms is not None and result.apiserver_cpu_ms_per_pod > 0
    # Every create of the run's pods (more if the apiserver refused one and its controller asked again), each with
    # its own latency from the audit log.
    assert result.pod_creates_audited >= 200
    p50, p99 = result.pod_create_exact_p50_ms, result.pod_create_exact_p99_ms
    assert p50 is not None and p99 is not None and 0 < p50 <= p99
    assert result.pod_creates_opening is not None and 0 < result.pod_creates_opening <= result.pod_creates_audited
    assert result.creates_in_flight_max is not None and result.creates_in_flight_p90 is not None
    assert 0 <= result.creates_in_flight_p90 <= result.creates_in_flight_max < result.pod_creates_audited
    assert result.etcd_cpu_ms_per_pod > 0 and result.etcd_pod_write_p50_ms is not None
    # The apiserver's Go runtime counters are read (their names are runtime/metrics', as client_golang exports them).
    assert result.apiserver_heap_kb_per_pod and result.apiserver_heap_kb_per_pod > 0
    assert result.apiserver_gc_cpu_ms_per_pod is not None and result.apiserver_gc_cycles is not None
    assert result.busiest_requests and "POST pods" in result.busiest_requests, result.busiest_requests
    assert 0 < result.machine_busy_percent <= 100.5 and result.client_qps == 500
    assert result.apiserver_idle_cores is None  # measured only when asked (--idle-seconds)
    assert result.settle_seconds is not None and result.settle_seconds >= fleet_scale.SETTLE_WINDOW
    assert result.base_policies is (True if mode == "gpugate" else None)
    if mode == "gpugate":
        assert result.webhook_p50_ms is not None and result.gpugate_p50_ms is not None
        assert result.gpugate_cpu_ms_per_pod and result.gpugate_peak_rss_mib
        assert result.audit_summary and " 0 refused, 0 warned, 0 changed" in result.audit_summary, result.audit_summary
    else:
        assert result.webhook_p50_ms is None and result.audit_summary is None
    # The CEL equivalent labels the pods it matches (those requesting nvidia.com/gpu) and no other.
    wanted = fleet_scale.class_pods(200, fleet_scale.pool_counts(20))
    matched = sum(n for cls, n in wanted.items() if fleet_scale.CLASSES[cls]["resource"] == "nvidia.com/gpu")
    assert result.cel_labelled == (matched if mode == "CEL" else None)
    assert 0 < matched < 200
    # The in-process floor labels every GPU pod, whatever its vendor.
    assert result.floor_labelled == (200 if mode == "floor" else None)
    # Each process of the run, by its pid, over the same window: the apiserver's figure is the row's own.
    processes = result.process_cpu_ms_per_pod
    expected = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "this bench"}
    assert set(processes) == expected | ({"gpugate"} if mode == "gpugate" else set()), processes
    assert all(v > 0 for v in processes.values()), processes
    assert processes["kube-apiserver"] == pytest.approx(result.apiserver_cpu_ms_per_pod, rel=0.2)


def test_without_base_policies_leaves_out_exactly_deploy_base_s_admission_policies() -> None:
    """--without-base-policies: the backstop and the runtime-handlers policy and their bindings, nothing else."""
    import yaml

    shipped = [d for d in yaml.safe_load_all((fleet_scale.REPO / "deploy/base/admission-policy.yaml").read_text()) if d]
    assert {d["kind"] for d in shipped} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert all(fleet_scale.is_base_policy(d) for d in shipped)
    webhooks = [d for d in yaml.safe_load_all((fleet_scale.REPO / "deploy/base/webhooks.yaml").read_text()) if d]
    assert not any(fleet_scale.is_base_policy(d) for d in webhooks)
    assert not fleet_scale.is_base_policy({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "gpugate-always"}})


def test_the_fleet_has_settled_after_a_window_of_quiet_seconds_in_a_row() -> None:
    def waited(per_second: list[float], *, quiet: float, window: int, timeout: float = 180.0) -> float | None:
        readings = iter([0.0, *[sum(per_second[: i + 1]) for i in range(len(per_second))]])
        slept: list[float] = []
        result = fleet_scale.settle(
            lambda: next(readings), quiet=quiet, window=window, timeout=timeout, sleep=slept.append
        )
        assert all(s == 1.0 for s in slept)
        return result

    # Busy for three seconds, then quiet: settled once the window of quiet seconds is full.
    assert waited([0.3, 0.2, 0.1] + [0.0] * 10, quiet=0.01, window=5) == 8.0
    # A busy second inside the window starts it again.
    assert waited([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], quiet=0.01, window=5) == 8.0
    # Never quiet for long enough: None once the timeout has passed, so the table can say it did not settle.
    assert waited([0.0, 0.0, 0.2] * 10, quiet=0.01, window=5, timeout=20) is None


def test_each_mode_s_p99_is_compared_with_none_s_of_the_same_pass() -> None:
    def result(mode: str, repeat: int, p99: float | None, after: float | None) -> fleet_scale.RunResult:
        r = fleet_scale.RunResult(mode, 1000, 3000, repeat=repeat)
        r.pod_create_exact_p99_ms, r.pod_create_exact_p99_after_opening_ms = p99, after
        return r

    results = [
        result("none", 1, 100.0, 50.0),
        result("native", 1, 300.0, 60.0),
        result("none", 2, 40.0, 50.0),
        result("native", 2, 80.0, None),  # a pass whose creates all came in the opening burst
        result("CEL", 3, 90.0, 45.0),  # no none in that pass: nothing to compare with
    ]

    ratios = fleet_scale.p99_ratios(results)

    assert ratios == {"native": ([3.0, 2.0], [1.2])}
    rendered = fleet_scale.render(results, "bench/fleet_scale.py --repeat 2")
    assert "| none (1) | native (1) | none (2) | native (2) | CEL (3) |" in rendered
    assert "| native | median 2.50× (3.00×, 2.00×) | 1.20× |" in rendered
    assert fleet_scale.p99_ratios([result("none", 0, 10.0, 5.0)]) == {}


def test_the_busiest_requests_are_counted_between_the_scrapes() -> None:
    line = 'apiserver_request_total{{code="{c}",component="apiserver",resource="{r}",subresource="{s}",verb="{v}"}} {n}'
    before = "\n".join(
        [line.format(c=201, r="pods", s="", v="POST", n=10), line.format(c=200, r="nodes", s="", v="LIST", n=5)]
    )
    after = "\n".join(
        [
            line.format(c=201, r="pods", s="", v="POST", n=3010),
            line.format(c=409, r="pods", s="", v="POST", n=2),
            line.format(c=200, r="nodes", s="", v="LIST", n=5),
            line.format(c=200, r="nodes", s="status", v="PATCH", n=900),
        ]
    )

    assert fleet_scale.busiest_requests(before, after) == "POST pods 3002, PATCH nodes/status 900"
