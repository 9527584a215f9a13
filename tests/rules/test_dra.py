"""DRA-native semantics under the shipped policies: DRA-backed extended resources, claims resolved to their
DeviceClass and driver, admin-access observers, DRA classes and the per-stack runtime class."""

from __future__ import annotations

import pytest

from tests.support import REPO, apply, container, pod, request
from webhook.admission import Environment, mutate, validate
from webhook.inventory.model import ClaimRequest, ClaimSpec, Inventory
from webhook.inventory.snapshot import load_snapshot
from webhook.pods.gpus import gpu_use
from webhook.policy.files import load_policies

FLEET = load_policies(REPO / "policies")
DEFAULT = next(p for p in FLEET.policies if p.name == "default")
SNAPSHOT = load_snapshot(REPO / "policies" / "examples" / "fleet" / "fleet.yaml")
NVIDIA_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TEMPLATE = "ResourceClaimTemplate"


def claims(**by_name: tuple[str, ...] | ClaimRequest):
    """A claim lookup: template name -> its request (a ClaimRequest, or DeviceClass names)."""
    known = {
        name: ClaimSpec(TEMPLATE, "default", name, (r if isinstance(r, ClaimRequest) else ClaimRequest(r),))
        for name, r in by_name.items()
    }
    return lambda kind, namespace, name: known.get(name) if kind == TEMPLATE and namespace == "default" else None


def decide(obj, *, fleet: Inventory | None = SNAPSHOT, lookup=None):
    env = Environment(policies=FLEET, fleet=lambda: fleet, claims=lookup)
    decision = mutate(request(obj), env)
    assert decision.allowed, decision.message
    result = apply(obj, decision.patch)
    return result, validate(request(result), env)


def claiming(template: str, **kw):
    return pod(container(), resourceClaims=[{"name": "c", "resourceClaimTemplateName": template}], **kw)


def test_a_gpu_claim_is_an_nvidia_gpu_pod_with_its_toleration_and_no_runtime_class():
    result, verdict = decide(claiming("one-gpu"), lookup=claims(**{"one-gpu": ("gpu.nvidia.com",)}))
    assert verdict.allowed, verdict.message
    assert result["spec"]["tolerations"] == [NVIDIA_TOLERATION]
    assert "runtimeClassName" not in result["spec"] and "nodeSelector" not in result["spec"]
    assert result["metadata"]["labels"]["gpugate.io/team"] == "unassigned"


def test_a_cpu_claim_is_no_gpu_and_may_not_tolerate_the_gpu_taint():
    obj = claiming("cpus", tolerations=[NVIDIA_TOLERATION])
    _, verdict = decide(obj, lookup=claims(cpus=("dra.cpu",)))
    assert not verdict.allowed
    assert "requests no GPU but tolerates the GPU node taint" in verdict.message
    # without the toleration it is just a CPU pod: nothing injected, not labelled as a GPU pod
    result, verdict = decide(claiming("cpus"), lookup=claims(cpus=("dra.cpu",)))
    assert verdict.allowed and "labels" not in result["metadata"]


def test_an_unresolvable_claim_stays_a_gpu_holder_never_a_refusal():
    obj = claiming("nowhere", tolerations=[NVIDIA_TOLERATION])
    assert decide(obj, lookup=claims())[1].allowed
    assert decide(obj, fleet=None, lookup=None)[1].allowed


def test_without_an_inventory_a_class_is_known_by_name_only():
    # No inventory: dra.cpu's driver is unknown, so the claim is unresolved (a holder); gpu.nvidia.com is
    # known by name from the built-in NVIDIA profile.
    use = gpu_use({}, claiming("cpus")["spec"], DEFAULT, namespace="default", claims=claims(cpus=("dra.cpu",)))
    assert use.holders == ("spec.resourceClaims[0]",) and use.devices == ()
    use = gpu_use({}, claiming("g")["spec"], DEFAULT, namespace="default", claims=claims(g=("gpu.nvidia.com",)))
    assert [d.name for d in use.devices] == ["nvidia"] and use.device_classes == ("gpu.nvidia.com",)


def test_admin_access_claims_observe_gpus_and_hold_none():
    monitor = ClaimRequest(("gpu.nvidia.com",), None, admin_access=True)
    obj = claiming("dcgm", tolerations=[NVIDIA_TOLERATION])
    result, verdict = decide(obj, lookup=claims(dcgm=monitor))
    assert verdict.allowed, verdict.message
    assert "labels" not in result["metadata"]  # not attributed as a GPU holder
    use = gpu_use({}, obj["spec"], DEFAULT, namespace="default", inventory=SNAPSHOT, claims=claims(dcgm=monitor))
    assert use.observer and not use.holds_gpu


def test_a_custom_device_class_on_a_gpu_driver_is_a_gpu_class():
    fleet = Inventory.of(
        [
            {
                "kind": "DeviceClass",
                "metadata": {"name": "h200.example.com"},
                "spec": {
                    "extendedResourceName": "example.com/h200",
                    "selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}],
                },
            }
        ]
    )
    use = gpu_use(
        {}, claiming("x")["spec"], DEFAULT, namespace="default", inventory=fleet, claims=claims(x=("h200.example.com",))
    )
    assert [d.name for d in use.devices] == ["nvidia"]
    spec = pod(container(limits={"example.com/h200": 2}))["spec"]
    use = gpu_use({}, spec, DEFAULT, inventory=fleet)
    assert use.resources == {"example.com/h200"} == use.dra_resources
    assert gpu_use({}, spec, DEFAULT).resources == frozenset()  # without the inventory: not a GPU


@pytest.mark.parametrize("fleet", [SNAPSHOT, None], ids=["with inventory", "without"])
def test_an_implicit_dra_extended_resource_is_an_nvidia_gpu(fleet):
    obj = pod(
        container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 2}), tolerations=[NVIDIA_TOLERATION]
    )
    result, verdict = decide(obj, fleet=fleet)
    assert verdict.allowed, verdict.message
    assert "runtimeClassName" not in result["spec"] and "nodeSelector" not in result["spec"]
    assert result["metadata"]["labels"]["gpugate.io/team"] == "unassigned"


def test_implicit_dra_gpus_count_against_the_limits():
    obj = pod(container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 12}))
    decision = mutate(request(obj), Environment(policies=FLEET))
    result = apply(obj, decision.patch)
    verdict = validate(request(result), Environment(policies=FLEET))
    assert not verdict.allowed and "more than the 8 per container" in verdict.message


def test_the_h200_dra_class_gets_its_pool_not_a_gfd_selector_or_runtime_class():
    obj = pod(container(limits={"nvidia.com/gpu": 2}), labels={"gpugate.io/model": "h200"})
    result, verdict = decide(obj)
    assert verdict.allowed, verdict.message
    assert result["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5en.48xlarge"}
    assert "runtimeClassName" not in result["spec"]


def test_runtime_class_pods_fractional_only_keeps_it_off_whole_gpu_pods(tmp_path):
    text = (REPO / "policies" / "00-default.yaml").read_text()
    text = text.replace("runtimeClassPods: [device-plugin, fractional]", "runtimeClassPods: [fractional]")
    (tmp_path / "00-default.yaml").write_text(text)
    env = Environment(policies=load_policies(tmp_path))
    whole = pod(container(limits={"nvidia.com/gpu": 1}))
    assert "runtimeClassName" not in apply(whole, mutate(request(whole), env).patch)["spec"]
    fraction = pod(container(), schedulerName="kai-scheduler")
    fraction["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    assert apply(fraction, mutate(request(fraction), env).patch)["spec"]["runtimeClassName"] == "nvidia"


def test_amd_partitions_are_amd_gpus():
    obj = pod(container(limits={"amd.com/cpx_nps4": 1}))
    result, verdict = decide(obj, fleet=None)
    assert verdict.allowed, verdict.message
    assert result["spec"]["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert result["spec"]["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}


VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def test_containers_of_a_dra_gpu_pod_that_reference_no_gpu_claim_see_no_gpu():
    # DRA's driver gives the claim's devices only to the containers that list it under resources.claims; a
    # sidecar, an init container or a container of a CPU claim would still honour a CUDA image's
    # NVIDIA_VISIBLE_DEVICES=all under an NVIDIA runtime, so each gets void.
    obj = pod(
        container("trainer", resources={"claims": [{"name": "gpu"}]}),
        container("pinned", resources={"claims": [{"name": "cpus"}]}),
        container("log-shipper"),
        init=[container("fetch")],
        resourceClaims=[
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            {"name": "cpus", "resourceClaimTemplateName": "cpus"},
        ],
    )
    result, verdict = decide(obj, lookup=claims(**{"one-gpu": ("gpu.nvidia.com",), "cpus": ("dra.cpu",)}))
    assert verdict.allowed, verdict.message
    spec = result["spec"]
    assert VOID not in (spec["containers"][0].get("env") or [])
    assert [c.get("env") for c in spec["containers"][1:]] == [[VOID], [VOID]]
    assert spec["initContainers"][0]["env"] == [VOID]


def test_a_container_of_an_unresolved_claim_keeps_its_devices():
    # A claim gpugate cannot resolve may hold a GPU: the container that references it is left alone.
    obj = pod(
        container("trainer", resources={"claims": [{"name": "c"}]}),
        container("side"),
        resourceClaims=[{"name": "c", "resourceClaimTemplateName": "nowhere"}],
        tolerations=[NVIDIA_TOLERATION],
    )
    result, verdict = decide(obj, fleet=None, lookup=claims())
    assert verdict.allowed, verdict.message
    assert "env" not in result["spec"]["containers"][0]
    assert "env" not in result["spec"]["containers"][1]  # no vendor known: nothing to hide from


def test_a_sidecar_of_a_dra_extended_resource_pod_sees_no_gpu():
    obj = pod(
        container("trainer", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
        container("side"),
        tolerations=[NVIDIA_TOLERATION],
    )
    result, verdict = decide(obj)
    assert verdict.allowed, verdict.message
    assert "env" not in result["spec"]["containers"][0]
    assert result["spec"]["containers"][1]["env"] == [VOID]
