"""Fault injection through the real apiserver: a steady load of pod creates while gpugate and the control
plane are hurt one fault at a time, and every decision checked against what was stored.

    python -m tests.e2e.faults [--threads 3] [--rate 12] [--steady 4] [--max-requests 4000]

prints one row per fault: requests sent, admitted, refused, timed out (the client's or a webhook's
deadline), unavailable (the apiserver itself down), and WRONG decisions:

- a GPU pod admitted (stored, or shown by a dry run) without everything its policy injects: the runtime
  class, the GPU toleration, the model's node selector, the team label, the policy annotation;
- a pod admitted with a team label its namespace did not carry: "unassigned" (guessed) while the
  namespace had a team label, or the old team more than LABEL_SETTLE seconds after the relabel (stale);
- a refusal of a pod that should have passed: any pod sent and answered while gpugate was healthy,
  and a pod without GPUs whenever the apiserver was up (gpugate's webhooks never see it).

A GPU pod refused while gpugate is down is not wrong: that is what failurePolicy Fail on the validating
webhook is for. The mutating webhook fails open (Ignore), so a pod that slips past it un-mutated must be
refused by the validating webhook, and the readback proves it was. Loopback only; bounded in requests
and time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509

from tests.harness.controlplane import ControlPlane, find_binaries
from tests.harness.gpugate import GPUGate, point_at, register, render_deploy
from tests.harness.polling import eventually
from tests.harness.processes import https_get, wait_for_https
from webhook import certs as certs_module

from .objects import BASE_POLICY, GPU, IMAGE, NODE_LABEL, TEAM

FAULTS = (
    "worker-sigkill",
    "gpugate-restart",
    "certificate-rotation",
    "policy-broken-then-fixed",
    "worker-sigkill-while-policy-broken",
    "namespace-relabel",
    "apiserver-restart",
)
# The namespace cache follows a watch; a relabel reaches every worker within this on loopback.
LABEL_SETTLE = 5.0
REQUEST_TIMEOUT = 20.0
POLICY_NAME = "e2e-fleet"
BROKEN_POLICY = BASE_POLICY.replace("mode: enforce", "mode: sometimes")
EXPECTED_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class Sent:
    """One create request and what came of it."""

    fault: str
    name: str
    namespace: str
    gpu: bool
    dry_run: bool
    sent: float
    done: float = 0.0
    outcome: str = ""  # admitted | refused | timed out | unavailable
    status: int = 0
    message: str = ""
    returned: dict[str, Any] | None = None


@dataclass
class Timeline:
    """When gpugate was healthy, when the apiserver was down, and when a namespace changed team."""

    unhealthy: list[tuple[float, float]] = field(default_factory=list)
    apiserver_down: list[tuple[float, float]] = field(default_factory=list)
    #: (the label call made, returned, namespace, old, new): the relabel takes effect somewhere between the two.
    relabels: list[tuple[float, float, str, str, str]] = field(default_factory=list)

    def healthy(self, start: float, end: float) -> bool:
        return not any(s < end and start < e for s, e in self.unhealthy)

    def apiserver_up(self, start: float, end: float) -> bool:
        return not any(s < end and start < e for s, e in self.apiserver_down)


# ------------------------------------------------------------------------------------------ API client


class API:
    """POST pods to the apiserver as the admin user, one kept-alive connection per thread."""

    def __init__(self, cp: ControlPlane) -> None:
        self.port = cp.apiserver_port
        self.context = ssl.create_default_context(cafile=str(cp.ca.cert_path))
        self.context.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, context=self.context, timeout=REQUEST_TIMEOUT
            )
            self.local.connection = connection
        return connection

    def close(self) -> None:
        connection = getattr(self.local, "connection", None)
        if connection is not None:
            connection.close()
            self.local.connection = None

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        connection = self._connection()
        try:
            data = json.dumps(body).encode() if body is not None else None
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
        except BaseException:
            self.close()
            raise
        try:
            return response.status, json.loads(payload)
        except ValueError:
            return response.status, {"message": payload.decode(errors="replace")}


def pod_body(name: str, namespace: str, *, gpu: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpu:
        container["resources"] = {"limits": {GPU: "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "load"}},
        "spec": {"containers": [container]},
    }


def create(api: API, record: Sent) -> None:
    path = f"/api/v1/namespaces/{record.namespace}/pods" + ("?dryRun=All" if record.dry_run else "")
    try:
        status, body = api.request("POST", path, pod_body(record.name, record.namespace, gpu=record.gpu))
    except TimeoutError:
        record.outcome, record.message = "timed out", "no answer from the apiserver in time"
    except (ConnectionError, OSError, http.client.HTTPException) as err:
        record.outcome, record.message = "unavailable", f"apiserver: {err!r}"
    else:
        record.status = status
        if status in (200, 201):
            record.outcome, record.returned = "admitted", body
        else:
            message = str(body.get("message", ""))
            record.message = message
            timed_out = "deadline exceeded" in message or "Timeout" in str(body.get("reason", ""))
            record.outcome = "timed out" if timed_out else "refused"
    record.done = time.monotonic()


# ------------------------------------------------------------------------------------------ load


class Load:
    """`threads` clients creating pods round-robin (GPU/CPU x real/dry-run x namespace), at most `rate`
    per second together and `max_requests` in all."""

    def __init__(self, api: API, namespaces: list[str], *, threads: int, rate: float, max_requests: int) -> None:
        self.api = api
        self.namespaces = namespaces
        self.threads = threads
        self.interval = threads / rate
        self.max_requests = max_requests
        self.fault = "warm-up"
        self.records: list[Sent] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.workers = [
            threading.Thread(target=self._run, args=(i,), name=f"load-{i}", daemon=True) for i in range(threads)
        ]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def finish(self) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=REQUEST_TIMEOUT * 2)

    def _run(self, index: int) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                with self.lock:
                    if len(self.records) >= self.max_requests:
                        return
                    fault = self.fault
                    shape = (seq + index) % 8
                    record = Sent(
                        fault=fault,
                        name=f"{fault[:20]}-{index}-{seq}",
                        gpu=shape % 2 == 0,
                        dry_run=shape % 4 >= 2,
                        namespace=self.namespaces[(shape // 4) % 2],
                        sent=time.monotonic(),
                    )
                    self.records.append(record)
                seq += 1
                create(self.api, record)
                self.stop.wait(max(0.0, self.interval - (record.done - record.sent)))
        finally:
            self.api.close()


# ------------------------------------------------------------------------------------------ the run


@dataclass
class Cluster:
    cp: ControlPlane
    gate: GPUGate
    ca: certs_module.Issued
    policy_file: Path
    namespaces: dict[str, str]  # name -> current team


def serving_certificate(ca: certs_module.Issued) -> certs_module.Issued:
    now = dt.datetime.now(dt.UTC)
    hosts = [*certs_module.service_hosts("gpugate", namespace="gpugate"), "127.0.0.1"]
    return certs_module.build_serving_certificate(ca, hosts, now=now, valid_for=dt.timedelta(days=1))


def install_certificate(gate: GPUGate, ca: certs_module.Issued, serving: certs_module.Issued) -> None:
    """Key first, then certificate, each replaced atomically (what `gpugate certs --force` does)."""
    certs_module.write_files(
        gate.cert_dir,
        {
            certs_module.KEY_FILE: (serving.private_key_pem(), 0o600),
            certs_module.CERT_FILE: (serving.certificate_pem(), 0o644),
            certs_module.CA_FILE: (ca.certificate_pem(), 0o644),
        },
        force=True,
    )


def served_serial(gate: GPUGate) -> int:
    context = ssl.create_default_context(cafile=str(gate.ca))
    with (
        socket.create_connection(("127.0.0.1", gate.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        der = sock.getpeercert(binary_form=True)
    return int(x509.load_der_x509_certificate(der or b"").serial_number)


def gpugate_metric(gate: GPUGate, name: str) -> float | None:
    try:
        status, body = https_get(f"{gate.url}/metrics", ca=gate.ca, timeout=5)
    except OSError:
        return None
    if status != 200:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


def start(workdir: Path, *, validate_failure_policy: str | None = None, backstop: bool = True) -> Cluster:
    cp = ControlPlane(find_binaries(), workdir / "cluster")
    cp.start()
    try:
        cp.ensure_runtime_class("nvidia")
        cp.ensure_default_service_account("kube-system")
        policy_dir = workdir / "policies"
        policy_dir.mkdir()
        policy_file = policy_dir / "fleet.yaml"
        policy_file.write_text(BASE_POLICY)
        gate = GPUGate(workdir / "gpugate", policy_dir, kubeconfig=cp.kubeconfig)
        # Our own CA, so that the serving certificate can be renewed under the same caBundle.
        ca = certs_module.build_ca(
            common_name="gpugate faults CA", now=dt.datetime.now(dt.UTC), valid_for=dt.timedelta(days=2)
        )
        install_certificate(gate, ca, serving_certificate(ca))
        gate.ca_bundle = certs_module.ca_bundle(ca.certificate_pem())
        gate.start()
        objects = point_at(render_deploy(cp), gate)
        if validate_failure_policy:  # only to show that the judge catches what a wrong setting lets through
            for obj in objects:
                if obj.get("kind") == "ValidatingWebhookConfiguration":
                    for hook in obj["webhooks"]:
                        hook["failurePolicy"] = validate_failure_policy
        if not backstop:
            objects = [o for o in objects if not o.get("kind", "").startswith("ValidatingAdmissionPolicy")]
        register(cp, objects)
        namespaces = {
            cp.create_namespace("faults-a", {"team": "alpha"}): "alpha",
            cp.create_namespace("faults-b", {"team": "beta"}): "beta",
        }
        return Cluster(cp, gate, ca, policy_file, namespaces)
    except BaseException:
        cp.stop()
        raise


def probe(api: API, cluster: Cluster) -> bool:
    """A dry-run GPU pod in every namespace comes back mutated with the namespace's current team."""
    for namespace, team in cluster.namespaces.items():
        record = Sent("probe", "probe", namespace, gpu=True, dry_run=True, sent=time.monotonic())
        create(api, record)
        if record.outcome != "admitted" or problems(record.returned or {}, {team}):
            return False
    return True


def wait_until_healthy(api: API, cluster: Cluster, timeout: float = 90.0) -> None:
    if not eventually(lambda: probe(api, cluster), timeout=timeout, interval=0.3):
        raise RuntimeError(f"gpugate did not recover within {timeout:.0f}s:\n{cluster.gate.process.log_tail()}")


def workers_of(gate: GPUGate) -> list[int]:
    assert gate.process.proc is not None
    master = gate.process.proc.pid
    found: list[int] = []
    for task in Path(f"/proc/{master}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


@contextlib.contextmanager
def unhealthy(timeline: Timeline, api: API, cluster: Cluster, *, apiserver: bool = False) -> Iterator[None]:
    """Mark the time from entering until gpugate (and the apiserver) answer correctly again."""
    started = time.monotonic()
    try:
        yield
        wait_until_healthy(api, cluster)
    finally:
        timeline.unhealthy.append((started, time.monotonic()))
        if apiserver:
            timeline.apiserver_down.append((started, time.monotonic()))


def inject(fault: str, cluster: Cluster, api: API, timeline: Timeline, *, hold: float) -> None:
    gate = cluster.gate
    if fault == "worker-sigkill":
        before = workers_of(gate)
        with unhealthy(timeline, api, cluster):
            os.kill(before[0], signal.SIGKILL)
            eventually(lambda: len(set(workers_of(gate)) - set(before)) >= 1, timeout=60)
    elif fault == "gpugate-restart":
        with unhealthy(timeline, api, cluster):
            gate.stop()  # SIGTERM to its process group
            time.sleep(hold)  # load meets a gpugate that is gone
            gate.start()
    elif fault == "certificate-rotation":
        old = served_serial(gate)
        renewed = serving_certificate(cluster.ca)
        install_certificate(gate, cluster.ca, renewed)
        if not eventually(lambda: served_serial(gate) == renewed.certificate.serial_number, timeout=30):
            raise RuntimeError(f"gpugate still serves serial {old:x} after the rotation")
    elif fault in ("policy-broken-then-fixed", "worker-sigkill-while-policy-broken"):
        cluster.policy_file.write_text(BROKEN_POLICY)
        if not eventually(lambda: gpugate_metric(gate, "gpugate_policy_last_reload_ok") == 0, timeout=30):
            raise RuntimeError("gpugate did not report the broken policy edit")
        if fault == "worker-sigkill-while-policy-broken":
            # The replacement worker cannot load the files on disk: it must start from the last good copy.
            before = workers_of(gate)
            with unhealthy(timeline, api, cluster):
                os.kill(before[0], signal.SIGKILL)
                eventually(lambda: len(set(workers_of(gate)) - set(before)) >= 1, timeout=60)
        time.sleep(hold)  # load meets the last good policies, kept in force
        cluster.policy_file.write_text(BASE_POLICY)
        if not eventually(lambda: gpugate_metric(gate, "gpugate_policy_last_reload_ok") == 1, timeout=30):
            raise RuntimeError("gpugate did not pick up the fixed policy")
    elif fault == "namespace-relabel":
        namespace = sorted(cluster.namespaces)[1]
        team = cluster.namespaces[namespace]
        new = {"beta": "gamma"}.get(team, "beta")
        # The relabel is stored, and reaches gpugate's watches, before kubectl returns: from the call on, a pod may
        # meet the old value in /mutate and the new one in /validate.
        started = time.monotonic()
        cluster.cp.kubectl("label", "namespace", namespace, f"team={new}", "--overwrite")
        changed = time.monotonic()
        timeline.relabels.append((started, changed, namespace, team, new))
        cluster.namespaces[namespace] = new
        # Mutate and validate may run in workers whose watches see the relabel a moment apart.
        timeline.unhealthy.append((started, changed + LABEL_SETTLE))
        time.sleep(LABEL_SETTLE)
    elif fault == "apiserver-restart":
        apiserver = cluster.cp.apiserver
        with unhealthy(timeline, api, cluster, apiserver=True):
            apiserver.stop()
            time.sleep(hold)
            apiserver.start()
            wait_for_https(
                f"{cluster.cp.server}/readyz",
                process=apiserver,
                ca=cluster.cp.ca.cert_path,
                client=cluster.cp.admin,
                timeout=120,
            )
    else:
        raise ValueError(f"unknown fault {fault!r}")


# ------------------------------------------------------------------------------------------ judging


def problems(pod: dict[str, Any], teams: set[str]) -> list[str]:
    """What an admitted GPU pod lacks of what the policy injects, or a team label outside `teams`."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    out = []
    if spec.get("runtimeClassName") != "nvidia":
        out.append(f"runtimeClassName {spec.get('runtimeClassName')!r}")
    if EXPECTED_TOLERATION not in (spec.get("tolerations") or []):
        out.append("no GPU toleration")
    if (spec.get("nodeSelector") or {}).get(NODE_LABEL) != "NVIDIA-L4":
        out.append(f"nodeSelector {spec.get('nodeSelector')!r}")
    if (meta.get("annotations") or {}).get("gpugate.io/policy") != POLICY_NAME:
        out.append("no gpugate.io/policy annotation")
    team = (meta.get("labels") or {}).get(TEAM)
    if team not in teams:
        out.append(f"team label {team!r}, expected {' or '.join(sorted(teams))}")
    return out


def expected_teams(record: Sent, timeline: Timeline, initial: dict[str, str]) -> set[str]:
    """Team labels acceptable for a pod: the namespace's team when sent; both around a relabel."""
    team = initial[record.namespace]
    allowed = {team}
    for started, changed, namespace, old, new in timeline.relabels:
        if namespace != record.namespace:
            continue
        if record.sent >= changed + LABEL_SETTLE:
            allowed = {new}
        elif record.done >= started:
            allowed = {old, new}
    return allowed


@dataclass
class Row:
    sent: int = 0
    admitted: int = 0
    refused: int = 0
    timed_out: int = 0
    unavailable: int = 0
    wrong: int = 0
    gpu: int = 0
    dry_run: int = 0


def judge(
    records: list[Sent], stored: dict[str, dict[str, Any]], timeline: Timeline, initial: dict[str, str]
) -> tuple[dict[str, Row], list[str]]:
    rows: dict[str, Row] = {}
    wrong: list[str] = []
    seen: set[str] = set()
    for r in records:
        row = rows.setdefault(r.fault, Row())
        row.sent += 1
        row.gpu += r.gpu
        row.dry_run += r.dry_run
        row.timed_out += r.outcome == "timed out"
        row.unavailable += r.outcome == "unavailable"
        faults: list[str] = []
        if r.outcome == "admitted":
            row.admitted += 1
            pod = r.returned or {}
            if not r.dry_run:
                seen.add(f"{r.namespace}/{r.name}")
                pod = stored.get(f"{r.namespace}/{r.name}") or {}
                if not pod:
                    faults.append("admitted, but not stored")
            if r.gpu and pod:
                faults += problems(pod, expected_teams(r, timeline, initial))
        elif r.outcome == "refused":
            row.refused += 1
            if timeline.healthy(r.sent, r.done):
                faults.append(f"refused while gpugate was healthy: HTTP {r.status} {r.message[:300]}")
            elif not r.gpu and timeline.apiserver_up(r.sent, r.done):
                faults.append(f"a pod without GPUs refused: HTTP {r.status} {r.message[:300]}")
        if faults:
            row.wrong += 1
            wrong.append(
                f"{r.fault}: {'dry-run ' if r.dry_run else ''}{'GPU' if r.gpu else 'CPU'} pod "
                f"{r.namespace}/{r.name}: {'; '.join(faults)}"
            )
    by_name = {f"{r.namespace}/{r.name}": r for r in records if not r.dry_run}
    for key, pod in stored.items():  # stored although the client saw no admission (an answer lost)
        sent = by_name.get(key)
        if key in seen or sent is None or not sent.gpu:
            continue
        found = problems(pod, expected_teams(sent, timeline, initial))
        if found:
            rows[sent.fault].wrong += 1
            wrong.append(
                f"{sent.fault}: GPU pod {key} stored although the client saw {sent.outcome!r}: {'; '.join(found)}"
            )
    return rows, wrong


def stored_pods(api: API, namespaces: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for namespace in namespaces:
        status, body = api.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        if status != 200:
            raise RuntimeError(f"listing pods in {namespace}: HTTP {status} {body}")
        for item in body.get("items", []):
            out[f"{namespace}/{item['metadata']['name']}"] = item
    api.close()
    return out


# ------------------------------------------------------------------------------------------ entry points


@dataclass
class Result:
    rows: dict[str, Row]
    wrong: list[str]
    seconds: float
    faults: tuple[str, ...]

    def table(self) -> str:
        w = max(len(f) for f in ("warm-up", *self.faults)) + 2
        head = (
            f"{'fault':<{w}}{'sent':>6}{'admitted':>10}{'refused':>9}{'timed out':>11}{'unavailable':>13}{'WRONG':>7}"
        )
        lines = [head, "-" * len(head)]
        total = Row()
        for fault in ("warm-up", *self.faults):
            row = self.rows.get(fault, Row())
            lines.append(
                f"{fault:<{w}}{row.sent:>6}{row.admitted:>10}{row.refused:>9}{row.timed_out:>11}"
                f"{row.unavailable:>13}{row.wrong:>7}"
            )
            for name in ("sent", "admitted", "refused", "timed_out", "unavailable", "wrong", "gpu", "dry_run"):
                setattr(total, name, getattr(total, name) + getattr(row, name))
        lines.append("-" * len(head))
        lines.append(
            f"{'total':<{w}}{total.sent:>6}{total.admitted:>10}{total.refused:>9}{total.timed_out:>11}"
            f"{total.unavailable:>13}{total.wrong:>7}"
        )
        lines.append(f"({total.gpu} GPU pods, {total.dry_run} dry runs; {self.seconds:.0f} s)")
        return "\n".join(lines)


def run(
    workdir: Path,
    *,
    threads: int = 3,
    rate: float = 12.0,
    steady: float = 4.0,
    hold: float = 3.0,
    max_requests: int = 4000,
    faults: tuple[str, ...] = FAULTS,
    validate_failure_policy: str | None = None,
    backstop: bool = True,
    log: Callable[[str], None] = lambda _m: None,
) -> Result:
    began = time.monotonic()
    cluster = start(workdir, validate_failure_policy=validate_failure_policy, backstop=backstop)
    try:
        api = API(cluster.cp)
        initial = dict(cluster.namespaces)
        wait_until_healthy(api, cluster)
        timeline = Timeline()
        load = Load(api, sorted(cluster.namespaces), threads=threads, rate=rate, max_requests=max_requests)
        load.start()
        try:
            time.sleep(steady)
            for fault in faults:
                log(f"fault: {fault}")
                with load.lock:
                    load.fault = fault
                time.sleep(steady)  # healthy load before the fault
                inject(fault, cluster, api, timeline, hold=hold)
                time.sleep(steady)  # and after it
        finally:
            load.finish()
            api.close()
        stored = stored_pods(api, sorted(cluster.namespaces))
        rows, wrong = judge(load.records, stored, timeline, initial)
        return Result(rows, wrong, time.monotonic() - began, faults)
    finally:
        cluster.gate.stop()
        cluster.cp.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.faults", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=3, help="client threads (default 3)")
    parser.add_argument("--rate", type=float, default=12.0, help="creates per second, all threads (default 12)")
    parser.add_argument("--steady", type=float, default=4.0, help="seconds of load before and after each fault")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds a fault lasts where it has a length")
    parser.add_argument("--max-requests", type=int, default=4000, help="stop the load after this many")
    parser.add_argument("--fault", action="append", choices=FAULTS, help="run only these (repeatable)")
    parser.add_argument(
        "--validate-failure-policy",
        choices=("Ignore", "Fail"),
        help="override the shipped failurePolicy of the validating webhook (Ignore shows what the "
        "judge reports when a GPU pod gets past a gpugate that is down)",
    )
    parser.add_argument(
        "--no-backstop",
        action="store_true",
        help="leave out deploy/'s ValidatingAdmissionPolicy (with --validate-failure-policy Ignore: "
        "nothing is left to stop an un-mutated GPU pod, and the judge must say so)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpugate-faults-") as tmp:
        result = run(
            Path(tmp),
            threads=args.threads,
            rate=args.rate,
            steady=args.steady,
            hold=args.hold,
            max_requests=args.max_requests,
            faults=tuple(args.fault or FAULTS),
            validate_failure_policy=args.validate_failure_policy,
            backstop=not args.no_backstop,
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
    print(result.table())
    for line in result.wrong:
        print("WRONG", line)
    return 1 if result.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
