"""The admission decision: an AdmissionRequest and the policies in force in, a Decision out. Holds the
vocabulary (``decision``), the two passes (``engine``), the JSON-type guard (``shapes``), the JSON patch
(``patch``) and the offline path ``check`` and ``audit`` share (``offline``).

Nothing here does I/O: no flask, no logging set-up, no clock, no environment, no Kubernetes client (the same
rule as flask's ``sansio`` package; an import-linter contract in pyproject.toml enforces it). Everything a
rule needs arrives as an argument: the object, the governing policy, the namespace's labels.
"""

from .decision import Decision, Environment, allowed, denied, errored, fit, pack
from .engine import mutate, validate

__all__ = ["Decision", "Environment", "allowed", "denied", "errored", "fit", "mutate", "pack", "validate"]
