"""The pool digest (webhook/native/pools.py): what the reference fleet offers, written as literals into a valid
gpugate-pools; a bound lifted where a pool's GPUs are unknown, no verdict for a vendor with no GPU anywhere; the
same digest the same fingerprint. What it refuses, through the real apiserver: tests/e2e/test_native_sync.py."""

from __future__ import annotations

import dataclasses

import kubernetes_validate

from tests.support import REPO
from webhook.inventory.model import Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.native.compiler import compile_policies
from webhook.native.pools import DIGEST_ANNOTATION, NAME, compile_pools, digest_of, fingerprint
from webhook.policy.files import load_policies

SHIPPED = REPO / "policies"
FLEET = REPO / "policies" / "examples" / "fleet" / "fleet.yaml"


def test_the_reference_fleet_s_digest_names_the_largest_per_resource_and_the_classes_present() -> None:
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    digest = digest_of(fleet, policies)
    most = max(int(n.allocatable.get("amd.com/gpu", "0")) for n in fleet.nodes)
    assert digest["largest"]["amd.com/gpu"] == most > 0
    assert digest["runtimeClasses"] == sorted(fleet.runtime_classes)
    assert digest["deviceClasses"] == sorted(fleet.device_classes)
    assert fingerprint(digest) == fingerprint(digest_of(load_snapshot(FLEET), load_policies(SHIPPED)))


def test_no_verdict_without_a_gpu_of_the_vendor_or_with_a_pool_of_unknown_gpus() -> None:
    policies, fleet = load_policies(SHIPPED), load_snapshot(FLEET)
    assert digest_of(Inventory(), policies)["largest"] == {}  # scaling from zero: nothing is refused
    unread = dataclasses.replace(fleet, unread=frozenset({"nodepools"}))
    assert digest_of(unread, policies)["largest"] == {}


def test_gpugate_pools_is_valid_small_and_refuses_only_what_the_webhooks_skip() -> None:
    policies = load_policies(SHIPPED)
    digest = digest_of(load_snapshot(FLEET), policies)
    objects = compile_pools(compile_policies(policies), policies, digest)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ValidatingAdmissionPolicy", NAME),
        ("ValidatingAdmissionPolicyBinding", NAME),
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    vap, binding = objects
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert vap["metadata"]["annotations"][DIGEST_ANNOTATION] == fingerprint(digest)
    names = [v["name"] for v in vap["spec"]["variables"]]
    assert "claimsFormed" in names and names[-2:] == ["largest", "gpus"]
    for validation in vap["spec"]["validations"]:
        # Only enforce-mode policies, and only pods the narrowed webhooks skip.
        assert validation["expression"].startswith(
            '!(variables.policy in ["default", "serving"]) || !variables.claimsFormed'
        )
    assert '"amd.com/gpu": ' in vap["spec"]["variables"][-2]["expression"]
