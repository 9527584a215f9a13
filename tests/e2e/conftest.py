"""Session fixtures for the end-to-end suite: one control plane (etcd + kube-apiserver) per
ExtendedResourceToleration setting, one gpugate per control plane registered from `deploy/`,
and a fresh namespace per test. Every process is stopped by its id at the end of the session,
also when a test or a start-up fails; the last lines of each process's log are attached to
every failing e2e test's report.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import workload_crds
from tests.harness.controlplane import BinariesMissing, ControlPlane, find_binaries
from tests.harness.fleet import device_classes
from tests.harness.gpugate import GPUGate, Stack, point_at, register, render_deploy
from tests.harness.polling import eventually

from .objects import BASE_POLICY, reload_policy

# Everything that is running, so that a failing test's report can show their logs.
_RUNNING: list[ControlPlane | GPUGate] = []


def _unavailable(reason: str) -> None:
    """Skip when the tools genuinely cannot exist here; in CI that is a failure, never a skip."""
    if os.environ.get("CI"):
        pytest.fail(f"e2e suite cannot run in CI: {reason}", pytrace=False)
    pytest.skip(f"!!! END-TO-END SUITE SKIPPED: {reason}")


@pytest.fixture(scope="session")
def e2e_bin() -> Path:
    try:
        return find_binaries()
    except BinariesMissing as e:
        if shutil.which("go") is None:
            _unavailable(f"{e}, and Go is not installed to build them (see docs/development/e2e.md)")
        pytest.fail(f"{e}: run tests/e2e/build.sh (or `make tools`) first; see docs/development/e2e.md", pytrace=False)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def control_plane_factory(
    e2e_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[bool], ControlPlane]]:
    """control_plane_factory(extended_resource_toleration) -> a started ControlPlane, one per setting."""
    planes: dict[bool, ControlPlane] = {}

    def get(extended_resource_toleration: bool = False) -> ControlPlane:
        if extended_resource_toleration not in planes:
            tag = "ert-on" if extended_resource_toleration else "ert-off"
            cp = ControlPlane(
                e2e_bin,
                tmp_path_factory.mktemp(f"cluster-{tag}"),
                extended_resource_toleration=extended_resource_toleration,
            )
            planes[extended_resource_toleration] = cp
            _RUNNING.append(cp)
            cp.start()
        return planes[extended_resource_toleration]

    try:
        yield get
    finally:
        for cp in planes.values():
            cp.stop()
            _RUNNING.remove(cp)


@pytest.fixture(scope="session")
def cluster(control_plane_factory: Callable[[bool], ControlPlane]) -> ControlPlane:
    return control_plane_factory(False)


@pytest.fixture(scope="session")
def stack_factory(
    control_plane_factory: Callable[[bool], ControlPlane], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[bool], Stack]]:
    stacks: dict[bool, Stack] = {}
    gates: list[GPUGate] = []  # stopped at the end even if their stack never finished setting up

    def get(extended_resource_toleration: bool = False) -> Stack:
        if extended_resource_toleration in stacks:
            return stacks[extended_resource_toleration]
        cp = control_plane_factory(extended_resource_toleration)
        work = tmp_path_factory.mktemp("gpugate")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        (policy_dir / "fleet.yaml").write_text(BASE_POLICY)
        (policy_dir / "reload.yaml").write_text(reload_policy("h100"))
        # The RuntimeClass admission plugin refuses pods naming a RuntimeClass that does not exist.
        cp.ensure_runtime_class("nvidia")
        cp.ensure_default_service_account("kube-system")
        gate = GPUGate(work, policy_dir, kubeconfig=cp.kubeconfig)
        gates.append(gate)
        _RUNNING.append(gate)
        gate.start()
        deploy = render_deploy(cp)
        registered = point_at(deploy, gate)
        register(cp, registered)
        stacks[extended_resource_toleration] = Stack(cp, gate, deploy, registered, policy_dir)
        return stacks[extended_resource_toleration]

    try:
        yield get
    finally:
        for gate in gates:
            gate.stop()
            _RUNNING.remove(gate)


@pytest.fixture(scope="session")
def stack(stack_factory: Callable[[bool], Stack]) -> Stack:
    return stack_factory(False)


SHIPPED_POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="session")
def fleet(e2e_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A control plane of its own where gpugate serves the SHIPPED policies (policies/*.yaml, the reference
    fleet), registered from deploy/ plus components/workload-crds, with the workload CRDs installed
    (tests/fixtures/crds) and the GPU Operator's RuntimeClasses (`nvidia`, `nvidia-cdi`, `nvidia-legacy`)."""
    cp = ControlPlane(e2e_bin, tmp_path_factory.mktemp("cluster-fleet"))
    _RUNNING.append(cp)
    gate: GPUGate | None = None
    try:
        cp.start()
        for runtime_class in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
            cp.ensure_runtime_class(runtime_class)
        # The DeviceClasses NVIDIA's DRA driver installs (and the CPU driver's), before gpugate starts: its live
        # inventory refuses a pod naming a DeviceClass the cluster does not have.
        for device_class in device_classes():
            cp.kubectl("apply", "-f", "-", stdin=device_class)
        cp.ensure_default_service_account("kube-system")
        workload_crds.install(cp, tmp_path_factory.mktemp("upstream-crds"))
        work = tmp_path_factory.mktemp("gpugate-fleet")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        for shipped in sorted(SHIPPED_POLICIES.glob("*.yaml")):
            shutil.copy(shipped, policy_dir / shipped.name)
        gate = GPUGate(work, policy_dir, kubeconfig=cp.kubeconfig)
        _RUNNING.append(gate)
        gate.start()
        deploy = render_deploy(cp, "workload-crds")
        registered = point_at(deploy, gate)
        register(cp, registered)
        # register() waits for the pod webhooks; the workload ones arrive in the same configuration
        # objects, but make sure: a RayCluster with half a GPU must meet gpugate before any test runs.
        ns = cp.create_namespace("e2e-registration-crds")
        half = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "probe", "namespace": ns},
            "spec": {
                "workerGroupSpecs": [
                    {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "w",
                                        "image": "rayproject/ray:2.41.0-gpu",
                                        "resources": {"limits": {"nvidia.com/gpu": "0.5"}},
                                    }
                                ]
                            }
                        }
                    }
                ]
            },
        }

        def checked() -> bool:
            dry = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=half, check=False)
            return 'admission webhook "mutate-workloads.gpugate.io"' in dry.stderr

        if not eventually(checked, timeout=60):
            raise RuntimeError("the workload-crds webhooks did not take effect within 60s")
        yield Stack(cp, gate, deploy, registered, policy_dir)
    finally:
        if gate is not None:
            gate.stop()
            _RUNNING.remove(gate)
        cp.stop()
        _RUNNING.remove(cp)


@pytest.fixture
def namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A fresh namespace (with its default ServiceAccount) named after the test."""
    stem = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:30].strip("-")
    return cluster.create_namespace(f"e2e-{stem}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("e2e") is not None:
        for thing in _RUNNING:
            procs = thing.processes if isinstance(thing, ControlPlane) else [thing.process]
            for proc in procs:
                report.sections.append((f"e2e log: {proc.log_path}", proc.log_tail(40)))
