"""Claim narrowing (webhook/native/claims.py): which live DeviceClasses are provably not GPU classes, and the
validating webhook's ``gpu-device-classes`` matchCondition, evaluated as CEL on claims of every shape: only a claim
whose every request names such a class skips the webhook. Through the real apiserver: tests/e2e/test_native_sync.py;
the sync's apply: tests/serve/test_native.py."""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel

from tests.support import REPO
from webhook.inventory.model import Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.native.claims import NAME, claim_condition, non_gpu_classes
from webhook.policy.files import load_policies

SHIPPED = load_policies(REPO / "policies")
FLEET = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
CLAIMS = {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}
TEMPLATES = {**CLAIMS, "resource": "resourceclaimtemplates"}
PODS = {"group": "", "version": "v1", "resource": "pods"}


def _device_class(name: str, cel_expression: str | None) -> dict[str, Any]:
    spec = {"selectors": [{"cel": {"expression": cel_expression}}]} if cel_expression else {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _claim(*requests: dict[str, Any], template: bool = False) -> dict[str, Any]:
    devices = {"devices": {"requests": list(requests)}}
    return {"metadata": {"name": "c"}, "spec": {"spec": devices} if template else devices}


def _exactly(name: str, device_class: str) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class}}


def _routed(
    expression: str, obj: dict[str, Any] | None, resource: dict[str, str] = CLAIMS, old: dict[str, Any] | None = None
) -> bool:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    request = {"operation": "UPDATE" if old else "CREATE", "resource": resource}
    value = env.compile(expression).eval(data={"object": obj, "oldObject": old, "request": request})
    assert value.type() != cel.Type.ERROR, value.value()
    result = value.plain_value()
    assert isinstance(result, bool)
    return result


def test_only_a_class_whose_drivers_no_policy_s_device_names_is_provably_not_a_gpu_class() -> None:
    fleet = Inventory.of(
        [
            *(_device_class(c.name, f"device.driver == '{c.drivers[0]}'") for c in FLEET.device_classes.values()),
            _device_class("nic", "device.driver == 'sriovnetwork.k8snetworkplumbingwg.io'"),
            _device_class("anything", None),  # no driver named: cannot tell
            _device_class("amd", "device.driver == 'gpu.amd.com'"),  # a built-in vendor's driver
        ]
    )
    assert non_gpu_classes(fleet, SHIPPED) == ["dra.cpu", "nic"]
    assert non_gpu_classes(Inventory(), SHIPPED) == []
    assert (
        claim_condition(Inventory.of([_device_class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'")]), SHIPPED)
        is None
    )


@pytest.mark.parametrize(
    ("case", "obj", "routed"),
    [
        ("a CPU claim", _claim(_exactly("cpu", "dra.cpu")), False),
        ("a CPU claim template", _claim(_exactly("cpu", "dra.cpu"), template=True), False),
        ("a GPU claim", _claim(_exactly("gpu", "gpu.nvidia.com")), True),
        ("a GPU claim template", _claim(_exactly("gpu", "gpu.nvidia.com"), template=True), True),
        ("a CPU and a GPU request", _claim(_exactly("cpu", "dra.cpu"), _exactly("gpu", "gpu.nvidia.com")), True),
        (
            "firstAvailable with a GPU alternative",
            _claim(
                {
                    "name": "x",
                    "firstAvailable": [
                        {"name": "a", "deviceClassName": "dra.cpu"},
                        {"name": "b", "deviceClassName": "gpu.nvidia.com"},
                    ],
                }
            ),
            True,
        ),
        (
            "firstAvailable of CPU alternatives only",
            _claim({"name": "x", "firstAvailable": [{"name": "a", "deviceClassName": "dra.cpu"}]}),
            False,
        ),
        ("a class the cluster lacks", _claim(_exactly("x", "not-there")), True),
        ("a request naming no class", _claim({"name": "x"}), True),
        ("v1beta1's deviceClassName on the request", _claim({"name": "x", "deviceClassName": "gpu.nvidia.com"}), True),
        ("v1beta1's CPU request", _claim({"name": "x", "deviceClassName": "dra.cpu"}), False),
    ],
)
def test_a_claim_skips_the_webhook_only_when_every_request_names_a_non_gpu_class(
    case: str, obj: dict[str, Any], routed: bool
) -> None:
    condition = claim_condition(FLEET, SHIPPED)
    assert condition is not None and condition["name"] == NAME
    resource = TEMPLATES if "template" in case else CLAIMS
    assert _routed(condition["expression"], obj, resource) is routed, case


def test_everything_else_the_webhook_routes_stays_routed() -> None:
    condition = claim_condition(FLEET, SHIPPED)
    assert condition is not None
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert _routed(condition["expression"], pod, PODS)
    # An UPDATE that made a GPU claim a CPU one is still seen (the old object names a GPU class).
    cpu, gpu = _claim(_exactly("cpu", "dra.cpu")), _claim(_exactly("gpu", "gpu.nvidia.com"))
    assert _routed(condition["expression"], cpu, CLAIMS, old=gpu)
    assert not _routed(condition["expression"], cpu, CLAIMS, old=cpu)
    # It reads what a webhook's matchCondition has, and nothing else.
    assert "variables." not in condition["expression"] and "params" not in condition["expression"]
