"""Which runtime classes are GPU runtime classes: by name, and by the handler of the live RuntimeClass. Pure; no I/O.

A RuntimeClass is a name for a CRI runtime handler (``handler``, what the node's containerd or CRI-O runs the pod
with; node.k8s.io/v1 RuntimeClass). By name alone, only the policy's ``gpuRuntimeClasses`` (default: the GPU
Operator's ``nvidia``, ``nvidia-cdi``, ``nvidia-legacy`` and k3s's ``nvidia-experimental``) and each device's
``runtimeClassName`` count; but any RuntimeClass can name the same handler: k3s and RKE2 ship
``nvidia-experimental`` (handler ``nvidia-experimental``), and an operator can create an alias ``my-gpu`` with
``handler: nvidia``. A pod under it runs under the NVIDIA runtime all the same, so with the live inventory (or a
fleet snapshot) a runtime class is a GPU one also when its RuntimeClass's handler is a GPU runtime's: one of
``GPU_RUNTIME_HANDLERS`` (``webhook.policy.vendors``: the handlers of the GPU Operator's and k3s's classes), or
the handler of a RuntimeClass the policy names (a ``gpuRuntimeClasses`` entry ``gpu-sandbox`` with handler
``kata-nvidia`` makes every class of handler ``kata-nvidia`` a GPU one for that policy).

Without an inventory only names count (``gpugate check`` without ``--fleet``, a server whose inventory has not
synced): gpugate never refuses on missing data, and the static lists (the webhooks' ``involves-gpus``, the
backstop) name the same defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..inventory.model import Inventory
from ..policy.model import Policy
from ..policy.vendors import GPU_RUNTIME_HANDLERS


@dataclass(frozen=True)
class GPURuntime:
    """Why a runtime class is a GPU one: ``handler`` is None when the policy names it, else the handler of its
    live RuntimeClass, a GPU runtime's."""

    name: str
    handler: str | None = None


def gpu_handlers(policy: Policy, inventory: Inventory | None) -> frozenset[str]:
    """The handlers of GPU runtimes: the GPU Operator's and k3s's, and those of the live RuntimeClasses the policy
    names as GPU runtime classes."""
    named: frozenset[str] = frozenset()
    if inventory is not None and inventory.runtime_handlers:
        handlers = inventory.runtime_handlers
        named = frozenset(handlers[n] for n in policy.gpu_runtime_classes if handlers.get(n))
    return frozenset(GPU_RUNTIME_HANDLERS) | named


def gpu_runtime(name: str | None, policy: Policy, inventory: Inventory | None) -> GPURuntime | None:
    """The GPU runtime ``name`` is (by the policy's names, or by its live RuntimeClass's handler), or None."""
    if not name:
        return None
    if name in policy.gpu_runtime_classes:
        return GPURuntime(name)
    handler = inventory.runtime_handlers.get(name) if inventory is not None else None
    if handler and handler in gpu_handlers(policy, inventory):
        return GPURuntime(name, handler)
    return None


def by_handler(inventory: Inventory, handlers: tuple[str, ...] = GPU_RUNTIME_HANDLERS) -> list[str]:
    """The live RuntimeClasses whose handler is one of ``handlers``, by name (sorted): what only the inventory can
    tell, for the native tier's pool digest (``webhook.native.pools``)."""
    return sorted(n for n, h in inventory.runtime_handlers.items() if h in handlers)
