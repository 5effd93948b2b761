"""A Kubernetes API for tests: the kmock emulator served over HTTP from a background thread.

No API server can run on these machines; kmock keeps objects in memory and serves list, read, patch (JSON merge
patch), create and delete like one. It has no eviction subresource, so ``Cluster`` registers one that behaves like
the real API for what Sentinel relies on: 404 for a missing pod, 429 while a disruption budget blocks, else the
pod is deleted. It knows nothing of PodDisruptionBudget objects: a test says which pods are blocked and for how
many attempts (``block``). Field selectors are ignored, as kmock ignores them.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock

PODS, NODES = kmock.resource("", "v1", "pods"), kmock.resource("", "v1", "nodes")


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.blocked: dict[str, int] = {}  # "ns/name" -> evictions still refused with 429 (-1: forever)
        self.acking: set[str] = set()  # pods whose training side acknowledges checkpoint requests
        self.evictions: list[str] = []
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self.url = ""

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with kmock.KubernetesEmulator() as km, kmock.Server(km) as server:
            self.km, self.url = km, str(server.url).rstrip("/")
            km["post", kmock.subresource("eviction")] << self._evict
            km["patch", kmock.resource("", "v1", "pods")] << self._patch_pod
            self._ready.set()
            await self._stop.wait()

    def start(self) -> Cluster:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kmock did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def kubeconfig(self) -> str:
        """A kubeconfig naming this server, so tests load the client the way production does."""
        path = self.tmp_path / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "sentinel", "user": {"token": "test-token"}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "sentinel"}}],
        }))
        return str(path)

    # --- objects ---------------------------------------------------------------------------------------------
    def add_node(self, name: str, unschedulable: bool = False, taints: list[dict[str, str]] | None = None) -> None:
        spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
        if taints:
            spec["taints"] = taints
        self.km.objects[NODES, None, name] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                              "spec": spec}

    def add_pod(self, name: str, node: str, namespace: str = "train", owner: str = "Job", phase: str = "Running",
                annotations: dict[str, str] | None = None) -> None:
        self.km.objects[PODS, namespace, name] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {},
                         "ownerReferences": [{"apiVersion": "v1", "kind": owner, "name": f"{name}-owner",
                                              "uid": f"uid-{name}"}]},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer:1"}]},
            "status": {"phase": phase},
        }

    def node(self, name: str) -> dict[str, Any]:
        return self.km.objects[NODES, None, name].raw  # type: ignore[no-any-return]

    def pod(self, name: str, namespace: str = "train") -> dict[str, Any] | None:
        obj = self.km.objects[PODS, namespace, name]
        return None if obj.deleted else obj.raw

    def requests(self) -> int:
        return len(self.km)

    # --- reactions (run on the server's loop) ---------------------------------------------------------------
    def _evict(self, request: kmock.Request) -> dict[str, Any]:
        job = f"{request.namespace}/{request.name}"
        key = (PODS, request.namespace, request.name)
        if key not in self.km.objects or self.km.objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        remaining = self.blocked.get(job, 0)
        if remaining:
            self.blocked[job] = remaining - 1 if remaining > 0 else -1
            raise kmock.KubernetesError(status=429, reason="TooManyRequests",
                                        message="Cannot evict pod as it would violate the pod's disruption budget.")
        self.km.objects[key].delete()
        self.evictions.append(job)
        return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}

    def _patch_pod(self, request: kmock.Request) -> dict[str, Any]:
        obj = self.km.objects[PODS, request.namespace, request.name]  # the emulator applied the patch already
        requested = obj.raw["metadata"].get("annotations", {}).get("sentinel.dev/checkpoint-requested")
        if requested and f"{request.namespace}/{request.name}" in self.acking:
            obj.patch({"metadata": {"annotations": {"sentinel.dev/checkpoint-ack": requested}}})
        return obj.raw  # type: ignore[no-any-return]


def running(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path).start()
    try:
        yield cluster
    finally:
        cluster.stop()
