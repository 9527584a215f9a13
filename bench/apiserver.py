"""What gpugate adds to every pod create in a real kube-apiserver, beside a no-op webhook and in-process CEL.

One control plane (etcd + kube-apiserver from tests/harness/controlplane.py), one run, these registrations in turn:

  nothing   no admission webhook or policy of ours;
  no-op     deploy/'s two webhook configurations pointed at bench/noop.py on gpugate's stack
            (gunicorn, TLS, flask; parses the review, answers allowed);
  no-op + patch
            the same no-op answering /mutate with the JSON patch gpugate produces for the pod: what the
            apiserver's side of any mutating webhook costs;
  gpugate   the same two webhook configurations pointed at `gpugate serve` with policies/;
  CEL       bench/cel-equivalent.yaml: a MutatingAdmissionPolicy and a ValidatingAdmissionPolicy inside
            the apiserver, what a user could write instead of running a webhook.

Three more on request (--registrations), not in the default run and its report: "native", the objects
`gpugate policy compile policies` prints (the native tier) with no webhook, and "native + webhook", those
objects beside the two webhook configurations pointed at `gpugate serve` and narrowed by the same compilation's
objectSelector and condition (gpugate-always's gpugate.io/webhook-object-selector and webhook-match-condition),
as deploy/components/native-tier and the chart's nativeTier install them: a plain GPU pod makes no webhook call
there; and "native (before)", the objects of `--native-before FILE` (another compilation, e.g. main's) measured
in the same run as "native", so that a change of the compiler is compared under the same load. A run that
measures them prints their ratios against gpugate and CEL (and native's against native (before)). And "floor",
bench/in-process-floor.yaml: one mutating policy that labels a GPU pod and one validating policy that refuses none
of the bench's, each as cheap as the apiserver allows, the most GPU pods/s an in-process tier can reach here.

For each: GPU and CPU pods, 1 and 8 keep-alive HTTPS clients (TCP_NODELAY, client-certificate auth, HTTP/1.1),
`POST .../pods?dryRun=All` (admission runs, nothing is stored). The registrations are interleaved in rounds,
the order reversed every other round, and every figure is the median over the rounds, so that load from
other tenants of the machine falls on all five alike. CPU seconds of each process (from /proc/<pid>/stat;
gunicorn's master plus its workers) are read around every cell.

Run: .venv/bin/python bench/apiserver.py [--rounds 5] [--requests 300] [--write docs/development/performance.md]
Needs the e2e binaries (tests/e2e/build.sh, `make tools`).

Profiles: `--profile DIR` starts the apiserver with `--profiling=true` and, after the rounds, takes for each
measured registration a CPU profile of the apiserver (`/debug/pprof/profile?seconds=N`, with the admin client
certificate) while 8 clients create GPU pods, and writes DIR/<registration>.pprof with `go tool pprof -top`
(flat and cumulative) beside it. The measured rounds run before it, so the profiling changes none of the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import resource
import socket
import ssl
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import jsonpatch
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries  # noqa: E402
from tests.harness.gpugate import WEBHOOK_KINDS, GPUGate, point_at, render_deploy  # noqa: E402
from webhook.native.compiler import Compiled, webhook_patch  # noqa: E402

REGISTRATIONS = ("nothing", "no-op", "no-op + patch", "gpugate", "CEL")
NATIVE = ("native", "native + webhook", "native (before)")  # measured on request: --registrations
# Also on request: bench/in-process-floor.yaml, the least an in-process tier that forms GPU pods costs the apiserver.
FLOOR = "floor"
ON_REQUEST = (*NATIVE, FLOOR)
# "native (before)": the objects of --native-before (another compilation, e.g. main's), measured in the same run as
# "native" so that the two compare under the same load.
PODS = ("GPU", "CPU")
CLIENTS = (1, 8)
CEL_FILE = REPO / "bench" / "cel-equivalent.yaml"
FLOOR_FILE = REPO / "bench" / "in-process-floor.yaml"
FLOOR_REFUSE = "bench/floor-refuse"  # the one label bench/in-process-floor.yaml's validating policy refuses
PROBE_ANNOTATION = "bench.gpugate.io/deny"  # bench/noop.py refuses an object naming its endpoint here
CLK_TCK = os.sysconf("SC_CLK_TCK")
IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


# --------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client: a request is one sendall of prepared bytes, a response is parsed just enough.


class Connection:
    """One keep-alive HTTPS connection to the apiserver, as client-go holds one (minus HTTP/2)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http does
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("the apiserver closed the connection")
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            self._fill()
        return self._take(i + 2)[:-2]

    def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = self._take(end + 4).lower()
        status = int(head[9:12])
        if (at := head.find(b"\ncontent-length:")) >= 0:
            return status, self._take(int(head[at + 16 : head.index(b"\r\n", at)]))
        if b"\ntransfer-encoding: chunked" not in head:
            raise ConnectionError(f"response without a length: {head!r}")
        body = bytearray()
        while size := int(self._line().split(b";")[0], 16):
            body += self._take(size)
            self._take(2)
        self._line()
        return status, bytes(body)


@dataclass
class API:
    """How to reach the apiserver: port, TLS context with the admin client certificate, the namespace."""

    port: int
    context: ssl.SSLContext
    namespace: str

    def create_request(self, pod: dict[str, Any]) -> bytes:
        body = json.dumps(pod, separators=(",", ":")).encode()
        return (
            f"POST /api/v1/namespaces/{self.namespace}/pods?dryRun=All HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{self.port}\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
            f"User-Agent: gpugate-bench\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    def connect(self) -> Connection:
        return Connection(self.port, self.context)

    def create(self, pod: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        conn = self.connect()
        try:
            status, body = conn.roundtrip(self.create_request(pod))
        finally:
            conn.close()
        return status, json.loads(body)


def pod(
    name: str,
    *,
    gpus: int | None,
    annotations: dict[str, str] | None = None,
    env: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = env
    meta: dict[str, Any] = {"name": name, "labels": {"app": "bench", **(labels or {})}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


GPU_POD = pod("bench-gpu", gpus=1)
# A GPU pod that chose its GPU by an instance type both H100 pools share: never plain, so the webhook decides it
# (it narrows the choice to one class's product) in every registration that has gpugate's webhooks.
CHOSEN_POD = {**pod("probe", gpus=1), "spec": {**pod("probe", gpus=1)["spec"],
              "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}}  # fmt: skip
# What gpugate's /mutate adds to GPU_POD as the apiserver sends it (the apiserver has already added the
# not-ready/unreachable tolerations): for --noop-patch, the no-op answering with a patch of the same size.
NOOP_PATCH = [
    {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"},
    {
        "op": "add",
        "path": "/spec/tolerations/-",
        "value": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    },
    {"op": "add", "path": "/spec/nodeSelector", "value": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
    {"op": "add", "path": "/metadata/labels/gpugate.io~1team", "value": "ml"},
    {"op": "add", "path": "/metadata/labels/gpugate.io~1cost-center", "value": "unassigned"},
    {"op": "add", "path": "/metadata/labels/gpugate.io~1workload-kind", "value": "Pod"},
    {"op": "add", "path": "/metadata/labels/gpugate.io~1workload-name", "value": "bench-gpu"},
    {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {
            "gpugate.io/workload": "Pod/bench-gpu",
            "gpugate.io/policy": "default",
            "gpugate.io/mutated": "labels,nodeSelector,runtimeClassName,tolerations",
        },
    },
]
CPU_POD = pod("bench-cpu", gpus=None)


# --------------------------------------------------------------------------------------------
# CPU accounting from /proc


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (proc(5) fields 14 and 15)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def tree_cpu(pid: int) -> float:
    """CPU seconds of a gunicorn master and its live workers."""
    return _proc_cpu(pid) + sum(_proc_cpu(child) for child in _children(pid))


def machine_busy() -> float:
    """CPU seconds all processes of the machine spent, from the first line of /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Meters:
    """Processes whose CPU is read around each cell."""

    readers: dict[str, Callable[[], float]]

    def read(self) -> dict[str, float]:
        out = {name: read() for name, read in self.readers.items()}
        out["machine"] = machine_busy()
        return out


# --------------------------------------------------------------------------------------------
# One cell: a pod kind, a client count, one registration


@dataclass
class Cell:
    p50: float
    p99: float
    rate: float
    requests: int
    cpu: dict[str, float]  # CPU seconds per request, by process; "others" is everything else on the machine


def load(
    api: API,
    pod_: dict[str, Any],
    *,
    clients: int,
    requests: int,
    meters: Meters,
    check: Callable[[int, dict[str, Any]], str | None],
) -> Cell:
    request = api.create_request(pod_)
    conns = [api.connect() for _ in range(clients)]
    try:
        for conn in conns:  # warm up: TLS handshakes, the apiserver's connections to the webhooks
            for _ in range(3):
                status, body = conn.roundtrip(request)
                problem = check(status, json.loads(body))
                if problem:
                    raise SystemExit(f"bench: unexpected answer: {problem}")
        per_client = max(1, requests // clients)
        latencies: list[list[float]] = [[] for _ in conns]
        failures: list[str] = []
        gate = threading.Barrier(clients + 1)

        def run(index: int) -> None:
            conn, mine = conns[index], latencies[index]
            gate.wait()
            try:
                for _ in range(per_client):
                    started = time.perf_counter()
                    status, _body = conn.roundtrip(request)
                    mine.append(time.perf_counter() - started)
                    if status != 201:
                        failures.append(f"HTTP {status}: {_body[:300]!r}")
                        return
            except OSError as err:
                failures.append(repr(err))

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        before = meters.read()
        gate.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        after = meters.read()
    finally:
        for conn in conns:
            conn.close()
    if failures:
        raise SystemExit(f"bench: {len(failures)} client(s) failed, first: {failures[0]}")
    flat = sorted(x for mine in latencies for x in mine)
    quantiles = statistics.quantiles(flat, n=100, method="inclusive")
    used = {name: after[name] - before[name] for name in before}
    ours = sum(v for k, v in used.items() if k != "machine")
    used["others"] = max(0.0, used.pop("machine") - ours)
    return Cell(
        p50=quantiles[49],
        p99=quantiles[98],
        rate=len(flat) / elapsed,
        requests=len(flat),
        cpu={k: v / len(flat) for k, v in used.items()},
    )


def expectation(registration: str, kind: str) -> Callable[[int, dict[str, Any]], str | None]:
    """What a dry-run create must answer under `registration`: the bench measures what it claims to."""
    if registration == "no-op + patch":
        registration = "gpugate"  # answers with gpugate's patch

    def check(status: int, obj: dict[str, Any]) -> str | None:
        if status != 201:
            return f"{registration}, {kind} pod: HTTP {status}: {json.dumps(obj)[:400]}"
        spec, meta = obj["spec"], obj["metadata"]
        annotations = meta.get("annotations") or {}
        injected = spec.get("runtimeClassName") == "nvidia"
        by_gpugate = "gpugate.io/policy" in annotations  # the native tier writes gpugate's annotations too
        formed_by_gpugate = registration in ("gpugate", *NATIVE)
        want_injected = kind == "GPU" and (formed_by_gpugate or registration == "CEL")
        if injected != want_injected or by_gpugate != (kind == "GPU" and formed_by_gpugate):
            return (
                f"{registration}, {kind} pod: runtimeClassName={spec.get('runtimeClassName')!r}, "
                f"gpugate annotations={sorted(annotations)}"
            )
        if want_injected and (meta.get("labels") or {}).get("gpugate.io/team") != "ml":
            return f"{registration}, {kind} pod: no team label from the namespace: {meta.get('labels')}"
        floored = (meta.get("labels") or {}).get("gpugate.io/formed-by") == "floor"
        if floored != (registration == FLOOR and kind == "GPU"):
            return f"{registration}, {kind} pod: labels {meta.get('labels')}"
        return None

    return check


# --------------------------------------------------------------------------------------------
# Registrations


@dataclass
class Registrar:
    """Switches the apiserver between the registrations and waits until the switch is in force.

    The apiserver picks up webhook configurations and admission policies through informers (and compiles
    policies asynchronously), so each switch is confirmed by dry-run probes that only the intended
    registration answers the way it does.
    """

    cp: ControlPlane
    api: API
    webhooks: dict[str, list[dict[str, Any]]]  # "no-op"/"gpugate" -> the two webhook configurations
    cel: list[dict[str, Any]]
    gate: GPUGate
    floor: list[dict[str, Any]] = field(default_factory=list)  # bench/in-process-floor.yaml
    native: list[dict[str, Any]] = field(default_factory=list)  # gpugate policy compile policies
    before: list[dict[str, Any]] = field(default_factory=list)  # --native-before
    current: str | None = None
    switches: list[float] = field(default_factory=list)

    def validations(self) -> float:
        """/validate calls gpugate answered so far (its own metrics, summed over workers)."""
        total = 0.0
        for line in self.gate.metrics().splitlines():
            if line.startswith("gpugate_admission_requests_total{") and 'endpoint="validate"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def observe(self) -> set[str]:
        seen: set[str] = set()
        validated = self.validations()
        status, obj = self.api.create(GPU_POD)
        if status == 201:
            annotations = obj["metadata"].get("annotations") or {}
            if "gpugate.io/policy" in annotations:
                seen.add("gpugate-mutate")
            elif obj["spec"].get("runtimeClassName") == "nvidia":
                seen.add("cel-mutate")
            if (obj["metadata"].get("labels") or {}).get("gpugate.io/formed-by") == "floor":
                seen.add("floor-mutate")
        if self.validations() > validated:
            seen.add("gpugate-validate")
        validated = self.validations()
        self.api.create(CHOSEN_POD)
        if self.validations() > validated:
            seen.add("gpugate-validate-chosen")
        for endpoint in ("mutate", "validate"):
            status, obj = self.api.create(pod("probe", gpus=1, annotations={PROBE_ANNOTATION: endpoint}))
            if status != 201 and f"no-op {endpoint} probe" in obj.get("message", ""):
                seen.add(f"noop-{endpoint}")
        status, obj = self.api.create(pod("probe", gpus=9))
        if status != 201 and "bench-whole-gpus" in obj.get("message", ""):
            seen.add("cel-validate")
        if status != 201 and "ValidatingAdmissionPolicy 'gpugate-" in obj.get("message", ""):
            seen.add("native-validate")  # runs before any validating webhook, so it answers first
        status, obj = self.api.create(pod("probe", gpus=1, labels={FLOOR_REFUSE: "true"}))
        if status != 201 and "bench-floor-check" in obj.get("message", ""):
            seen.add("floor-validate")
        return seen

    EXPECTED: ClassVar[dict[str, set[str]]] = {
        "nothing": set(),
        "no-op": {"noop-mutate", "noop-validate"},
        "no-op + patch": {"noop-mutate", "noop-validate", "gpugate-mutate"},
        "gpugate": {"gpugate-mutate", "gpugate-validate", "gpugate-validate-chosen"},
        "CEL": {"cel-mutate", "cel-validate"},
        # The native tier's pod carries gpugate's annotations: what tells it from the webhook is /validate.
        "native": {"gpugate-mutate", "native-validate"},
        # Narrowed: the plain GPU pod skips the webhooks, the pod that chose an instance type is theirs.
        "native + webhook": {"gpugate-mutate", "native-validate", "gpugate-validate-chosen"},
        "native (before)": {"gpugate-mutate", "native-validate"},
        FLOOR: {"floor-mutate", "floor-validate"},
    }

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=obj)

    def _delete(self, objects: list[dict[str, Any]]) -> None:
        for obj in reversed(objects):
            self.cp.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", "--wait=false")

    def switch(self, target: str, *, timeout: float = 90.0) -> None:
        started = time.monotonic()
        if target in self.webhooks:
            self._apply(self.webhooks[target])  # same names: replaces the other server's clientConfig (and conditions)
        elif self.current in self.webhooks:
            self._delete(self.webhooks[self.current])
        if target in NATIVE:
            # The same names in both compilations: applying one replaces the other (objects only one has go).
            objects = self.before if target == "native (before)" else self.native
            if self.current in NATIVE:
                names = {(o["kind"], o["metadata"]["name"]) for o in objects}
                previous = self.native if objects is self.before else self.before
                self._delete([o for o in previous if (o["kind"], o["metadata"]["name"]) not in names])
            self._apply(objects)
        elif self.current in NATIVE:
            self._delete(self.before if self.current == "native (before)" else self.native)
        if target == "CEL":
            self._apply(self.cel)
        elif self.current == "CEL":
            self._delete(self.cel)
        if target == FLOOR:
            self._apply(self.floor)
        elif self.current == FLOOR:
            self._delete(self.floor)
        deadline = time.monotonic() + timeout
        expected = self.EXPECTED[target]
        while (seen := self.observe()) != expected:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"bench: {target} not in force after {timeout:.0f}s: the probes saw {sorted(seen)}, "
                    f"expected {sorted(expected)}"
                )
            time.sleep(0.2)
        self.current = target
        self.switches.append(time.monotonic() - started)


def narrowed(webhooks: list[dict[str, Any]], native: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The webhook configurations as deploy/components/native-tier's narrowing.yaml and the chart leave them beside
    the native objects: the first webhook of each (a pod's creation) with the objectSelector and the matchCondition
    of the same compilation (``gpugate policy compile --webhook-patch``)."""
    always = next(
        (o for o in native if o["metadata"]["name"] == "gpugate-always" and "validations" in o.get("spec", {})), None
    )
    if always is None:
        return webhooks
    patch = webhook_patch(Compiled(tuple(native), ()))
    return [jsonpatch.apply_patch(config, patch) for config in webhooks]


# --------------------------------------------------------------------------------------------
# The run


@dataclass
class Run:
    args: argparse.Namespace
    machine: dict[str, str]
    cells: dict[tuple[str, str, int], list[Cell]] = field(default_factory=dict)
    duration: float = 0.0
    load_before: str = ""
    load_after: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    def median(self, registration: str, kind: str, clients: int, attr: str) -> float:
        return statistics.median(getattr(c, attr) for c in self.cells[(registration, kind, clients)])

    def cpu(self, registration: str, kind: str, clients: int, process: str) -> float:
        return statistics.median(c.cpu.get(process, 0.0) for c in self.cells[(registration, kind, clients)])

    def spread(self, registration: str, kind: str, clients: int, attr: str) -> tuple[float, float]:
        values = [getattr(c, attr) for c in self.cells[(registration, kind, clients)]]
        return min(values), max(values)


def describe_machine(bin_dir: Path) -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.machine(),
    )
    meminfo = Path("/proc/meminfo").read_text()
    mem_kb = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal")))

    def version(*argv: str) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        except OSError as err:
            return f"unknown ({err})"
        return out.strip().splitlines()[0] if out.strip() else "unknown"

    commit = version("git", "-C", str(REPO), "rev-parse", "--short", "HEAD")
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    packages = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("flask", "werkzeug", "gunicorn"))
    return {
        "CPUs (nproc)": str(len(os.sched_getaffinity(0))),
        "CPU model": model,
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}, OpenSSL "
        f"{ssl.OPENSSL_VERSION.split()[1]}",
        "serving stack": packages,
        "kube-apiserver": version(str(bin_dir / "kube-apiserver"), "--version"),
        "etcd": version(str(bin_dir / "etcd"), "--version"),
        "gpugate": f"commit {commit}{' with uncommitted changes' if dirty else ''}",
    }


@contextlib.contextmanager
def control_plane(bin_dir: Path, work: Path, *, profiling: bool = False) -> Iterator[ControlPlane]:
    cp = ControlPlane(bin_dir, work / "cluster", profiling=profiling)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


def start_server(
    work: Path,
    name: str,
    *,
    cp: ControlPlane,
    server_args: list[str],
    factory: str | None = None,
    policies: Path = REPO / "policies",
    env: dict[str, str] | None = None,
) -> GPUGate:
    gate = GPUGate(work / name, policies, kubeconfig=cp.kubeconfig)
    gate.process.name = name
    gate.process.log_path = gate.workdir / f"{name}.log"
    gate.process.argv += server_args
    if factory:
        gate.process.argv += ["--app-factory", factory]
        gate.process.env["PYTHONPATH"] = str(REPO)
    gate.process.env.update(env or {})
    gate.start()
    return gate


def measure(args: argparse.Namespace) -> Run:
    try:
        bin_dir = find_binaries()
    except BinariesMissing as err:
        raise SystemExit(f"bench: {err}; build them with tests/e2e/build.sh (or `make tools`)") from None
    run = Run(args=args, machine=describe_machine(bin_dir))
    run.load_before = Path("/proc/loadavg").read_text().strip()
    started = time.monotonic()
    server_args = args.server_args.split() if args.server_args else []
    with (
        tempfile.TemporaryDirectory(prefix="gpugate-bench-") as tmp,
        control_plane(bin_dir, Path(tmp), profiling=bool(args.profile)) as cp,
    ):
        work = Path(tmp)
        served = {
            r["name"]
            for r in json.loads(cp.kubectl("get", "--raw", "/apis/admissionregistration.k8s.io/v1").stdout)["resources"]
        }
        if "mutatingadmissionpolicies" not in served:
            raise SystemExit(
                "bench: this kube-apiserver does not serve admissionregistration.k8s.io/v1 "
                "mutatingadmissionpolicies (GA and on by default from Kubernetes 1.36)"
            )
        cp.ensure_runtime_class("nvidia")
        cp.ensure_default_service_account("kube-system")
        namespace = cp.create_namespace("bench", labels={"team": "ml"})
        context = ssl.create_default_context(cafile=str(cp.ca.cert_path))
        context.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
        api = API(cp.apiserver_port, context, namespace)

        noop = start_server(work, "noop", cp=cp, server_args=server_args, factory="bench.noop:build_app")
        patching = start_server(
            work,
            "noop-patch",
            cp=cp,
            server_args=server_args,
            factory="bench.noop:build_app",
            env={"BENCH_NOOP_PATCH": json.dumps(NOOP_PATCH, separators=(",", ":"))},
        )
        gate = start_server(work, "gpugate", cp=cp, server_args=server_args)
        try:
            deploy = [o for o in render_deploy(cp) if o.get("kind") in WEBHOOK_KINDS]
            cel = [d for d in yaml.safe_load_all(Path(args.cel_file).read_text()) if d]
            targets = {"no-op": noop, "no-op + patch": patching, "gpugate": gate}
            source = REPO / "policies"
            if args.native_policies:
                from bench import scale as scale_bench

                source = work / f"native-policies-{args.native_policies}"
                source.mkdir()
                scale_bench.write_policies(source, args.native_policies)
            compiled = (
                Path(args.native_file).read_text()
                if args.native_file
                else subprocess.run(
                    [str(gate.exe), "policy", "compile", str(source)], capture_output=True, text=True, check=True
                ).stdout
            )
            run.extra["native_bytes"] = len(compiled.encode())
            native = [d for d in yaml.safe_load_all(compiled) if d]
            before = (
                [d for d in yaml.safe_load_all(Path(args.native_before).read_text()) if d] if args.native_before else []
            )
            webhooks = {r: point_at(deploy, t) for r, t in targets.items()}
            webhooks["native + webhook"] = narrowed(webhooks["gpugate"], native)
            floor = [d for d in yaml.safe_load_all(FLOOR_FILE.read_text()) if d]
            registrar = Registrar(cp, api, webhooks, cel, gate, floor, native, before)
            assert cp.apiserver.proc is not None and cp.processes[0].proc is not None
            assert noop.process.proc is not None and gate.process.proc is not None
            pids = {"apiserver": cp.apiserver.proc.pid, "etcd": cp.processes[0].proc.pid}
            meters = Meters(
                {
                    "apiserver": lambda: _proc_cpu(pids["apiserver"]),
                    "etcd": lambda: _proc_cpu(pids["etcd"]),
                    # Either no-op: only the registered one is called.
                    "no-op server": lambda: (
                        tree_cpu(noop.process.proc.pid)  # type: ignore[union-attr]
                        + tree_cpu(patching.process.proc.pid)  # type: ignore[union-attr]
                    ),
                    "gpugate server": lambda: tree_cpu(gate.process.proc.pid),  # type: ignore[union-attr]
                    "client": self_cpu,
                }
            )
            for round_ in range(args.rounds):
                order = args.registrations if round_ % 2 == 0 else tuple(reversed(args.registrations))
                for registration in order:
                    registrar.switch(registration)
                    for kind in args.pods:
                        for clients in CLIENTS:
                            n = args.requests * (2 if clients > 1 else 1)
                            cell = load(
                                api,
                                GPU_POD if kind == "GPU" else CPU_POD,
                                clients=clients,
                                requests=n,
                                meters=meters,
                                check=expectation(registration, kind),
                            )
                            run.cells.setdefault((registration, kind, clients), []).append(cell)
                            print(
                                f"round {round_ + 1}/{args.rounds}  {registration:8s} {kind} pod, {clients} "
                                f"client{'s' if clients > 1 else ' '}: p50 {cell.p50 * 1e3:6.2f} ms  p99 "
                                f"{cell.p99 * 1e3:6.2f} ms  {cell.rate:7.0f} pods/s  apiserver CPU/pod "
                                f"{cell.cpu['apiserver'] * 1e6:5.0f} µs",
                                flush=True,
                            )
                    rss = run.extra.setdefault("apiserver_rss_mb", {}).setdefault(registration, [])
                    rss.append(process_rss(pids["apiserver"]))
            if args.profile:
                for registration in args.registrations:
                    registrar.switch(registration)
                    profile(api, registration, Path(args.profile), seconds=args.profile_seconds)
            run.extra["switch_seconds"] = statistics.median(registrar.switches)
            run.extra["rss_mb"] = {
                "gpugate": worker_rss(gate.process.proc.pid),
                "no-op": worker_rss(noop.process.proc.pid),
            }
            if args.write:
                run.extra["rss_1000"] = rss_with_policies(work, cp=cp, server_args=server_args, count=1000)
        finally:
            gate.stop()
            patching.stop()
            noop.stop()
    run.duration = time.monotonic() - started
    run.load_after = Path("/proc/loadavg").read_text().strip()
    return run


def _slug(registration: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in registration).strip("-").replace("---", "-")


def profile(api: API, registration: str, out: Path, *, seconds: int, clients: int = 8) -> Path:
    """A CPU profile of the apiserver while `clients` keep creating GPU pods under `registration`: the raw
    profile and `go tool pprof -top` of it, flat and cumulative, in `out`."""
    import urllib.request

    out.mkdir(parents=True, exist_ok=True)
    request = api.create_request(GPU_POD)
    stop = threading.Event()
    created = [0] * clients

    def busy(index: int) -> None:
        conn = api.connect()
        try:
            while not stop.is_set():
                status, body = conn.roundtrip(request)
                if status != 201:
                    raise SystemExit(f"bench: profile of {registration}: HTTP {status}: {body[:300]!r}")
                created[index] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=busy, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    try:
        url = f"https://127.0.0.1:{api.port}/debug/pprof/profile?seconds={seconds}"
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=api.context)
        )
        with opener.open(url, timeout=seconds + 60) as resp:
            data = resp.read()
    finally:
        stop.set()
        for t in threads:
            t.join()
    raw = out / f"{_slug(registration)}.pprof"
    raw.write_bytes(data)
    for flag, suffix in (("-top", "top"), ("-cum", "cum")):
        argv = ["go", "tool", "pprof", "-top", "-nodecount=60"] + (["-cum"] if flag == "-cum" else []) + [str(raw)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        (out / f"{_slug(registration)}.{suffix}.txt").write_text(
            f"# {registration}: {sum(created)} GPU pods created by {clients} clients in the {seconds} s profile\n"
            + done.stdout
            + done.stderr
        )
    print(f"profile of {registration}: {sum(created)} GPU pods in {seconds} s, {raw}", flush=True)
    return raw


def rss_with_policies(work: Path, *, cp: ControlPlane, server_args: list[str], count: int) -> list[float]:
    """Worker RSS of a gpugate with `count` policies (bench/scale.py's) and its namespace cache, after 400
    admission reviews."""
    from bench import scale as scale_bench
    from bench.serving import load as serve

    policies = work / f"policies-{count}"
    policies.mkdir()
    scale_bench.write_policies(policies, count)
    gate = start_server(work, f"gpugate-{count}", cp=cp, server_args=server_args, policies=policies)
    try:
        body = (REPO / "policies" / "examples" / "review-gpu-pod.json").read_bytes()
        serve(gate.port, gate.cert_dir, body, requests=400, clients=4)
        assert gate.process.proc is not None
        return worker_rss(gate.process.proc.pid)
    finally:
        gate.stop()


def process_rss(pid: int) -> float:
    """Resident memory of one process, MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker_rss(master: int) -> list[float]:
    """Resident memory of each gunicorn worker, MB (VmRSS from /proc/<pid>/status)."""
    out = []
    for pid in _children(master):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out.append(int(line.split()[1]) / 1024)
    return out


# --------------------------------------------------------------------------------------------
# Report


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def report(run: Run) -> str:
    m = run.median
    added = {r: m(r, "GPU", 1, "p50") - m("nothing", "GPU", 1, "p50") for r in REGISTRATIONS}
    lines: list[str] = []
    w = lines.append
    target_p50 = added["gpugate"] / added["no-op"] if added["no-op"] > 0 else float("inf")
    target_rate = m("gpugate", "GPU", 8, "rate") / m("no-op", "GPU", 8, "rate")
    w("### Ratios (GPU pods; medians over the rounds)")
    w("")
    w("| ratio | measured | target |")
    w("| --- | --- | --- |")
    w(
        f"| gpugate's added p50 over nothing ÷ the no-op's added p50 (1 client) | {target_p50:.2f}× "
        f"({ms(added['gpugate'])} ÷ {ms(added['no-op'])}) | ≤ 1.3× {'met' if target_p50 <= 1.3 else '**not met**'} |"
    )
    w(
        f"| gpugate's GPU pods/s ÷ the no-op's (8 clients) | {target_rate:.2f}× | ≥ 0.85× "
        f"{'met' if target_rate >= 0.85 else '**not met**'} |"
    )
    patched = added["gpugate"] / added["no-op + patch"] if added["no-op + patch"] > 0 else float("inf")
    w(
        f'| the same two, against the no-op answering with gpugate\'s patch ("no-op + patch") | {patched:.2f}× and '
        f"{m('gpugate', 'GPU', 8, 'rate') / m('no-op + patch', 'GPU', 8, 'rate'):.2f}× | (what gpugate's own work "
        f"costs: the apiserver applies the same patch in both) |"
    )
    w(f"| CEL's added p50 ÷ gpugate's added p50 (1 client) | {added['CEL'] / added['gpugate']:.2f}× | (comparison) |")
    w(
        f"| CEL's GPU pods/s ÷ gpugate's (8 clients) | "
        f"{m('CEL', 'GPU', 8, 'rate') / m('gpugate', 'GPU', 8, 'rate'):.2f}× | (comparison) |"
    )
    w(
        f"| gpugate's GPU pods/s ÷ nothing's (8 clients) | "
        f"{m('gpugate', 'GPU', 8, 'rate') / m('nothing', 'GPU', 8, 'rate'):.2f}× | (comparison) |"
    )
    w("")
    w("### CPU pods (the webhooks' `matchConditions` keep them away from the servers)")
    w("")
    w("| registered | CPU pod p50, 1 client | ÷ nothing | CPU pods/s, 8 clients | ÷ nothing | apiserver CPU / pod |")
    w("| --- | --- | --- | --- | --- | --- |")
    for r in REGISTRATIONS:
        w(
            f"| {r} | {ms(m(r, 'CPU', 1, 'p50'))} | {m(r, 'CPU', 1, 'p50') / m('nothing', 'CPU', 1, 'p50'):.2f}× | "
            f"{m(r, 'CPU', 8, 'rate'):,.0f} | {m(r, 'CPU', 8, 'rate') / m('nothing', 'CPU', 8, 'rate'):.2f}× | "
            f"{us(run.cpu(r, 'CPU', 8, 'apiserver'))} |"
        )
    w("")
    for kind in PODS:
        w(f"### {kind} pods")
        w("")
        w(
            "| registered | p50, 1 client | p99, 1 client | pods/s, 1 client | p50, 8 clients | p99, 8 clients | "
            "pods/s, 8 clients | p50 range over rounds (1 client) |"
        )
        w("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in REGISTRATIONS:
            lo, hi = run.spread(r, kind, 1, "p50")
            w(
                f"| {r} | {ms(m(r, kind, 1, 'p50'))} | {ms(m(r, kind, 1, 'p99'))} | {m(r, kind, 1, 'rate'):,.0f} | "
                f"{ms(m(r, kind, 8, 'p50'))} | {ms(m(r, kind, 8, 'p99'))} | {m(r, kind, 8, 'rate'):,.0f} | "
                f"{lo * 1e3:.2f}–{hi * 1e3:.2f} ms |"
            )
        w("")
    w("### CPU per GPU pod, 8 clients (CPU seconds ÷ pods created)")
    w("")
    processes = ("apiserver", "etcd", "no-op server", "gpugate server", "client", "others")
    w("| registered | " + " | ".join(processes) + " |")
    w("| --- |" + " --- |" * len(processes))
    for r in REGISTRATIONS:
        w(f"| {r} | " + " | ".join(us(run.cpu(r, "GPU", 8, p)) for p in processes) + " |")
    w("")
    w(
        f"gpugate's server CPU per admitted GPU pod (a `/mutate` and a `/validate` call): "
        f"{us(run.cpu('gpugate', 'GPU', 8, 'gpugate server'))} at 8 clients, "
        f"{us(run.cpu('gpugate', 'GPU', 1, 'gpugate server'))} at 1 client; the no-op's: "
        f"{us(run.cpu('no-op', 'GPU', 8, 'no-op server'))} and {us(run.cpu('no-op', 'GPU', 1, 'no-op server'))}."
    )
    rss = run.extra.get("rss_mb", {})
    if rss:
        w(
            f"Worker RSS at the end: gpugate {', '.join(f'{v:.0f}' for v in rss['gpugate'])} MB; "
            f"no-op {', '.join(f'{v:.0f}' for v in rss['no-op'])} MB."
        )
    return "\n".join(lines)


def native_report(run: Run) -> str:
    """The native tier beside what else was measured: GPU pods/s at 8 clients, the ratios, apiserver CPU."""
    measured = [r for r in (*REGISTRATIONS, *ON_REQUEST) if (r, "GPU", 8) in run.cells]
    lines = [
        "### The native tier and what it is measured against (GPU pods, 8 clients; medians over the rounds)",
        "",
        "| registered | pods/s | p50 | p99 | apiserver CPU / pod | gpugate server CPU / pod |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in measured:
        lines.append(
            f"| {r} | {run.median(r, 'GPU', 8, 'rate'):,.0f} | {ms(run.median(r, 'GPU', 8, 'p50'))} | "
            f"{ms(run.median(r, 'GPU', 8, 'p99'))} | {us(run.cpu(r, 'GPU', 8, 'apiserver'))} | "
            f"{us(run.cpu(r, 'GPU', 8, 'gpugate server'))} |"
        )
    lines.append("")
    rss = run.extra.get("apiserver_rss_mb", {})
    if rss:
        lines.append(
            "apiserver RSS after each registration's cells (MB, largest over the rounds): "
            + ", ".join(f"{r} {max(v):.0f}" for r, v in rss.items())
            + f"; the native objects measured: {run.extra.get('native_bytes', 0):,} bytes of YAML"
        )
        lines.append("")
    for native in (n for n in NATIVE if n in measured):
        for other in (o for o in ("gpugate", "CEL", FLOOR, "nothing") if o in measured):
            ratio = run.median(native, "GPU", 8, "rate") / run.median(other, "GPU", 8, "rate")
            lines.append(f"- {native} GPU pods/s ÷ {other}'s: {ratio:.2f}×")
    if "native" in measured and "native (before)" in measured:
        ratio = run.median("native", "GPU", 8, "rate") / run.median("native (before)", "GPU", 8, "rate")
        lines.append(f"- native GPU pods/s ÷ native (before)'s: {ratio:.2f}×")
    return "\n".join(lines)


TEMPLATE = REPO / "bench" / "performance-template.md"  # the prose of docs/development/performance.md
# The native tier's section is written by hand in docs/development/performance.md (figures from many commands, not one
# run's): the template holds only its markers, and --write carries the section over from the file it replaces.
NATIVE_BEGIN = "<!-- native-tier: begin (written by hand from bench/apiserver.py runs; not regenerated by --write) -->"
NATIVE_END = "<!-- native-tier: end -->"


def hand_written(generated: str, current: str | None) -> str:
    """generated with the native tier's section of current (the file it replaces) in place of the template's."""
    if current is None or NATIVE_BEGIN not in current or NATIVE_END not in current:
        return generated
    kept = current[current.index(NATIVE_BEGIN) : current.index(NATIVE_END)]
    return generated[: generated.index(NATIVE_BEGIN)] + kept + generated[generated.index(NATIVE_END) :]


def document(
    run: Run,
    measured: str,
    *,
    decisions: dict[str, dict[str, float]] | None,
    scale: str | None,
    parts: list[tuple[str, float]] | None = None,
    current: str | None = None,
) -> str:
    """docs/development/performance.md: bench/performance-template.md filled with this run's tables and figures, and
    the hand-written native tier's section as it stands in current (the file being replaced)."""
    client_share = run.cpu("nothing", "GPU", 8, "client") / max(run.cpu("nothing", "GPU", 8, "apiserver"), 1e-9)
    machine = ["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in run.machine.items())]
    machine.append(
        f"| load average (1, 5, 15 min) | before {' '.join(run.load_before.split()[:3])}, "
        f"after {' '.join(run.load_after.split()[:3])} |"
    )
    fields = {
        "command": " ".join(["bench/apiserver.py", *run.argv]),
        "rounds": str(run.args.rounds),
        "requests": str(run.args.requests),
        "requests8": str(2 * run.args.requests),
        "duration": f"{run.duration:.0f}",
        "measured": measured,
        "findings": "\n".join(findings(run, decisions)),
        "decisions": decision_section(decisions, parts),
        "scale": f"## Scale: 1,000 policies\n\n`bench/scale.py`, in this run ({SCALE_NOTE}).\n\n{scale}\n\n"
        if scale
        else "",
        "machine": "\n".join(machine),
        "client_share": f"{client_share:.0%}",
    }
    return hand_written(string.Template(TEMPLATE.read_text()).substitute(fields), current).rstrip("\n")


def decision_section(decisions: dict[str, dict[str, float]] | None, parts: list[tuple[str, float]] | None) -> str:
    """The decision alone (bench/decisions.py): a table per pod, and where the every-field pod's time goes."""
    if not decisions:
        return ""
    out = [
        "## The decision alone",
        "",
        "`bench/decisions.py`, in this run: CPU time per call, no HTTP; "
        "`/validate` is given the object `/mutate` produced, as the apiserver gives it.",
        "",
        "| pod | mutate | validate | mutate + validate | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, calls in decisions.items():
        total = calls["mutate"] + calls["validate"]
        target = ""
        if name == "every-field pod":
            target = f"≤ 150 µs {'met' if total <= 150e-6 else '**not met**'}"
        out.append(f"| {name} | {us(calls['mutate'])} | {us(calls['validate'])} | {us(total)} | {target} |")
    out.append("")
    if parts:
        out += [
            "Where the every-field pod's mutate + validate goes (`bench/decisions.py`, each part timed by a "
            "wrapper, CPU time):",
            "",
            "| part | per mutate + validate |",
            "| --- | --- |",
        ]
        out += [f"| {name} | {seconds * 1e6:.1f} µs |" for name, seconds in parts]
        out.append("")
    return "\n".join(out) + "\n"


def findings(run: Run, decisions: dict[str, dict[str, float]] | None) -> list[str]:
    """The answers the tables hold, in words, computed from the same medians."""
    m, cpu = run.median, run.cpu
    out = []
    added = {r: m(r, "GPU", 1, "p50") - m("nothing", "GPU", 1, "p50") for r in REGISTRATIONS}
    floor, ours = cpu("no-op", "GPU", 8, "no-op server"), cpu("gpugate", "GPU", 8, "gpugate server")
    patch_cost = cpu("no-op + patch", "GPU", 8, "apiserver") - cpu("no-op", "GPU", 8, "apiserver")
    out.append(
        f"- **The two serving targets, and why they are not met** (when the table says so): against the no-op, "
        f"gpugate's added p50 is {added['gpugate'] / added['no-op']:.2f}× (target ≤ 1.3×) and its 8-client "
        f"pods/s {m('gpugate', 'GPU', 8, 'rate') / m('no-op', 'GPU', 8, 'rate'):.2f}× (≥ 0.85×). The no-op "
        f'answers without a patch; answering with gpugate\'s patch alone ("no-op + patch") costs the apiserver '
        f"{us(patch_cost)} more CPU per pod (decoding the patch, applying it, decoding the object again) and "
        f"takes the no-op to {added['no-op + patch'] / added['no-op']:.2f}× its added p50 and "
        f"{m('no-op + patch', 'GPU', 8, 'rate') / m('no-op', 'GPU', 8, 'rate'):.2f}× its pods/s. Against that "
        f"patching no-op, gpugate's figures are {added['gpugate'] / added['no-op + patch']:.2f}× and "
        f"{m('gpugate', 'GPU', 8, 'rate') / m('no-op + patch', 'GPU', 8, 'rate'):.2f}×: what is left is gpugate's "
        f"own work, {us(ours - floor)} more server CPU per pod than the no-op for two decisions."
    )
    # CPU pods: the matchConditions keep them from both servers; what remains is the apiserver's CEL.
    cells = run.cells[("nothing", "CPU", 1)]
    spread = max(c.p50 for c in cells) / min(c.p50 for c in cells)
    slower = {r: m(r, "CPU", 1, "p50") / m("nothing", "CPU", 1, "p50") for r in ("no-op", "gpugate")}
    fewer = {r: m(r, "CPU", 8, "rate") / m("nothing", "CPU", 8, "rate") for r in ("no-op", "gpugate")}
    extra = cpu("gpugate", "CPU", 8, "apiserver") - cpu("nothing", "CPU", 8, "apiserver")
    verdict = (
        "slower"
        if slower["gpugate"] > spread and fewer["gpugate"] < 1 / spread
        else "not measurably slower (the difference is within the round-to-round spread of nothing)"
    )
    out.append(
        f"- **CPU pods with gpugate registered are {verdict}**: p50 {slower['gpugate']:.2f}× and "
        f"{fewer['gpugate']:.2f}× the pods/s of nothing, as with the no-op registered ({slower['no-op']:.2f}×, "
        f"{fewer['no-op']:.2f}×): the two registrations are the same webhook configurations, and neither "
        f"server is called for a CPU pod (gpugate's server CPU per CPU pod: "
        f"{us(cpu('gpugate', 'CPU', 8, 'gpugate server'))}). What a CPU pod pays is the apiserver evaluating "
        f"both webhooks' `matchConditions` (CEL): {us(extra)} of apiserver CPU per pod over nothing. "
        f"Round-to-round spread of nothing's CPU-pod p50: {spread:.2f}×."
    )
    line = (
        f"- **Where gpugate's time goes**: its server spends {us(ours)} of CPU per GPU pod (a `/mutate` and a "
        f"`/validate` call) where the no-op on the same stack spends {us(floor)}; the no-op's share is what "
        f"gunicorn, TLS, flask and JSON cost (the floor)."
    )
    if decisions:
        small = decisions["small GPU pod"]
        line += (
            f" The decision itself, measured alone on the same machine in this run, is "
            f"{us(small['mutate'] + small['validate'])} for this pod (mutate + validate)."
        )
    out.append(line)
    apiserver_cost = {
        r: cpu(r, "GPU", 8, "apiserver") - cpu("nothing", "GPU", 8, "apiserver")
        for r in ("no-op", "no-op + patch", "gpugate", "CEL")
    }
    out.append(
        f"- **What the apiserver itself spends**: over nothing, per GPU pod, {us(apiserver_cost['no-op'])} of "
        f"apiserver CPU to call the no-op's two webhooks, {us(apiserver_cost['no-op + patch'])} when the no-op "
        f"answers with gpugate's patch, {us(apiserver_cost['gpugate'])} to call gpugate's, "
        f"{us(apiserver_cost['CEL'])} to run the CEL policies. A webhook costs the apiserver an HTTPS round "
        f"trip with the object encoded and decoded twice; the CEL policies cost it evaluation and, for the "
        f"mutation, re-encoding the object."
    )
    total = {
        r: sum(cpu(r, "GPU", 8, p) for p in ("apiserver", "etcd", "no-op server", "gpugate server", "client"))
        for r in REGISTRATIONS
    }
    out.append(
        "- **The CPU budget per GPU pod** (apiserver + etcd + webhook server + client, 8 clients): "
        + ", ".join(f"{r} {us(total[r])}" for r in REGISTRATIONS)
        + f". With the cores saturated, pods/s go as the inverse: gpugate's budget is "
        f"{total['no-op'] / total['gpugate']:.2f}× the no-op's inverse. Of gpugate's excess over the no-op, "
        f"{us(apiserver_cost['gpugate'] - apiserver_cost['no-op'])} is the apiserver's (decoding and applying "
        f'gpugate\'s JSON patch: the no-op answers without one; "no-op + patch" shows the same) and '
        f"{us(ours - floor)} gpugate's own."
    )
    out.append(
        "- **What the webhook buys over CEL**: bench/cel-equivalent.yaml covers one default policy (runtime "
        "class, toleration, one model selector, the team label) and whole GPUs; gpugate's policies select by "
        "namespace glob and label, pick model classes by what the pod requests, check limits, shapes, holders "
        "and workload templates, and answer with messages that name the policy and the fix."
    )
    return out


SCALE_NOTE = (
    "1,000 policies selecting namespaces by glob, exact name and namespaceSelector, some also by "
    "podSelector, above policies/00-default.yaml as the fallback"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument(
        "--requests",
        type=int,
        default=300,
        help="pod creates per cell with 1 client; twice as many with 8 (default 300)",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help="extra `gpugate serve` options for both servers, e.g. '--workers 2 --threads 4'",
    )
    parser.add_argument(
        "--registrations",
        default=",".join(REGISTRATIONS),
        help="comma-separated subset to measure, for experiments (the report needs all five)",
    )
    parser.add_argument("--cel-file", default=str(CEL_FILE), help=f"the CEL equivalent (default {CEL_FILE.name})")
    parser.add_argument(
        "--native-file",
        help="the native tier's objects to measure, instead of `gpugate policy compile policies` from this "
        "checkout (to compare two versions of the compiler in the same way)",
    )
    parser.add_argument(
        "--native-before",
        metavar="FILE",
        help='native objects measured as the registration "native (before)" in the same run (e.g. main\'s compile)',
    )
    parser.add_argument(
        "--native-policies",
        type=int,
        metavar="N",
        help="measure the native tier compiled from bench/scale.py's N team policies above policies/00-default.yaml "
        "(the bench pod's namespace matches none of them: every policy is passed over)",
    )
    parser.add_argument("--pods", default=",".join(PODS), help="comma-separated subset of GPU,CPU, for experiments")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 round of 20 requests, no decision or scale benchmark: checks that it all works",
    )
    parser.add_argument(
        "--write",
        metavar="FILE",
        help="also run bench/decisions.py and bench/scale.py and write the whole report there "
        "(docs/development/performance.md)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="run the apiserver with --profiling=true and, after the rounds, write a CPU profile per registration "
        "(GPU pods, 8 clients) and `go tool pprof -top` of it into DIR",
    )
    parser.add_argument("--profile-seconds", type=int, default=15, help="length of each profile (default 15)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests = 1, 20
    args.registrations = tuple(args.registrations.split(","))
    args.pods = tuple(args.pods.split(","))
    if "native (before)" in args.registrations and not args.native_before:
        parser.error('--registrations: "native (before)" needs --native-before FILE')
    unknown = set(args.registrations) - set(REGISTRATIONS) - set(ON_REQUEST)
    if unknown:
        parser.error(
            f"--registrations: unknown {', '.join(sorted(unknown))} (choose from "
            f"{', '.join(REGISTRATIONS + ON_REQUEST)})"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = measure(args)
    run.argv = list(argv if argv is not None else sys.argv[1:])
    if set(ON_REQUEST) & set(args.registrations) and "GPU" in args.pods:
        print()
        print(native_report(run))
    if set(args.registrations) != set(REGISTRATIONS) or set(args.pods) != set(PODS):
        return 0
    text = report(run)
    print()
    print(text)
    print(
        f"\n{run.args.rounds} rounds in {run.duration:.0f} s; load average before {run.load_before}, "
        f"after {run.load_after}"
    )
    if args.write:
        from bench import decisions as decisions_bench
        from bench import scale as scale_bench

        decided = decisions_bench.measure()
        parts = decisions_bench.breakdown(decisions_bench.every_field_pod())
        scaled = scale_bench.report(scale_bench.measure(1000, rss=False), rss=run.extra.get("rss_1000"))
        out = Path(args.write)
        current = out.read_text() if out.exists() else None
        out.write_text(document(run, text, decisions=decided, scale=scaled, parts=parts, current=current) + "\n")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
