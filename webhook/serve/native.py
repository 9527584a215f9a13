"""``gpugate serve --native-sync``: the native tier kept in step with the policies the server loads.

Off by default. When on, every worker runs :meth:`NativeSync.step` on a timer; one writer at a time, by a
coordination.k8s.io Lease (``gpugate-native-sync`` in gpugate's namespace), applies the objects ``gpugate policy
compile`` would print for the policies in force, by server-side apply under the field manager ``gpugate-serve``,
then narrows the webhook configurations with the condition of the same compilation (it owns that one
matchCondition entry and nothing else of them) and, once the GPU inventory has synced, the validating webhook's
claim route with ``gpu-device-classes`` (``webhook.native.claims``: claims of DeviceClasses that serve no GPU skip
the webhook), in the same apply, so that each apply states every entry it owns. Why a Lease and not only an
idempotent apply: the apply is deterministic (same policies, same bytes), so writers that agree never conflict,
but during a ConfigMap
rollout replicas hold different policies for up to the kubelet's sync period, and two writers with two
versions would each put theirs back at every step. The Lease makes the replica that holds it the only
writer; when it stops renewing, another takes over after ``LEASE_SECONDS``.

What it never does: remove or change the objects in force because of a policy edit that does not load (the
store keeps the last good policies, and only those are compiled), write anything on a cluster whose discovery
does not list ``admissionregistration.k8s.io/v1`` MutatingAdmissionPolicy (the webhook then does everything,
and :attr:`NativeSync.mode` says so in /readyz and the logs), or touch objects other than its own by name.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..inventory.model import Inventory
from ..kube import native as kube
from ..native import claims, pools
from ..native.compiler import (
    NARROWING,
    NARROWING_ANNOTATION,
    OBJECT_SELECTOR_ANNOTATION,
    PREFIX,
    Compiled,
    compile_policies,
    webhook_object_selector,
)
from ..policy.model import PolicySet

log = logging.getLogger("gpugate")

LEASE_NAME = "gpugate-native-sync"
LEASE_SECONDS = 30
#: Seconds between steps; a step that finds nothing changed makes two GETs (discovery, the Lease).
INTERVAL = 5.0
#: The objects are applied again this often even when the policies did not change (a hand edit or a deletion
#: is repaired within it).
RESYNC_SECONDS = 60.0
#: Every name the compiler can emit, each a policy and its binding: what RBAC grants, and what is removed when
#: a compilation no longer has it (no policy left in that mode).
NAMES = tuple(f"{PREFIX}-{n}" for n in ("mutate", "enforce", "warn", "audit", "always"))
ALWAYS = f"{PREFIX}-always"
#: The pod-create webhook of each configuration (deploy/base/webhooks.yaml), which the narrowing is for.
WEBHOOKS = {
    "MutatingWebhookConfiguration": "mutate.gpugate.io",
    "ValidatingWebhookConfiguration": "validate.gpugate.io",
}
#: The validating webhook of every other request, which routes the ResourceClaims: the claim condition's.
CLAIM_WEBHOOK = "validate-objects.gpugate.io"
_ORDER = {
    # The checks first (gpugate-always judges what the narrowed webhooks skip), the webhooks' narrowing last.
    "ValidatingAdmissionPolicy": 0,
    "ValidatingAdmissionPolicyBinding": 1,
    "MutatingAdmissionPolicy": 2,
    "MutatingAdmissionPolicyBinding": 3,
}

NO_API = (
    "webhook only: the cluster does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy "
    "(Kubernetes 1.36+), so gpugate's webhook decides every GPU pod"
)


def in_cluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "gpugate"
    except OSError:
        return os.environ.get("POD_NAMESPACE", "gpugate")


def webhook_narrowing(
    compiled: Compiled,
    configuration: str,
    claim_condition: dict[str, str] | None = None,
    *,
    object_selector: bool = True,
) -> list[dict[str, Any]]:
    """Apply configurations that give each gpugate pod-create webhook the compilation's narrowing matchCondition and
    objectSelector (a pod the native tier formed is not sent), and the validating webhook that routes the claims
    (:data:`CLAIM_WEBHOOK`) ``claim_condition`` when there is one: only those fields (matchConditions is a map keyed
    by name, webhooks one keyed by name; the base sets no objectSelector), so the install's manager keeps every
    other field. An entry or field this manager applied before and no longer states (the claim condition, once no
    DeviceClass is provably not a GPU one; the objectSelector, while a gpugate-always that does not judge what it
    skips is kept) is removed by the apiserver's structured merge."""
    always = next(
        o for o in compiled.objects if o["metadata"]["name"] == f"{PREFIX}-always" and "validations" in o["spec"]
    )
    condition = {"name": NARROWING, "expression": always["metadata"]["annotations"][NARROWING_ANNOTATION]}
    found = webhook_object_selector(compiled) if object_selector else None
    selector = {"objectSelector": found} if found else {}
    out = []
    for kind, hook in WEBHOOKS.items():
        hooks: list[dict[str, Any]] = [{"name": hook, **selector, "matchConditions": [condition]}]
        if kind.startswith("Validating"):
            # Stated with no condition when there is none, so that one this manager applied before is removed
            # (and one an earlier gpugate applied to the pod-create webhook, which routes no claims, goes too).
            hooks.append({"name": CLAIM_WEBHOOK, "matchConditions": [claim_condition] if claim_condition else []})
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": configuration},
                "webhooks": hooks,
            }
        )
    return out


class NativeSync:
    """One worker's part in keeping the native tier in force; :meth:`step` is called on a timer."""

    def __init__(
        self,
        api_client: Any,
        policies: Callable[[], PolicySet],
        *,
        namespace: str,
        identity: str | None = None,
        webhook_configuration: str = "gpugate",
        inventory: Callable[[], Inventory | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_client = api_client
        self.policies = policies
        self.namespace = namespace
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.webhook_configuration = webhook_configuration
        self.inventory = inventory  # the fleet watcher's; None: no pool digest
        self.pool_digest: dict[str, Any] | None = None  # the inventory's last (pools.digest_of)
        self.pools_applied = ""  # the policy digest and pool fingerprint in the gpugate-always applied last
        self.legacy_removed = False  # gpugate-pools (an earlier gpugate's) looked for and removed
        #: The validating webhook's claim condition applied last (None: none, every claim routed).
        self.claim_condition: dict[str, str] | None = None
        self.clock = clock
        self.mode = "starting: the native sync has not run yet"
        self.applied = ""  # the policy digest this worker last applied
        self.applied_at = 0.0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def step(self) -> str:
        """Discover, hold the Lease, apply when the policies changed (or at the resync): the mode after it."""
        with self._lock:
            try:
                mode = self._step()
                self.last_error = None
            except kube.NativeError as err:
                # The objects in force stay as they are; the next step tries again.
                self.last_error = str(err)
                mode = f"native sync failing, the objects in force stay: {err}"
            except Exception as err:  # a compiler bug: the same, and the traceback in the log
                log.exception("native sync: step failed")
                self.last_error = f"{type(err).__name__}: {err}"
                mode = f"native sync failing, the objects in force stay: {self.last_error}"
            if mode != self.mode:
                (log.warning if mode.startswith(("webhook only", "native sync failing")) else log.info)(
                    "admission tier: %s", mode
                )
            self.mode = mode
            return mode

    def _step(self) -> str:
        if not kube.serves_mutating_policies(self.api_client):
            self.applied = ""
            return NO_API
        current = self.policies()
        digest = current.digest[:16] if current.digest else ""
        if not kube.hold_lease(
            self.api_client, namespace=self.namespace, name=LEASE_NAME, identity=self.identity, duration=LEASE_SECONDS
        ):
            self.applied = ""
            return self._in_force(digest, writer="another gpugate worker (the Lease holder)")
        now = self.clock()
        resync = now - self.applied_at >= RESYNC_SECONDS
        inventory = self.inventory() if self.inventory is not None else None
        # Until the inventory has synced, the claim condition in force stays (none at first: every claim routed).
        claim = (
            inventory.memo(("claim-condition", current.digest), lambda: claims.claim_condition(inventory, current))
            if inventory is not None
            else self.claim_condition
        )
        # The pool digest goes into gpugate-always (pools.with_pools). Until the inventory has synced, the digest
        # this worker applied last stays in what it applies (none at first: no feasibility in-process yet).
        if inventory is not None:
            self.pool_digest = pools.digest_of(inventory, current)
        pooled = f"{digest}/{pools.fingerprint(self.pool_digest)}" if self.pool_digest is not None else digest
        compiled: Compiled | None = None
        if digest != self.applied or resync:
            compiled = compile_policies(current)
            self.claim_condition = claim
            keep = self._keep_always(digest)
            self._apply(self._pooled(compiled, current), keep_always=keep)
            self.applied, self.applied_at = digest, now
            self.pools_applied = "" if keep else pooled
        else:
            if claim != self.claim_condition:
                compiled = compile_policies(current)
                self.claim_condition = claim
                self._narrow(compiled, object_selector=self._always_judges_skipped())
                log.info(
                    "native sync: the claim route of %s %s",
                    self.webhook_configuration,
                    f"skips claims of {claims.NAME} {claims.non_gpu_classes(inventory, current)}"
                    if claim is not None and inventory is not None
                    else "routes every claim",
                )
            if pooled != self.pools_applied:
                merged = self._pooled(compiled or compile_policies(current), current)
                kube.apply(self.api_client, next(o for o in merged.objects if o["metadata"]["name"] == ALWAYS))
                self.pools_applied = pooled
        self._remove_legacy_pools()
        return (
            f"native + webhook: the native objects of policies {digest} are in force, kept by this replica"
            + self._pool_note()
        )

    def _keep_always(self, digest: str) -> bool:
        """After a restart, until the inventory has synced: a gpugate-always in force that carries a pool digest for
        these policies stays as it is (written without the digest it would lift the pool checks meanwhile)."""
        if self.inventory is None or self.pool_digest is not None:
            return False
        always = kube.get(self.api_client, "ValidatingAdmissionPolicy", ALWAYS)
        annotations = ((always or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get("gpugate.io/policy-digest") == digest and pools.DIGEST_ANNOTATION in annotations

    def _pooled(self, compiled: Compiled, current: PolicySet) -> Compiled:
        if self.pool_digest is None:
            return compiled
        if not self.pools_applied.endswith("/" + pools.fingerprint(self.pool_digest)):
            log.info(
                "native sync: applying the pool digest %s (%s) in %s",
                pools.fingerprint(self.pool_digest),
                self.pool_digest["largest"],
                ALWAYS,
            )
        return pools.with_pools(compiled, current, self.pool_digest)

    def _pool_note(self) -> str:
        if self.inventory is None:
            return ""
        if self.pool_digest is None:
            return "; pool digest: waiting for the GPU inventory"
        return f"; pool digest {pools.fingerprint(self.pool_digest)}"

    def _remove_legacy_pools(self) -> None:
        """gpugate-pools, where an earlier gpugate wrote the digest: gone once gpugate-always carries it (the
        binding first, so the policy is never bound half-removed)."""
        if self.legacy_removed or self.pool_digest is None:
            return
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            if kube.get(self.api_client, kind, pools.LEGACY_NAME) is not None:
                kube.delete(self.api_client, kind, pools.LEGACY_NAME)
        self.legacy_removed = True

    def _in_force(self, digest: str, *, writer: str) -> str:
        always = kube.get(self.api_client, "ValidatingAdmissionPolicy", ALWAYS)
        if always is None:
            return f"webhook only for now: no native objects applied yet ({writer} holds the native sync Lease)"
        theirs = ((always.get("metadata") or {}).get("annotations") or {}).get("gpugate.io/policy-digest", "")
        if theirs == digest:
            return f"native + webhook: the native objects of policies {digest} are in force, kept by {writer}"
        return f"native + webhook: the native objects in force are of policies {theirs}, this replica has {digest}"

    def _apply(self, compiled: Compiled, *, keep_always: bool = False) -> None:
        objects = sorted(compiled.objects, key=lambda o: _ORDER.get(o["kind"], 9))
        if keep_always:
            kept = ("ValidatingAdmissionPolicy", ALWAYS)
            objects = [o for o in objects if (o["kind"], o["metadata"]["name"]) != kept]
        for obj in objects:
            kube.apply(self.api_client, obj)
        emitted = {o["metadata"]["name"] for o in objects}
        for name in NAMES:
            if name in emitted:
                continue
            # No policy is left in that mode: the binding goes first, so the policy is never bound half-removed.
            kind = "MutatingAdmissionPolicy" if name.endswith("-mutate") else "ValidatingAdmissionPolicy"
            for k in (f"{kind}Binding", kind):
                if kube.get(self.api_client, k, name) is not None:
                    kube.delete(self.api_client, k, name)
        # A gpugate-always kept from an earlier gpugate that does not judge the pods the objectSelector skips: the
        # webhooks keep seeing them until it is rewritten.
        self._narrow(compiled, object_selector=not keep_always or self._always_judges_skipped())
        log.info(
            "native sync: applied %d objects of policies %s and narrowed the webhooks of %s",
            len(objects),
            compiled.objects[0]["metadata"]["annotations"].get("gpugate.io/policy-digest", ""),
            self.webhook_configuration,
        )

    def _narrow(self, compiled: Compiled, *, object_selector: bool = True) -> None:
        for narrowing in webhook_narrowing(
            compiled, self.webhook_configuration, self.claim_condition, object_selector=object_selector
        ):
            kube.apply(self.api_client, narrowing)

    def _always_judges_skipped(self) -> bool:
        always = kube.get(self.api_client, "ValidatingAdmissionPolicy", ALWAYS)
        return OBJECT_SELECTOR_ANNOTATION in (((always or {}).get("metadata") or {}).get("annotations") or {})
