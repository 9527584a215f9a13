"""GPU quantities: whole numbers, never negative, a limit for every request and request == limit.

Guards, for every GPU resource in ``resources.requests`` / ``resources.limits`` of containers and init
containers, the checks of k/k pkg/apis/core/validation/validation.go (ValidateResourceQuantityValue,
validateResourceRequirements): extended resources are integer-only and not overcommittable. The apiserver
runs them only AFTER mutating webhooks, so the mutating endpoint is the only one that ever sees such a pod;
messages keep the apiserver's wording and add how to fix it. Needs no policy and is always enforced
(``refused_by_apiserver``).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..pods.fields import RESOURCES
from ..pods.gpus import counts_as_gpu
from ..pods.objects import container_label, containers
from ..pods.quantity import QuantityError, QuantityTooLarge, format_quantity, parse_quantity
from .base import PodContext, PodView, Violation
from .registry import rule

RULE = "gpu-quantity"
record = rule(RULE, order=10, reads={"container.resources": RESOURCES}, module=__name__)
#: More of one GPU resource than any node advertises (MIG slices and time-slicing replicas multiply a
#: node's GPUs, but not to this): a count beyond it is refused before any arithmetic on it.
MOST_ON_A_NODE = 2**16
PART_OF_A_GPU = (
    "request whole GPUs; for part of a GPU use nvidia.com/gpu.shared (time-slicing) "
    "or a MIG profile such as nvidia.com/mig-1g.10gb"
)


def _section(resources: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    values = resources.get(name)
    return values if isinstance(values, Mapping) else {}


def _text(raw: object) -> str:
    """The value as written; a YAML integer too long to print is named by its size."""
    return str(raw) if not isinstance(raw, int) or raw.bit_length() < 200 else f"<{raw.bit_length()}-bit number>"


def _shown(raw: object) -> str:
    """The value as the tenant wrote it, cut short: a quantity of thousands of digits is not echoed back."""
    text = _text(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _too_large(path: str, who: str, raw: object) -> Violation:
    if _text(raw).startswith("-") or (isinstance(raw, int) and raw < 0):
        words, fix = "must be greater than or equal to 0", "request at least 1 GPU"
    else:
        words = f"must be less than or equal to {MOST_ON_A_NODE}"
        fix = f'no node has more than {MOST_ON_A_NODE} of one GPU resource: request whole GPUs, such as "1"'
    return Violation(RULE, path, who, f'Invalid value: "{_shown(raw)}": {words}', fix, refused_by_apiserver=True)


# Over 60 lines: the apiserver's quantity checks in its own order (k/k validation.go), each with its message.
@record.validator(pods="any", needs_policy=False)
def require_whole_gpus(pod: PodView, ctx: PodContext) -> list[Violation]:
    spec = pod.spec
    violations: list[Violation] = []
    for fld, index, container in containers(spec):
        if fld == "ephemeralContainers":
            continue  # any resources there are refused by gpu_placement
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            continue
        base = ctx.spec_field(f"{fld}[{index}].resources")
        who = container_label(fld, container)
        requests: Mapping[str, Any] = _section(resources, "requests")
        limits: Mapping[str, Any] = _section(resources, "limits")
        parsed: dict[tuple[str, str], Fraction | None] = {}
        for section, values in (("limits", limits), ("requests", requests)):
            for resource, raw in values.items():
                if not counts_as_gpu(resource, ctx.policy):
                    continue
                if section == "requests" and resource in limits and _text(limits[resource]) == _text(raw):
                    parsed[(section, resource)] = parsed.get(("limits", resource))
                    continue  # defaulted from the limit (SetDefaults_Pod): the limit's message says it all
                path = f"{base}.{section}[{resource}]"
                try:
                    value = parse_quantity(raw)
                    if abs(value) > MOST_ON_A_NODE:
                        raise QuantityTooLarge(str(raw))
                except QuantityTooLarge:
                    violations.append(_too_large(path, who, raw))
                    continue
                except QuantityError:
                    violations.append(
                        Violation(
                            RULE,
                            path,
                            who,
                            f'Invalid value: "{_shown(raw)}": is not a quantity',
                            'write a whole number such as "1"',
                            refused_by_apiserver=True,
                        )
                    )
                    continue
                parsed[(section, resource)] = value
                if value < 0:
                    violations.append(
                        Violation(
                            RULE,
                            path,
                            who,
                            f'Invalid value: "{_shown(raw)}": must be greater than or equal to 0',
                            "request at least 1 GPU",
                            refused_by_apiserver=True,
                        )
                    )
                elif value.denominator != 1:
                    violations.append(
                        Violation(
                            RULE,
                            path,
                            who,
                            f'Invalid value: "{_shown(raw)}": must be an integer',
                            PART_OF_A_GPU,
                            refused_by_apiserver=True,
                        )
                    )
        for (section, resource), request in parsed.items():
            if section != "requests":
                continue
            if resource not in limits:
                # Pods get requests defaulted from limits (SetDefaults_Pod), never the other way round.
                violations.append(
                    Violation(
                        RULE,
                        f"{base}.limits",
                        who,
                        f"Required value: Limit must be set for non overcommitable resources ({resource})",
                        f"set resources.limits[{resource}] to the same whole number as the request "
                        f'("{requests[resource]}"), or only set the limit',
                        refused_by_apiserver=True,
                    )
                )
                continue
            limit = parsed.get(("limits", resource))
            if request is None or limit is None or request.denominator != 1 or limit.denominator != 1:
                continue  # unparsable or fractional: already reported above
            if limit != request:
                violations.append(
                    Violation(
                        RULE,
                        f"{base}.requests[{resource}]",
                        who,
                        f'Invalid value: "{requests[resource]}": must be equal to {resource} limit of '
                        f"{format_quantity(limit)}",
                        "GPUs cannot be overcommitted: make the request equal to the limit, or drop the request",
                        refused_by_apiserver=True,
                    )
                )
    return violations
