"""A control plane that schedules: etcd + kube-apiserver (tests.harness.controlplane) plus the real
kube-scheduler and kube-controller-manager and kwok playing every Node's kubelet, with the reference fleet of
tests.harness.fleet created as kwok Nodes. Pods are bound by the scheduler, Deployments/Jobs/CronJobs/
StatefulSets run through the real controllers, ResourceClaims are allocated by the scheduler's DRA plugin,
and kwok's "fast" stages make a bound pod Running (and a Job's pod Succeeded) at once.

    cluster = FleetCluster(bin_dir, kwok_dir, workdir, counts={"l4": 2, "h100": 1})
    cluster.start()          # returns once every Node is Ready and schedulable
    ...
    cluster.stop()           # stops every process it started, by its id

All on 127.0.0.1. Binaries: tests/e2e/build.sh (kube-scheduler, kube-controller-manager in the control plane's
bin directory; kwok and its stages.yaml in `build.sh --print-kwok`)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import fleet
from tests.harness.controlplane import BUILD_SH, BinariesMissing, ControlPlane, binary_dir
from tests.harness.kubeapi import ApiError, KubeAPI
from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.harness.processes import Process, wait_for_https

SCHEDULING_BINARIES = ("etcd", "kube-apiserver", "kubectl", "kube-scheduler", "kube-controller-manager")
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def kwok_dir() -> Path:
    """Where tests/e2e/build.sh puts kwok and its stages; GPUGATE_KWOK_DIR overrides it."""
    override = os.environ.get("GPUGATE_KWOK_DIR")
    if override:
        return Path(override)
    out = subprocess.run(["bash", str(BUILD_SH), "--print-kwok"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def find_scheduling_binaries() -> tuple[Path, Path]:
    """(control-plane bin directory, kwok directory), or BinariesMissing naming what is not built."""
    bins, kwok = binary_dir(), kwok_dir()
    missing = [str(bins / b) for b in SCHEDULING_BINARIES if not os.access(bins / b, os.X_OK)]
    missing += [str(kwok / f) for f in ("kwok", "stages.yaml") if not (kwok / f).exists()]
    if missing:
        raise BinariesMissing(f"not built: {', '.join(missing)}")
    return bins, kwok


@dataclass
class FleetCluster:
    """The reference fleet on a real control plane with a scheduler, controllers and kwok."""

    bin_dir: Path
    kwok_dir: Path
    workdir: Path
    counts: Mapping[str, int] | None = None  # nodes per pool (tests.harness.fleet.DEFAULT_COUNTS when None)
    client_qps: int = 200  # scheduler / controller-manager client rate limits (the defaults, 20-50, are for one node)
    extra: list[Process] = field(default_factory=list)
    profiling: bool = False  # kube-apiserver's /debug/pprof for the admin client (bench/fleet_scale.py --profile)
    audit_pod_creates: bool = False  # an audit log of the pods' creates (ControlPlane.audit_pod_creates)

    def __post_init__(self) -> None:
        self.cp = ControlPlane(
            self.bin_dir, self.workdir, profiling=self.profiling, audit_pod_creates=self.audit_pod_creates
        )
        self.counts = dict(fleet.DEFAULT_COUNTS if self.counts is None else self.counts)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, *, ready_timeout: float = 120.0) -> None:
        cp = self.cp
        cp.start()
        self.api = KubeAPI.for_control_plane(cp)
        kubeconfig = str(cp.kubeconfig)
        auth = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--kube-api-qps={self.client_qps}",
            f"--kube-api-burst={2 * self.client_qps}",
        ]
        probes: list[tuple[Process, str]] = []
        for name, flags in (
            (
                "kube-controller-manager",
                [
                    "--leader-elect=false",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={cp.pki / 'sa.key'}",
                    f"--root-ca-file={cp.ca.cert_path}",
                    "--controllers=*,-bootstrapsigner,-tokencleaner,-csrsigning,-csrapproving,-csrcleaner",
                    "--concurrent-deployment-syncs=10",
                    "--concurrent-replicaset-syncs=10",
                    "--concurrent-job-syncs=10",
                ],
            ),
            ("kube-scheduler", ["--leader-elect=false"]),
        ):
            port = free_port()
            serving = cp.ca.issue(name, common_name=name, ips=["127.0.0.1"], server=True)
            proc = Process(
                name,
                [
                    str(self.bin_dir / name),
                    *auth,
                    f"--secure-port={port}",
                    f"--tls-cert-file={serving.cert}",
                    f"--tls-private-key-file={serving.key}",
                    "--profiling=false",
                    "--v=1",
                    *flags,
                ],
                cp.log_dir,
            )
            cp.processes.append(proc)
            proc.start()
            probes.append((proc, f"https://127.0.0.1:{port}/healthz"))
        kwok = Process(
            "kwok",
            [
                str(self.kwok_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={self.kwok_dir / 'stages.yaml'}",
                "--manage-nodes-with-annotation-selector={}={}".format(*fleet.KWOK_ANNOTATION),
                f"--server-address=127.0.0.1:{free_port()}",
                "--cidr=10.64.0.0/10",
                "--node-ip=10.63.0.1",
            ],
            cp.log_dir,
        )
        cp.processes.append(kwok)
        kwok.start()
        for proc, url in probes:
            wait_for_https(url, process=proc, ca=cp.ca.cert_path, timeout=90)
        self.install_fleet()
        self.wait_for_nodes(timeout=ready_timeout, kwok=kwok)

    def stop(self) -> None:
        if hasattr(self, "api"):
            self.api.close()
        self.cp.stop()

    @property
    def processes(self) -> list[Process]:
        return self.cp.processes

    # -- the fleet -------------------------------------------------------------------------------

    def install_fleet(self) -> None:
        for obj in fleet.fleet_objects(self.counts):
            try:
                self.api.create(obj)
            except ApiError as e:
                if e.status != 409:  # already there (a restart of the same workdir)
                    raise
        self.install_nodepools()

    def install_nodepools(self) -> None:
        """Karpenter's NodePool CRD and the fleet's NodePools: pools with no node that could add one."""
        crd = self.cp.workdir / "karpenter.sh_nodepools.yaml"
        crd.write_bytes(fleet.karpenter_crd())
        self.kubectl("apply", "--server-side", "-f", str(crd), timeout=60)

        def established() -> bool:
            # kubectl wait fails outright on a CRD whose status has no conditions yet, so ask until it answers.
            done = self.kubectl("wait", "--for=condition=Established", "--timeout=10s", "-f", str(crd), check=False)
            return bool(done.ok)

        if not eventually(established, timeout=90):
            raise RuntimeError("Karpenter's NodePool CRD was not Established within 90s")
        for obj in fleet.NODEPOOLS:
            try:
                self.api.create(obj)
            except ApiError as e:
                if e.status != 409:
                    raise

    def wait_for_nodes(self, *, timeout: float, kwok: Process | None = None) -> None:
        """Until every fleet Node is Ready (kwok) and the node lifecycle controller lifted its not-ready taint."""
        wanted = set(fleet.node_names(self.counts))
        deadline = time.monotonic() + timeout
        waiting: set[str] = wanted
        while True:
            waiting = set(wanted)
            for node in self.api.list("Node"):
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in node.get("status", {}).get("conditions", [])
                )
                tainted = any(t.get("key") == NOT_READY_TAINT for t in node.get("spec", {}).get("taints", []))
                if ready and not tainted:
                    waiting.discard(node["metadata"]["name"])
            if not waiting:
                return
            if kwok is not None and not kwok.running:
                raise RuntimeError(kwok.describe_failure("died while the fleet's nodes came up"))
            if time.monotonic() > deadline:
                sample = ", ".join(sorted(waiting)[:5])
                raise RuntimeError(
                    f"{len(waiting)} of {len(wanted)} nodes not Ready and schedulable after {timeout:.0f}s: {sample}"
                )
            # A list of 1,000 nodes is megabytes for the apiserver to encode and this process to decode, on the cores
            # the controller-manager needs to lift the taints: ask less often the larger the fleet.
            time.sleep(max(0.5, len(wanted) / 200))

    # -- convenience -----------------------------------------------------------------------------

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        return self.cp.kubectl(*args, **kwargs)

    def create_namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        return self.cp.create_namespace(prefix, labels)
