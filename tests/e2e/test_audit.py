"""`gpugate audit` against a real apiserver on which gpugate was never registered: pods and workloads of
several shapes, stored as the apiserver accepts them, are found (exit 1); `--compare-to` names exactly the
objects a tighter limit refuses; workload CRDs are read once served; the shipped RBAC (and the CronJob's
ServiceAccount) is enough, and PolicyReports go through the real CRD;
10,000 pods created straight through the API are audited, with the time and the peak RSS printed.

This module runs its own control plane: nothing here may pass through a registered gpugate, and the
10,000 pods should not slow down the other scenarios.
"""

from __future__ import annotations

import base64
import concurrent.futures
import copy
import http.client
import json
import os
import pty
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.controlplane import REPO, ControlPlane
from tests.harness.gpugate import gpugate_executable
from webhook.admission.offline import check_objects
from webhook.policy.files import load_policies

from .objects import BASE_POLICY, GPU_TOLERATION, container, deployment, gpu_pod, pod

pytestmark = pytest.mark.e2e

CRD = REPO / "tests" / "fixtures" / "wg-policy-prototypes" / "wgpolicyk8s.io_policyreports.yaml"
TEAM = {"team": "vision"}


@pytest.fixture(scope="module")
def cp(e2e_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(e2e_bin, tmp_path_factory.mktemp("audit-cluster"))
    try:
        plane.start()
        # The RuntimeClass admission plugin refuses pods naming a RuntimeClass that does not exist.
        plane.ensure_runtime_class("nvidia")
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def policy_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The e2e fleet policy, and the same with maxPerPod tightened from 8 to 2."""
    base = tmp_path_factory.mktemp("audit-policies")
    current, tighter = base / "current", base / "tighter"
    current.mkdir()
    tighter.mkdir()
    (current / "fleet.yaml").write_text(BASE_POLICY)
    assert "maxPerPod: 8" in BASE_POLICY
    (tighter / "fleet.yaml").write_text(BASE_POLICY.replace("maxPerPod: 8", "maxPerPod: 2"))
    return current, tighter


def formed(obj: dict[str, Any], policy_dir: Path, labels: dict[str, str]) -> dict[str, Any]:
    """`obj` as it is stored when gpugate's mutating webhook did see it (`gpugate check`'s own path)."""
    ns = obj["metadata"]["namespace"]
    [result] = check_objects([obj], policies=load_policies(policy_dir), namespace_labels={ns: labels})
    assert result.allowed, result.decision.message
    return dict(result.mutated)


def audit(
    cp: ControlPlane, *args: str, kubeconfig: Path | None = None, timeout: float = 300.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(gpugate_executable()), "audit", "--kubeconfig", str(kubeconfig or cp.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def by_name(report: dict[str, Any]) -> dict[str, str]:
    return {f["name"]: f["verdict"] for f in report["findings"]}


# ---- findings ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shapes(cp: ControlPlane, policy_dirs: tuple[Path, Path]) -> str:
    """One namespace holding every shape, created while no webhook is registered."""
    ns = cp.create_namespace("audit-shapes", labels=TEAM)
    three = [container(f"c{i}", gpus="3") for i in range(3)]  # 9 GPUs: 3 per container, over 8 per pod
    unlabelled = formed(gpu_pod("unlabelled", ns), policy_dirs[0], TEAM)
    for key in [k for k in unlabelled["metadata"]["labels"] if k.startswith("gpugate.io/")]:
        del unlabelled["metadata"]["labels"][key]
    objects = [
        gpu_pod("bare", ns),  # nothing injected
        unlabelled,  # everything but the labels
        gpu_pod("h200", ns, labels={"app": "h200", "gpugate.io/model": "h200"}),  # disallowed model class
        pod("greedy", ns, *three),  # over the per-pod limit
        pod("squatter", ns, tolerations=[GPU_TOLERATION]),  # CPU pod on the GPU taint
        formed(gpu_pod("good", ns), policy_dirs[0], TEAM),  # as gpugate stores it
        pod("plain", ns),  # a CPU pod
        deployment("web", ns, gpu_pod("x", ns)),  # a GPU template: fine
        deployment("big", ns, pod("x", ns, *three)),  # a GPU template over the limit
    ]
    cp.kubectl("create", "-f", "-", stdin=objects)
    return ns


EXPECTED = {
    "bare": "changed",
    "unlabelled": "changed",
    "h200": "refused",
    "greedy": "refused",
    "squatter": "refused",
    "big": "refused",
}


def test_audit_finds_every_shape(cp: ControlPlane, shapes: str, policy_dirs: tuple[Path, Path]) -> None:
    done = audit(cp, "--policies", str(policy_dirs[0]), "--namespace", shapes, "-o", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert by_name(report) == EXPECTED
    findings = {f["name"]: f for f in report["findings"]}
    assert [c["change"] for c in findings["bare"]["wouldAdd"]] == [
        "runtimeClassName: nvidia",
        "toleration nvidia.com/gpu Exists:NoSchedule",
        "nodeSelector nvidia.com/gpu.product=NVIDIA-L4",
        "label gpugate.io/team=vision",
        "label gpugate.io/workload-kind=Pod",
        "label gpugate.io/workload-name=bare",
    ]
    assert {c["field"] for c in findings["unlabelled"]["wouldAdd"]} == {"labels"}
    assert "kubectl label" in findings["unlabelled"]["note"]
    assert any("h200" in v["message"] for v in findings["h200"]["violations"])
    assert any("8 per pod" in v["message"] for v in findings["greedy"]["violations"])
    assert any("toleration" in v["rule"] for v in findings["squatter"]["violations"])
    assert findings["big"]["kind"] == "Deployment" and findings["big"]["podsWillGet"]
    summary = report["namespaces"][shapes]
    # bare, unlabelled, h200, greedy (9), good: 13 GPUs on 5 GPU pods; bare and h200 and greedy lack labels too
    assert summary["gpuPods"] == 5 and summary["gpus"] == {"nvidia.com/gpu": "13"}
    assert summary["missingAttributionLabels"] == 4
    assert report["teams"]["vision"]["gpuPods"] == 5
    assert report["totals"]["audited"] == 9 and report["totals"]["fine"] == 3


def test_table_and_yaml_say_the_same(cp: ControlPlane, shapes: str, policy_dirs: tuple[Path, Path]) -> None:
    as_yaml = audit(cp, "--policies", str(policy_dirs[0]), "-n", shapes, "-o", "yaml")
    assert as_yaml.returncode == 1
    assert by_name(yaml.safe_load(as_yaml.stdout)) == EXPECTED
    table = audit(cp, "--policies", str(policy_dirs[0]), "-n", shapes)
    assert table.returncode == 1
    for name, verdict in EXPECTED.items():
        assert any(
            name in line and (verdict.upper() if verdict == "refused" else verdict) in line
            for line in table.stdout.splitlines()
        ), f"{name}: {verdict} missing:\n{table.stdout}"
    assert "the mutating webhook never saw this pod" in table.stdout
    # No progress line when stderr is not a terminal; what stderr may hold is the fleet drift the audit
    # reports (this control plane has no GPU nodes, so every class names values no node carries).
    assert all(line.startswith("gpugate audit: fleet drift: ") for line in table.stderr.splitlines()), table.stderr
    assert "\r" not in table.stderr


def test_progress_line_on_a_terminal(cp: ControlPlane, shapes: str, policy_dirs: tuple[Path, Path]) -> None:
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                str(gpugate_executable()),
                "audit",
                "--kubeconfig",
                str(cp.kubeconfig),
                "--policies",
                str(policy_dirs[0]),
                "-n",
                shapes,
            ],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
        )
        os.close(terminal)
        out, _ = proc.communicate(timeout=120)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 1
    assert b"gpugate audit: listing namespaces" in seen
    assert "bare" in out


def test_a_clean_namespace_exits_0(cp: ControlPlane, policy_dirs: tuple[Path, Path]) -> None:
    ns = cp.create_namespace("audit-clean", labels=TEAM)
    cp.kubectl("create", "-f", "-", stdin=[formed(gpu_pod("good", ns), policy_dirs[0], TEAM), pod("cpu", ns)])
    done = audit(cp, "--policies", str(policy_dirs[0]), "-n", ns)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings." in done.stdout


def test_bad_input_and_an_unreachable_cluster_exit_2_with_one_line(
    cp: ControlPlane, tmp_path: Path, policy_dirs: tuple[Path, Path]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "p.yaml").write_text(
        "apiVersion: gpugate.io/v1\nkind: GPUPolicy\nmetadata: {name: x}\nspec: {mode: sometimes}\n"
    )
    gone = tmp_path / "kubeconfig"
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    gone.write_text(yaml.safe_dump(config))
    cases = [
        (["--policies", str(broken)], "mode"),
        (["--policies", str(policy_dirs[0]), "--compare-to", str(tmp_path / "nowhere")], "not a directory"),
        (["--policies", str(policy_dirs[0]), "-n", "no-such-namespace"], "no such namespace"),
        (["--kubeconfig", str(gone), "--policies", str(policy_dirs[0])], "cannot reach the cluster"),
        ([], "no gpugate Deployment gpugate/gpugate"),  # nothing installed, no --policies
    ]
    for args, words in cases:
        done = audit(cp, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert words in done.stderr, (args, done.stderr)
        assert done.stderr.startswith("gpugate audit: "), done.stderr


# ---- the policy-change preview -----------------------------------------------------------------


def test_compare_to_names_exactly_what_a_tighter_limit_refuses(
    cp: ControlPlane, policy_dirs: tuple[Path, Path]
) -> None:
    current, tighter = policy_dirs
    ns = cp.create_namespace("audit-compare", labels=TEAM)
    two = [container(f"c{i}", gpus="1") for i in range(2)]
    three = [container(f"c{i}", gpus="1") for i in range(3)]
    objects = [
        formed(gpu_pod("one", ns), current, TEAM),
        formed(pod("two", ns, *two), current, TEAM),
        formed(pod("three", ns, *three), current, TEAM),
        gpu_pod("bare-four", ns, gpus="4"),
        deployment("web-two", ns, pod("x", ns, *two)),
        deployment("web-three", ns, pod("x", ns, *three)),
        pod("cpu", ns),
    ]
    cp.kubectl("create", "-f", "-", stdin=objects)
    done = audit(cp, "--policies", str(current), "--compare-to", str(tighter), "-n", ns, "-o", "json")
    assert done.returncode == 1, done.stderr
    diffs = {(d["kind"], d["name"]): d for d in json.loads(done.stdout)["differences"]}
    assert set(diffs) == {("Pod", "three"), ("Pod", "bare-four"), ("Deployment", "web-three")}
    assert diffs[("Pod", "three")]["verdict"] == {"from": "fine", "to": "refused"}
    assert diffs[("Pod", "bare-four")]["verdict"] == {"from": "changed", "to": "refused"}
    assert diffs[("Deployment", "web-three")]["verdict"] == {"from": "fine", "to": "refused"}
    assert all(any("2 per pod" in v for v in d["newViolations"]) for d in diffs.values())
    table = audit(cp, "--policies", str(current), "--compare-to", str(tighter), "-n", ns)
    assert f"Pod {ns}/three: fine -> refused" in table.stdout
    same = audit(cp, "--policies", str(current), "--compare-to", str(current), "-n", ns)
    assert same.returncode == 0 and "No object changes verdict or injections." in same.stdout


# ---- workload CRDs ----------------------------------------------------------------------------


WORKLOAD_CRDS = REPO / "tests" / "fixtures" / "crds" / "workload-crds.yaml"


def test_workload_crds_are_audited_once_the_cluster_serves_them(
    cp: ControlPlane, policy_dirs: tuple[Path, Path]
) -> None:
    ns = cp.create_namespace("audit-crd", labels=TEAM)
    args = ("--policies", str(policy_dirs[0]), "-n", ns, "-o", "json")
    unserved = audit(cp, *args)
    assert unserved.returncode == 0, unserved.stderr  # no workload CRDs: skipped without a word
    assert json.loads(unserved.stdout)["totals"]["listed"] == {}

    crds = [d for d in yaml.safe_load_all(WORKLOAD_CRDS.read_text()) if d]
    cp.kubectl("apply", "-f", "-", stdin=crds)
    for crd in crds:
        cp.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
    nine = pod(
        "w", ns, container("ray-worker", gpus="3"), container("sidecar", gpus="3"), container("extra", gpus="3")
    )["spec"]
    one = gpu_pod("x", ns)["spec"]
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [container("head")]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": nine}}],
        },
    }
    volcano = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc", "namespace": ns},
        "spec": {"tasks": [{"name": "t", "replicas": 1, "template": {"spec": one}}]},
    }
    batch = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bj", "namespace": ns},
        "spec": {"template": {"spec": {**nine, "restartPolicy": "Never"}}},
    }
    cp.kubectl("create", "-f", "-", stdin=[ray, volcano, batch])
    served = audit(cp, *args)
    assert served.returncode == 1, served.stderr
    report = json.loads(served.stdout)
    assert report["totals"]["listed"] == {"Job": 1, "Job.batch.volcano.sh": 1, "RayCluster.ray.io": 1}
    assert by_name(report) == {"train": "refused", "bj": "refused"}  # the Volcano Job asks for one GPU: fine
    [ray_finding] = [f for f in report["findings"] if f["name"] == "train"]
    assert any("8 per pod" in v["message"] and "workerGroupSpecs[0]" in v["path"] for v in ray_finding["violations"])
    assert "spec.workerGroupSpecs[0].template: runtimeClassName: nvidia" in [
        c["change"] for c in ray_finding["podsWillGet"]
    ]


# ---- installed policies, RBAC, PolicyReports -----------------------------------------------------


def _install_gpugate_without_webhooks(cp: ControlPlane) -> list[dict[str, Any]]:
    """deploy/'s Namespace, ServiceAccount, policy ConfigMap and Deployment (never the webhooks): what audit
    reads to find the installed policies. No controller runs, so the Deployment starts no pods."""
    rendered = [d for d in yaml.safe_load_all(cp.kubectl("kustomize", str(REPO / "deploy")).stdout) if d]
    wanted = [d for d in rendered if d["kind"] in ("Namespace", "ServiceAccount", "ConfigMap", "Deployment")]
    cp.kubectl("apply", "-f", "-", stdin=wanted)
    return wanted


def _user_kubeconfig(cp: ControlPlane, tmp_path: Path, user: str, groups: list[str]) -> Path:
    pair = cp.ca.issue(user, common_name=user, organizations=groups, client=True)
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(pair.cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(pair.key.read_bytes()).decode(),
    }
    path = tmp_path / f"{user}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_shipped_rbac_reads_the_installed_policies_and_writes_reports(
    cp: ControlPlane, shapes: str, tmp_path: Path
) -> None:
    installed = _install_gpugate_without_webhooks(cp)
    [configmap] = [d for d in installed if d["kind"] == "ConfigMap"]
    cp.kubectl("apply", "-k", str(REPO / "deploy" / "audit"))
    auditor = _user_kubeconfig(cp, tmp_path, "alice", ["gpugate-auditors"])
    nobody = _user_kubeconfig(cp, tmp_path, "mallory", [])

    denied = audit(cp, kubeconfig=nobody)
    assert denied.returncode == 2 and "HTTP 403" in denied.stderr and "gpugate-audit" in denied.stderr

    done = audit(cp, "-o", "json", kubeconfig=auditor)
    assert done.returncode == 1, done.stderr
    assert "the GPU fleet was not read" not in done.stderr, done.stderr  # the role lists it for drift
    report = json.loads(done.stdout)
    assert report["policies"]["source"] == f"configmap gpugate/{configmap['metadata']['name']}"
    shipped = load_policies(REPO / "deploy" / "base" / "policies")
    assert report["policies"]["names"] == [p.name for p in shipped.policies]
    assert "gpugate" not in report["namespaces"]  # excluded, as the webhooks exclude it

    # PolicyReports: the CRD first (Kyverno or Policy Reporter would have installed it), then the writer role.
    cp.kubectl("apply", "--server-side", "-f", str(CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/policyreports.wgpolicyk8s.io", "--timeout=60s")
    stale_ns = cp.create_namespace("audit-stale")
    stale = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": "gpugate-audit",
            "namespace": stale_ns,
            "labels": {"app.kubernetes.io/managed-by": "gpugate-audit"},
        },
        "results": [],
    }
    foreign: dict[str, Any] = copy.deepcopy(stale)
    foreign["metadata"].update(name="someone-else", labels={"app.kubernetes.io/managed-by": "kyverno"})
    cp.kubectl("apply", "-f", "-", stdin=[stale, foreign])
    args = ("--policies", str(REPO / "deploy" / "base" / "policies"), "-n", shapes, "--report", "policyreports")

    forbidden = audit(cp, *args, kubeconfig=auditor)
    assert forbidden.returncode == 2 and "HTTP 403" in forbidden.stderr, forbidden.stderr
    cp.kubectl("apply", "-k", str(REPO / "deploy" / "audit" / "reports"))
    reporter = _user_kubeconfig(cp, tmp_path, "bob", ["gpugate-auditors", "gpugate-audit-reporters"])
    for _ in range(2):  # the second run replaces what the first wrote
        wrote = audit(cp, *args, "-o", "json", kubeconfig=reporter)
        assert wrote.returncode == 1, wrote.stderr
        assert "wrote 1 PolicyReports" in wrote.stderr
    reports = cp.kubectl("get", "policyreports.v1alpha2.wgpolicyk8s.io", "-A", "-o", "json").json()["items"]
    names = sorted((r["metadata"]["namespace"], r["metadata"]["name"]) for r in reports)
    # --namespace limits the stale sweep to that namespace: the other report stays, so does kyverno's
    assert names == sorted([(shapes, "gpugate-audit"), (stale_ns, "gpugate-audit"), (stale_ns, "someone-else")])
    [ours] = [r for r in reports if r["metadata"]["namespace"] == shapes]
    assert {r["resources"][0]["name"] for r in ours["results"]} >= set(EXPECTED)
    assert ours["summary"]["fail"] == sum(r["result"] == "fail" for r in ours["results"]) > 0
    everywhere = audit(
        cp, "--policies", str(REPO / "deploy" / "base" / "policies"), "--report", "policyreports", kubeconfig=reporter
    )
    assert everywhere.returncode == 1, everywhere.stderr
    assert "deleted 1 stale" in everywhere.stderr
    left = cp.kubectl("get", "policyreports.v1alpha2.wgpolicyk8s.io", "-n", stale_ns, "-o", "name").stdout.split()
    assert left == ["policyreport.wgpolicyk8s.io/someone-else"]


def test_the_cronjobs_service_account_can_run_the_report(cp: ControlPlane, shapes: str, tmp_path: Path) -> None:
    """deploy/audit-cronjob: admitted by the restricted PodSecurity profile of gpugate's namespace without a
    warning, and its ServiceAccount's token runs exactly the CronJob's command (no kubelet here to run it)."""
    _install_gpugate_without_webhooks(cp)
    cp.kubectl("apply", "--server-side", "-f", str(CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/policyreports.wgpolicyk8s.io", "--timeout=60s")
    cp.kubectl("apply", "-k", str(REPO / "deploy" / "audit-cronjob"))
    rendered = [
        d for d in yaml.safe_load_all(cp.kubectl("kustomize", str(REPO / "deploy" / "audit-cronjob")).stdout) if d
    ]
    [job] = [d for d in rendered if d["kind"] == "CronJob"]
    template = job["spec"]["jobTemplate"]["spec"]["template"]
    # PodSecurity enforces on pods, not on CronJobs: dry-run the pod the Job would create.
    as_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "audit-probe", "namespace": "gpugate"},
        "spec": template["spec"],
    }
    probe = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=as_pod, check=False)
    assert probe.ok and "PodSecurity" not in probe.stderr, str(probe)
    args = template["spec"]["containers"][0]["args"]
    token = cp.kubectl("create", "token", "gpugate-audit", "-n", "gpugate").stdout.strip()
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    kubeconfig = tmp_path / "cronjob.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [str(gpugate_executable()), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # --exit-zero: findings are in the reports
    assert done.stdout == ""  # -o none
    assert "wrote" in done.stderr and "PolicyReports" in done.stderr
    ours = cp.kubectl("get", "policyreports.v1alpha2.wgpolicyk8s.io", "-n", shapes, "-o", "json").json()["items"]
    assert [r["metadata"]["name"] for r in ours] == ["gpugate-audit"] and ours[0]["summary"]["fail"] > 0


# ---- 10,000 pods -------------------------------------------------------------------------------

PODS = int(os.environ.get("GPUGATE_AUDIT_PODS", "10000"))
NAMESPACES = 10
CREATE_THREADS = 16


def create_pods(cp: ControlPlane, pods: list[dict[str, Any]], *, threads: int = CREATE_THREADS) -> float:
    """POST every pod straight to the apiserver over `threads` kept-alive HTTPS connections; seconds taken."""
    context = ssl.create_default_context(cafile=str(cp.ca.cert_path))
    context.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
    local = threading.local()
    opened: list[http.client.HTTPSConnection] = []

    def post(body: dict[str, Any]) -> None:
        connection = getattr(local, "connection", None)
        if connection is None:
            connection = local.connection = http.client.HTTPSConnection(
                "127.0.0.1", cp.apiserver_port, context=context, timeout=60
            )
            opened.append(connection)
        ns = body["metadata"]["namespace"]
        connection.request(
            "POST", f"/api/v1/namespaces/{ns}/pods", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        text = response.read()
        if response.status != 201:
            raise AssertionError(f"create {ns}/{body['metadata']['name']}: HTTP {response.status}: {text[:300]!r}")

    start = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for future in concurrent.futures.as_completed([pool.submit(post, p) for p in pods]):
                future.result()
    finally:
        for connection in opened:
            connection.close()
    return time.monotonic() - start


# Peak RSS from the child's own /proc/self/status VmHWM: the rusage of a child also counts what it shared with
# this (large) test process before exec.
_MEASURED = (
    "import sys; from webhook.cli import main; code = main(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(next(line for line in open('/proc/self/status') "
    "if line.startswith('VmHWM')).split()[1]); sys.exit(code)"
)


def run_measured(args: list[str], *, tmp_path: Path, timeout: float) -> tuple[int, str, float, int]:
    """(exit code, stdout, seconds, peak RSS in KiB) of one `gpugate` run in a child process."""
    hwm = tmp_path / "vmhwm"
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, str(hwm), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )
    return done.returncode, done.stdout, time.monotonic() - start, int(hwm.read_text())


def test_ten_thousand_pods(
    cp: ControlPlane, policy_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    current, tighter = policy_dirs
    namespaces = [cp.create_namespace(f"audit-bulk{i}", labels={"team": f"team-{i % 3}"}) for i in range(NAMESPACES)]
    templates = {  # every tenth pod bare, every tenth a CPU pod, the rest as gpugate forms them
        ns: formed(gpu_pod("tpl", ns), current, {"team": f"team-{i % 3}"}) for i, ns in enumerate(namespaces)
    }
    pods = []
    for n in range(PODS):
        ns = namespaces[(n // 7) % NAMESPACES]  # every namespace gets every shape
        if n % 10 == 0:
            body = gpu_pod(f"bare-{n}", ns, gpus="2")
        elif n % 10 == 1:
            body = pod(f"cpu-{n}", ns)
        else:
            body = copy.deepcopy(templates[ns])
            body["metadata"]["name"] = f"gpu-{n}"
            body["metadata"]["labels"]["gpugate.io/workload-name"] = f"gpu-{n}"
            body["metadata"]["labels"]["app"] = f"gpu-{n}"
        pods.append(body)
    created = create_pods(cp, pods)
    bare, cpu = len(range(0, PODS, 10)), len(range(1, PODS, 10))

    common = ["audit", "--kubeconfig", str(cp.kubeconfig), "--policies", str(current)]
    small_ns = cp.create_namespace("audit-small", labels=TEAM)
    cp.kubectl("create", "-f", "-", stdin=[gpu_pod("bare", small_ns)])
    strict = tmp_path / "strict"
    strict.mkdir()
    (strict / "fleet.yaml").write_text(BASE_POLICY.replace("maxPerPod: 8", "maxPerPod: 1"))
    code_small, _, secs_small, rss_small = run_measured(
        [*common, "-n", small_ns, "-o", "json"], tmp_path=tmp_path, timeout=120
    )
    code, out, secs, rss = run_measured([*common, "-o", "json"], tmp_path=tmp_path, timeout=300)
    code_cmp, out_cmp, secs_cmp, rss_cmp = run_measured(
        [*common, "--compare-to", str(strict), "-o", "json"], tmp_path=tmp_path, timeout=300
    )
    lines = [
        f"{PODS} pods in {NAMESPACES} namespaces created in {created:.1f} s ({PODS / created:.0f} pods/s, "
        f"{CREATE_THREADS} keep-alive HTTPS connections)",
        f"gpugate audit -o json, {PODS} pods: {secs:.1f} s, peak RSS {rss / 1024:.0f} MiB",
        f"gpugate audit --compare-to -o json, {PODS} pods: {secs_cmp:.1f} s, peak RSS {rss_cmp / 1024:.0f} MiB",
        f"gpugate audit -n <namespace of 1 pod> -o json: {secs_small:.1f} s, peak RSS {rss_small / 1024:.0f} MiB",
    ]
    with capsys.disabled():
        print("", *(f"audit bench: {line}" for line in lines), sep="\n")
    assert code_small == 1
    assert code == 1
    report = json.loads(out)
    bulk = {ns: t for ns, t in report["namespaces"].items() if ns.startswith("audit-bulk")}
    assert sum(t["gpuPods"] for t in bulk.values()) == PODS - cpu
    assert sum(t["changed"] for t in bulk.values()) == bare
    assert sum(t["fine"] for t in bulk.values()) == PODS - bare
    assert sum(t["missingAttributionLabels"] for t in bulk.values()) == bare
    assert sum(int(t["gpus"].get("nvidia.com/gpu", 0)) for t in bulk.values()) == 2 * bare + (PODS - bare - cpu)
    # one GPU per pod at most: exactly the bare pods (2 GPUs each) change, from changed to refused
    assert code_cmp == 1
    moved = [d for d in json.loads(out_cmp)["differences"] if d["namespace"].startswith("audit-bulk")]
    assert len(moved) == bare
    assert all(d["name"].startswith("bare-") and d["verdict"] == {"from": "changed", "to": "refused"} for d in moved)
