"""`make demo`: the reference fleet on your machine, with gpugate in front of it.

Builds what is missing (the pinned control plane, kwok and helm, cached outside the clone), starts etcd,
kube-apiserver, kube-scheduler, kube-controller-manager and kwok on 127.0.0.1 with every pool of the reference
fleet as kwok Nodes (tests/harness/fleet.py), installs gpugate's Helm chart with `webhooks.url` pointing at a
gpugate served from this checkout, creates team namespaces, prints what to try, and runs until Ctrl-C, when it
stops everything it started.

    python -m tests.harness.demo [--nodes-per-pool N] [--keep]
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from tests.harness import fleet
from tests.harness.controlplane import REPO
from tests.harness.gpugate import GPUGate, wait_until_in_force
from tests.harness.scheduling import FleetCluster, find_scheduling_binaries

CHART = REPO / "charts" / "gpugate"
CRDS = REPO / "tests" / "fixtures" / "crds" / "workload-crds.yaml"
# The namespaces the examples name, labelled as their expected.yaml says, and one more team.
TEAMS = {
    "default": {"team": "vision", "cost-center": "cc-42"},
    "ml-serving": {"team": "inference", "cost-center": "cc-7"},
    "research-nlp": {"team": "nlp", "cost-center": "research"},
    "team-speech": {"team": "speech", "cost-center": "cc-19"},
}
READY_LINE = "gpugate demo: ready"


def say(text: str = "") -> None:
    print(text, flush=True)


def build() -> Path:
    """Build the pinned binaries and helm if they are missing; return helm's path."""
    for script in ("tests/e2e/build.sh", "tests/chart/build-helm.sh"):
        if shutil.which("go") is None:
            break
        done = subprocess.run(["bash", str(REPO / script)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"gpugate demo: {script} failed (exit {done.returncode})")
        for line in done.stdout.splitlines()[:-1]:
            say(f"  {line}")
    helm = subprocess.run(
        ["bash", str(REPO / "tests/chart/build-helm.sh"), "--print"], capture_output=True, text=True, check=False
    )
    path = Path(helm.stdout.strip().splitlines()[-1]) if helm.returncode == 0 and helm.stdout.strip() else Path()
    if not path.is_file():
        raise SystemExit("gpugate demo: helm is not built and Go is not installed; see README (What make check needs)")
    return path


def helm_run(helm: Path, *args: str, kubeconfig: Path) -> str:
    done = subprocess.run(
        [str(helm), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=180,
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(kubeconfig.parent / "helm-cache"),
            "HELM_CONFIG_HOME": str(kubeconfig.parent / "helm-config"),
        },
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Demo:
    def __init__(self, workdir: Path, nodes_per_pool: int) -> None:
        self.workdir = workdir
        self.counts = {p.name: nodes_per_pool for p in fleet.POOLS}
        self.cluster: FleetCluster | None = None
        self.gate: GPUGate | None = None

    def start(self, helm: Path) -> None:
        bins, kwok = find_scheduling_binaries()
        self.bins = bins
        self.cluster = cluster = FleetCluster(bins, kwok, self.workdir / "cluster", self.counts)
        cluster.start()
        kubeconfig = cluster.cp.kubeconfig
        cluster.kubectl("apply", "--server-side", "-f", str(CRDS))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS), timeout=90)
        for name, labels in TEAMS.items():
            cluster.kubectl("create", "namespace", name, check=False)
            cluster.kubectl("label", "namespace", name, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
            cluster.cp.ensure_default_service_account(name)
        # pod-dra-claim.yaml claims through this template, as NVIDIA's DRA examples do.
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            stdin={
                "apiVersion": fleet.DRA_API,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "single-gpu", "namespace": "default"},
                "spec": {
                    "spec": {
                        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
                    }
                },
            },
        )
        policy_dir = self.workdir / "policies"
        policy_dir.mkdir()
        self.gate = gate = GPUGate(self.workdir / "gpugate", policy_dir, kubeconfig=kubeconfig)
        helm_run(
            helm,
            "install",
            "gpugate",
            str(CHART),
            "--namespace",
            "gpugate",
            "--create-namespace",
            "--set",
            f"webhooks.url={gate.url}",
            "--set",
            "certificates.ipAddresses={127.0.0.1}",
            "--set",
            "replicas=0",  # gpugate runs here, not as kwok's pretend pods
            "--set",
            "networkPolicy.controlPlaneCIDRs={127.0.0.1/32}",  # the demo's apiserver
            "--set",
            "workloadCRDs.enabled=true",
            kubeconfig=kubeconfig,
        )
        cluster.cp.ensure_default_service_account("gpugate")
        # gpugate serves what the chart made: its Secret's certificate and its ConfigMap's policies (the shipped
        # ones), so that `gpugate audit` reads the same policies back from the cluster.
        secret = cluster.kubectl("get", "secret", "gpugate-tls", "-n", "gpugate", "-o", "json").json()
        for key in ("tls.crt", "tls.key", "ca.crt"):
            (gate.cert_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
        configmap = cluster.kubectl("get", "configmap", "gpugate-policies", "-n", "gpugate", "-o", "json").json()
        for name, text in configmap["data"].items():
            (policy_dir / name).write_text(text)
        gate.start()
        manifest = helm_run(helm, "get", "manifest", "gpugate", "--namespace", "gpugate", kubeconfig=kubeconfig)
        objects = [d for d in yaml.safe_load_all(manifest) if d]
        wait_until_in_force(cluster.cp, [o for o in objects if o["kind"] != "ValidatingWebhookConfiguration"])

    def processes(self) -> list[Any]:
        procs = list(self.cluster.processes) if self.cluster else []
        return procs + ([self.gate.process] if self.gate else [])

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.stop()
        if self.cluster is not None:
            self.cluster.stop()

    def guide(self) -> str:
        assert self.cluster is not None and self.gate is not None
        kubeconfig = self.cluster.cp.kubeconfig
        exe = self.gate.exe
        return f"""
The reference fleet ({sum(self.counts.values())} kwok nodes; kube-scheduler and kube-controller-manager are real):
{fleet.describe(self.counts)}

gpugate serves https://127.0.0.1:{self.gate.port} from this checkout, registered by `helm install gpugate
charts/gpugate --set webhooks.url=...`; logs in {self.workdir}.
Team namespaces: {", ".join(f"{ns} (team={labels['team']})" for ns, labels in TEAMS.items())}.

In another shell:

  export KUBECONFIG={kubeconfig}
  export PATH={self.bins}:$PATH        # the pinned kubectl

  kubectl apply -f policies/examples/pod-gpu-basic.yaml        # admitted: runtime class, toleration, L4 selector
  kubectl apply -f policies/examples/pod-mig-mixed.yaml        # a MIG slice: lands on the A100 pool
  kubectl apply -f policies/examples/pod-amd-mi300x.yaml       # AMD: its own toleration and selector
  kubectl apply -f policies/examples/pod-dra-claim.yaml        # a DRA claim: the H200 pool's ResourceSlices
  kubectl apply -f policies/examples/pod-fractional.yaml       # refused, with the field and the fix
  kubectl apply -f policies/examples/pod-l40s-scale-from-zero.yaml  # admitted, Pending: NodePool l40s can add a node
  kubectl apply -f policies/examples/pod-gke-unmapped.yaml     # GKE A100 pool at 0 nodes: admitted, Pending
  kubectl get nodepools                # Karpenter's NodePool for l40s (no Karpenter runs: it stays at 0)
  kubectl apply -f policies/examples/deployment-gpu.yaml       # through the real Deployment controller
  kubectl get pods -o wide -A          # NODE names the pool: l4-0, a100-1, ...
  kubectl get nodes -L {fleet.POOL_LABEL},nvidia.com/gpu.product
  kubectl get events -A --field-selector reason=FailedScheduling
  {exe} audit --gpugate-namespace gpugate

Ctrl-C stops everything.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description="the reference fleet with gpugate, until Ctrl-C")
    parser.add_argument("--nodes-per-pool", type=int, default=2, metavar="N", help="kwok nodes per pool (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, kubeconfig) afterwards")
    args = parser.parse_args(argv)
    started = time.monotonic()
    stop = {"signal": 0}

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop["signal"] = signum
        raise KeyboardInterrupt

    # Both explicitly: a shell that starts the demo in the background leaves SIGINT ignored, and Python then
    # installs no KeyboardInterrupt for it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    say("gpugate demo: building what is missing (cached in ~/.cache/gpugate-e2e and ~/.cache/gpugate-tools)")
    helm = build()
    workdir = Path(tempfile.mkdtemp(prefix="gpugate-demo-"))
    demo = Demo(workdir, args.nodes_per_pool)
    try:
        say("gpugate demo: starting the control plane, the fleet and gpugate")
        demo.start(helm)
        say(demo.guide())
        pids = " ".join(f"{p.name}={p.proc.pid}" for p in demo.processes() if p.proc is not None)
        say(
            f"{READY_LINE} in {time.monotonic() - started:.0f} s; kubeconfig {demo.cluster.cp.kubeconfig if demo.cluster else ''}"
        )
        say(f"gpugate demo: processes demo={os.getpid()} {pids}")
        while True:
            dead = [p for p in demo.processes() if not p.running]
            if dead:
                say(dead[0].describe_failure("stopped on its own"))
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        say("\ngpugate demo: stopping")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        demo.stop()
        if args.keep:
            say(f"gpugate demo: kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        say("gpugate demo: stopped everything it started")


if __name__ == "__main__":
    raise SystemExit(main())
