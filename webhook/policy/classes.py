"""GPU model classes: node label values exactly as a pool's nodes carry them, and the resources they offer;
and the small bounded memo both classes and device profiles answer repeated questions from."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def matches_any(resource: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, glob) for glob in globs)


CACHE_LIMIT = 512  # resource names come from tenants: remember only so many answers per policy


def remember(cache: dict[Any, Any], key: Any, compute: Callable[[], Any]) -> Any:
    """A policy's answer for ``key``, computed once while the cache is small (the decision's hot path
    matches resource names against globs for every container of every request)."""
    if key in cache:
        return cache[key]
    value = compute()
    if len(cache) < CACHE_LIMIT:
        cache[key] = value
    return value


@dataclass(frozen=True)
class ModelClass:
    """A GPU model class: node label values exactly as its nodes carry them, and the resources they offer."""

    name: str
    device: str
    values: tuple[str, ...]
    #: Resources the class's nodes offer (globs allowed); a pod is only steered here if all it requests is.
    resources: tuple[str, ...]
    #: Alias label or annotation key -> values that mean this class (``cloud.google.com/gke-accelerator``).
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: DeviceClasses of the class's DRA pools: their devices are this class's GPUs (DRA nodes carry no GFD label).
    device_classes: tuple[str, ...] = ()
    #: Node labels of the class's pools, added as they are (a DRA pool has no model label to select by).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    _cache: dict[Any, bool] = field(default_factory=dict, compare=False, repr=False)

    def offers(self, resources: Iterable[str]) -> bool:
        wanted = tuple(resources)
        return bool(remember(self._cache, wanted, lambda: all(matches_any(r, self.resources) for r in wanted)))


@dataclass(frozen=True)
class Models:
    classes: Mapping[str, ModelClass]
    #: Classes tried in order when a pod names none; the first that offers what the pod requests wins.
    defaults: tuple[str, ...] = ()

    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def has_dra_classes(self) -> bool:
        """Some class is DRA pools only (DeviceClasses, no model label values)."""
        found = self._cache.get("has-dra")
        if found is None:
            found = self._cache["has-dra"] = any(c.device_classes and not c.values for c in self.classes.values())
        return bool(found)

    def default_is_dra(self, device: str, resources: frozenset[str]) -> bool:
        """The class a pod that names none and chose nothing gets is DRA pools only."""
        key = ("default-dra", device, resources)
        found = self._cache.get(key)
        if found is None:
            chosen = self.default_for(device, sorted(resources))
            found = chosen is not None and bool(chosen.device_classes) and not chosen.values
            if len(self._cache) < CACHE_LIMIT:
                self._cache[key] = found
        return bool(found)

    @property
    def dra_choice_keys(self) -> frozenset[str]:
        """The label and annotation keys through which a pod's own choice can reach a DRA-only class."""
        if "dra-keys" not in self._cache:
            dra = [c for c in self.classes.values() if c.device_classes and not c.values]
            self._cache["dra-keys"] = frozenset(k for c in dra for k in (*c.aliases, *c.node_selector))
        return self._cache["dra-keys"]  # type: ignore[no-any-return]

    def offering(self, device: str, resources: Iterable[str]) -> list[ModelClass]:
        wanted = tuple(resources)
        return [c for c in self.classes.values() if c.device == device and c.offers(wanted)]

    def default_for(self, device: str, resources: Iterable[str]) -> ModelClass | None:
        """The class a pod that names none gets: the first listed default that can serve it, else the only
        class that can; None when none or several can."""
        wanted = tuple(resources)
        return remember(self._cache, ("default", device, wanted), lambda: self._default_for(device, wanted))  # type: ignore[no-any-return]

    def _default_for(self, device: str, wanted: tuple[str, ...]) -> ModelClass | None:
        found = self.defaults_for(device, wanted)
        return found[0] if found else None

    def defaults_for(self, device: str, resources: Iterable[str]) -> list[ModelClass]:
        """Every class a pod that names none may get, in order: the listed defaults that can serve it, else the
        only class that can (a pod too large for the first default's nodes takes the next that holds it)."""
        wanted = tuple(resources)
        candidates = self.offering(device, wanted)
        listed = [c for name in self.defaults for c in candidates if c.name == name]
        return listed or (candidates if len(candidates) == 1 else [])
