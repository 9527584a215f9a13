"""GPU rules, one topic per module. Importing the package registers them all (see ``registry``); each rule's
record gives its place in the run order (mutators: runtime class, tolerations, model, then attribution, last
so its provenance annotation sees everything else), so the order of these imports does not matter. The
registry is checked once they are all in: a module here that registers no rule stops the import.

A rule never imports another rule and does no I/O: what two rules both need is a fact the engine computes
once into the pod context (``base.PodContext``) or a helper of ``webhook.pods``."""

from . import (  # noqa: F401
    attribution,
    cdi_devices,
    device_variables,
    feasibility,
    fraction_annotations,
    gpu_limits,
    gpu_placement,
    gpu_quantities,
    gpu_shapes,
    model_selection,
    privileged,
    runtime_class,
    tolerations,
    visible_devices,
)
from .registry import REGISTRY

REGISTRY.seal(__name__, __path__)
