"""Compile a loaded policy set into native admission objects: one MutatingAdmissionPolicy (JSONPatch), one
ValidatingAdmissionPolicy that denies (the security rules of every mode and the enforce-mode rules), one per
other mode in use (warn, audit), and their bindings. No I/O.

What CEL decides inside the apiserver, and only that: a *plain* GPU pod, one the compiler can form exactly as
``/mutate`` does, gets its runtime class, tolerations, model selector, attribution labels, ``void`` for the
containers without GPUs and the provenance annotations from the MutatingAdmissionPolicy; every GPU pod meets
the policy's limits and shapes (per mode) and the security rules (always Deny). Everything else stays in the
webhook, and :func:`compile_policies` says so, per policy and rule, with the reason (``Outcome``).

Shape, for the apiserver's sake (kubernetes#133383: VAP latency grows with bindings; #122658, #124237:
param objects deny after restarts): the policy data is written into the expressions as CEL literals, keyed by
policy, in a handful of objects whatever the number of policies, and no ``paramKind``. Tolerations, the node
selector and affinity are atomic in the Pod schema (k8s.io/api core/v1 types.go ``listType=atomic``,
``mapType=atomic``), which an ApplyConfiguration may not change (k8s.io/apiserver
pkg/admission/plugin/policy/mutating/patch/smd.go ``validatePatch``), so every mutation is a JSONPatch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..policy.classes import ModelClass
from ..policy.keys import (
    CLAIMS_PENDING_LABEL,
    FORMED_BY_LABEL,
    FORMED_BY_NATIVE,
    GROUP,
    MODEL_LABEL,
    MUTATED_ANNOTATION,
    POLICY_ANNOTATION,
    WORKLOAD_ANNOTATION,
    WORKLOAD_KIND_LABEL,
    WORKLOAD_NAME_LABEL,
)
from ..policy.labels import LabelSelector
from ..policy.model import BUILTIN, Device, Policy, PolicySet
from ..policy.vendors import HAMI_UUID_ANNOTATIONS, IMPLICIT_DRA_PREFIX, KAI_SHARED_CONFIGMAP_ANNOTATION
from .cel import any_glob, literal, look_alike_pattern, selector, string

API_VERSION = "admissionregistration.k8s.io/v1"
PREFIX = "gpugate"
MANAGED = {"app.kubernetes.io/managed-by": "gpugate", "app.kubernetes.io/part-of": "gpugate"}
#: The namespaces the webhooks skip (deploy/base/webhooks.yaml): the native tier skips the same ones.
EXCLUDED_NAMESPACES = ("kube-system", "gpugate")
#: Containers (and, separately, init containers) a plain pod may have, and tolerations one device may add: the
#: bounds of the work (and of the patch) of one pod. The indices a patch needs come from the lists themselves (a
#: two-variable ``transformList``: one evaluation per element, not one per slot of a literal list of indices).
MAX_CONTAINERS = 16
MAX_TOLERATIONS = 8
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: Touch names as the ``gpugate.io/mutated`` annotation lists them (sorted, as ``admission.engine`` writes).
TOUCHES = ("affinity", "containers", "initContainers", "labels", "nodeSelector", "runtimeClassName", "tolerations")
LABEL_VALUE = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
CDI = "k.startsWith('cdi.k8s.io/') || k == 'nvidia.cdi.k8s.io' || k.startsWith('nvidia.cdi.k8s.io/')"


@dataclass(frozen=True)
class Outcome:
    """One line of the explanation: for a policy (or "*" for the directory), a rule, whether the native tier
    decides it, and why, or why not."""

    policy: str
    rule: str
    native: bool
    reason: str

    def line(self) -> str:
        where = "native " if self.native else "webhook"
        return f"{self.policy}: {self.rule}: {where}: {self.reason}"


@dataclass(frozen=True)
class Compiled:
    objects: tuple[dict[str, Any], ...]
    outcomes: tuple[Outcome, ...]


# ------------------------------------------------------------------------------------------ policy data


@dataclass(frozen=True)
class _Entry:
    """What /mutate gives a plain pod of one policy requesting one concrete GPU resource."""

    runtime_class: str
    tolerations: tuple[Mapping[str, Any], ...]
    selector: Mapping[str, str]
    affinity: tuple[str, ...]  # (label, value, value...) when several values: an ``In`` term
    choice_keys: tuple[str, ...]
    void: bool


def _concrete(globs: tuple[str, ...]) -> list[str]:
    return [g for g in globs if not any(ch in g for ch in "*?[")]


def _entry(policy: Policy, device: Device, resource: str, named: ModelClass | None = None) -> tuple[_Entry | None, str]:
    """The entry for ``resource`` of ``device`` under ``policy``, or None and why not: for a pod that names no
    class, or (``named``) for one whose ``gpugate.io/model`` label names that class of the device, which offers
    ``resource`` (``rules.choice``: a named class is the pod's, whatever the defaults and the inventory say)."""
    models = policy.models
    if any(not all(isinstance(v, str) for v in t.values()) for t in device.tolerations):
        return None, f"{device.name}: a toleration with tolerationSeconds (not a string table)"
    if len(device.tolerations) > MAX_TOLERATIONS:
        return None, f"{device.name}: more than {MAX_TOLERATIONS} tolerations"
    choice_keys = tuple(k for k in (device.model_label, *device.model_aliases) if k)
    chosen: ModelClass | None = named
    if models is not None and device.model_label and named is None:
        chosen = models.default_for(device.name, [resource])
        if chosen is None:
            return None, f"{resource}: no single default class offers it (the pod must name one; webhook judges)"
    elif models is not None and not device.model_label:
        return None, f"{device.name}: no modelLabel"
    dra_only = chosen is not None and bool(chosen.device_classes) and not chosen.values
    runtime_class = ""
    if device.runtime_class_name and "device-plugin" in device.runtime_class_pods and not dra_only:
        runtime_class = device.runtime_class_name
    selector_entries: dict[str, str] = {}
    affinity: tuple[str, ...] = ()
    if chosen is not None:
        selector_entries.update(chosen.node_selector)
        choice_keys = tuple(dict.fromkeys((*choice_keys, *chosen.node_selector)))
        if len(chosen.values) == 1 and device.model_label:
            selector_entries.setdefault(device.model_label, chosen.values[0])
        elif len(chosen.values) > 1 and device.model_label:
            affinity = (device.model_label, *chosen.values)
    return (
        _Entry(
            runtime_class=runtime_class,
            tolerations=tuple(device.tolerations),
            selector=selector_entries,
            affinity=affinity,
            choice_keys=choice_keys,
            void=device.name == "nvidia",
        ),
        "",
    )


def _resources(policy: Policy) -> list[str]:
    """The concrete GPU counts a plain pod of ``policy`` may request: its devices' and its classes'."""
    resources: list[str] = []
    for device in policy.devices.values():
        resources += _concrete(device.resources)
    if policy.models is not None:
        for c in policy.models.classes.values():
            resources += _concrete(c.resources)
    return [r for r in dict.fromkeys(resources) if policy.device_of(r) is not None and policy.counts_as_gpu(r)]


def _entries(policy: Policy) -> tuple[dict[str, _Entry], list[str]]:
    """Concrete GPU resource -> entry for a pod that names no class, and the resources left to the webhook with
    why."""
    out: dict[str, _Entry] = {}
    left: list[str] = []
    for resource in _resources(policy):
        owner = policy.device_of(resource)
        assert owner is not None
        entry, why = _entry(policy, owner, resource)
        if entry is None:
            left.append(why)
        else:
            out[resource] = entry
    return out, left


def _named_entries(policy: Policy) -> dict[tuple[str, str], _Entry]:
    """(class, concrete GPU resource) -> entry for a pod whose ``gpugate.io/model`` label names a class of the
    policy that offers the resource on the resource's own device. A class that does not offer what the pod requests,
    or of another vendor, has no entry: the webhook refuses the pod, naming the classes that do."""
    out: dict[tuple[str, str], _Entry] = {}
    if policy.models is None:
        return out
    for resource in _resources(policy):
        owner = policy.device_of(resource)
        assert owner is not None
        for c in policy.models.classes.values():
            if c.device != owner.name or not c.offers([resource]):
                continue
            entry, _ = _entry(policy, owner, resource, named=c)
            if entry is not None:
                out[(c.name, resource)] = entry
    return out


def _owned(policy: Policy) -> str:
    """Every resource that makes a pod a GPU pod of this policy: GPU counts, auxiliary ones, DRA-backed."""
    globs = [g for d in policy.devices.values() for g in (*d.resources, *d.auxiliary_resources)]
    return any_glob([*globs, IMPLICIT_DRA_PREFIX + "*"])


def _counted(policy: Policy) -> str:
    return any_glob([g for d in policy.devices.values() for g in d.resources])


# ------------------------------------------------------------------------------------------------ CEL


# Past this many policies the governing policy is found in two levels rather than a chain of ternaries: CEL
# parsers bound an expression's nesting (cel-go's default recursion limit is 250, and every ternary nests one
# level deeper), so a chain of 1,000 team policies is refused by the apiserver when the object is written.
FLAT_GOVERNING_BEYOND = 16
#: Policies per group of the two-level pick: a group's chain nests no deeper than the single chain above.
GOVERNING_GROUP = 16
#: What a group of the two-level pick yields when none of its policies matches: no policy's name (a Kubernetes
#: object name holds no "/"), and not "" (the built-in checks).
NO_POLICY = "/"
#: The longest expression the two-level pick writes, below cel-go's parser limit of 100,000 code points.
EXPRESSION_SIZE = 90_000


def _first_values(sel: LabelSelector | None) -> tuple[str, tuple[str, ...]] | None:
    """One label a selector requires and the values it allows (a matchLabels entry, or an ``In`` expression), or
    None when it requires no label to hold one of a few values."""
    if sel is None:
        return None
    for key, value in sorted(sel.match_labels.items()):
        return key, (value,)
    for r in sel.match_expressions:
        if r.operator == "In":
            return r.key, tuple(r.values)
    return None


def _necessary(group: list[Policy]) -> str:
    """A condition that holds whenever one of ``group`` matches, cheaper than their conditions: the namespace names
    they match as one list and one pattern, and for those matched by labels alone one required label each, the
    values allowed for a key as one list ("true" when one of them requires nothing of the kind)."""
    names: set[str] = set()
    globs: set[str] = set()
    labels: dict[tuple[str, str], set[str]] = {}
    for p in group:
        if p.match.namespaces:
            for g in p.match.namespaces:
                (names if _concrete((g,)) else globs).add(g)
            continue
        for where, sel in (
            ("variables.nsLabels", p.match.namespace_selector),
            ("variables.labels", p.match.pod_selector),
        ):
            required = _first_values(sel)
            if required is not None:
                labels.setdefault((where, required[0]), set()).update(required[1])
                break
        else:
            return "true"
    parts = []
    if names:
        parts.append(f"request.namespace in {literal(sorted(names))}")
    if globs:
        parts.append(f"request.namespace.matches({string(any_glob(globs))})")
    for (where, key), values in sorted(labels.items()):
        parts.append(f"({string(key)} in {where} && {where}[{string(key)}] in {literal(sorted(values))})")
    return " || ".join(parts)


def _governing(policies: tuple[Policy, ...]) -> list[dict[str, str]]:
    """The ``policy`` variable, the governing policy's name or "" (built-in checks only): the first, highest
    priority first, whose every selector matches (``PolicySet.governing``). Up to ``FLAT_GOVERNING_BEYOND``
    policies as a chain of ternaries. Beyond, in two levels, so that the nesting stays the same for any count and a
    pod pays a few dozen conditions rather than one per policy: ``policyGroups0`` (and on) holds, per group of
    ``GOVERNING_GROUP`` policies in order, a cheap condition that holds whenever one of them matches
    (:func:`_necessary`) and, only when it does, the group's chain (its first match, or ``NO_POLICY``); the
    governing policy is the first group's answer that is a policy, or the last case. A group whose condition fails
    holds no match, and a group's chain takes its first match in order, so the pick is the flat order's."""
    cases: list[tuple[str, str, Policy | None]] = []
    for p in policies:
        terms = []
        if p.match.namespaces:
            terms.append(f"request.namespace.matches({string(any_glob(p.match.namespaces))})")
        if p.match.namespace_selector is not None:
            terms.append(selector(p.match.namespace_selector, "variables.nsLabels"))
        if p.match.pod_selector is not None:
            terms.append(selector(p.match.pod_selector, "variables.labels"))
        if not terms:
            cases.append(("true", p.name, p))
            break
        cases.append((" && ".join(f"({t})" for t in terms), p.name, p))
    else:
        cases.append(("true", "", None))

    def chain(group: list[tuple[str, str, Policy | None]], fallback: str) -> str:
        out = string(fallback)
        for condition, name, _ in reversed(group):
            out = f"({condition}) ? {string(name)} : {out}"
        return out

    *matched, (_, fallback, _) = cases
    if len(cases) <= FLAT_GOVERNING_BEYOND:
        return [{"name": "policy", "expression": chain(matched, fallback)}]
    # The groups in lists of at most EXPRESSION_SIZE code points each (cel-go's parser refuses a longer expression,
    # and the apiserver keeps its default: github.com/google/cel-go v0.26.0 parser/parser.go, 100,000), a later list
    # evaluated only when no group of the earlier ones matched.
    chunks: list[list[str]] = [[]]
    for start in range(0, len(matched), GOVERNING_GROUP):
        group = matched[start : start + GOVERNING_GROUP]
        check = _necessary([p for _, _, p in group if p is not None])
        text = f"({check}) ? ({chain(group, NO_POLICY)}) : {string(NO_POLICY)}"
        if chunks[-1] and sum(len(g) + 2 for g in chunks[-1]) + len(text) > EXPRESSION_SIZE:
            chunks.append([])
        chunks[-1].append(text)
    none = string(NO_POLICY)
    out = string(fallback)
    for i in reversed(range(len(chunks))):
        groups = f"variables.policyGroups{i}"
        out = f"{groups}.exists(n, n != {none}) ? {groups}.filter(n, n != {none})[0] : {out}"
    return [
        *({"name": f"policyGroups{i}", "expression": "[" + ", ".join(c) + "]"} for i, c in enumerate(chunks)),
        {"name": "policy", "expression": out},
    ]


def _device_profiles(policies: tuple[Policy, ...]) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """Policy -> the id of its GPU vocabulary (what counts, what holds a GPU), and id -> [owned pattern, counted
    pattern, holder annotations, their schedulers]: policies with the same devices share one entry."""
    ids: dict[str, str] = {}
    seen: dict[str, str] = {}
    data: dict[str, list[Any]] = {}
    for p in (*policies, BUILTIN):
        row = [_owned(p), _counted(p), sorted(p.holders.annotations), sorted(p.holders.annotation_schedulers)]
        signature = literal(row)
        if signature not in seen:
            seen[signature] = f"d{len(seen)}"
            data[seen[signature]] = row
        ids["" if p is BUILTIN else p.name] = seen[signature]
    return ids, data


def _common_variables(policies: tuple[Policy, ...]) -> list[dict[str, str]]:
    ids, data = _device_profiles(policies)
    owned = {d: row[0] for d, row in data.items()}
    counted = {d: row[1] for d, row in data.items()}
    holder_annotations = {d: row[2] for d, row in data.items()}
    schedulers = {d: row[3] for d, row in data.items()}

    def by_devices(table: Mapping[str, Any], fallback: Any) -> str:
        return f"{literal(dict(table))}[?variables.devices].orValue({literal(fallback)})"

    return [
        {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {"name": "annotations", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
        {
            "name": "nsLabels",
            "expression": "namespaceObject != null && has(namespaceObject.metadata.labels) ? "
            "namespaceObject.metadata.labels : {}",
        },
        {"name": "init", "expression": "has(object.spec.initContainers) ? object.spec.initContainers : []"},
        {"name": "all", "expression": "object.spec.containers + variables.init"},
        {
            "name": "maps",
            "expression": "variables.all.map(c, has(c.resources) && has(c.resources.limits) ? c.resources.limits : {}) "
            "+ variables.all.map(c, has(c.resources) && has(c.resources.requests) ? c.resources.requests : {})",
        },
        *_governing(policies),
        {"name": "devices", "expression": f"{literal(ids)}[?variables.policy].orValue('')"},
        {"name": "owned", "expression": by_devices(owned, "a^")},
        {"name": "counted", "expression": by_devices(counted, "a^")},
        # A GPU pod, as far as resources tell: a positive amount of a GPU count, or an auxiliary resource.
        {
            "name": "holdsByResource",
            "expression": "variables.all.exists(c, has(c.resources) && "
            "[has(c.resources.limits) ? c.resources.limits : {}, "
            "has(c.resources.requests) ? c.resources.requests : {}].exists(m, m.exists(r, "
            "r.matches(variables.owned) && (!r.matches(variables.counted) || "
            "quantity(string(m[r])).isGreaterThan(quantity('0'))))))",
        },
        {"name": "holderAnnotations", "expression": by_devices(holder_annotations, [])},
        {
            "name": "scheduler",
            "expression": "has(object.spec.schedulerName) && object.spec.schedulerName != '' ? "
            "object.spec.schedulerName : 'default-scheduler'",
        },
        {
            "name": "fractionAnnotated",
            "expression": "variables.annotations.exists(k, k in variables.holderAnnotations)",
        },
        # A GPU-sharing scheduler's annotation holds a GPU only under the scheduler that implements it.
        {
            "name": "holdsByAnnotation",
            "expression": "variables.fractionAnnotated && variables.scheduler in " + by_devices(schedulers, []),
        },
        {"name": "holdsGPU", "expression": "variables.holdsByResource || variables.holdsByAnnotation"},
    ]


def _chain(selector: str, cases: Mapping[str, str], fallback: str = "false") -> str:
    """``selector == key ? case : ...`` over sorted keys: each case with constant regex patterns, which the
    apiserver compiles once (a pattern taken from a variable is compiled again at every call)."""
    out = fallback
    for key, case in sorted(cases.items(), reverse=True):
        out = f"({selector} == {string(key)} ? {case} : {out})"
    return out


def _constant_patterns(objects: list[dict[str, Any]], policies: tuple[Policy, ...]) -> None:
    """Write the device vocabulary's patterns into each expression as constants (see ``_chain``)."""
    _, data = _device_profiles(policies)
    owned = _chain("variables.devices", {d: f"r.matches({string(row[0])})" for d, row in data.items()})
    counted = _chain("variables.devices", {d: f"r.matches({string(row[1])})" for d, row in data.items()})

    def rewrite(node: Any) -> Any:
        if isinstance(node, str):
            return node.replace("r.matches(variables.owned)", owned).replace("r.matches(variables.counted)", counted)
        if isinstance(node, list):
            return [rewrite(x) for x in node]
        if isinstance(node, dict):
            return {k: rewrite(v) for k, v in node.items()}
        return node

    for obj in objects:
        obj["spec"] = rewrite(obj["spec"])
        if "variables" in obj["spec"]:
            obj["spec"]["variables"] = [v for v in obj["spec"]["variables"] if v["name"] not in ("owned", "counted")]


def _gpu_sum(container: str) -> str:
    """A container's GPUs: the sum of its GPU counts' limits. Validating admission runs after the apiserver has
    validated the pod (k8s.io/apiserver v0.36.3 pkg/registry/generic/registry/store.go ``Create`` calls
    ``rest.BeforeCreate``, the Pod strategy's validation, before ``createValidation``), which holds every extended
    resource, as GPU counts are, to a whole, non-negative limit, and a request of one to a limit equal to it
    (kubernetes v1.36.3 pkg/apis/core/validation/validation.go ``validateResourceRequirements``: "must be an
    integer", "must be equal to ... limit", "Limit must be set for non overcommitable resources"): so the limits
    hold every count (as ``pods.gpus.gpu_amounts``, limits winning), and a count is read with one quantity parse."""
    limits = f"{container}.resources.limits"
    # One comprehension over the limits (transformList, cel-go's two-variable comprehensions: the apiserver's CEL
    # environment since Kubernetes 1.32, pkg/cel/environment/base.go), not a filter and then a map that looks each
    # key up again.
    return (
        f"(has({container}.resources) && has({limits}) ? {limits}.transformList(r, q, r.matches(variables.counted), "
        "quantity(string(q)).asInteger()).sum() : 0)"
    )


# ------------------------------------------------------------------------------------------ the MAP


def _plain_tables(policies: tuple[Policy, ...]) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {
        "rc": {},
        "tolerations": {},
        "tolerationsNormal": {},
        "selector": {},
        "affinity": {},
        "choice": {},
    }
    void: list[str] = []
    candidates: dict[str, list[str]] = {}
    attribution: dict[str, list[list[str]]] = {}
    shared: dict[str, list[str]] = {}
    holders: dict[str, list[str]] = {}
    look_alike: dict[str, str] = {}
    owned_keys: dict[str, list[str]] = {}  # the label keys gpugate-mutate writes: labelPairs' keys
    # Policies that differ only in what they match share one profile, so a thousand team policies cut from
    # one template cost one set of table entries, not a thousand (the apiserver stores an object in etcd,
    # 1.5 MiB at most by default).
    profiles: dict[str, str] = {}
    seen: dict[str, str] = {}
    for p in policies:
        signature = literal(_profile(p))
        if signature in seen:
            profiles[p.name] = seen[signature]
            continue
        name = seen[signature] = profiles[p.name] = f"p{len(seen)}"
        entries, _ = _entries(p)
        # Keyed by profile, the class the pod's gpugate.io/model label names ("" for none) and the resource.
        rows = {("", r): e for r, e in entries.items()} | _named_entries(p)
        for model, resource in sorted(rows):
            candidates.setdefault(f"{name}|{model}", []).append(resource)
        for (model, resource), e in sorted(rows.items()):
            key = f"{name}|{model}|{resource}"
            tables["rc"][key] = e.runtime_class
            tables["tolerations"][key] = [dict(t) for t in e.tolerations]
            tables["tolerationsNormal"][key] = [
                {
                    "key": str(t.get("key") or ""),
                    "operator": str(t.get("operator") or "Equal"),
                    "value": str(t.get("value") or ""),
                    "effect": str(t.get("effect") or ""),
                }
                for t in e.tolerations
            ]
            tables["selector"][key] = dict(e.selector)
            tables["affinity"][key] = list(e.affinity)
            tables["choice"][key] = list(e.choice_keys)
            if e.void:
                void.append(key)
        attribution[name] = [
            [a.key, "value", a.value, ""]
            if a.value is not None
            else [a.key, "from", a.from_namespace_label or "", a.default]
            for a in p.attribution
        ]
        shared[name] = sorted(p.shared_gpu_containers)
        holders[name] = sorted(
            # HAMi's GPU pinning by UUID takes no model constraint in the webhook: not plain.
            {*p.holders.annotations, KAI_SHARED_CONFIGMAP_ANNOTATION, *HAMI_UUID_ANNOTATIONS.values()}
            | {a for d in p.devices.values() for a in d.choice_annotations}
            | _pinning(p)
        )
        owned = [a.key for a in p.attribution] + ([WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL] if p.attribution else [])
        look_alike[name] = "|".join(look_alike_pattern(k) for k in [*owned, MODEL_LABEL])
        owned_keys[name] = owned
    return {
        **tables,
        "void": void,
        "candidates": candidates,
        "attribution": attribution,
        "shared": shared,
        "holders": holders,
        "lookAlike": look_alike,
        "owned": owned_keys,
        "profiles": profiles,
    }


def _profile(p: Policy) -> dict[str, Any]:
    """Everything of a policy the mutating policy's tables hold: its entries and attribution, not its match."""
    entries, _ = _entries(p)
    return {
        "entries": {r: repr(e) for r, e in sorted(entries.items())},
        "named": {f"{c}|{r}": repr(e) for (c, r), e in sorted(_named_entries(p).items())},
        "attribution": [repr(a) for a in p.attribution],
        "shared": sorted(p.shared_gpu_containers),
        "holders": repr(p.holders),
        "choices": sorted({a for d in p.devices.values() for a in d.choice_annotations} | _pinning(p)),
    }


def _pinning(p: Policy) -> set[str]:
    """HAMi's annotations that pin a pod's GPUs by UUID, for the policy's devices: the pinned GPUs choose the
    hardware (``rules.choice``), so such a pod is not plain and the webhook decides it."""
    return {HAMI_UUID_ANNOTATIONS[d.name] for d in p.devices.values() if d.name in HAMI_UUID_ANNOTATIONS}


#: The value one attribution entry ``s`` of ``variables.attribution`` gives a pod: ``[key, 'value', value, '']`` or
#: ``[key, 'from', namespace label, default]`` (``_plain_tables``).
_ATTRIBUTION_VALUE = (
    "(s[1] == 'value' ? s[2] : (s[2] in variables.nsLabels && variables.nsLabels[s[2]] != '' && "
    f"size(variables.nsLabels[s[2]]) <= 63 && variables.nsLabels[s[2]].matches({string(LABEL_VALUE)}) ? "
    "string(variables.nsLabels[s[2]]) : s[3]))"
)


#: A toleration ``e`` of the pod is the normalized toleration ``n`` a device adds (``variables.tolerationsNormal``).
_SAME_TOLERATION = (
    "(has(e.key) ? e.key : '') == n['key'] && (has(e.operator) && e.operator != '' ? e.operator : 'Equal') == "
    "n['operator'] && (has(e.value) ? e.value : '') == n['value'] && (has(e.effect) ? e.effect : '') == "
    "n['effect'] && !has(e.tolerationSeconds)"
)


def _mutating_variables(policies: tuple[Policy, ...]) -> list[dict[str, str]]:
    t = _plain_tables(policies)

    def at(table: str, fallback: Any) -> str:
        return f"{literal(t[table])}[?variables.key].orValue({literal(fallback)})"

    spec = "object.spec"
    # The workload as two variables, not eight (owner, its kind and name, the pod's own name, the two derivations):
    # every variable costs each activation of each object an entry in its lazy map and, once read, an evaluation of
    # its own (k8s.io/apiserver v0.36.3 pkg/admission/plugin/cel/composition.go ``Variables``, ``Callback``). The
    # owner is the first controller ownerReference, read once per variable inside a one-item list; the pod's own
    # name is its generateName without the last '-' (its name is given after mutating admission), else its name.
    # A Deployment's pod is its ReplicaSet's (named after it plus ``-<pod-template-hash>``), a CronJob's its Job's
    # (plus ``-<schedule time>``), as webhook/pods/objects.py derives them.
    meta = "object.metadata"
    controller = f"{meta}.ownerReferences.filter(r, has(r.controller) && r.controller)"
    own_name = (
        f"(has({meta}.generateName) && {meta}.generateName != '' && {meta}.generateName != '-' ? "
        f"({meta}.generateName.endsWith('-') ? {meta}.generateName.substring(0, size({meta}.generateName) - 1) : "
        f"{meta}.generateName) : (has({meta}.name) ? {meta}.name : ''))"
    )
    template_hash = "variables.labels[?'pod-template-hash'].orValue('')"
    workload = [
        {
            "name": "workloadKind",
            "expression": f"!has({meta}.ownerReferences) ? 'Pod' : [{controller}].map(o, size(o) == 0 ? 'Pod' : "
            f"o[0].kind == 'ReplicaSet' && {template_hash} != '' && o[0].name.endsWith('-' + {template_hash}) ? "
            "'Deployment' : o[0].kind == 'Job' && o[0].name.matches('^.+-[0-9]{8,}$') ? 'CronJob' : o[0].kind)[0]",
        },
        {
            # The kind tells whether the owner's name was derived: it differs from the owner's own kind then.
            "name": "workloadName",
            "expression": f"!has({meta}.ownerReferences) ? {own_name} : [{controller}].map(o, size(o) == 0 ? "
            f"{own_name} : variables.workloadKind == o[0].kind ? o[0].name : variables.workloadKind == 'Deployment' ? "
            f"o[0].name.substring(0, size(o[0].name) - size({template_hash}) - 1) : "
            "o[0].name.substring(0, o[0].name.lastIndexOf('-')))[0]",
        },
    ]
    plain_resource = (
        "size(variables.present) == 1 && variables.maps.all(m, m.all(r, !r.matches(variables.owned) || "
        "r == variables.present[0])) ? variables.present[0] : ''"
    )
    label_ok = f"size(x) <= 63 && x.matches({string(LABEL_VALUE)})"
    plain = " && ".join(
        [
            "variables.policy != ''",
            "variables.resource != ''",
            "request.operation == 'CREATE'",
            f"{spec}.containers.exists(c, has(c.resources) && has(c.resources.limits) && "
            "variables.resource in c.resources.limits)",
            f"(!has({spec}.resourceClaims) || size({spec}.resourceClaims) == 0)",
            f"size({spec}.containers) <= {MAX_CONTAINERS} && size(variables.init) <= {MAX_CONTAINERS}",
            f"!has({spec}.nodeName)",
            f"!variables.annotations.exists(k, k.startsWith({string(GROUP + '/')}) || {CDI} || k in variables.holders)",
            # gpugate.io/claims-pending is /mutate's alone (a pod naming claims is never plain): the webhook removes it.
            f"!({string(CLAIMS_PENDING_LABEL)} in variables.labels)",
            f"!variables.labels.exists(k, k != {string(MODEL_LABEL)} && "
            + _chain(
                "variables.profile", {p: f"k.lowerAscii().matches({string(x)})" for p, x in t["lookAlike"].items()}
            )
            + ")",
            f"(!has({spec}.nodeSelector) || !{spec}.nodeSelector.exists(k, k in variables.choiceKeys))",
            f"(!has({spec}.affinity) || !has({spec}.affinity.nodeAffinity) || (size(variables.affinity) == 0 && "
            f"!has({spec}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)))",
            f"(!has({spec}.runtimeClassName) || variables.rc == '' || {spec}.runtimeClassName == variables.rc)",
            f"variables.all.all(c, (!has(c.env) || !c.env.exists(e, e.name == {string(VISIBLE_DEVICES)})) && "
            "(!has(c.envFrom) || size(c.envFrom) == 0))",
            "variables.workloadName != '' && !variables.workloadName.endsWith('-')",
            "[variables.workloadKind, variables.workloadName].all(x, " + label_ok + ")",
        ]
    )
    tolerations = f"({spec}.tolerations)"
    same = _SAME_TOLERATION
    hidden = (
        "(!has(c.resources) || ![has(c.resources.limits) ? c.resources.limits : {}, "
        "has(c.resources.requests) ? c.resources.requests : {}].exists(m, m.exists(r, r.matches(variables.counted) "
        "&& quantity(string(m[r])).isGreaterThan(quantity('0'))))) && !(c.name in variables.shared) && "
        f"(!has(c.env) || !c.env.exists(e, e.name == {string(VISIBLE_DEVICES)}))"
    )
    attribution_value = _ATTRIBUTION_VALUE
    return [
        {"name": "profile", "expression": f"{literal(t['profiles'])}[?variables.policy].orValue('')"},
        *workload,
        # The class the pod names ("" for none): a named class is the pod's choice, and forms it as /mutate does.
        {"name": "model", "expression": f"variables.labels[?{string(MODEL_LABEL)}].orValue('')"},
        {
            "name": "present",
            "expression": f"{literal(t['candidates'])}[?(variables.profile + '|' + variables.model)].orValue([])"
            ".filter(r, variables.maps.exists(m, r in m))",
        },
        {"name": "resource", "expression": plain_resource},
        {"name": "key", "expression": "variables.profile + '|' + variables.model + '|' + variables.resource"},
        {"name": "shared", "expression": f"{literal(t['shared'])}[?variables.profile].orValue([])"},
        # Every table is looked up once, here: a literal inside a comprehension is built again at each step.
        {"name": "holders", "expression": f"{literal(t['holders'])}[?variables.profile].orValue([])"},
        {"name": "choiceKeys", "expression": at("choice", [])},
        {"name": "rc", "expression": at("rc", "")},
        {"name": "affinity", "expression": at("affinity", [])},
        {"name": "attribution", "expression": f"{literal(t['attribution'])}[?variables.profile].orValue([])"},
        {"name": "plain", "expression": plain},
        {"name": "addRuntimeClass", "expression": f"variables.rc != '' && !has({spec}.runtimeClassName)"},
        {"name": "tolerationsNormal", "expression": at("tolerationsNormal", [])},
        {
            "name": "missingTolerations",
            "expression": f"variables.tolerationsNormal.transformList(i, n, !has({spec}.tolerations) || "
            f"!{tolerations}.exists(e, {same}), i)",
        },
        {"name": "tolerations", "expression": at("tolerations", [])},
        {"name": "selector", "expression": at("selector", {})},
        {
            "name": "selectorKeys",
            "expression": f"variables.selector.filter(k, !has({spec}.nodeSelector) || !(k in {spec}.nodeSelector))",
        },
        {"name": "voids", "expression": f"variables.key in {literal(t['void'])}"},
        {
            "name": "voidContainers",
            "expression": f"variables.voids ? {spec}.containers.transformList(i, c, {hidden}, i) : []",
        },
        {
            "name": "voidInit",
            "expression": f"variables.voids ? variables.init.transformList(i, c, {hidden}, i) : []",
        },
        {
            "name": "labelPairs",
            "expression": "size(variables.attribution) == 0 ? [] : "
            "variables.attribution.map(s, "
            f"[string(s[0]), string({attribution_value})]) + "
            f"[[{string(WORKLOAD_KIND_LABEL)}, string(variables.workloadKind)], "
            f"[{string(WORKLOAD_NAME_LABEL)}, string(variables.workloadName)]]",
        },
        {
            "name": "touched",
            "expression": f"{literal(list(TOUCHES))}.filter(f, "
            "f == 'affinity' ? size(variables.affinity) > 0 : "
            "f == 'containers' ? size(variables.voidContainers) > 0 : "
            "f == 'initContainers' ? size(variables.voidInit) > 0 : "
            "f == 'labels' ? size(variables.labelPairs) > 0 : "
            "f == 'nodeSelector' ? size(variables.selectorKeys) > 0 : "
            "f == 'runtimeClassName' ? variables.addRuntimeClass : "
            "size(variables.missingTolerations) > 0)",
        },
        # A pod this policy formed, seen again on the reinvocation pass after a later mutating webhook (a sidecar
        # injector's) added a container without GPUs: only that container's void is added (as /mutate adds it when
        # it is reinvoked), and the field in gpugate.io/mutated. The pod's policy must be the one it names, and what
        # that annotation lists must be fields gpugate touches (so that the union below keeps them all).
        {
            "name": "reform",
            "expression": "!variables.plain && variables.policy != '' && "
            f"variables.annotations[?{string(POLICY_ANNOTATION)}].orValue('') == variables.policy && "
            f"variables.annotations[?{string(MUTATED_ANNOTATION)}].orValue('').split(',').all(f, "
            f"f in {literal(list(TOUCHES))}) && (size(variables.voidContainers) > 0 || size(variables.voidInit) > 0)",
        },
        # A pod that carries the formed-by label and is not formed as this tier forms one: the label goes (narrow).
        {"name": "unform", "expression": _unformed_condition(policies, variables=True)},
    ]


def _patches() -> str:
    spec = "object.spec"
    void = string(VISIBLE_DEVICES)

    def env(field: str, indices: str, items: str) -> str:
        return (
            f"{indices}.map(i, has({items}[i].env) ? "
            f"JSONPatch{{op: 'add', path: '/spec/{field}/' + string(i) + '/env/-', "
            f"value: {{'name': {void}, 'value': 'void'}}}} : "
            f"JSONPatch{{op: 'add', path: '/spec/{field}/' + string(i) + '/env', "
            f"value: [{{'name': {void}, 'value': 'void'}}]}})"
        )

    affinity = (
        "{'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [{'matchExpressions': "
        "[{'key': dyn(variables.affinity[0]), 'operator': dyn('In'), 'values': dyn(variables.affinity.filter(v, "
        "v != variables.affinity[0]))}]}]}}"
    )
    annotations = (
        f"[[{string(WORKLOAD_ANNOTATION)}, variables.workloadKind + '/' + variables.workloadName]].filter(p, "
        "size(variables.labelPairs) > 0) + "
        f"[[{string(POLICY_ANNOTATION)}, variables.policy], [{string(MUTATED_ANNOTATION)}, "
        "variables.touched.join(',')]]"
    )
    bare_annotations = (
        f"{string(POLICY_ANNOTATION)}: variables.policy, {string(MUTATED_ANNOTATION)}: variables.touched.join(',')"
    )
    whole_annotations = (
        f"{string(WORKLOAD_ANNOTATION)}: variables.workloadKind + '/' + variables.workloadName, {bare_annotations}"
    )
    parts = [
        "(variables.addRuntimeClass ? [JSONPatch{op: 'add', path: '/spec/runtimeClassName', "
        "value: variables.rc}] : [])",
        f"(size(variables.missingTolerations) == 0 ? [] : !has({spec}.tolerations) ? "
        "[JSONPatch{op: 'add', path: '/spec/tolerations', value: variables.missingTolerations.map(i, "
        "variables.tolerations[i])}] : variables.missingTolerations.map(i, JSONPatch{op: 'add', "
        "path: '/spec/tolerations/-', value: variables.tolerations[i]}))",
        # A map the pod does not have yet is added whole, in one operation (each operation is an object the
        # apiserver converts, marshals and applies: patch/json_patch.go ``evaluatePatchExpression``).
        f"(size(variables.selectorKeys) == 0 ? [] : !has({spec}.nodeSelector) ? "
        "[JSONPatch{op: 'add', path: '/spec/nodeSelector', value: variables.selector}] : "
        "variables.selectorKeys.map(k, JSONPatch{op: 'add', path: '/spec/nodeSelector/' + jsonpatch.escapeKey(k), "
        "value: variables.selector[k]}))",
        f"(size(variables.affinity) == 0 ? [] : has({spec}.affinity) ? [JSONPatch{{op: 'add', "
        f"path: '/spec/affinity/nodeAffinity', value: {affinity}}}] : [JSONPatch{{op: 'add', "
        f"path: '/spec/affinity', value: {{'nodeAffinity': {affinity}}}}}])",
        env("containers", "variables.voidContainers", f"{spec}.containers"),
        env("initContainers", "variables.voidInit", "variables.init"),
        "(has(object.metadata.labels) ? [] : [JSONPatch{op: 'add', path: '/metadata/labels', value: {}}])",
        "variables.labelPairs.map(p, JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey(p[0]), "
        "value: p[1]})",
        # What tells the narrowed webhooks' objectSelector that this tier formed the pod (narrow).
        f"[JSONPatch{{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey({string(FORMED_BY_LABEL)}), "
        f"value: {string(FORMED_BY_NATIVE)}}}]",
        "(!has(object.metadata.annotations) ? [JSONPatch{op: 'add', path: '/metadata/annotations', value: "
        f"size(variables.labelPairs) > 0 ? {{{whole_annotations}}} : {{{bare_annotations}}}}}] : "
        f"({annotations}).map(p, JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey(p[0]), "
        "value: p[1]}))",
    ]
    mutated = f"variables.annotations[{string(MUTATED_ANNOTATION)}].split(',')"
    reform = " +\n".join(
        [
            env("containers", "variables.voidContainers", f"{spec}.containers"),
            env("initContainers", "variables.voidInit", "variables.init"),
            f"[JSONPatch{{op: 'replace', path: '/metadata/annotations/' + jsonpatch.escapeKey("
            f"{string(MUTATED_ANNOTATION)}), value: {literal(list(TOUCHES))}.filter(f, f in {mutated} || "
            "(f == 'containers' && size(variables.voidContainers) > 0) || "
            "(f == 'initContainers' && size(variables.voidInit) > 0)).join(',')}]",
        ]
    )
    # A pod that carries the formed-by label and is not formed as this tier forms one (a later webhook changed it,
    # or its author wrote the label) loses it, so the webhooks' objectSelector lets them judge it (narrow).
    unform = (
        "(variables.unform ? [JSONPatch{op: 'remove', path: '/metadata/labels/' + "
        f"jsonpatch.escapeKey({string(FORMED_BY_LABEL)})}}] : [])"
    )
    return (
        f"(variables.reform ? {reform} :\n"
        + "!variables.plain || size(variables.touched) == 0 ? [] : "
        + " +\n".join(parts)
        + f") +\n{unform}"
    )


# ------------------------------------------------------------------------------------------ the VAPs


def _in(policies: list[Policy]) -> str:
    return f"variables.policy in {literal(sorted(p.name for p in policies))}"


def _mode_validations(policies: list[Policy]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Limits and shapes, for the policies of one mode (their bindings give the mode its action), and the
    variables they need beside the common ones."""
    out: list[dict[str, Any]] = []
    extra: list[dict[str, str]] = []
    per_container = {p.name: p.limits.max_per_container for p in policies if p.limits.max_per_container is not None}
    per_pod = {p.name: p.limits.max_per_pod for p in policies if p.limits.max_per_pod is not None}
    if per_container or per_pod:
        # Each container's GPUs, counted once per evaluation and shared by both limits (variables are evaluated
        # lazily, at most once per activation: k8s.io/apiserver pkg/admission/plugin/cel/composition.go).
        extra.append({"name": "appGPUs", "expression": f"object.spec.containers.map(c, {_gpu_sum('c')})"})
        extra.append({"name": "initGPUs", "expression": f"variables.init.map(c, {_gpu_sum('c')})"})
    if per_container:
        extra.append(
            {"name": "maxPerContainer", "expression": f"{literal(per_container)}[?variables.policy].orValue(-1)"}
        )
        table = "variables.maxPerContainer"
        # The message names the first container over the limit from the counts the per-pod limit's message reads
        # too (one count per activation), not by counting each container's GPUs again.
        counts = "(variables.appGPUs + variables.initGPUs)"
        # The message is worked out only for a pod that can hold a container over the limit: no container holds
        # more GPUs than the pod does as the scheduler counts them (podGPUs, which the per-pod limit's message reads
        # anyway), so for any other pod it is '' at once, without the counts' list, filter and error.
        over = f"{table} < 0 || variables.podGPUs <= {table}" if per_pod else f"{table} < 0"
        out.append(
            {
                "expression": f"{table} < 0 || !{counts}.exists(n, n > {table})",
                # indexOf (the Kubernetes list library): the first count over the limit is first at its container.
                "messageExpression": f"{over} ? '' : "
                f"[{counts}].map(g, [g.filter(n, n > {table})[0]].map(n, 'container \"' + "
                "variables.all[g.indexOf(n)].name + '\": requests ' + string(n) + ' GPUs, more than the ' + "
                f"string({table}) + ' per container that policy \"' + variables.policy + '\" allows; request at "
                f"most ' + string({table}) + ', or split the work across pods (gpugate)')[0])[0]",
                "message": "gpugate: a container requests more GPUs than its policy allows per container",
                "reason": "Forbidden",
            }
        )
    if per_pod:
        extra.append({"name": "maxPerPod", "expression": f"{literal(per_pod)}[?variables.policy].orValue(-1)"})
        table = "variables.maxPerPod"

        def sidecar(c: str) -> str:
            return f"has({c}.restartPolicy) && {c}.restartPolicy == 'Always'"

        # Over the init containers themselves, with their indices (transformList), once each.
        app = (
            f"variables.appGPUs.sum() + variables.init.transformList(i, c, {sidecar('c')}, variables.initGPUs[i]).sum()"
        )
        init_peak = (
            f"variables.init.transformList(i, c, !({sidecar('c')}), variables.initGPUs[i] + "
            f"variables.init.transformList(j, d, j < i && {sidecar('d')}, variables.initGPUs[j]).sum())"
        )
        # The pod's GPUs as the scheduler counts them (KEP-753): app containers and sidecars, or the largest
        # init container's with the sidecars started before it.
        # A pod without init containers (most) skips the init containers' arithmetic.
        extra.append(
            {
                "name": "podGPUs",
                "expression": f"size(variables.init) == 0 ? variables.appGPUs.sum() : ([{app}] + {init_peak}).max()",
            }
        )
        out.append(
            {
                "expression": f"{table} < 0 || variables.podGPUs <= {table}",
                # Built only for a pod over the limit: the count is the message's own, its comparison costs nothing
                # more (the apiserver evaluates every message of every pod: _validating).
                "messageExpression": f"{table} >= 0 && variables.podGPUs > {table} ? "
                "'spec.containers: pod: requests ' + string(variables.podGPUs) + ' GPUs in all, "
                f"more than the ' + string({table}) + ' per pod that policy \"' + variables.policy + "
                f"'\" allows; request at most ' + string({table}) + ' GPUs per pod (gpugate)' : ''",
                "message": "gpugate: the pod requests more GPUs than its policy allows per pod",
                "reason": "Forbidden",
            }
        )
    names = _in(policies)
    # The limits hold every GPU count (see _gpu_sum).
    zero = (
        "variables.all.exists(c, has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, "
        "r.matches(variables.counted) && !quantity(string(c.resources.limits[r])).isGreaterThan(quantity('0'))))"
    )
    out.append(
        {
            "expression": f"!({names}) || !({zero})",
            "messageExpression": "'a container requests 0 of a GPU resource; remove it: a zero GPU request still "
            "attracts GPU-node tolerations (policy \"' + variables.policy + '\", gpugate)'",
            "message": "gpugate: a container requests 0 GPUs",
            "reason": "Forbidden",
        }
    )
    positive = "quantity(string(m[r])).isGreaterThan(quantity('0'))"
    whole = f"m.exists(r, r in ['nvidia.com/gpu', 'nvidia.com/gpu.shared'] && {positive})"
    mig = f"m.exists(r, r.startsWith('nvidia.com/mig-') && {positive})"
    out.append(
        {
            "expression": f"!({names}) || !(variables.maps.exists(m, {whole}) && variables.maps.exists(m, {mig}))",
            "messageExpression": "'pod: mixes whole GPUs with MIG slices; request either whole GPUs or MIG slices "
            "in one pod, no node offers both at once (policy \"' + variables.policy + '\", gpugate)'",
            "message": "gpugate: the pod mixes whole GPUs with MIG slices",
            "reason": "Forbidden",
        }
    )
    out.append(
        {
            "expression": f"!({names}) || !variables.fractionAnnotated || variables.holdsGPU || "
            "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
            "messageExpression": "'pod: asks for part of a GPU with a GPU-sharing annotation, but its "
            "schedulerName \"' + variables.scheduler + '\" does not implement it, so the pod would get no GPU "
            "(policy \"' + variables.policy + '\", gpugate)'",
            "message": "gpugate: a GPU-sharing annotation under a scheduler that does not implement it",
            "reason": "Forbidden",
        }
    )
    return out, extra


def _always_validations(policies: tuple[Policy, ...]) -> list[dict[str, Any]]:
    """The security rules (every mode) and, while /mutate is absent, the refusal of a GPU pod it did not form."""
    every = (*policies, BUILTIN)
    privileged = {p.name if p is not BUILTIN else "": p.privileged_gpu_containers == "deny" for p in every}
    override = {p.name if p is not BUILTIN else "": p.visible_devices_override == "deny" for p in every}
    formed = sorted(p.name for p in policies if p.attribution)
    eph = "(has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])"
    privileged_first = (
        f"(variables.all + {eph}).filter(c, has(c.securityContext) && has(c.securityContext.privileged) && "
        "c.securityContext.privileged)"
    )
    exposing = (
        f"e.name == {string(VISIBLE_DEVICES)} && !has(e.valueFrom) && !((has(e.value) ? e.value : '') in "
        "['void', 'none'])"
    )
    overriding = f"(variables.all + {eph}).filter(c, has(c.env) && c.env.exists(e, {exposing}))"
    return [
        {
            "expression": f"!variables.holdsGPU || !{literal(privileged)}[?variables.policy].orValue(true) || "
            f"size({privileged_first}) == 0",
            # The first container at fault as the one item of a list: a pod without one stops at the index, before
            # any part of the text is evaluated (CEL evaluates both sides of a +, an error's too).
            "messageExpression": f"[{privileged_first}[0]].map(c, 'container \"' + c.name + '\": is privileged in a "
            "GPU pod, so it sees every GPU of its node, not only the ones the pod requested; remove "
            "securityContext.privileged (policy \"' + variables.policy + '\", gpugate)')[0]",
            "message": "gpugate: a privileged container in a GPU pod sees every GPU of its node",
            "reason": "Forbidden",
        },
        {
            "expression": f"!{literal(override)}[?variables.policy].orValue(true) || "
            f"{string(KAI_SHARED_CONFIGMAP_ANNOTATION)} in variables.annotations || size({overriding}) == 0",
            # The containers filtered once, not once for the name and again for the value.
            "messageExpression": f"[{overriding}[0]].map(c, 'container \"' + c.name + '\": sets {VISIBLE_DEVICES}=' + "
            f"c.env.filter(e, {exposing})[0].value + ', which would expose GPUs the pod did not "
            f"request; remove {VISIBLE_DEVICES}: request GPUs with resources.limits and the device plugin sets it "
            "(gpugate)')[0]",
            "message": f"gpugate: a container sets {VISIBLE_DEVICES}, which would expose GPUs the pod did not request",
            "reason": "Forbidden",
        },
        {
            "expression": f"request.operation != 'CREATE' || !variables.holdsGPU || !(variables.policy in "
            f"{literal(formed)}) || {string(POLICY_ANNOTATION)} in variables.annotations",
            "messageExpression": "'pod: a GPU pod that policy \"' + variables.policy + '\" governs reached "
            "validation without what gpugate injects (no gpugate.io/policy annotation): its mutating webhook did not "
            "run; retry when gpugate is available (gpugate)'",
            "message": "gpugate: a GPU pod was not formed by gpugate; retry when gpugate is available",
            "reason": "Forbidden",
        },
    ]


# ------------------------------------------------------------------------------------------ objects


def _match_constraints() -> dict[str, Any]:
    return {
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}
            ]
        },
    }


def _match_conditions(policies: tuple[Policy, ...], *, env: bool) -> list[dict[str, str]]:
    """Only pods that name a GPU or auxiliary resource of some policy (the same device lists the webhooks'
    ``involves-gpus`` condition is kept in step with), or, for the security rules, set the variable."""
    owned = any_glob(
        [g for p in (*policies, BUILTIN) for d in p.devices.values() for g in (*d.resources, *d.auxiliary_resources)]
        + [IMPLICIT_DRA_PREFIX + "*"]
    )
    names = (
        "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c, "
        "has(c.resources) && [has(c.resources.limits) ? c.resources.limits : {}, "
        "has(c.resources.requests) ? c.resources.requests : {}].exists(m, m.exists(r, r.matches("
        f"{string(owned)}))))"
    )
    annotations = sorted({a for p in (*policies, BUILTIN) for a in p.holders.annotations})
    names += (
        f" || (has(object.metadata.annotations) && object.metadata.annotations.exists(k, k in {literal(annotations)}))"
    )
    if env:
        names += (
            " || (object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []) + "
            "(has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])).exists(c, has(c.env) && "
            f"c.env.exists(e, e.name == {string(VISIBLE_DEVICES)}))"
        )
    return [{"name": "involves-gpus", "expression": names}]


#: What every plain pod has, whatever its policy, as a match condition of the mutating policy: implied by the
#: ``plain`` variable, so it changes no decision, only where a pod that is not plain stops. Once matched, a
#: MutatingAdmissionPolicy's patch is applied even when the expression yields no operation: the apiserver encodes
#: the pod to JSON, applies the (empty) patch, decodes, converts and defaults it, marks it changed and so runs the
#: whole mutating chain once more (k8s.io/apiserver v0.36.3, kubernetes/kubernetes v1.36.3
#: staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go ``dispatchOne`` sets
#: ``Dirty`` unconditionally and ``dispatchInvocations`` then calls ``SetShouldReinvoke``; patch/json_patch.go
#: ``jsonPatcher.Patch``; pkg/admission/reinvocation.go). A pod this condition turns away skips all of that:
#: one the webhook or a reinvocation already formed (a ``gpugate.io/`` annotation), one with a node, a resource
#: claim, CDI annotations, ``NVIDIA_VISIBLE_DEVICES`` or ``envFrom``, or too many containers.
#:
#: And ``reinvocationPolicy: IfNeeded``. A mutating webhook after this policy (every one: policies run before webhooks)
#: may add a container to the pod it formed: a sidecar or an init container without GPUs, which under the NVIDIA
#: runtime would see every GPU of the node unless it gets ``void``. gpugate's own webhook cannot add it: the
#: narrowing skipped it on the first pass, and the apiserver reinvokes only webhooks it called then
#: (webhook/mutating/dispatcher.go: "during reinvocation, a webhook will not be called for the first time"), so
#: /validate refused such a pod. On the reinvocation pass (which this policy's own change always causes) the
#: policy matches such a pod again (``_sidecar_added``) and voids only the new container. A pod formed and left
#: alone stops at that condition's GPU container, as it did at the first lookup with ``Never``: the apiserver
#: evaluates a policy's match conditions on the reinvocation pass before it asks whether to reinvoke it
#: (policy/mutating/dispatcher.go ``dispatchInvocations``), so ``Never`` saved no evaluation.
_PLAIN_SHAPE = " && ".join(
    [
        "!has(object.spec.nodeName)",
        "(!has(object.spec.resourceClaims) || size(object.spec.resourceClaims) == 0)",
        f"size(object.spec.containers) <= {MAX_CONTAINERS}",
        f"(!has(object.spec.initContainers) || size(object.spec.initContainers) <= {MAX_CONTAINERS})",
        "(!has(object.metadata.annotations) || !object.metadata.annotations.exists(k, "
        f"k.startsWith({string(GROUP + '/')}) || {CDI}))",
        "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).all(c, "
        f"(!has(c.env) || !c.env.exists(e, e.name == {string(VISIBLE_DEVICES)})) && "
        "(!has(c.envFrom) || size(c.envFrom) == 0))",
    ]
)

#: Not yet formed (implied by ``_PLAIN_SHAPE``, which refuses every ``gpugate.io/`` annotation): checked first, so the
#: reinvocation pass, which finds the pod formed, stops at one lookup.
_UNFORMED = f"(!has(object.metadata.annotations) || !({string(POLICY_ANNOTATION)} in object.metadata.annotations))"


def _sidecar_added(policies: tuple[Policy, ...]) -> str:
    """A pod this policy may have formed, with a container that holds no GPU and has no ``NVIDIA_VISIBLE_DEVICES``:
    what the reinvocation pass sees after a later mutating webhook added a sidecar or an init container (Istio's,
    Datadog's library injection). Implied by the ``reform`` variable (a container ``voidContainers`` or ``voidInit``
    lists names no GPU resource that every policy counts), but for a container added later that names a GPU at a
    quantity of 0: it is left to /validate, which refuses it without its void. Cheap for a formed pod that needs
    nothing, which every GPU pod the policy formed is on that pass: its GPU container names a GPU, and no quantity
    is parsed. "" when no class gets ``void``."""
    t = _plain_tables(policies)
    resources = sorted({key.rsplit("|", 1)[-1] for key in t["void"]})
    if not resources:
        return ""
    counted = " && ".join(f"r.matches({string(c)})" for c in sorted({_counted(p) for p in policies}))
    meta, spec = "object.metadata", "object.spec"
    return " && ".join(
        [
            f"has({meta}.annotations) && {string(MUTATED_ANNOTATION)} in {meta}.annotations && "
            f"{string(POLICY_ANNOTATION)} in {meta}.annotations",
            f"!has({spec}.nodeName)",
            f"size({spec}.containers) <= {MAX_CONTAINERS}",
            f"(!has({spec}.initContainers) || size({spec}.initContainers) <= {MAX_CONTAINERS})",
            f"{spec}.containers.exists(c, has(c.resources) && has(c.resources.limits) && "
            f"c.resources.limits.exists(r, r in {literal(resources)}))",
            f"({spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : [])).exists(c, "
            f"(!has(c.env) || !c.env.exists(e, e.name == {string(VISIBLE_DEVICES)})) && (!has(c.resources) || "
            "![has(c.resources.limits) ? c.resources.limits : {}, has(c.resources.requests) ? c.resources.requests : "
            f"{{}}].exists(m, m.exists(r, {counted}))))",
        ]
    )


def _one_condition(name: str, parts: list[str]) -> list[dict[str, str]]:
    """Several match conditions as one, cheapest and most selective first.

    The apiserver evaluates every match condition of an object before it looks at any result (k8s.io/apiserver
    v0.36.3 pkg/admission/plugin/webhook/matchconditions/matcher.go ``Match`` calls ``ForInput``, which evaluates
    them all, then returns no match at the first false); joined by ``&&``, CEL stops at the first false. The
    outcome is the same: false when any part is false (CEL's ``&&`` is false beside an error, as the matcher lets a
    false condition win over another's error), an error only when no part is false, true when all are."""
    return [{"name": name, "expression": " && ".join(f"({p})" for p in parts)}]


def _mutate_condition(policies: tuple[Policy, ...]) -> list[dict[str, str]]:
    """gpugate-mutate's one match condition: a pod it could form (``_PLAIN_SHAPE``), one it formed that a later
    mutating webhook gave a container to void (``_sidecar_added``), or one that carries the formed-by label and is
    not so formed (``_unformed_condition``), each cheapest part first."""
    [plain] = _one_condition(
        "gpu-pod-to-form", [_UNFORMED, _match_conditions(policies, env=False)[0]["expression"], _PLAIN_SHAPE]
    )
    branches = [plain["expression"], _sidecar_added(policies), _unformed_condition(policies, variables=False)]
    plain["expression"] = " || ".join(f"({b})" for b in branches if b)
    return [plain]


def _unformed_condition(policies: tuple[Policy, ...], *, variables: bool) -> str:
    """A pod that carries :data:`FORMED_BY_LABEL` and is not one the native tier decided (:func:`decided_natively`
    on the pod as ``gpugate-mutate`` sees it): ``gpugate-mutate`` removes the label, so that the narrowed webhooks'
    objectSelector does not skip it. On the reinvocation pass that is a pod a later mutating webhook changed
    (a sidecar with an ``envFrom``); on the first, a pod whose author wrote the label. With ``variables``, for the
    ``unform`` variable (a plain pod is given the label, not relieved of it)."""
    label = string(FORMED_BY_LABEL)
    has = (
        f"!variables.plain && {label} in variables.labels"
        if variables
        else f"has(object.metadata.labels) && {label} in object.metadata.labels"
    )
    return f"{has} && !({decided_natively(policies, variables=variables)})"


def _meta(name: str, digest: str) -> dict[str, Any]:
    return {"name": name, "labels": dict(MANAGED), "annotations": {"gpugate.io/policy-digest": digest}}


def compile_policies(policies: PolicySet) -> Compiled:
    """The native objects for ``policies`` and the explanation, the same for the same set."""
    ordered = policies.policies
    digest = policies.digest[:16] if policies.digest else ""
    common = _common_variables(ordered)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicy",
            "metadata": _meta(f"{PREFIX}-mutate", digest),
            "spec": {
                # A failed evaluation leaves the pod as it was: the webhook forms it, or (without the webhook)
                # the always-deny policy refuses it unformed.
                "failurePolicy": "Ignore",
                # IfNeeded (see _PLAIN_SHAPE): the reinvocation pass voids a container a later webhook added.
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": _match_constraints(),
                "matchConditions": _mutate_condition(ordered),
                "variables": [*common, *_mutating_variables(ordered)],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _patches()}}],
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": _meta(f"{PREFIX}-mutate", digest),
            "spec": {"policyName": f"{PREFIX}-mutate"},
        },
    ]
    # The enforce-mode rules share gpugate-always's object (both Deny): every object evaluates the pod again from
    # the start (its own match conditions, variables, and a conversion of the pod per activation:
    # k8s.io/apiserver pkg/admission/plugin/cel/activation.go ``newActivation``), so one object fewer is a third
    # of the validating cost fewer. The always rules come first, so their message answers first, as before.
    deny = _always_validations(ordered)
    deny_extra: list[dict[str, str]] = []
    enforce = [p for p in ordered if p.mode == "enforce"]
    if enforce:
        validations, deny_extra = _mode_validations(enforce)
        deny += validations
    for mode, action in {"warn": "Warn", "audit": "Audit"}.items():
        members = [p for p in ordered if p.mode == mode]
        if not members:
            continue
        validations, extra = _mode_validations(members)
        objects += _validating(
            f"{PREFIX}-{mode}",
            digest,
            [*common, *extra],
            validations,
            ordered,
            [action] if action != "Warn" else ["Warn", "Audit"],
            namespaces=_namespaces_of(members),
        )
    objects += _validating(f"{PREFIX}-always", digest, [*common, *deny_extra], deny, ordered, ["Deny"], env=True)
    _constant_patterns(objects, ordered)
    return _read_variables_only(narrow(Compiled(tuple(objects), tuple(explain(policies))), policies))


#: ``gpugate-always``'s variables that the pool digest's checks (webhook/native/pools.py, added to it by
#: ``gpugate serve --native-sync``) read (with what they read), kept there whether its own checks read them or not.
POOLS_READ = ("claimsFormed", "resource", "policy", "init", "key", "model", "holdsGPU")


def _read_variables_only(compiled: Compiled) -> Compiled:
    """Each object with only the variables its match conditions, validations, messages or mutations read (and what
    those read). An unread variable is never evaluated, but it still costs: every activation of its object (match
    conditions, validations, messages, audit annotations, the patch; each request) adds an entry for every variable
    to a lazy map of its own (k8s.io/apiserver v0.36.3 pkg/admission/plugin/cel/composition.go ``Variables``,
    called by cel/activation.go ``newActivation``). ``gpugate-always`` took every one of ``gpugate-mutate``'s, the
    patch's too; ``gpugate-mutate`` the common ones of the validating objects'."""
    objects = []
    for obj in compiled.objects:
        if "variables" in obj["spec"]:
            spec = obj["spec"]
            expressions = {v["name"]: v["expression"] for v in spec["variables"]}
            roots = set(_reads({k: v for k, v in spec.items() if k != "variables"}))
            if obj["metadata"]["name"] == f"{PREFIX}-always":
                roots |= set(POOLS_READ) & set(expressions)
            needed, todo = set(roots), list(roots)
            while todo:
                for name in _reads(expressions.get(todo.pop(), "")):
                    if name not in needed:
                        needed.add(name)
                        todo.append(name)
            obj = {**obj, "spec": {**spec, "variables": [v for v in spec["variables"] if v["name"] in needed]}}
        objects.append(obj)
    return Compiled(tuple(objects), compiled.outcomes)


def _reads(node: Any) -> list[str]:
    """The variables an expression (or every expression in a spec) reads."""
    if isinstance(node, str):
        return re.findall(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)", node)
    if isinstance(node, list):
        return [n for x in node for n in _reads(x)]
    if isinstance(node, dict):
        return [n for x in node.values() for n in _reads(x)]
    return []


def _namespaces_of(members: list[Policy]) -> str | None:
    """A pattern every namespace that one of ``members`` can govern matches, or None when one of them matches by
    something else than namespace names alone (a policy matches only where all of its selectors match)."""
    if not all(p.match.namespaces for p in members):
        return None
    return any_glob([g for p in members for g in p.match.namespaces])


#: Every messageExpression is worked out on its own, not behind its validation. A ValidatingAdmissionPolicy
#: evaluates every messageExpression of every request it matches, also when every validation passed
#: (k8s.io/apiserver v0.36.3 pkg/admission/plugin/policy/validating/validator.go ``Validate`` calls
#: ``messageFilter.ForInput`` unconditionally; cel/condition.go ``ForInput`` evaluates each expression), in an
#: activation of its own where every variable is evaluated afresh (cel/composition.go ``Variables``). Guarded by its
#: validation (``valid ? '' : message``), a message paid the whole validation again there: for a pod the native tier
#: formed, every check of its claim (labels, tolerations, workload) a second time. Unguarded, an admitted pod pays
#: what the message alone costs until it stops: a message names the first item over a limit (``filter(...)[0]``),
#: which an admitted pod does not have, so it fails at once, and ``Validate`` reads ``messageResults[i]`` only for a
#: validation that failed (an error there falls back to ``message``). A refused pod gets the same message as before.


def _validating(
    name: str,
    digest: str,
    variables: list[dict[str, str]],
    validations: list[dict[str, Any]],
    policies: tuple[Policy, ...],
    actions: list[str],
    *,
    env: bool = False,
    namespaces: str | None = None,
) -> list[dict[str, Any]]:
    conditions = _match_conditions(policies, env=env)
    if namespaces is not None:
        # A warn or audit object decides only for its policies: where none of them can govern (the names they
        # match), it is not evaluated at all. Only names: match conditions see no namespace object (the matcher is
        # given none: k8s.io/apiserver pkg/admission/plugin/webhook/matchconditions/matcher.go ``Match``). The
        # namespace first: one match of the name, and a pod elsewhere stops there.
        conditions = _one_condition(
            "involves-gpus-in-mode-namespaces",
            [f"request.namespace.matches({string(namespaces)})", conditions[0]["expression"]],
        )
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": _meta(name, digest),
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": _match_constraints(),
                "matchConditions": conditions,
                "variables": variables,
                "validations": validations,
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _meta(name, digest),
            "spec": {"policyName": name, "validationActions": actions},
        },
    ]


# ------------------------------------------------------------------------------------------ explanation


def _object_of(policy: Policy) -> str:
    """The ValidatingAdmissionPolicy that holds a policy's limits and shapes: its mode's, or gpugate-always's in
    enforce mode."""
    return f"{PREFIX}-always" if policy.mode == "enforce" else f"{PREFIX}-{policy.mode}"


def explain(policies: PolicySet) -> list[Outcome]:
    """Per policy and rule: decided natively, or left to the webhook, and why."""
    out = [
        Outcome(
            "*",
            "pod UPDATE, pods/ephemeralcontainers, pods/status, bindings",
            False,
            "the native objects match Pod CREATE only; attribution edits and debug containers stay in the webhook",
        ),
        Outcome(
            "*",
            "workload templates and workload CRDs",
            False,
            "their verdict is warnings that show what each pod will get; the webhook writes them",
        ),
        Outcome(
            "*",
            "DRA claims and DRA-backed extended resources",
            False,
            "resolving a claim to its DeviceClass reads other objects; CEL cannot",
        ),
        Outcome(
            "*",
            "feasibility against the live inventory",
            False,
            "needs the cluster's nodes, pools, RuntimeClasses and DeviceClasses; `gpugate serve --native-sync` "
            "writes their digest into gpugate-always for the plain pods of enforce-mode policies, the rest is the "
            "webhook's",
        ),
        Outcome(
            "*",
            "fractional, negative, request-without-limit, request != limit",
            True,
            "the apiserver's own Pod validation refuses them before any validating policy; /mutate names the "
            "field first when the webhook runs",
        ),
        Outcome(
            "*",
            "privileged GPU containers, NVIDIA_VISIBLE_DEVICES overrides",
            True,
            f"{PREFIX}-always (Deny in every mode); a value from a reference (KAI's ConfigMap) stays in the webhook",
        ),
        Outcome(
            "*",
            "GPU pod not formed",
            True,
            f"{PREFIX}-always refuses a GPU pod of a policy with attribution that carries no gpugate.io/policy "
            "annotation, so without the webhook no such pod is admitted unformed",
        ),
    ]
    for p in policies.policies:
        entries, left = _entries(p)
        mode = {"enforce": "Deny", "warn": "Warn", "audit": "Audit"}[p.mode]
        if entries:
            out.append(
                Outcome(
                    p.name,
                    "plain GPU pods: runtime class, tolerations, model selector, void, provenance",
                    True,
                    f"{PREFIX}-mutate for pods requesting one of {', '.join(sorted(entries))} and "
                    "choosing nothing themselves",
                )
            )
        for why in left:
            out.append(Outcome(p.name, "model selection", False, why))
        named = sorted({c for c, _ in _named_entries(p)})
        if named:
            out.append(
                Outcome(
                    p.name,
                    "a class named by gpugate.io/model: its selector or affinity term, tolerations, runtime class",
                    True,
                    f"{PREFIX}-mutate for pods naming one of {', '.join(named)} that offers what they request and "
                    "choosing nothing else themselves (a class that does not serve the pod is the webhook's to refuse)",
                )
            )
        out.append(
            Outcome(
                p.name,
                "own model choice (selectors, aliases, annotations, nodeName)",
                False,
                "the class tables with aliases and the inventory stay in the webhook",
            )
        )
        if p.attribution:
            out.append(
                Outcome(
                    p.name,
                    "attribution labels",
                    True,
                    "from namespaceObject's labels with the policy's defaults, and the owning workload "
                    "through ownerReferences (names that are not label values stay in the webhook, "
                    "which hashes them)",
                )
            )
            out.append(
                Outcome(
                    p.name,
                    "tenant-set or look-alike attribution labels",
                    False,
                    "replaced with a warning or refused by the webhook; a MutatingAdmissionPolicy emits no warnings",
                )
            )
        if p.limits.max_per_container is not None or p.limits.max_per_pod is not None:
            out.append(
                Outcome(
                    p.name,
                    "limits (maxPerContainer, maxPerPod)",
                    True,
                    f"{_object_of(p)} ({mode}), GPUs of containers and the KEP-753 pod total",
                )
            )
        out.append(Outcome(p.name, "zero GPUs, whole GPUs mixed with MIG", True, f"{_object_of(p)} ({mode})"))
        out.append(
            Outcome(
                p.name,
                "init-only GPUs, several vendors, runtime class mismatch, model class allowed",
                False,
                "not compiled yet: the webhook judges them",
            )
        )
        if p.non_gpu_tolerations != "allow" or p.non_gpu_runtime_class != "allow":
            out.append(
                Outcome(
                    p.name,
                    "GPU tolerations, GPU runtime class and CDI annotations without a GPU",
                    True,
                    "the shipped gpugate-backstop ValidatingAdmissionPolicy (deploy/base)",
                )
            )
    return out


# ------------------------------------------------------------------------------- the narrowed webhook

#: The webhooks' matchCondition that leaves them the pods the native tier decided (its expression is
#: :func:`decided_natively` negated), and the annotation of ``gpugate-always`` that carries it, so whoever
#: installs the objects (the chart, ``gpugate serve``) narrows the webhooks with the condition of the same
#: compilation.
NARROWING = "not-decided-natively"
NARROWING_ANNOTATION = f"{GROUP}/webhook-match-condition"
#: The pod-create webhooks' objectSelector with the native tier in force, and the annotation of ``gpugate-always``
#: that carries it (JSON): a pod ``gpugate-mutate`` formed carries :data:`FORMED_BY_LABEL` and is not sent to them
#: at all, before any CEL (k8s.io/apiserver pkg/admission/plugin/webhook/generic/webhook.go ``ShouldCallHook``
#: tests the namespace and object selectors first, and converts the pod for the match conditions only after).
#: Only on the webhooks that route a pod's creation alone (deploy/base/webhooks.yaml): an objectSelector also
#: matches an UPDATE's old object, so on the webhook of every other request it would hide updates.
OBJECT_SELECTOR = {"matchExpressions": [{"key": FORMED_BY_LABEL, "operator": "DoesNotExist"}]}
OBJECT_SELECTOR_ANNOTATION = f"{GROUP}/webhook-object-selector"
BOOKKEEPING = (MUTATED_ANNOTATION, POLICY_ANNOTATION, WORKLOAD_ANNOTATION)


def decided_natively(policies: tuple[Policy, ...], *, variables: bool = False) -> str:
    """A CEL condition, true for a Pod CREATE that carries what ``gpugate-mutate`` writes into a *plain* pod and
    is formed as it forms one under the policy its ``gpugate.io/policy`` annotation names.

    With ``variables``, the same condition for ``gpugate-always``'s ``claimsFormed``: the pod's containers and
    resource maps read from the object's variables ``all`` and ``maps``; without, the same expressions bound once
    as ``cs`` and ``ms`` (tests/native/test_compiler.py rebinds the variables' text and gets the webhooks').

    It reads only ``object`` and ``request``: a webhook's matchConditions have no ``namespaceObject`` and no
    variables (k8s.io/apiserver pkg/admission/plugin/webhook/matchconditions/matcher.go builds the input from
    the request alone), so it cannot tell the governing policy and trusts the annotation, which the pod's author
    can write too. What it cannot check (that policy is the governing one, the labels taken from the namespace,
    the tolerations and ``void``) ``gpugate-always`` checks on the same object (:func:`_claim_validation`), and
    refuses a pod that claims to be formed and is not (:func:`_claim_validations`): no pod skips the webhooks
    without being judged.
    """
    t = _plain_tables(policies)
    holders = sorted({a for hs in t["holders"].values() for a in hs})
    owned = any_glob(
        [g for p in (*policies, BUILTIN) for d in p.devices.values() for g in (*d.resources, *d.auxiliary_resources)]
        + [IMPLICIT_DRA_PREFIX + "*"]
    )
    spec, meta = "object.spec", "object.metadata"
    # The containers and their resource maps: gpugate-always's variables, or in a webhook's matchCondition (no
    # variables there) each built once and bound by a one-element list's `all` after the cheap tests: a webhook
    # sees every pod UPDATE too, and the condition's text repeats them six times.
    everyone, maps = ("variables.all", "variables.maps") if variables else ("cs", "ms")
    bound_everyone = f"({spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : []))"
    bound_maps = (
        "(cs.map(c, has(c.resources) && has(c.resources.limits) ? c.resources.limits : {}) + "
        "cs.map(c, has(c.resources) && has(c.resources.requests) ? c.resources.requests : {}))"
    )

    def at(table: str, key: str, fallback: Any) -> str:
        return f"({key} in {literal(t[table])} ? {literal(t[table])}[{key}] : {literal(fallback)})"

    affinity = f"{spec}.affinity.nodeAffinity"
    required = f"{affinity}.requiredDuringSchedulingIgnoredDuringExecution"
    term = (
        f"{required}.nodeSelectorTerms.size() == 1 && !has({required}.nodeSelectorTerms[0].matchFields) && "
        f"has({required}.nodeSelectorTerms[0].matchExpressions) && "
        f"[{required}.nodeSelectorTerms[0].matchExpressions].all(es, size(es) == 1 && es[0].key == aff[0] && "
        "es[0].operator == 'In' && has(es[0].values) && es[0].values == aff.filter(v, v != aff[0]))"
    )
    entry = " && ".join(
        [
            f"[{at('rc', 'key', '')}].all(rc, rc == '' || (has({spec}.runtimeClassName) && "
            f"{spec}.runtimeClassName == rc))",
            f"[{at('selector', 'key', {})}].all(sel, sel.all(k, has({spec}.nodeSelector) && k in {spec}.nodeSelector "
            f"&& {spec}.nodeSelector[k] == sel[k]) && [{at('choice', 'key', [])}].all(choice, "
            f"!has({spec}.nodeSelector) || {spec}.nodeSelector.all(k, !(k in choice) || k in sel)))",
            f"[{at('affinity', 'key', [])}].all(aff, size(aff) == 0 ? (!has({spec}.affinity) || "
            f"!has({affinity}) || !has({required})) : (has({spec}.affinity) && has({affinity}) && "
            f"!has({affinity}.preferredDuringSchedulingIgnoredDuringExecution) && has({required}) && {term}))",
        ]
    )
    # Every container without the GPU has its void (a sidecar another mutating webhook added after
    # gpugate-mutate has not: the webhooks are then called, and /mutate adds it on reinvocation).
    holds = (
        "has(c.resources) && ((has(c.resources.limits) && present[0] in c.resources.limits) || "
        "(has(c.resources.requests) && present[0] in c.resources.requests))"
    )
    voided = (
        f"(!(key in {literal(t['void'])}) || {everyone}.all(c, ({holds}) || c.name in {at('shared', 'p', [])} || "
        f"(has(c.env) && c.env.exists(e, e.name == {string(VISIBLE_DEVICES)}))))"
    )
    named = string(MODEL_LABEL)
    model = f"(has({meta}.labels) && {named} in {meta}.labels ? {meta}.labels[{named}] : '')"
    resource = (
        f"[{at('candidates', 'pm', [])}.filter(r, {maps}.exists(m, r in m))].all(present, size(present) == 1 && "
        f"{maps}.all(m, m.all(r, !r.matches({string(owned)}) || r == present[0])) && "
        f"{spec}.containers.exists(c, has(c.resources) && has(c.resources.limits) && present[0] in "
        f"c.resources.limits) && [pm + '|' + present[0]].all(key, {entry} && {voided}))"
    )
    policy = f"{meta}.annotations[{string(POLICY_ANNOTATION)}]"
    reading = " && ".join(
        [
            f"{everyone}.all(c, (!has(c.envFrom) || size(c.envFrom) == 0) && (!has(c.env) || c.env.all(e, "
            f"e.name != {string(VISIBLE_DEVICES)} || (!has(e.valueFrom) && has(e.value) && e.value == 'void'))))",
            f"[{at('profiles', policy, '')}].all(p, p != '' && [p + '|' + {model}].all(pm, {resource}))",
        ]
    )
    if not variables:
        reading = f"[{bound_everyone}].all(cs, [{bound_maps}].all(ms, {reading}))"
    return " && ".join(
        [
            "request.operation == 'CREATE'",
            "request.resource.resource == 'pods'",
            "(!has(request.subResource) || request.subResource == '')",
            f"has({meta}.annotations)",
            f"{string(POLICY_ANNOTATION)} in {meta}.annotations",
            f"{string(MUTATED_ANNOTATION)} in {meta}.annotations",
            f"{meta}.annotations.all(k, (!k.startsWith({string(GROUP + '/')}) || k in {literal(list(BOOKKEEPING))}) "
            f"&& !({CDI}) && !(k in {literal(holders)}))",
            f"(!has({meta}.labels) || !({string(CLAIMS_PENDING_LABEL)} in {meta}.labels))",
            f"!has({spec}.nodeName)",
            f"(!has({spec}.resourceClaims) || size({spec}.resourceClaims) == 0)",
            f"size({spec}.containers) <= {MAX_CONTAINERS}",
            f"(!has({spec}.initContainers) || size({spec}.initContainers) <= {MAX_CONTAINERS})",
            reading,
        ]
    )


def narrowing_condition(policies: tuple[Policy, ...]) -> dict[str, str]:
    """The matchCondition that narrows a gpugate webhook to the pods the native tier does not decide."""
    return {"name": NARROWING, "expression": f"!({decided_natively(policies)})"}


def _claim_validations(policies: tuple[Policy, ...]) -> list[dict[str, Any]]:
    """``gpugate-always``'s checks of a pod the narrowed webhooks skip (``variables.claimsFormed``, which is
    :func:`decided_natively`): the policy it names governs it, its attribution labels are the ones that policy
    gives it in this namespace with no look-alike beside them, its workload labels and annotation name its owner,
    and it holds the tolerations and ``void`` ``gpugate-mutate`` gives a plain pod.

    Each is checked on the final object directly, not by working out the mutation again: a label against the value
    the namespace gives it, the workload against the pod's owner, the look-alikes against the keys the policy owns
    (a constant per policy). ``claimsFormed`` already holds the pod to the claimed policy's runtime class, node
    selector, affinity and ``void`` containers, so with the first check (the claimed policy governs) the runtime
    class is not checked again. Their variables are ``gpugate-mutate``'s, evaluated on the final object (nothing
    here changes resources). Every message stops at once for a pod that passes (the apiserver evaluates each
    message for every request: :func:`_validating`), and none works out the workload again."""
    t = _plain_tables(policies)
    workload = string(WORKLOAD_ANNOTATION)
    kind, name = string(WORKLOAD_KIND_LABEL), string(WORKLOAD_NAME_LABEL)
    claimed = f"variables.annotations[{string(POLICY_ANNOTATION)}]"
    look_alike = _chain(
        "variables.profile",
        {
            # The keys the policy owns first: most of a formed pod's labels, passed without a lowercase copy and a
            # match of the pattern.
            p: f"!(k in {literal([*t['owned'][p], MODEL_LABEL])}) && k.lowerAscii().matches({string(x)})"
            for p, x in t["lookAlike"].items()
        },
    )
    stray = f"variables.labels.filter(k, {look_alike})"
    stray_exists = f"variables.labels.exists(k, {look_alike})"
    right = f"s[0] in variables.labels && variables.labels[s[0]] == {_ATTRIBUTION_VALUE}"
    wrong = f"variables.attribution.filter(s, !({right}))"
    owner = (
        f"size(variables.attribution) == 0 ? !({workload} in variables.annotations) : "
        f"({kind} in variables.labels && "
        f"variables.labels[{kind}] == variables.workloadKind && {name} in variables.labels && "
        f"variables.labels[{name}] == variables.workloadName && {workload} in variables.annotations && "
        f"variables.annotations[{workload}] == variables.workloadKind + '/' + variables.workloadName)"
    )
    # The limits hold every GPU count (see _gpu_sum).
    gpu = (
        "has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, r.matches(variables.counted) && "
        "quantity(string(c.resources.limits[r])).isGreaterThan(quantity('0')))"
    )
    # As booleans, not the mutating policy's index lists (its patch needs the indices, this check does not): every
    # toleration the device adds is there (``missingTolerations`` empty), and a container holds
    # NVIDIA_VISIBLE_DEVICES exactly when gpugate-mutate voids it (``voidContainers``/``voidInit`` empty, and no other
    # container has it): one pass over the containers.
    formed = " && ".join(
        [
            "variables.tolerationsNormal.all(n, has(object.spec.tolerations) && "
            f"object.spec.tolerations.exists(e, {_SAME_TOLERATION}))",
            f"variables.all.all(c, (has(c.env) && c.env.exists(e, e.name == {string(VISIBLE_DEVICES)})) == "
            f"(variables.voids && !(c.name in variables.shared) && !({gpu})))",
        ]
    )
    fix = "remove the gpugate.io annotations and let gpugate form it (gpugate)"
    return [
        {
            "expression": f"!variables.claimsFormed || variables.policy == {claimed}",
            "messageExpression": f"'pod: carries gpugate.io/policy \"' + {claimed} + '\" as if gpugate had formed "
            f"it, but policy \"' + variables.policy + '\" governs it here; {fix}'",
            "message": "gpugate: a pod names a policy in gpugate.io/policy that does not govern it",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.claimsFormed || variables.attribution.all(s, {right})",
            # '' at once for a pod whose labels are right (no list, no index error), the first wrong one named else.
            "messageExpression": f"variables.attribution.all(s, {right}) ? '' : [{wrong}[0]].map(s, 'pod: carries "
            "gpugate.io/policy as if gpugate had formed it, "
            f"but its label ' + s[0] + ' is not ' + {_ATTRIBUTION_VALUE} + ', what policy \"' + variables.policy + "
            f"'\" gives it in this namespace; {fix}')[0]",
            "message": "gpugate: a pod's attribution labels are not the ones its policy gives it",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.claimsFormed || ({owner})",
            "messageExpression": f"'pod: carries gpugate.io/policy \"' + {claimed} + '\" as if gpugate had formed "
            f"it, but its {WORKLOAD_ANNOTATION} annotation or its {WORKLOAD_KIND_LABEL} and {WORKLOAD_NAME_LABEL} "
            "labels do not name the workload that owns it (its controller ownerReference, or the pod itself) as "
            f"policy \"' + variables.policy + '\" writes them; remove them, and {fix}'",
            "message": "gpugate: a pod's workload labels or annotation do not name its owner",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.claimsFormed || !{stray_exists}",
            # The first look-alike as the one item of a list: a pod without one stops at the index.
            "messageExpression": f"[{stray}[0]].map(k, 'pod: label ' + k + ' looks like an attribution label of "
            "policy \"' + variables.policy + '\" (kube-state-metrics would export both under one name); remove it, "
            f"and the gpugate.io annotations, and let gpugate form it (gpugate)')[0]",
            "message": "gpugate: a pod carries a look-alike of an attribution label",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.claimsFormed || ({formed})",
            "messageExpression": f"'pod: carries gpugate.io/policy \"' + {claimed} + '\" and gpugate.io/mutated as if "
            "gpugate had formed it, but it is not formed as policy \"' + variables.policy + '\" forms it here "
            f"(tolerations or {VISIBLE_DEVICES}=void differ); {fix}'",
            "message": "gpugate: a pod claims to be formed by gpugate and is not",
            "reason": "Forbidden",
        },
    ]


def _formed_by_validation() -> dict[str, Any]:
    """A pod that carries :data:`FORMED_BY_LABEL` skips the pod-create webhooks (:data:`OBJECT_SELECTOR`), so it must
    be one the native tier decided (``claimsFormed``, judged by the claim checks beside this one). ``gpugate-mutate``
    removes the label from any pod it sees that is not; what carries it here was changed after gpugate-mutate's
    last pass (by a mutating webhook on the reinvocation pass). A static message: no activation of its own."""
    return {
        "expression": f"!({string(FORMED_BY_LABEL)} in variables.labels) || variables.claimsFormed",
        "message": f"pod: carries the label {FORMED_BY_LABEL}, which only gpugate's MutatingAdmissionPolicy "
        "gpugate-mutate gives a pod it formed, but the pod is not formed as the native tier forms one (it was "
        "changed after gpugate-mutate, or its author wrote the label); remove the label and let gpugate form the "
        "pod (gpugate)",
        "reason": "Forbidden",
    }


def narrow(compiled: Compiled, policies: PolicySet) -> Compiled:
    """``compiled`` with ``gpugate-always`` checking the pods the narrowed webhooks skip, and carrying their
    matchCondition in its annotation (:data:`NARROWING_ANNOTATION`)."""
    ordered = policies.policies
    mutating = next(o for o in compiled.objects if o["kind"] == "MutatingAdmissionPolicy")
    known = {v["name"] for v in mutating["spec"]["variables"]}
    objects = []
    for obj in compiled.objects:
        if obj["kind"] == "ValidatingAdmissionPolicy" and obj["metadata"]["name"] == f"{PREFIX}-always":
            obj = {**obj, "metadata": {**obj["metadata"]}, "spec": {**obj["spec"]}}
            have = {v["name"] for v in obj["spec"]["variables"]}
            missing = [v for v in mutating["spec"]["variables"] if v["name"] in known - have]
            holder: dict[str, Any] = {"spec": {"validations": _claim_validations(ordered)}}
            _constant_patterns([holder], ordered)
            claim = holder["spec"]["validations"]
            claims = {"name": "claimsFormed", "expression": decided_natively(ordered, variables=True)}
            obj["spec"]["variables"] = [*obj["spec"]["variables"], *missing, claims]
            obj["spec"]["validations"] = [*obj["spec"]["validations"], *claim, _formed_by_validation()]
            # Every pod that carries the label, GPUs or not: the webhooks' objectSelector skips it.
            obj["spec"]["matchConditions"] = [
                {
                    **c,
                    "expression": f"({c['expression']}) || (has(object.metadata.labels) && "
                    f"{string(FORMED_BY_LABEL)} in object.metadata.labels)",
                }
                for c in obj["spec"]["matchConditions"]
            ]
            obj["metadata"]["annotations"] = {
                **obj["metadata"]["annotations"],
                NARROWING_ANNOTATION: narrowing_condition(ordered)["expression"],
                OBJECT_SELECTOR_ANNOTATION: json.dumps(OBJECT_SELECTOR, sort_keys=True, separators=(",", ":")),
            }
        objects.append(obj)
    return Compiled(tuple(objects), compiled.outcomes)


def webhook_patch(compiled: Compiled) -> list[dict[str, Any]]:
    """A JSON patch (RFC 6902) for a gpugate webhook configuration: append the narrowing matchCondition of this
    compilation to its first webhook (the pod-create webhook; deploy/components/native-tier applies it to both
    configurations), and the objectSelector that skips the pods the native tier formed."""
    always = next(
        o for o in compiled.objects if o["metadata"]["name"] == f"{PREFIX}-always" and "validations" in o["spec"]
    )
    condition = {"name": NARROWING, "expression": always["metadata"]["annotations"][NARROWING_ANNOTATION]}
    selector = webhook_object_selector(compiled)
    return [
        *([{"op": "add", "path": "/webhooks/0/objectSelector", "value": selector}] if selector else []),
        {"op": "add", "path": "/webhooks/0/matchConditions/-", "value": condition},
    ]


def webhook_object_selector(compiled: Compiled) -> dict[str, Any] | None:
    """The pod-create webhooks' objectSelector this compilation's ``gpugate-always`` carries (it judges what they skip:
    :func:`_formed_by_validation`); None for objects an earlier gpugate compiled, which do not."""
    always = next(
        o for o in compiled.objects if o["metadata"]["name"] == f"{PREFIX}-always" and "validations" in o["spec"]
    )
    selector = always["metadata"]["annotations"].get(OBJECT_SELECTOR_ANNOTATION)
    return dict(json.loads(selector)) if selector else None
