"""The fault-injection run (tests/e2e/faults.py) as a test: under a steady load of pod creates, a killed
worker, a restarted gpugate, a rotated certificate, a broken-then-fixed policy, a worker killed while that
broken edit is ignored, a relabelled namespace and a restarted apiserver lead to no wrong decision, and
gpugate serves correctly after each of them.
Asserts invariants only; the figures are printed (and published in docs/development/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import faults

pytestmark = pytest.mark.e2e


def test_no_wrong_decision_under_faults(e2e_bin: Path, tmp_path: Path) -> None:
    result = faults.run(tmp_path, threads=3, rate=10.0, steady=3.0, hold=2.0, max_requests=2000)
    print(result.table())
    assert result.wrong == [], "\n".join(["wrong decisions:", *result.wrong, result.table()])
    for fault in faults.FAULTS:
        row = result.rows.get(fault)
        assert row is not None and row.sent > 0, f"no load reached the {fault} phase:\n{result.table()}"
        # Load before and after every fault: something was admitted in each phase.
        assert row.admitted > 0, f"nothing admitted around {fault}:\n{result.table()}"


# The judge itself, without a cluster: each kind of wrong decision is reported.

GOOD_GPU_POD = {
    "metadata": {"labels": {"gpugate.io/team": "alpha"}, "annotations": {"gpugate.io/policy": "e2e-fleet"}},
    "spec": {
        "runtimeClassName": "nvidia",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def sent(
    outcome: str,
    *,
    gpu: bool = True,
    dry_run: bool = False,
    namespace: str = "a",
    at: float = 10.0,
    returned: dict | None = None,
) -> faults.Sent:
    return faults.Sent(
        "f",
        f"p{at}",
        namespace,
        gpu,
        dry_run,
        sent=at,
        done=at + 0.1,
        outcome=outcome,
        status=201 if outcome == "admitted" else 500,
        returned=returned,
    )


def wrong(records, stored=None, timeline=None) -> list[str]:
    return faults.judge(records, stored or {}, timeline or faults.Timeline(), {"a": "alpha", "b": "beta"})[1]


def test_the_judge_accepts_a_correctly_mutated_pod() -> None:
    assert wrong([sent("admitted", dry_run=True, returned=GOOD_GPU_POD)]) == []
    assert wrong([sent("admitted")], {"a/p10.0": GOOD_GPU_POD}) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p["spec"].pop("runtimeClassName"),
        lambda p: p["spec"].pop("tolerations"),
        lambda p: p["spec"].pop("nodeSelector"),
        lambda p: p["metadata"]["annotations"].clear(),
        lambda p: p["metadata"]["labels"].__setitem__("gpugate.io/team", "unassigned"),
    ],
)
def test_the_judge_reports_a_gpu_pod_stored_without_its_injections(damage) -> None:
    pod = json.loads(json.dumps(GOOD_GPU_POD))
    damage(pod)
    assert len(wrong([sent("admitted")], {"a/p10.0": pod})) == 1
    assert len(wrong([sent("timed out")], {"a/p10.0": pod})) == 1  # stored although the answer was lost
    assert len(wrong([sent("admitted", dry_run=True, returned=pod)])) == 1


def test_the_judge_reports_a_pod_admitted_but_not_stored() -> None:
    assert len(wrong([sent("admitted")])) == 1


def test_refusals_are_wrong_only_while_gpugate_was_healthy_or_for_pods_without_gpus() -> None:
    down = faults.Timeline(unhealthy=[(9.0, 11.0)])
    assert len(wrong([sent("refused")])) == 1
    assert wrong([sent("refused")], timeline=down) == []
    assert len(wrong([sent("refused", gpu=False)], timeline=down)) == 1
    apiserver_down = faults.Timeline(unhealthy=[(9.0, 11.0)], apiserver_down=[(9.0, 11.0)])
    assert wrong([sent("refused", gpu=False)], timeline=apiserver_down) == []


def test_a_stale_team_label_is_wrong_once_the_relabel_has_settled() -> None:
    beta = json.loads(json.dumps(GOOD_GPU_POD))
    beta["metadata"]["labels"]["gpugate.io/team"] = "beta"
    relabel = faults.Timeline(relabels=[(9.8, 10.0, "b", "beta", "gamma")])
    # Answered after the label call was made and before it returned: the relabel may have reached gpugate, either team.
    gamma = json.loads(json.dumps(GOOD_GPU_POD))
    gamma["metadata"]["labels"]["gpugate.io/team"] = "gamma"
    assert wrong([sent("admitted", namespace="b", at=9.75, dry_run=True, returned=gamma)], timeline=relabel) == []
    assert (
        wrong(
            [sent("admitted", namespace="b", at=10.0 + faults.LABEL_SETTLE / 2, dry_run=True, returned=beta)],
            timeline=relabel,
        )
        == []
    )
    assert (
        len(
            wrong(
                [sent("admitted", namespace="b", at=10.0 + faults.LABEL_SETTLE + 1, dry_run=True, returned=beta)],
                timeline=relabel,
            )
        )
        == 1
    )
