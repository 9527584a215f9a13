"""The report's figures from dcgm-exporter and kube-state-metrics series, integrated step by step (pure: no I/O).

Every evaluation time ``t`` of a range query stands for the interval ``(t - step, t]``. At each step the
GPUs a pod holds are joined to the pod's attribution labels *at that step*, so a pod that ended or was
renamed mid-window is billed for the steps it held GPUs, not for the window. The window arrives in chunks
of steps (:meth:`Integrator.add`; :mod:`.chunk` decodes one); only sums per group, workload and bucket outlive
a chunk (:mod:`.totals`), so memory is bounded by groups and one chunk, not by series x steps. docs/report.md
explains each rule and its source.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace

from .accounting import (
    MIG_PREFIX,
    SHARED,
    SOURCE_DEV,
    SOURCE_PROF,
    WHOLE,
    Accumulator,
    Bucket,
    Prices,
    Row,
    Unit,
    Workload,
    mig_fraction,
    mig_profile_of,
    model_memory_mib,
    sanitize,
    split_by_use,
)
from .chunk import Chunk, Claim, DeviceSeries, StepDevices
from .model import (
    ATTRIBUTION_KEYS,
    BUCKETS,
    DEFAULT_THRESHOLD,
    GROUPS,
    UNLABELLED,
    DeviceKey,
    Inputs,
    Pod,
    Report,
    dcgm_label,
    ksm_label,
)
from .totals import Totals

__all__ = [
    "ATTRIBUTION_KEYS",
    "BUCKETS",
    "DEFAULT_THRESHOLD",
    "GROUPS",
    "UNLABELLED",
    "Inputs",
    "Integrator",
    "Prices",
    "Report",
    "Row",
    "Workload",
    "compute_report",
    "dcgm_label",
    "ksm_label",
    "mig_fraction",
    "mig_profile_of",
]


class Integrator(Totals):
    """Integrates the window chunk by chunk (:meth:`add`), then :meth:`finish` makes the report."""

    def __init__(
        self,
        *,
        step: float,
        group_by: str = "team",
        threshold: float = DEFAULT_THRESHOLD,
        prices: Prices | None = None,
        top: int = 10,
        bucket: int | None = None,
        keep_timeline: bool = True,
        weight_by_use: bool = False,
    ) -> None:
        super().__init__(
            step=step,
            group_by=group_by,
            threshold=threshold,
            prices=prices,
            top=top,
            bucket=bucket,
            keep_timeline=keep_timeline,
            weight_by_use=weight_by_use,
        )
        self.known_units: dict[Pod, list[Unit]] = {}
        self.time_sliced: set[str] = set()  # GPU UUIDs seen with dcgm-exporter's vgpu label, or requested as shared
        self.mig_nodes: dict[str, tuple[str, str]] = {}
        self.owners: dict[tuple[Pod, int, int], tuple[Accumulator, Workload]] = {}
        self.unit_cache: dict[tuple[str, str, int, str, int, str], Unit] = {}
        self.replicas: dict[str, int] = {}  # node -> time-slicing/MPS replicas per GPU, where GFD says
        self.devices_seen: dict[DeviceKey, DeviceSeries] = {}  # what telemetry last said of a claimed device
        self.sharing = False  # the chunk has KAI, HAMi or DRA claim series: claims are looked at
        # What nodes advertise (kube_node_status_capacity), where the chunk has it: GPUs no telemetry shows
        self.advertising = False
        self.host_models: dict[str, str] = {}
        self.time_sliced_hosts: set[str] = set()
        self.hami_nodes: set[str] = set()  # HAMi's device plugin advertises split counts, not GPUs
        self.step_held: dict[str, float] = defaultdict(float)  # node -> GPUs held this step without telemetry

    # ---- one chunk ---------------------------------------------------------------------------

    def add(self, inputs: Inputs) -> None:
        chunk = Chunk.of(inputs)
        # The owner cache is keyed by the ids of this chunk's label dicts; a freed dict's id can be reused.
        self.owners.clear()
        self.mig_nodes.update(inputs.mig_nodes)
        self.replicas.update(inputs.replicas)
        self.sharing = bool(
            chunk.hami_series
            or chunk.kai_series
            or chunk.kai_multi_series
            or chunk.dra_series
            or chunk.allocated_series
        )
        self.advertising = bool(chunk.capacity_series or chunk.published_series)
        for name, present in (
            ("kube_node_status_capacity", chunk.capacity_series),
            ("gpugate_dra_gpu_device", chunk.published_series),
        ):
            if present:
                self.capacity.sources.add(name)
        # A device is time-sliced for the whole window once any of its series says so, so that a step in
        # which one replica is idle or missing is not mistaken for a whole GPU handed from pod to pod.
        self.time_sliced.update(s.key[0] for s in (*chunk.engine_series, *chunk.util_series) if s.vgpu)
        for i, t in enumerate(chunk.steps):
            self.times.append(t)
            self._step(chunk, i, len(self.times) - 1, t)

    def _step(self, chunk: Chunk, i: int, index: int, t: float) -> None:
        placeholders = chunk.placeholders(i)
        devices = chunk.devices(i, placeholders=placeholders)
        requested, nodes, ksm = chunk.pods(i)
        shown = self._gpus_seen(devices) if self.advertising else {}
        if self.sharing:
            for pod in placeholders:
                requested.pop(pod, None)
            self.devices_seen.update(devices.meta)
            held = {key: {pod for pod, _ in holders} for key, holders in devices.holders.items()}
            self._bill_claims(chunk.claims(i, held), devices, requested, ksm, index, t)
        use = self._split_shared(devices)
        pod_devices: dict[Pod, list[DeviceKey]] = defaultdict(list)
        for key in sorted(devices.holders):
            for pod in sorted({pod for pod, _ in devices.holders[key]}):
                pod_devices[pod].append(key)
        for pod in sorted(requested.keys() | pod_devices.keys()):
            accumulator, workload = self._owner(pod, ksm.get(pod), devices.dcgm_attribution.get(pod))
            self.last_group[pod] = (accumulator.row.group, workload.key)
            units = sorted(requested.get(pod, ()))
            seen = self._bill_devices(
                pod, pod_devices.get(pod, ()), units, devices, accumulator, workload, index, t, use=use
            )
            if seen:
                self.known_units[pod] = seen
            self._bill_missing(pod, units, nodes.get(pod, ""), len(seen), accumulator, workload, index, t)
        self._bill_unallocated(devices, t)
        if self.advertising:
            for node, gpus in chunk.published_gpus(i).items():
                model = next((m for m in gpus.values() if m), "")
                if model and not self.host_models.get(node):
                    self.host_models[node] = model
            self._bill_unreported(chunk.advertised(i), shown, t)
        for accumulator in self.groups.values():
            self.total.merge_step(accumulator)
            accumulator.close_step()
        self.total.close_step()

    def _split_shared(self, devices: StepDevices) -> dict[tuple[DeviceKey, Pod], float]:
        """The time-sliced or MPS GPUs several pods hold in the step (dcgm-exporter's vgpu copies), counted by how
        their held part is split; with --weight-by-use, each pod's part of the device by its use where the step has
        per-pod figures (:func:`split_by_use`), else nothing: the pods are billed by their replicas."""
        out: dict[tuple[DeviceKey, Pod], float] = {}
        for key, holders in devices.holders.items():
            if len(holders) < 2 or not any(vgpu for _, vgpu in holders):
                continue
            pods = {pod for pod, _ in holders}
            if len(pods) < 2:
                continue
            parts = None
            if self.weight_by_use and key in devices.util_device_level:
                device = devices.meta[key]
                # as _bill_devices bills them: each replica 1/R where GFD names R, else the holders split the GPU
                replicas = 0 if device.profile else self.replicas.get(device.host, 0)
                held = len(holders) / max(len(holders), replicas)
                parts = split_by_use({pod: devices.dev_of_pod.get((key, pod)) for pod in pods}, held)
            self.shared_steps["replicas" if parts is None else "use"] += 1
            out.update(((key, pod), part) for pod, part in (parts or {}).items())
        return out

    def _owner(self, pod: Pod, ksm: dict[str, str] | None, dcgm: dict[str, str] | None) -> tuple[Accumulator, Workload]:
        """The group and workload a pod's step is billed to (kube_pod_labels first, then dcgm-exporter's copies)."""
        cache_key = (pod, id(ksm), id(dcgm))
        found = self.owners.get(cache_key)
        if found is None:
            attribution = ksm or dcgm or {}
            team = attribution.get("team") or UNLABELLED
            cost_center = attribution.get("cost_center") or UNLABELLED
            kind = attribution.get("workload_kind") or "Pod"
            name = attribution.get("workload_name") or pod[1]
            key = f"{pod[0]}/{kind}/{name}"
            workload = self.workloads.get(key)
            if workload is None:
                workload = self.workloads[key] = Workload(pod[0], kind, name, team, cost_center)
            group = {
                "team": team,
                "cost-center": cost_center,
                "namespace": pod[0],
                "workload": key,
                "pod": "/".join(pod),
            }[self.group_by]
            if group not in self.groups:
                self.groups[group] = Accumulator(group)
                if self.group_by == "pod":
                    self.groups[group].row.workload = key
            found = self.owners[cache_key] = (self.groups[group], workload)
        return found

    def _bill_claims(
        self,
        claims: Sequence[Claim],
        devices: StepDevices,
        requested: dict[Pod, list[str]],
        ksm: dict[Pod, dict[str, str] | None],
        index: int,
        t: float,
    ) -> None:
        """Devices held by share (KAI, HAMi, a DRA claim no telemetry maps): each pod billed its share, the
        rest of the device unallocated, the device's own utilisation for all of them. Such a device is then
        out of the step's telemetry path, so that nobody (KAI's reservation pod, a copy per pod) bills it twice."""
        by_device: dict[DeviceKey, list[Claim]] = defaultdict(list)
        for claim in claims:
            by_device[claim.uuid, claim.instance].append(claim)
        for key in sorted(by_device):
            self._bill_claimed_device(key, by_device[key], devices, requested, ksm, index, t)

    def _bill_claimed_device(
        self,
        key: DeviceKey,
        mine: Sequence[Claim],
        devices: StepDevices,
        requested: dict[Pod, list[str]],
        ksm: dict[Pod, dict[str, str] | None],
        index: int,
        t: float,
    ) -> None:
        """One device held by share: each claim billed its share, the rest unallocated."""
        reported = key in devices.meta
        seen = devices.meta.get(key) or self.devices_seen.get(key)
        model = seen.model if seen else mine[0].model
        host = seen.host if seen else mine[0].node
        profile = seen.profile if seen else mine[0].profile
        fraction = mig_fraction(profile, model=model)[0] if profile else 1.0
        shares = [self._claim_share(claim, model=model, profile=profile) for claim in mine]
        total = sum(shares)
        if total > 1.0 + 1e-9:
            self.overcommitted.add(key[0])
        scale = 1.0 / total if total > 1.0 else 1.0
        utilisation, source = devices.prof.get(key), SOURCE_PROF
        if utilisation is None:
            utilisation, source = devices.dev.get(key), SOURCE_DEV
        kind = "dra" if mine[0].mode == "dra" else "fraction"
        price = self.prices.device(model=model, profile=profile, fraction=fraction, node=host) if self.prices else None
        for claim, share in zip(mine, shares, strict=True):
            accumulator, workload = self._owner(claim.pod, ksm.get(claim.pod), devices.dcgm_attribution.get(claim.pod))
            self.last_group[claim.pod] = (accumulator.row.group, workload.key)
            _use_unit(requested.get(claim.pod))
            unit = Unit(
                kind=kind,
                share=fraction * share * scale,
                price=price,
                price_share=share * scale,
                model=model,
                fraction=fraction,
            )
            measured = (utilisation, source)
            self._bill_share(
                unit, claim.pod, key, accumulator, workload, index=index, t=t, measured=measured, part=claim.shared
            )
        rest = max(0.0, 1.0 - total)
        if rest > 1e-9:
            cost = None if price is None else price * rest
            self._unallocated(model=model, resource=kind, share=fraction * rest, price=cost, t=t)
        devices.meta.pop(key, None)
        devices.holders.pop(key, None)
        if self.advertising and host:
            if not reported:  # held, so advertised by its node, but not in the step's telemetry
                self.step_held[host] += fraction
            if any(claim.mode == "hami" for claim in mine):
                self.hami_nodes.add(host)

    def _bill_share(
        self,
        unit: Unit,
        pod: Pod,
        key: DeviceKey,
        accumulator: Accumulator,
        workload: Workload,
        *,
        index: int,
        t: float,
        measured: tuple[float | None, str],
        part: bool = False,
    ) -> None:
        """One pod's share of a shared device in one step, judged by the device's utilisation. ``part``: a DRA
        claim's share of a device other claims share too, counted in the peak as the fraction it is."""
        utilisation, source = measured
        fraction = unit.kind == "fraction" or part
        held: Hashable = (pod, key, unit.share) if fraction else key
        self._account(
            unit,
            accumulator,
            workload,
            held=held,
            index=index,
            t=t,
            utilisation=utilisation,
            source=source,
            missing=utilisation is None,
            peak="fraction" if fraction else None,
        )
        if utilisation is not None:
            workload.samples += 1

    def _claim_share(self, claim: Claim, *, model: str, profile: str) -> float:
        """A claim's share of its device; KAI's gpu-memory (MiB) over the device's framebuffer by its name."""
        if claim.share is not None:
            return claim.share
        memory = model_memory_mib(model, profile)
        if not memory or claim.memory_mib is None:
            self.unknown_memory.add(model or "(no modelName)")
            return 1.0
        return min(1.0, claim.memory_mib / memory)

    def _unit(self, *, model: str, profile: str, sharers: int, kind: str, replicas: int = 1, node: str = "") -> Unit:
        """One device's unit as a pod holding ``replicas`` of its ``sharers`` shares is billed."""
        node = node if self.prices is not None and node in self.prices.per_node else ""
        cache_key = (model, profile, sharers, kind, replicas, node)
        unit = self.unit_cache.get(cache_key)
        if unit is None:
            fraction, known = mig_fraction(profile, model=model) if profile else (1.0, True)
            if not known:
                self.unknown_models.add(model or "(no modelName)")
            price = (
                self.prices.device(model=model, profile=profile, fraction=fraction, node=node) if self.prices else None
            )
            # A device is counted once: the replicas of a time-sliced GPU split its hours evenly.
            unit = self.unit_cache[cache_key] = Unit(
                kind=kind,
                share=fraction * replicas / sharers,
                price=price,
                price_share=replicas / sharers,
                model=model,
                fraction=fraction,
            )
        return unit

    def _bill_devices(
        self,
        pod: Pod,
        keys: Sequence[DeviceKey],
        units: list[str],
        devices: StepDevices,
        accumulator: Accumulator,
        workload: Workload,
        index: int,
        t: float,
        *,
        use: Mapping[tuple[DeviceKey, Pod], float],
    ) -> list[Unit]:
        """Bill the devices telemetry shows the pod holding; each uses up the requested units it stands for.
        ``use``: a time-sliced GPU's part of the pod by its use (--weight-by-use), in place of its replicas'."""
        seen: list[Unit] = []
        for key in keys:
            device = devices.meta[key]
            holders = devices.holders[key]
            replicas = sum(1 for holder, _ in holders if holder == pod)
            kind = self._use_requests(key, device, len(holders), replicas, units, any(v for _, v in holders))
            # Several pods on one device in one step of a GPU never seen time-sliced is a hand-over (one pod
            # ended, the next started): the hours are split, but the GPU is not a shared one.
            unit = self._unit(
                model=device.model,
                profile=device.profile,
                # each replica is 1/R of the GPU where GFD names R; else the hour is split between the holders
                sharers=max(len(holders), self.replicas.get(device.host, 0) if kind == "shared" else 0),
                kind=kind,
                replicas=replicas,
                node=device.host,
            )
            seen.extend([unit] * replicas)
            part = use.get((key, pod))
            billed = unit if part is None else replace(unit, share=unit.fraction * part, price_share=part)
            own = kind != "shared" and len(holders) > 1
            utilisation = devices.prof_of_pod.get((key, pod)) if own else devices.prof.get(key)
            source = SOURCE_PROF
            if utilisation is None:
                utilisation = devices.dev_of_pod.get((key, pod)) if own else devices.dev.get(key)
                source = SOURCE_DEV
            held: Hashable = (pod, key) if kind == "shared" else key
            for replica in range(1, replicas if kind == "shared" else 1):  # each replica a pod holds counts
                accumulator.counts[kind].add((pod, key, replica))
            self._account(
                billed, accumulator, workload, held=held, index=index, t=t, utilisation=utilisation, source=source
            )
            if utilisation is not None:
                workload.samples += 1
        return seen

    def _use_requests(
        self, key: DeviceKey, device: DeviceSeries, holders: int, replicas: int, units: list[str], vgpu: bool
    ) -> str:
        """The requested units a device's replicas held by the pod stand for, used up; the kind it is billed as."""
        time_sliced = key[0] in self.time_sliced or vgpu
        kind = device.profile or ("shared" if time_sliced else "dra" if device.dra else "whole")
        # mixed strategy names the profile; single strategy requests it as nvidia.com/gpu
        wanted = (MIG_PREFIX + sanitize(device.profile), WHOLE) if device.profile else (WHOLE, SHARED)
        if not device.profile and (time_sliced or holders > 1):
            wanted = (SHARED, WHOLE)
        for _ in range(replicas):
            for resource in wanted:
                if resource in units:
                    units.remove(resource)
                    if resource == SHARED:
                        kind = "shared"
                        self.time_sliced.add(key[0])
                    self.capacity.requested_as.setdefault((device.model, kind), resource)
                    break
        return kind

    def _bill_missing(
        self,
        pod: Pod,
        units: list[str],
        node: str,
        seen: int,
        accumulator: Accumulator,
        workload: Workload,
        index: int,
        t: float,
    ) -> None:
        """Requested units no telemetry accounts for: allocated, but neither busy nor idle. What the pod's
        devices were when last seen says what they are; else the node's MIG instances (single strategy: a slice
        is requested as nvidia.com/gpu, never a whole GPU); else the resource name."""
        remembered = self.known_units.get(pod, [])[seen:]
        for n, resource in enumerate(units):
            if n < len(remembered):
                unit = remembered[n]
            elif resource.startswith(MIG_PREFIX):
                model = self.mig_nodes.get(node, ("", ""))[0]
                unit = self._unit(
                    model=model, profile=mig_profile_of(resource), sharers=1, kind=mig_profile_of(resource)
                )
            elif resource == WHOLE and node in self.mig_nodes:
                model, profile = self.mig_nodes[node]
                unit = self._unit(model=model, profile=profile, sharers=1, kind=profile, node=node)
            else:
                kind = "shared" if resource == SHARED else "whole"
                # A replica of a node whose GFD names its replicas per GPU is that share of a GPU.
                share = 1.0 / self.replicas[node] if kind == "shared" and self.replicas.get(node) else 1.0
                price = self.prices.unknown(fraction=1.0, node=node) if self.prices else None
                unit = Unit(kind=kind, share=share, price=price, price_share=share)
            self._account(
                unit, accumulator, workload, held=(pod, resource, n), index=index, t=t, utilisation=None, missing=True
            )
            if self.advertising and node:
                self.step_held[node] += unit.share

    def _bill_unallocated(self, devices: StepDevices, t: float) -> None:
        """Devices telemetry shows that no pod holds: capacity nobody was allocated (the bill still has it). A
        whole-GPU series of a GPU whose MIG instances are reported is the parent, not more capacity."""
        partitioned: dict[str, float] = defaultdict(float)  # MIG parent UUID -> share its instances hold
        models: dict[str, tuple[str, str]] = {}
        for key, device in devices.meta.items():
            if key[1]:
                partitioned[key[0]] += mig_fraction(device.profile, model=device.model)[0]
                models[key[0]] = (device.model, device.host)
        for key, device in devices.meta.items():
            holders = devices.holders.get(key)
            replicas = self.replicas.get(device.host, 0)
            if holders and key[0] in self.time_sliced and replicas > len(holders):
                # The replicas of a time-sliced GPU that no pod holds: unallocated, as the bill has them.
                rest = (replicas - len(holders)) / replicas
                price = (
                    self.prices.device(model=device.model, profile="", fraction=rest, node=device.host)
                    if self.prices
                    else None
                )
                self._unallocated(model=device.model, resource="shared", share=rest, price=price, t=t)
            if holders or (not key[1] and key[0] in partitioned):
                continue
            unit = self._unit(
                model=device.model, profile=device.profile, sharers=1, kind=device.profile or "whole", node=device.host
            )
            resource = device.profile or ("shared" if key[0] in self.time_sliced else "whole")
            self._unallocated(model=device.model, resource=resource, share=unit.share, price=unit.price, t=t)
        # The bill has the whole GPU: what no MIG instance was created on is unallocated too.
        for uuid, share in partitioned.items():
            rest = max(0.0, 1.0 - share)
            if rest > 1e-9:
                model, host = models[uuid]
                price = self.prices.device(model=model, profile="", fraction=rest, node=host) if self.prices else None
                self._unallocated(model=model, resource="mig-unpartitioned", share=rest, price=price, t=t)

    def _gpus_seen(self, devices: StepDevices) -> dict[str, float]:
        """Physical GPUs telemetry shows per node in one step (a MIG GPU once, however many instances)."""
        self.step_held.clear()
        by_node: dict[str, set[str]] = defaultdict(set)
        for key, device in devices.meta.items():
            if device.host:
                by_node[device.host].add(key[0])
                self.host_models[device.host] = device.model
                if key[0] in self.time_sliced:
                    self.time_sliced_hosts.add(device.host)
        return {node: float(len(uuids)) for node, uuids in by_node.items()}

    def _bill_unreported(
        self, advertised: dict[str, list[tuple[str, float]]], seen: dict[str, float], t: float
    ) -> None:
        """GPUs a node advertised that neither telemetry showed nor a pod held in the step: unallocated capacity
        (resource ``no-telemetry``), so a GPU whose exporter is down, or a node without one, is still on the bill."""
        for node in sorted(advertised):
            gpus = None if node in self.hami_nodes else self._advertised_gpus(node, advertised[node])
            if gpus is None:
                continue
            rest = gpus - seen.get(node, 0.0) - self.step_held.get(node, 0.0)
            if rest > 1e-6:
                model = self.host_models.get(node, "")
                price = self.prices.device(model=model, profile="", fraction=rest, node=node) if self.prices else None
                self._unallocated(model=model, resource="no-telemetry", share=rest, price=price, t=t)

    def _advertised_gpus(self, node: str, resources: list[tuple[str, float]]) -> float | None:
        """Physical GPUs behind a node's advertised units: a MIG instance is its g/N, a time-sliced or MPS replica
        1/R where GFD names R (else None: they cannot be counted)."""
        replicas = self.replicas.get(node, 0)
        total = 0.0
        for resource, count in resources:
            if resource.startswith(MIG_PREFIX):
                total += count * mig_fraction(mig_profile_of(resource), model=self.host_models.get(node, ""))[0]
            elif resource == WHOLE and node in self.mig_nodes:
                model, profile = self.mig_nodes[node]
                total += count * mig_fraction(profile, model=model)[0]
            elif resource == "dra":  # physical GPUs, counted from the ResourceSlices
                total += count
            elif resource == SHARED or node in self.time_sliced_hosts:
                if not replicas:
                    return None
                total += count / replicas
            else:
                total += count
        return total

    def _unallocated(self, *, model: str, resource: str, share: float, price: float | None, t: float) -> None:
        hours = share * self.step_hours
        cost = None if price is None else price * self.step_hours
        self.capacity.add(
            model=model, resource=resource, hours=hours, cost=cost, allocated=False, units=self.step_hours
        )
        bucket = self._fleet_bucket(t)
        bucket.unallocated_hours += hours
        bucket.unallocated_cost += cost or 0.0

    def _fleet_bucket(self, t: float) -> Bucket:
        size = self.bucket or 0
        start = int((t - self.step) // size * size) if size else 0
        found = self.fleet_buckets.get(start)
        if found is None:
            found = self.fleet_buckets[start] = Bucket(float(start))
        return found

    def _account(
        self,
        unit: Unit,
        accumulator: Accumulator,
        workload: Workload,
        *,
        held: Hashable,
        index: int,
        t: float,
        utilisation: float | None,
        source: str = SOURCE_DEV,
        missing: bool = False,
        peak: str | None = None,
    ) -> None:
        hours = unit.share * self.step_hours
        cost = None if unit.price is None else unit.price * self.step_hours * unit.price_share
        # What was held at once: a device counts once however many pods the step saw on it.
        accumulator.counts[peak or unit.kind].add(held)
        idle = accumulator.add(
            index=index,
            hours=hours,
            utilisation=utilisation,
            source=source,
            threshold=self.threshold,
            cost=cost,
            bucket=self._bucket_start(t),
            timeline=self.keep_timeline,
        )
        workload.account(
            hours=hours, utilisation=utilisation, idle=idle, cost=cost, unit=unit, unit_hours=self.step_hours
        )
        self.capacity.add(
            model=unit.model, resource=unit.kind, hours=hours, cost=cost, allocated=True, units=self.step_hours
        )
        if missing:
            self.capacity.no_telemetry_cost += cost or 0.0
        bucket = self._fleet_bucket(t)
        bucket.allocated_hours += hours
        bucket.cost += cost or 0.0
        if utilisation is None:
            bucket.no_telemetry_hours += hours
        elif idle:
            bucket.idle_hours += hours
            bucket.idle_cost += cost or 0.0
        else:
            bucket.busy_hours += hours

    def _bucket_start(self, t: float) -> int | None:
        return int((t - self.step) // self.bucket * self.bucket) if self.bucket else None


def _use_unit(units: list[str] | None) -> None:
    """A share uses up the pod's nvidia.com/gpu unit for that device (HAMi's pods ask one per device)."""
    for resource in (WHOLE, SHARED):
        if units and resource in units:
            units.remove(resource)
            return


def compute_report(
    inputs: Inputs,
    *,
    group_by: str = "team",
    threshold: float = DEFAULT_THRESHOLD,
    prices: Prices | None = None,
    top: int = 10,
    bucket: int | None = None,
    weight_by_use: bool = False,
) -> Report:
    """The report of one chunk that holds the whole window (tests; the command streams chunks)."""
    integrator = Integrator(
        step=inputs.step,
        group_by=group_by,
        threshold=threshold,
        prices=prices,
        top=top,
        bucket=bucket,
        weight_by_use=weight_by_use,
    )
    integrator.add(inputs)
    integrator.memory(inputs.memory_peak)
    return integrator.finish()
