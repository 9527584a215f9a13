"""Attribution nobody can rewrite, through the real apiserver with deploy/ registered: a pods/status update
that rewrites gpugate's labels, a Binding that carries them, a kube-state-metrics
look-alike key, and a Deployment selecting on an attribution label are refused; ordinary status updates and
bindings are not.
Labels added on UPDATE need no routing of their own (tests/rules/test_attribution_integrity.py)."""

from __future__ import annotations

import json

import pytest

from tests.harness.controlplane import KubectlResult
from tests.harness.gpugate import Stack
from tests.harness.polling import eventually
from tests.support import STANDARD, policy_yaml

from .objects import TEAM, deployment, gpu_pod, gpugate_denial

pytestmark = pytest.mark.e2e


def _created(stack: Stack, prefix: str) -> tuple[str, dict]:
    cp = stack.cluster
    ns = cp.create_namespace(prefix)
    cp.kubectl("apply", "-f", "-", stdin=gpu_pod("trainer", ns))
    stored = json.loads(cp.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)
    assert stored["metadata"]["labels"][TEAM] == "unassigned"
    return ns, stored


def _labels(stack: Stack, ns: str) -> dict[str, str]:
    stored = json.loads(stack.cluster.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)
    return dict(stored["metadata"].get("labels") or {})


def _status_patch(stack: Stack, ns: str, patch: dict) -> KubectlResult:
    return stack.cluster.kubectl(
        "patch",
        "pod",
        "trainer",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
        check=False,
    )


@pytest.mark.parametrize(
    "metadata",
    [
        {"labels": {TEAM: "someone-else"}},
        {"labels": {"gpugate.io/workload-name": None}},
        {"annotations": {"gpugate.io/policy": "x"}},
    ],
)
def test_a_status_update_cannot_rewrite_gpugates_labels(stack: Stack, metadata: dict) -> None:
    """The backstop refuses it first (admission policies run before validating webhooks), gpugate too."""
    ns, before = _created(stack, "e2e-status")
    done = _status_patch(stack, ns, {"metadata": metadata})
    assert not done.ok, f"the status update went through:\n{done}"
    assert "a status update must not add, change or remove a gpugate.io label or annotation" in done.stderr, done
    assert _labels(stack, ns) == before["metadata"]["labels"]


def test_status_updates_reach_gpugate_only_when_they_change_metadata(stack: Stack) -> None:
    ns, _ = _created(stack, "e2e-status")
    sent = stack.gpugate.admission_requests()
    condition = {"type": "example.com/Ready", "status": "True"}
    assert _status_patch(stack, ns, {"status": {"conditions": [condition]}}).ok  # a kubelet's report
    assert stack.gpugate.admission_requests() == sent
    assert _status_patch(stack, ns, {"metadata": {"labels": {"app": "renamed"}}}).ok
    assert stack.gpugate.admission_requests() == sent + 1  # sent, judged and allowed
    assert _labels(stack, ns)["app"] == "renamed"


def test_a_pod_update_reaches_gpugate_only_when_it_changes_what_gpugate_reads(stack: Stack) -> None:
    """A finalizer added and removed (what the Job controller does to each of its pods) changes nothing gpugate reads
    of a pod: not sent. A label edit is, and an attribution label's is refused."""
    ns, _ = _created(stack, "e2e-update")

    def patch(body: dict) -> KubectlResult:
        return stack.cluster.kubectl(
            "patch", "pod", "trainer", "-n", ns, "--type=merge", "-p", json.dumps(body), check=False
        )

    sent = stack.gpugate.admission_requests()
    assert patch({"metadata": {"finalizers": ["example.com/tracking"]}}).ok
    assert patch({"metadata": {"finalizers": None}}).ok
    assert stack.gpugate.admission_requests() == sent
    assert patch({"metadata": {"labels": {"app": "renamed"}}}).ok
    assert stack.gpugate.admission_requests() == sent + 1  # sent, judged and allowed
    refused = patch({"metadata": {"labels": {TEAM: "someone-else"}}})
    message = gpugate_denial(refused.stderr)
    assert message is not None and "is set by gpugate and cannot be edited" in message, refused
    assert _labels(stack, ns)[TEAM] == "unassigned"


OWN_KEY = "billing.example.com/team"


def test_gpugate_refuses_a_status_update_of_an_attribution_key_outside_its_group(stack: Stack) -> None:
    """A policy's attribution key need not be gpugate.io's, which is all the backstop knows: gpugate itself
    refuses a status update that rewrites it."""
    cp = stack.cluster
    ns = cp.create_namespace("e2e-status-key")
    own = policy_yaml(
        "e2e-own-key",
        priority=50,
        match={"namespaces": ["e2e-status-key-*"]},
        devices=STANDARD["devices"],
        attribution={"labels": {OWN_KEY: {"value": "billing"}}},
    )
    policy_file = stack.policy_dir / "own-key.yaml"
    try:
        policy_file.write_text(own)

        def labelled() -> bool:
            # While the workers pick up the new file, /mutate and /validate of one request may run under
            # different policy sets (a refusal that the pod lacks the new label): not loaded yet, ask again.
            dry = cp.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=gpu_pod("probe", ns), check=False
            )
            return dry.ok and dry.json()["metadata"].get("labels", {}).get(OWN_KEY) == "billing"

        assert eventually(labelled, timeout=15), "gpugate did not load the policy"
        cp.kubectl("apply", "-f", "-", stdin=gpu_pod("trainer", ns))
        done = _status_patch(stack, ns, {"metadata": {"labels": {OWN_KEY: "someone-else"}}})
        message = gpugate_denial(done.stderr)
        assert message is not None, done
        assert f"metadata.labels[{OWN_KEY}]: pod: a status update cannot change gpugate's label {OWN_KEY}" in message
        assert _labels(stack, ns)[OWN_KEY] == "billing"
    finally:
        policy_file.unlink()


def _bind(stack: Stack, ns: str, metadata: dict) -> KubectlResult:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "trainer", "namespace": ns, **metadata},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"},
    }
    return stack.cluster.kubectl("create", "-f", "-", stdin=binding, check=False)


def test_a_binding_cannot_carry_gpugates_labels_onto_a_pod(stack: Stack) -> None:
    """pods/binding merges the Binding's annotations, and (PodTopologyLabelsAdmission, beta and on since 1.35)
    its labels, into the pod (k/k pkg/registry/core/pod/storage/storage.go setPodNodeAndMetadata)."""
    ns, before = _created(stack, "e2e-binding")
    done = _bind(stack, ns, {"labels": {TEAM: "someone-else"}, "annotations": {"gpugate.io/workload": "Pod/x"}})
    assert not done.ok, f"the binding went through:\n{done}"
    message = gpugate_denial(done.stderr)
    assert message is not None and f"a Binding cannot set gpugate's label {TEAM}" in message, done.stderr
    assert _labels(stack, ns) == before["metadata"]["labels"]
    # Any other Binding is never sent to gpugate; what it carries lands on the pod, as the strategy says.
    sent = stack.gpugate.admission_requests()
    assert _bind(stack, ns, {"labels": {"example.com/rack": "r1"}, "annotations": {"example.com/by": "test"}}).ok
    stored = json.loads(stack.cluster.kubectl("get", "pod", "trainer", "-n", ns, "-o", "json").stdout)
    assert stored["spec"]["nodeName"] == "gpu-node-1"
    assert stored["metadata"]["annotations"]["example.com/by"] == "test"
    assert stored["metadata"]["labels"]["example.com/rack"] == "r1"
    assert stack.gpugate.admission_requests() == sent


def test_a_look_alike_team_key_is_refused(stack: Stack) -> None:
    cp = stack.cluster
    ns = cp.create_namespace("e2e-look-alike")
    sent = gpu_pod("trainer", ns, labels={"app": "trainer", "gpugate.io/TEAM": "someone-else"})
    done = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    message = gpugate_denial(done.stderr)
    assert message is not None, done.stderr
    assert "label gpugate.io/TEAM is exported by kube-state-metrics as label_gpugate_io_team" in message


def test_a_deployment_selecting_on_the_team_label_is_refused(stack: Stack) -> None:
    cp = stack.cluster
    ns = cp.create_namespace("e2e-selector")
    sent = deployment("trainer", ns, gpu_pod("trainer", ns))
    sent["spec"]["selector"]["matchLabels"][TEAM] = "vision"
    sent["spec"]["template"]["metadata"]["labels"][TEAM] = "vision"
    done = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=sent, check=False)
    message = gpugate_denial(done.stderr)
    assert message is not None, done.stderr
    assert f"spec.selector.matchLabels[{TEAM}]: workload: selects its pods by {TEAM}" in message
    assert f"select on labels of your own (such as app) and leave {TEAM} out of the selector" in message
