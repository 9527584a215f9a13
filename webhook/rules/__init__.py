"""GPU rules, one topic per module. Importing the package registers them all (see ``registry``) in the order
below, which is the order mutators run in: runtime class, tolerations, model, then attribution (last, so its
provenance annotation sees everything else)."""

# isort: off
from . import gpu_quantities, gpu_placement, gpu_shapes, gpu_limits  # noqa: F401
from . import runtime_class, tolerations, model_selection, attribution, visible_devices  # noqa: F401
from . import feasibility  # noqa: F401
# isort: on
