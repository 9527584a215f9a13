"""DRA-native semantics under the shipped policies: DRA-backed extended resources, claims resolved to their
DeviceClass and driver, admin-access observers, DRA classes and the per-stack runtime class."""

from __future__ import annotations

import pytest

from tests.support import REPO, apply, container, pod, request, standard
from webhook.admission import Environment, mutate, validate
from webhook.inventory.model import ClaimOption, ClaimRequest, ClaimSpec, Inventory
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


# ---- DRA devices count toward the limits (the default policy: maxPerPod 8, maxPerContainer 8) ------------


def exactly(count: int, device_class: str = "gpu.nvidia.com", name: str = "gpu") -> ClaimRequest:
    return ClaimRequest((device_class,), count, name=name, options=(ClaimOption(device_class, count),))


def all_of(device_class: str = "gpu.nvidia.com", name: str = "gpu") -> ClaimRequest:
    return ClaimRequest((device_class,), None, name=name, options=(ClaimOption(device_class, None),))


def first_available(*options: tuple[str, int | None], name: str = "gpu") -> ClaimRequest:
    kept = tuple(ClaimOption(c, n, name=f"alt{i}") for i, (c, n) in enumerate(options))
    counts = [n for _, n in options]
    worst = None if None in counts else max(n for n in counts if n is not None)
    return ClaimRequest(tuple(c for c, _ in options), worst, name=name, options=kept)


def test_a_claim_of_sixteen_gpus_is_over_a_limit_of_eight_per_pod():
    _, verdict = decide(claiming("sixteen"), lookup=claims(sixteen=exactly(16)))
    assert not verdict.allowed
    assert (
        "spec.resourceClaims: pod: requests 16 GPUs in all (0 in its containers' resources, 16 through claims: "
        'spec.resourceClaims[0] claim "c" (ResourceClaimTemplate "sixteen") request "gpu": 16 of DeviceClass '
        '"gpu.nvidia.com"), more than the 8 per pod that policy "default" allows; request at most 8 GPUs per pod '
        "(containers' resources and claims' devices together)"
    ) in verdict.message, verdict.message
    assert 'Pod "p" in namespace "default" violates GPU policy "default"' in verdict.message
    assert decide(claiming("eight"), lookup=claims(eight=exactly(8)))[1].allowed


def test_claims_add_to_the_containers_gpus_and_each_claim_counts_once():
    obj = claiming("four", containers=[container("a", limits={"nvidia.com/gpu": "4"})])
    obj["spec"]["resourceClaims"].append({"name": "d", "resourceClaimTemplateName": "four"})
    _, verdict = decide(obj, lookup=claims(four=exactly(4)))
    assert not verdict.allowed and "requests 12 GPUs in all" in verdict.message, verdict.message
    shared = pod(
        container(),
        resourceClaims=[{"name": "c", "resourceClaimName": "shared"}, {"name": "d", "resourceClaimName": "shared"}],
    )
    known = {"shared": ClaimSpec("ResourceClaim", "default", "shared", (exactly(6),))}
    lookup = lambda kind, namespace, name: known.get(name) if kind == "ResourceClaim" else None
    assert decide(shared, lookup=lookup)[1].allowed  # one claim named twice: 6 devices, not 12


def test_all_counts_as_the_largest_node_of_its_device_class():
    """The fleet snapshot's h200 nodes publish 8 gpu.nvidia.com devices each: All is 8, within 8 per pod, and
    with one more GPU in a container it is over."""
    assert decide(claiming("all"), lookup=claims(all=all_of()))[1].allowed
    obj = claiming("all", containers=[container("a", limits={"nvidia.com/gpu": "1"})])
    _, verdict = decide(obj, lookup=claims(all=all_of()))
    assert not verdict.allowed
    assert 'request "gpu": all of DeviceClass "gpu.nvidia.com" (8 on its largest node)' in verdict.message


def test_all_is_refused_where_no_one_can_say_how_many_it_takes():
    _, verdict = decide(claiming("all"), fleet=None, lookup=claims(all=all_of()))
    assert not verdict.allowed
    assert (
        'spec.resourceClaims[0]: pod: spec.resourceClaims[0] claim "c" (ResourceClaimTemplate "all") request "gpu": '
        'all of DeviceClass "gpu.nvidia.com" (how many one node has is unknown), so the GPUs it takes cannot be '
        'counted against the 8 per pod that policy "default" allows; claim a number of devices: exactly.count '
        "(allocationMode ExactCount) of at most 8"
    ) in verdict.message, verdict.message


def test_first_available_counts_its_worst_alternative_and_only_gpu_classes():
    lookup = claims(alts=first_available(("gpu.nvidia.com", 2), ("gpu.nvidia.com", 12)))
    _, verdict = decide(claiming("alts"), lookup=lookup)
    assert not verdict.allowed
    assert (
        'request "gpu": the most of firstAvailable: 2 of DeviceClass "gpu.nvidia.com", 12 of DeviceClass '
        '"gpu.nvidia.com"'
    ) in verdict.message
    # a CPU alternative of 64 devices holds no GPU; nor does a CPU claim of 64
    assert decide(claiming("mixed"), lookup=claims(mixed=first_available(("gpu.nvidia.com", 2), ("dra.cpu", 64))))[
        1
    ].allowed
    cpu_and_gpu = ClaimSpec(TEMPLATE, "default", "both", (exactly(64, "dra.cpu", "cpu"), exactly(2)))
    assert decide(claiming("both"), lookup=lambda *key: cpu_and_gpu)[1].allowed


def test_admin_access_requests_take_no_gpu():
    monitor = ClaimRequest(
        ("gpu.nvidia.com",), None, admin_access=True, name="m", options=(ClaimOption("gpu.nvidia.com", None, True),)
    )
    obj = claiming("dcgm", tolerations=[NVIDIA_TOLERATION])
    assert decide(obj, fleet=None, lookup=claims(dcgm=monitor))[1].allowed


def test_a_container_counts_the_claims_it_names():
    """maxPerContainer of 4: a container naming a 6-GPU claim is over; one naming only its 2-GPU request is not."""
    limited = standard(limits={"maxPerContainer": 4})
    spec_claim = ClaimSpec(TEMPLATE, "default", "t", (exactly(6), exactly(2, name="small")))
    obj = pod(
        container("whole", resources={"claims": [{"name": "c"}]}),
        container("part", resources={"claims": [{"name": "c", "request": "small"}]}),
        resourceClaims=[{"name": "c", "resourceClaimTemplateName": "t"}],
    )
    env = Environment(policies=limited, fleet=lambda: SNAPSHOT, claims=lambda *key: spec_claim)
    verdict = validate(request(obj), env)
    assert not verdict.allowed
    assert 'spec.containers[0].resources.claims: container "whole": requests 8 GPUs' in verdict.message
    assert 'container "part"' not in verdict.message, verdict.message
