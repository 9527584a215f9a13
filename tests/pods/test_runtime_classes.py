"""Which runtime classes are GPU ones (webhook/pods/runtime_classes.py): by the policy's names without an
inventory, and with one by the handler of the live RuntimeClass: a GPU runtime's (the GPU Operator's, k3s's), or
that of a class the policy names. Through the rule: tests/rules/test_runtime_class.py."""

from __future__ import annotations

from tests.support import standard
from webhook.inventory.model import Inventory
from webhook.pods.runtime_classes import GPURuntime, by_handler, gpu_handlers, gpu_runtime
from webhook.policy.vendors import GPU_RUNTIME_HANDLERS

FLEET = Inventory.of(
    {"kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}
    for name, handler in {
        "nvidia": "nvidia",
        "my-gpu": "nvidia",
        "k3s-gpu": "nvidia-experimental",
        "sandbox": "kata-nvidia",
        "sandbox-2": "kata-nvidia",
        "crun": "crun",
        "no-handler": "",
    }.items()
)
[POLICY] = standard().policies
[SANDBOXED] = standard(gpuRuntimeClasses=["sandbox"]).policies


def test_by_name_without_an_inventory_and_by_handler_with_one() -> None:
    assert gpu_runtime("nvidia-cdi", POLICY, None) == GPURuntime("nvidia-cdi")  # a default name
    assert gpu_runtime("my-gpu", POLICY, None) is None  # the handler is unknown: never a refusal on missing data
    assert gpu_runtime("my-gpu", POLICY, FLEET) == GPURuntime("my-gpu", "nvidia")
    assert gpu_runtime("k3s-gpu", POLICY, FLEET) == GPURuntime("k3s-gpu", "nvidia-experimental")
    for name in ("crun", "no-handler", "not-there", "", None):
        assert gpu_runtime(name, POLICY, FLEET) is None, name


def test_a_policy_s_named_class_lends_its_handler_to_its_aliases() -> None:
    assert gpu_handlers(SANDBOXED, FLEET) == {*GPU_RUNTIME_HANDLERS, "kata-nvidia"}
    assert gpu_runtime("sandbox-2", SANDBOXED, FLEET) == GPURuntime("sandbox-2", "kata-nvidia")
    assert gpu_runtime("sandbox-2", POLICY, FLEET) is None
    assert gpu_handlers(SANDBOXED, None) == set(GPU_RUNTIME_HANDLERS)


def test_the_classes_found_by_handler_for_the_pool_digest() -> None:
    assert by_handler(FLEET) == ["k3s-gpu", "my-gpu", "nvidia"]
    assert by_handler(Inventory()) == []
