"""Through a real kube-apiserver: a normal GPU pod's dry-run is answered, and answered correctly (allowed, with the
default policy's `nvidia` runtime class), while 16 hostile clients work against gpugate at once: 4 dry-running
pods that name 32 missing claim templates back to back, and 12 TLS connections straight to gpugate's port sending
a review a byte every 0.1 s. With gthread's worker the slow senders held all 8 threads (2 workers x 4) until
--request-timeout: the normal pod's dry-run took 9.9 s and was refused (its /mutate timed out, and the validating
webhook, failing closed, found no runtime class). bench/hostile.py is the same run, longer, with the latencies (docs/security.md);
no timing is asserted here."""

from __future__ import annotations

import argparse

import pytest

from bench import hostile

pytestmark = pytest.mark.e2e


def test_a_normal_gpu_pod_is_answered_correctly_while_16_hostile_clients_run(e2e_bin: object) -> None:
    args = argparse.Namespace(seconds=4.0, interval=0.2, claimers=4, slow_senders=12, request_timeout=10.0, code=None)
    results = hostile.run(args)
    for phase in ("quiet", "hostile"):
        summary = results[phase]
        assert summary["normal failures"] == 0, (phase, summary)
        assert summary["normal answered"] >= 3 and summary["normal correct"] == summary["normal answered"], summary
    assert results["hostile"]["claim dry-runs answered"] > 0, results["hostile"]
    assert results["hostile"]["slow connections opened"] >= 12, results["hostile"]
