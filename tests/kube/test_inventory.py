"""The fleet watcher (webhook/kube/inventory.py) on what only it reads, against the fake apiserver of
tests/kube/fakeapi.py: kinds the cluster does not serve, and a kind gpugate may not list. Its list+watch is
tested with the namespace cache's in tests/kube/test_informer.py."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client

from tests.kube.fakeapi import FakeAPI, wait_until, write_kubeconfig
from tests.kube.test_informer import started
from webhook.kube.client import configuration
from webhook.kube.inventory import FleetWatcher


def test_the_fleet_counts_unserved_kinds_as_listed_and_empty(tmp_path: Path) -> None:
    """A fake that serves nodes only: RuntimeClasses and DRA's kinds answer 404 on every version."""
    api = FakeAPI("/api/v1/nodes", "Node")
    api.put("gpu-0", {"nvidia.com/gpu.product": "NVIDIA-L4"})
    configured = configuration(write_kubeconfig(tmp_path / "kubeconfig", api.url))
    watcher = FleetWatcher(kubernetes.client.ApiClient(configured), backoff_initial=0.05, backoff_max=0.2)
    try:
        started(watcher)
        inventory = watcher.inventory()
        assert inventory is not None and not inventory.runtime_classes and not inventory.slices
        assert [node.name for node in inventory.nodes] == ["gpu-0"]
        assert watcher.unsynced() == [] and watcher.stats()["deviceclasses"] == 0
        assert any(r.startswith("/apis/resource.k8s.io/v1beta1/deviceclasses") for r in api.requests)
    finally:
        watcher.stop()
        api.close()


def test_a_kind_gpugate_may_not_list_is_listed_as_unread(tmp_path: Path) -> None:
    """NodePools without the RBAC rule for them (403): synced, empty and unread, so feasibility warns; a kind
    that is simply not served (404) is synced and empty, not unread."""
    api = FakeAPI("/api/v1/nodes", "Node")
    api.put("gpu-0", {"nvidia.com/gpu.product": "NVIDIA-L4"})
    api.forbidden.add("/apis/karpenter.sh/v1/nodepools")
    configured = configuration(write_kubeconfig(tmp_path / "kubeconfig", api.url))
    watcher = FleetWatcher(kubernetes.client.ApiClient(configured), backoff_initial=0.05, backoff_max=0.2)
    try:
        started(watcher)
        inventory = watcher.inventory()
        assert inventory is not None and inventory.unread == frozenset({"nodepools"}) and not inventory.pools
        assert watcher.stats()["watch_errors"] == 0
        api.forbidden.clear()  # the rule granted: the next look lists them (none here), no longer unread
        wait_until(lambda: (watcher.inventory() or inventory).unread == frozenset(), "NodePools read")
    finally:
        watcher.stop()
        api.close()


def test_the_fleet_keeps_each_runtime_class_s_handler_from_list_and_watch(tmp_path: Path) -> None:
    """RuntimeClasses by name with their handler (an alias of nvidia is one by its handler), kept current by the
    watch: a class re-pointed at another handler, and one deleted."""
    api = FakeAPI("/apis/node.k8s.io/v1/runtimeclasses", "RuntimeClass")

    def runtime_class(name: str, handler: str) -> dict[str, object]:
        return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}

    api.put_object("nvidia", runtime_class("nvidia", "nvidia"))
    api.put_object("my-gpu", runtime_class("my-gpu", "nvidia"))
    configured = configuration(write_kubeconfig(tmp_path / "kubeconfig", api.url))
    watcher = FleetWatcher(kubernetes.client.ApiClient(configured), backoff_initial=0.05, backoff_max=0.2)
    try:
        started(watcher)
        inventory = watcher.inventory()
        assert inventory is not None and inventory.runtime_handlers == {"nvidia": "nvidia", "my-gpu": "nvidia"}
        assert inventory.runtime_classes == {"nvidia", "my-gpu"}
        api.put_object("my-gpu", runtime_class("my-gpu", "crun"))
        api.delete("nvidia")
        wait_until(
            lambda: (watcher.inventory() or inventory).runtime_handlers == {"my-gpu": "crun"}, "the watch's changes"
        )
        assert (watcher.inventory() or inventory).runtime_classes == {"my-gpu"}
    finally:
        watcher.stop()
        api.close()
