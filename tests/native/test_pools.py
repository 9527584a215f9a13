"""The pool digest (webhook/native/pools.py): what the reference fleet offers, written as literals into a valid
gpugate-always; a bound lifted where a pool's GPUs are unknown, no verdict for a vendor with no GPU anywhere; the
same digest the same fingerprint. What it refuses, through the real apiserver: tests/e2e/test_native_sync.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
from cel_expr_python import cel

from tests.support import REPO
from webhook.inventory.model import Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.native.compiler import Compiled, compile_policies
from webhook.native.pools import DIGEST_ANNOTATION, _least_bound, digest_of, fingerprint, with_pools
from webhook.policy.files import load_policies
from webhook.policy.model import PolicySet

SHIPPED = REPO / "policies"
FLEET = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


def _always(compiled: Compiled) -> dict[str, Any]:
    return next(o for o in compiled.objects if o["metadata"]["name"] == "gpugate-always" and "validations" in o["spec"])


def _pooled(policies: PolicySet, digest: dict[str, Any]) -> dict[str, Any]:
    """gpugate-always with the digest's checks, which follow its own."""
    return _always(with_pools(compile_policies(policies), policies, digest))


def test_the_reference_fleet_s_digest_names_the_largest_per_resource_and_the_classes_present() -> None:
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    digest = digest_of(fleet, policies)
    most = max(int(n.allocatable.get("amd.com/gpu", "0")) for n in fleet.nodes)
    assert digest["largest"]["amd.com/gpu"] == most > 0
    assert digest["runtimeClasses"] == sorted(fleet.runtime_classes)
    assert digest["deviceClasses"] == sorted(fleet.device_classes)
    assert digest["gpuRuntimeClasses"] == {}  # only nvidia, which the static lists name
    assert fingerprint(digest) == fingerprint(digest_of(load_snapshot(FLEET), load_policies(SHIPPED)))


def test_no_verdict_without_a_gpu_of_the_vendor_or_with_a_pool_of_unknown_gpus() -> None:
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    assert digest_of(Inventory(), policies)["largest"] == {}  # scaling from zero: nothing is refused
    unread = dataclasses.replace(fleet, unread=frozenset({"nodepools"}))
    assert digest_of(unread, policies)["largest"] == {}


def test_gpugate_always_carries_the_digest_after_its_own_checks_and_refuses_only_what_the_webhooks_skip() -> None:
    """One policy, not a second one: the apiserver builds four activations (each converting the pod) per policy it
    evaluates, and a second policy would evaluate claimsFormed and the resource again."""
    policies = load_policies(SHIPPED)
    digest = digest_of(load_snapshot(FLEET), policies)
    compiled = compile_policies(policies)
    merged = with_pools(compiled, policies, digest)
    assert [(o["kind"], o["metadata"]["name"]) for o in merged.objects] == [
        (o["kind"], o["metadata"]["name"]) for o in compiled.objects
    ]
    plain, vap = _always(compiled), _always(merged)
    kubernetes_validate.validate(vap, "1.36.0", strict=True)
    assert DIGEST_ANNOTATION not in plain["metadata"]["annotations"]  # `gpugate policy compile`: no inventory
    assert vap["metadata"]["annotations"][DIGEST_ANNOTATION] == fingerprint(digest)
    assert [o for o in merged.objects if o is not vap] == [o for o in compiled.objects if o is not plain]
    own = plain["spec"]["validations"]
    assert vap["spec"]["validations"][: len(own)] == own
    assert vap["spec"]["matchConditions"] == plain["spec"]["matchConditions"]  # no alias in the fleet
    names = [v["name"] for v in vap["spec"]["variables"]]
    assert names == [v["name"] for v in plain["spec"]["variables"]] + ["largest", "gpus", "classLargest", "className"]
    assert len(names) == len(set(names))
    added = vap["spec"]["validations"][len(own) :]
    assert len(added) == 3
    for validation in added:
        # Only enforce-mode policies, and only pods the narrowed webhooks skip.
        assert validation["expression"].startswith(
            '!(variables.policy in ["default", "serving"]) || !variables.claimsFormed'
        )
    assert '"amd.com/gpu": ' in vap["spec"]["variables"][-4]["expression"]


def _with_runtime_classes(fleet: Inventory, **handlers: str) -> Inventory:
    return dataclasses.replace(
        fleet,
        runtime_classes=fleet.runtime_classes | set(handlers),
        runtime_handlers={**fleet.runtime_handlers, **handlers},
        _cache={},
    )


def _evaluate(expression: str, pod: dict[str, Any], variables: dict[str, Any], operation: str = "CREATE") -> Any:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "request", "variables")})
    value = env.compile(expression).eval(
        data={"object": pod, "request": {"operation": operation}, "variables": variables}
    )
    assert value.type() != cel.Type.ERROR, value.value()
    return value.plain_value()


def test_an_alias_of_a_gpu_runtime_is_carried_by_handler_and_a_pod_without_gpus_under_it_refused() -> None:
    """``my-gpu`` (handler nvidia) and k3s's ``nvidia-experimental`` are GPU runtime classes; the digest carries the
    one the static lists do not name, gpugate-always sees pods under it (the webhooks never do) and refuses one
    without GPUs in every mode of a policy that denies GPU runtime classes to such pods, naming class and handler."""
    policies = load_policies(SHIPPED)
    fleet = _with_runtime_classes(
        load_snapshot(FLEET), **{"my-gpu": "nvidia", "nvidia-experimental": "nvidia-experimental", "crun": "crun"}
    )
    digest = digest_of(fleet, policies)
    assert digest["gpuRuntimeClasses"] == {"my-gpu": "nvidia"}
    vap = _pooled(policies, digest)
    kubernetes_validate.validate(vap, "1.36.0", strict=True)
    [condition] = vap["spec"]["matchConditions"]
    assert condition["expression"].endswith(
        '|| (has(object.spec.runtimeClassName) && object.spec.runtimeClassName in ["my-gpu"])'
    )
    alias = vap["spec"]["validations"][-1]
    assert alias["expression"].startswith("request.operation != 'CREATE' || ")  # every mode, not enforce only
    assert "holdsGPU" in {v["name"] for v in vap["spec"]["variables"]}
    cpu: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {"runtimeClassName": "my-gpu", "containers": [{"name": "c"}]},
    }
    research = {"policy": "research", "holdsGPU": False}  # a warn-mode policy: refused all the same
    assert _evaluate(alias["expression"], cpu, research) is False
    assert _evaluate(alias["messageExpression"], cpu, research) == (
        'pod: requests no GPU but runs under the GPU runtime class "my-gpu" (RuntimeClass "my-gpu" has handler '
        "\"nvidia\", a GPU runtime's), which can expose the node's GPUs to it; remove runtimeClassName, or request a "
        'GPU in resources.limits (policy "research", gpugate pool digest)'
    )
    assert _evaluate(alias["expression"], cpu, {**research, "holdsGPU": True}) is True
    assert _evaluate(alias["expression"], cpu, {"policy": "", "holdsGPU": False}) is True  # no governing policy
    assert _evaluate(alias["expression"], cpu, research, operation="UPDATE") is True
    crun = {**cpu, "spec": {**cpu["spec"], "runtimeClassName": "crun"}}
    assert _evaluate(alias["expression"], crun, research) is True
    claimed = {**cpu, "spec": {**cpu["spec"], "resourceClaims": [{"name": "gpu"}]}}
    assert _evaluate(alias["expression"], claimed, research) is True  # DRA: the webhook judges its claims
    allowing = dataclasses.replace(policies.policies[0], non_gpu_runtime_class="allow")
    relaxed = dataclasses.replace(policies, policies=(allowing, *policies.policies[1:]))
    vap = _pooled(relaxed, digest_of(fleet, relaxed))
    assert f'"{allowing.name}"' not in vap["spec"]["validations"][-1]["expression"].split("variables.policy in")[1]


def test_a_pod_is_bounded_by_the_nodes_of_the_class_it_is_formed_for() -> None:
    """Per class a pod names (and the first default, for one that names none): the most one node of the class holds
    on the reference fleet, and gpugate-always refuses a pod the class's nodes can never hold, as the webhook's
    feasibility does, naming the class; no bound without a GPU of the vendor anywhere (scaling from zero)."""
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    digest = digest_of(fleet, policies)
    bounds = {k.split("|", 1)[1]: v for k, v in digest["classLargest"].items() if k.startswith("p2|")}  # default
    assert bounds["h100|nvidia.com/gpu"] == [8, "h100"]
    assert bounds["l4|nvidia.com/gpu"] == [4, "l4"]
    assert bounds["|nvidia.com/gpu"] == [4, "l4"]  # the first default, which gpugate-mutate forms it for
    assert bounds["mi300x|amd.com/gpu"] == [8, "mi300x"]
    assert digest_of(Inventory(), policies)["classLargest"] == {}
    vap = _pooled(policies, digest)
    bound = next(v for v in vap["spec"]["validations"] if "classLargest" in v["expression"])
    six: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "6"}}}]},
    }
    variables = {
        "claimsFormed": True,
        "policy": "default",
        "resource": "nvidia.com/gpu",
        "largest": 56,
        "gpus": 6,
        "classLargest": 4,
        "className": "l4",
        "model": "",
        "podGPUs": 6,
    }
    assert _evaluate(bound["expression"], six, variables) is False
    assert _evaluate(bound["messageExpression"], six, variables) == (
        'pod: requests 6 × nvidia.com/gpu, more than the 4 one node of GPU model class "l4" (or a pool that scales '
        'up for it) offers; label the pod gpugate.io/model with a class whose nodes hold it (policy "default", '
        "gpugate pool digest)"
    )
    named = {**variables, "classLargest": 0, "className": "h200", "model": "h200"}
    assert _evaluate(bound["messageExpression"], six, named) == (
        'pod: requests 6 × nvidia.com/gpu, which no node of GPU model class "h200" offers and no pool adds for it; '
        "request at most what its nodes have, or name a class whose nodes hold it in gpugate.io/model (policy "
        '"default", gpugate pool digest)'
    )
    assert _evaluate(bound["expression"], six, {**variables, "classLargest": 8, "className": "h100"}) is True
    # A pod within the bound builds no message (the apiserver evaluates every message for every pod).
    assert _evaluate(bound["messageExpression"], six, {**variables, "classLargest": 8, "className": "h100"}) == ""
    fleet_wide = next(v for v in vap["spec"]["validations"] if "variables.gpus <= variables.largest" in v["expression"])
    assert _evaluate(fleet_wide["messageExpression"], six, variables) == ""
    assert _evaluate(fleet_wide["messageExpression"], six, {**variables, "largest": 4}) == (
        "pod: requests 6 × nvidia.com/gpu, more than the 4 one node of the cluster (or a pool that scales up) offers; "
        'request at most what a node has, or add such nodes (policy "default", gpugate pool digest)'
    )
    assert _evaluate(bound["expression"], six, {**variables, "classLargest": -1, "className": ""}) is True  # no verdict
    # Over the fleet-wide bound too: that one message only.
    assert _evaluate(bound["expression"], six, {**variables, "largest": 4}) is True
    assert _evaluate(bound["expression"], six, {**variables, "claimsFormed": False}) is True


def test_a_pod_within_the_least_bound_builds_no_bound_message_and_works_out_no_bound() -> None:
    """The apiserver evaluates both bounds' messages for every pod, in a context of their own: a pod whose GPUs
    (podGPUs, which the limits' messages read there anyway) are within the least bound of the digest stops at that,
    without its GPU resource, its amount of it or the bounds (none are given here); a pod over it gets its message."""
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    digest = digest_of(fleet, policies)
    least = _least_bound(digest, policies)
    assert least == min([*digest["largest"].values(), *(v[0] for v in digest["classLargest"].values())]) == 4
    vap = _pooled(policies, digest)
    bounds = [v for v in vap["spec"]["validations"] if "variables.gpus <=" in v["expression"]]
    assert len(bounds) == 2
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    for gpus in (0, 1, least):
        for v in bounds:
            assert _evaluate(v["messageExpression"], pod, {"podGPUs": gpus}) == ""
    over = {"podGPUs": 6, "gpus": 6, "resource": "nvidia.com/gpu", "largest": 56, "classLargest": 4,
            "className": "l4", "model": "", "policy": "default"}  # fmt: skip
    assert [_evaluate(v["messageExpression"], pod, over) for v in bounds] == [
        "",
        'pod: requests 6 × nvidia.com/gpu, more than the 4 one node of GPU model class "l4" (or a pool that scales '
        'up for it) offers; label the pod gpugate.io/model with a class whose nodes hold it (policy "default", '
        "gpugate pool digest)",
    ]
    # No bound in the digest (a fleet scaling from zero): nothing to compare with.
    assert _least_bound({"largest": {}, "classLargest": {}}, policies) is None
