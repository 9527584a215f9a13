"""Claim narrowing for ``gpugate serve --native-sync``: the validating webhook's claim route, narrowed by the live
DeviceClasses. No I/O.

The static deploy sends the validating webhook every ResourceClaim and ResourceClaimTemplate with device requests
(deploy/base/webhooks.yaml, ``involves-gpus``): which DeviceClass serves GPUs is known from the inventory only.
A claim is judged for its GPU requests alone (``webhook.admission.claims``: only GPU DeviceClasses count, against
the limits), so one whose every request names a DeviceClass that is provably not a GPU class, a CPU claim of
``dra.cpu`` (kubernetes-sigs/dra-driver-cpu) or a NIC's, is always admitted: the webhook call is only latency and
a dependency (``failurePolicy: Fail``). With the inventory synced, the sync adds to the validating webhook that routes
them (``validate-objects.gpugate.io``, not the pod-create one) the
matchCondition ``gpu-device-classes`` (:data:`NAME`), false for exactly those claims, so they skip the webhook.

Provably not a GPU class: the live DeviceClass exists and names drivers (its CEL selectors'
``device.driver == '...'``), none of them the DRA driver of any device profile of any policy (nor of the built-in
ones), and no profile knows the class's name as a GPU class (``webhook.pods.claims.vendor_of_class`` answers "known,
no vendor" for every policy). A class the inventory lacks, one without a driver in its selectors, or a request
naming no class keeps its claim routed: gpugate never lets through what it cannot tell. Every alternative of a
``firstAvailable`` request counts (the scheduler may pick any). A DeviceClass changed or created later is seen at
the sync's next step (``webhook.serve.native.INTERVAL``); until then the condition in force is the last one.
"""

from __future__ import annotations

from ..inventory.model import Inventory
from ..pods.claims import vendor_of_class
from ..policy.model import BUILTIN, PolicySet
from .cel import literal

NAME = "gpu-device-classes"


def non_gpu_classes(inventory: Inventory, policies: PolicySet) -> list[str]:
    """The live DeviceClasses that serve no GPU under any policy (sorted names)."""
    every = (*policies.policies, BUILTIN)
    out = []
    for name in sorted(inventory.device_classes):
        verdicts = [vendor_of_class(name, p, inventory) for p in every]
        if all(v.known and v.device is None for v in verdicts):
            out.append(name)
    return out


def claim_condition(inventory: Inventory, policies: PolicySet) -> dict[str, str] | None:
    """The matchCondition that lets claims of non-GPU DeviceClasses skip the validating webhook, or None when the
    cluster has no such class (every claim stays routed, as in the static deploy).

    It reads only ``request``, ``object`` and ``oldObject`` (a webhook's matchConditions have nothing else): true
    for whatever is not a resource.k8s.io object, and for a claim (or claim template) of which some request, in
    the new object or the old one, names a class not in the list, or names none. The webhook receives v1 claims
    (``matchPolicy: Equivalent`` converts the beta versions); a request's class is in ``exactly`` or in each of
    its ``firstAvailable`` alternatives (resource.k8s.io/v1 DeviceRequest), and ``deviceClassName`` on the
    request itself is v1beta1's, read too."""
    names = non_gpu_classes(inventory, policies)
    if not names:
        return None
    classes = (
        "(has(r.exactly) && has(r.exactly.deviceClassName) ? [r.exactly.deviceClassName] : []) + "
        "(has(r.deviceClassName) ? [r.deviceClassName] : []) + "
        "(has(r.firstAvailable) ? r.firstAvailable.map(s, has(s.deviceClassName) ? s.deviceClassName : '') : [])"
    )
    expression = (
        "!has(request.resource) || request.resource.group != 'resource.k8s.io' || "
        "[object, oldObject].exists(o, o != null && has(o.spec) && ["
        "has(o.spec.devices) ? o.spec.devices : {}, "
        "has(o.spec.spec) && has(o.spec.spec.devices) ? o.spec.spec.devices : {}"
        "].exists(d, has(d.requests) && d.requests.exists(r, "
        f"[{classes}].exists(names, size(names) == 0 || names.exists(n, !(n in {literal(names)}))))))"
    )
    return {"name": NAME, "expression": expression}
