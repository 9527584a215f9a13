"""The JSON types of every field gpugate reads in an admitted object, as kube-apiserver sends them.

kube-apiserver decodes a request into its Go types before any admission plugin runs, then encodes
the typed object into the AdmissionReview (k8s.io/apiserver pkg/admission/plugin/webhook/request
admissionreview.go). So labels always arrive as a map of strings, containers as a list of objects,
quantities as strings: anything else did not come from an apiserver. Such a review is refused with
code 400 and the field path, instead of reaching a rule that would trip over it. Fields gpugate
never reads are not looked at; ``null`` stands for an absent field, as in Go. Every kind gpugate reads is
checked: the built-in workloads and the kinds the policy directory declares (GPUWorkloadKind), whose pod
templates the rules read just the same.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from .. import rules  # noqa: F401  (registers every rule, and with it what each reads)
from ..pods.fields import ANY_OBJECT, BASE_READS, CONTAINER_LISTS, QUANTITY, MapOf
from ..pods.objects import dig, shapes_of
from ..pods.operated import operated_pods
from ..policy.model import WorkloadKind
from ..rules.registry import REGISTRY, RegistryError

Workloads = Mapping[tuple[str, str], WorkloadKind]


def _merge(node: dict[str, Any], keys: list[str], schema: Any, path: str) -> None:
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise RegistryError(f"{path}: declared both as a field and as a value")
    last = keys[-1]
    if last not in node:
        node[last] = copy.deepcopy(schema)
    elif isinstance(node[last], dict) and isinstance(schema, dict):
        for key, sub in schema.items():
            _merge(node[last], [key], sub, f"{path}.{key}")
    elif node[last] != schema:
        raise RegistryError(f"{path}: two rules read it with different types")


def pod_schemas(reads: Iterable[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The object-metadata and pod-spec schemas of a set of reads (``pods.fields``)."""
    tree: dict[str, dict[str, Any]] = {"metadata": {}, "spec": {}, "container": {}}
    for path, schema in reads:
        top, _, rest = path.partition(".")
        if top not in tree or not rest or (top == "spec" and rest.split(".")[0] in CONTAINER_LISTS):
            raise RegistryError(f"{path}: a read is metadata.<field>, spec.<field> or container.<field>")
        _merge(tree[top], rest.split("."), schema, path)
    spec = {name: [tree["container"]] for name in CONTAINER_LISTS} | tree["spec"]
    return tree["metadata"], spec


#: Every field gpugate reads: what finding pods and GPUs needs, and what the registered rules declare.
OBJECT_META, POD_SPEC = pod_schemas([*BASE_READS.items(), *REGISTRY.reads()])

MAX_REPORTED = 10  # a hostile object can be wrong in thousands of places; the first few say enough
_NAMES = {str: "a string", bool: "a boolean", int: "an integer", QUANTITY: "a quantity string", ANY_OBJECT: "an object"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else "null"


def _check(value: Any, schema: Any, path: str, problems: list[str]) -> None:
    if value is None:
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object, got {_json_type(value)}")
            return
        for key, sub in schema.items():
            if key in value:
                _check(value[key], sub, f"{path}.{key}", problems)
    elif isinstance(schema, list):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {_json_type(value)}")
            return
        for index, item in enumerate(value):
            _check(item, schema[0], f"{path}[{index}]", problems)
    elif isinstance(schema, MapOf):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map, got {_json_type(value)}")
            return
        for key, item in value.items():
            _check(item, schema.value, f"{path}[{key}]", problems)
    elif not _matches(value, schema):
        problems.append(f"{path}: expected {_NAMES[schema]}, got {_json_type(value)}")


def _matches(value: Any, schema: Any) -> bool:
    if schema is QUANTITY:
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if schema is ANY_OBJECT:
        return isinstance(value, dict)
    if schema is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, schema)


#: The most containers of all kinds (containers, init and ephemeral containers) gpugate reads in one pod spec.
#: Kubernetes sets no such bound, but every rule walks the containers, so without one a pod of 20,000 containers
#: cost about a second of CPU per call; real pods have a handful (a large inference pod a dozen or two), and
#: ``kubectl debug`` adds one ephemeral container per session.
MAX_CONTAINERS = 256


#: The most ``spec.resourceClaims`` entries gpugate reads in one pod spec. Each may be a read of the apiserver
#: (``serve.lookups``); a pod naming thousands made one dry-run thousands of reads. A real GPU pod names a few.
MAX_RESOURCE_CLAIMS = 32


def _too_many_containers(spec: Any, path: str) -> str | None:
    """A spec with more containers than ``MAX_CONTAINERS`` (or more claims than ``MAX_RESOURCE_CLAIMS``), in the
    apiserver's words (field.TooMany)."""
    if not isinstance(spec, Mapping):
        return None
    claims = spec.get("resourceClaims")
    if isinstance(claims, list) and len(claims) > MAX_RESOURCE_CLAIMS:
        return (
            f"{path}.resourceClaims: Too many: {len(claims)}: must have at most {MAX_RESOURCE_CLAIMS} items; name "
            "one claim per device set (a request's count asks for several devices)"
        )
    counts = {f: len(spec[f]) for f in CONTAINER_LISTS if isinstance(spec.get(f), list)}
    total = sum(counts.values())
    if total <= MAX_CONTAINERS:
        return None
    largest = max(counts, key=lambda f: counts[f])
    return (
        f"{path}.{largest}: Too many: {total}: must have at most {MAX_CONTAINERS} items (containers, init and "
        "ephemeral containers together); split the work over several pods"
    )


def object_problems(obj: Mapping[str, Any], *, path: str, workloads: Workloads | None = None) -> list[str]:
    """Fields of ``obj`` (a Pod or a workload gpugate reads) whose JSON type no apiserver would send.
    ``workloads``: the kinds gpugate reads (``pods.objects.workload_kinds``; the built-in ones when None)."""
    problems: list[str] = []
    for key in ("apiVersion", "kind"):
        if key in obj and not isinstance(obj[key], str):
            problems.append(f"{path}.{key}: expected a string, got {_json_type(obj[key])}")
    if problems:
        return problems
    _check(obj.get("metadata"), OBJECT_META, f"{path}.metadata", problems)
    if problems:
        return problems  # finding the pod templates reads the metadata
    shapes = shapes_of(obj, workloads=workloads)
    for shape in shapes or ():  # kinds gpugate does not read are not looked into
        if shape.template:
            _check(dig(obj, shape.meta_keys), OBJECT_META, f"{path}.{shape.meta_path}", problems)
        spec = dig(obj, shape.spec_keys)
        too_many = _too_many_containers(spec, f"{path}.{shape.spec_path}")
        if too_many:
            return [too_many]  # before anything walks them
        _check(spec, POD_SPEC, f"{path}.{shape.spec_path}", problems)
    if shapes is not None:
        for pod in operated_pods(obj):  # what an operator builds its pods from (pods.operated), as the rules read it
            found: list[str] = []
            too_many = _too_many_containers(pod.spec, "spec")
            if too_many:
                where, _, what = too_many.partition(": ")
                return [f"{path}.{pod.locate(where)}: {what}"]
            _check(pod.metadata, OBJECT_META, "metadata", found)
            _check(pod.spec, POD_SPEC, "spec", found)
            for problem in found:  # named by the field the user wrote
                where, _, what = problem.partition(": ")
                problems.append(f"{path}.{pod.locate(where)}: {what}")
    return problems


def request_problems(request: Mapping[str, Any], *, workloads: Workloads | None = None) -> list[str]:
    """Fields of an AdmissionRequest gpugate reads (besides uid, kind and operation) with a wrong JSON type."""
    problems: list[str] = []
    for key in ("namespace", "name", "subResource"):
        if request.get(key) is not None and not isinstance(request[key], str):
            problems.append(f"request.{key}: expected a string, got {_json_type(request[key])}")
    if request.get("dryRun") is not None and not isinstance(request["dryRun"], bool):
        problems.append(f"request.dryRun: expected a boolean, got {_json_type(request['dryRun'])}")
    for key in ("object", "oldObject"):
        if isinstance(request.get(key), dict):
            problems += object_problems(request[key], path=f"request.{key}", workloads=workloads)
    if len(problems) > MAX_REPORTED:
        problems[MAX_REPORTED:] = [f"and {len(problems) - MAX_REPORTED} more"]
    return problems
