"""The Kubernetes scheduler backend: cordon, taint, annotate, evict through the eviction API, uncordon only ours.

Implements ``sentinel.actuator.Scheduler`` with the official ``kubernetes`` client (optional extra
``sentinel-gpu[kubernetes]``). A "job" is a pod, named ``namespace/name``. Pods owned by a DaemonSet, mirror
(static) pods, finished pods and pods already terminating are not jobs: they are neither evicted nor waited for.

- drain: ``spec.unschedulable = true`` (only if the node was schedulable: ``sentinel.dev/cordoned`` records that
  the cordon is ours), the taint ``<taint_key>=<incident>:NoSchedule``, and the annotations
  ``sentinel.dev/drain-reason`` and ``sentinel.dev/incident`` on the node and its pods.
- requeue: an Eviction per pod, so PodDisruptionBudgets are respected: the API answers 429 while a budget
  blocks; we retry with exponential backoff and then report the pod as blocked (``ActuatorError``).
- checkpoint: the annotation ``sentinel.dev/checkpoint-requested=<ts>`` on the pod; the training side answers
  with ``sentinel.dev/checkpoint-ack=<ts>`` (same or later), waited for up to ``checkpoint_timeout_s``.
- resume: only a node whose drain reason carries our prefix; the cordon is lifted only if it was ours.

Patches are JSON merge patches: lists (taints) are sent whole, so the result is the same on any API server.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from sentinel.actuator import OWNED_REASON_PREFIX, JobTiming
from sentinel.clock import Clock
from sentinel.config.actuation import KubernetesConfig
from sentinel.errors import ActuatorError, ValidationError
from sentinel.events import NODE_NAME_PATTERN

OWNED_PREFIX = OWNED_REASON_PREFIX
REASON, INCIDENT, CORDONED = "sentinel.dev/drain-reason", "sentinel.dev/incident", "sentinel.dev/cordoned"
DRAINED_AT = "sentinel.dev/drained-at"  # epoch seconds of our drain (auto-resume needs a boot after it)
CHECKPOINT_REQUESTED, CHECKPOINT_ACK = "sentinel.dev/checkpoint-requested", "sentinel.dev/checkpoint-ack"
LAST_CHECKPOINT, ENDS = "sentinel.dev/last-checkpoint-ts", "sentinel.dev/ends-ts"
_MERGE = "application/merge-patch+json"
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]")


def build_api(config: KubernetesConfig) -> Any:
    """A CoreV1Api from the kubeconfig (``kubeconfig``/``context``, else $KUBECONFIG or ~/.kube/config) or from
    the pod's service account (``in_cluster``)."""
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    try:
        if config.in_cluster:
            kube_config.load_incluster_config()
            return client.CoreV1Api()
        api_client = kube_config.new_client_from_config(config_file=config.kubeconfig or None,
                                                        context=config.context or None)
    except (ConfigException, OSError) as exc:
        raise ActuatorError(f"actuator.kubernetes: cannot load the cluster configuration: {exc}") from None
    return client.CoreV1Api(api_client)


def _check_node(node: str) -> str:
    if not re.match(NODE_NAME_PATTERN, node):
        raise ValidationError(f"not a valid node name: {node!r}")
    return node


def _split_job(job_id: str) -> tuple[str, str]:
    namespace, _, name = job_id.partition("/")
    if not (_DNS_NAME.match(namespace) and _DNS_NAME.match(name)):
        raise ValidationError(f"not a pod id (namespace/name): {job_id!r}")
    return namespace, name


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KubernetesScheduler:
    def __init__(self, api: Any, config: KubernetesConfig, clock: Clock,
                 wait: Callable[[float], object] | None = None) -> None:
        from kubernetes.client.exceptions import ApiException

        self.api = api
        self.config = config
        self.clock = clock
        self.wait = wait or threading.Event().wait  # never set: a plain interruptible delay
        self._api_exception = ApiException

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.config.request_timeout_s, **kwargs)
        except self._api_exception:
            raise
        except Exception as exc:  # urllib3 connection/timeout errors, undecodable responses
            raise ActuatorError(f"{what}: Kubernetes API unreachable: {type(exc).__name__}: {exc}") from None

    def _pods(self, node: str) -> list[Any]:
        # The field selector spares a real API server the work; the filter below is what we rely on.
        pods = self._call(f"list pods on {node}", self.api.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}")
        return [p for p in pods.items if p.spec is not None and p.spec.node_name == node and _is_job(p)]

    def _node(self, node: str) -> Any:
        try:
            return self._call(f"read node {node}", self.api.read_node, node)
        except self._api_exception as exc:
            raise ActuatorError(f"read node {node}: {exc.status} {exc.reason}") from None

    def _patch_node(self, node: str, body: dict[str, Any]) -> None:
        try:
            self._call(f"patch node {node}", self.api.patch_node, node, body, _content_type=_MERGE)
        except self._api_exception as exc:
            raise ActuatorError(f"patch node {node}: {exc.status} {exc.reason}") from None

    def _annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        try:
            self._call(f"annotate pod {namespace}/{name}", self.api.patch_namespaced_pod, name, namespace,
                       {"metadata": {"annotations": annotations}}, _content_type=_MERGE)
        except self._api_exception as exc:
            if exc.status == 404:
                return False  # gone meanwhile
            raise ActuatorError(f"annotate pod {namespace}/{name}: {exc.status} {exc.reason}") from None
        return True

    # --- sentinel.actuator.Scheduler -----------------------------------------------------------------------
    def jobs_on(self, node: str) -> list[str]:
        return sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in self._pods(_check_node(node)))

    def checkpoint(self, job_id: str) -> bool:
        namespace, name = _split_job(job_id)
        requested = self.clock.now()
        if not self._annotate_pod(namespace, name, {CHECKPOINT_REQUESTED: f"{requested:.3f}"}):
            return False
        deadline = requested + self.config.checkpoint_timeout_s
        while True:
            acked = _float(self._annotations(namespace, name).get(CHECKPOINT_ACK))
            if acked is not None and acked >= requested - 0.001:
                return True
            if self.clock.now() >= deadline:
                return False
            self.wait(self.config.checkpoint_poll_s)

    def drain(self, node: str, reason: str) -> None:
        current = self._node(_check_node(node))
        incident = reason.removeprefix(OWNED_PREFIX).split()[0] if reason.startswith(OWNED_PREFIX) else ""
        value = _LABEL_VALUE.sub("-", incident)[:63].strip("-._") or "unknown"
        taints = [_taint_dict(t) for t in (current.spec.taints or []) if t.key != self.config.taint_key]
        taints.append({"key": self.config.taint_key, "value": value, "effect": "NoSchedule"})
        annotations = {REASON: reason, INCIDENT: incident, DRAINED_AT: f"{self.clock.now():.0f}"}
        if not current.spec.unschedulable:
            annotations[CORDONED] = "true"  # the cordon is ours to lift
        self._patch_node(node, {"spec": {"unschedulable": True, "taints": taints},
                                "metadata": {"annotations": annotations}})
        for pod in self._pods(node):
            self._annotate_pod(pod.metadata.namespace, pod.metadata.name, {INCIDENT: incident})

    def drain_reason(self, node: str) -> str | None:
        current = self._node(_check_node(node))
        if not current.spec.unschedulable:
            return None
        annotations = current.metadata.annotations or {}
        return annotations.get(REASON) or "cordoned (not by Sentinel)"

    def requeue(self, job_id: str) -> None:
        from kubernetes import client

        namespace, name = _split_job(job_id)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        delay = self.config.eviction_backoff_s
        for attempt in range(self.config.eviction_retries + 1):
            try:
                self._call(f"evict {job_id}", self.api.create_namespaced_pod_eviction, name, namespace, body)
                return
            except self._api_exception as exc:
                if exc.status == 404:
                    return  # already gone: requeueing twice changes nothing
                if exc.status != 429:
                    raise ActuatorError(f"evict {job_id}: {exc.status} {exc.reason}") from None
            if attempt < self.config.eviction_retries:
                self.wait(delay)
                delay = min(delay * 2, 60.0)
        raise ActuatorError(f"evict {job_id}: blocked by a PodDisruptionBudget (429) after "
                            f"{self.config.eviction_retries + 1} attempts")

    # --- beyond the protocol ----------------------------------------------------------------------------------
    def resume(self, node: str) -> bool:
        """Undo our drain: remove our taint and annotations; uncordon only if we cordoned. False if not ours."""
        current = self._node(_check_node(node))
        annotations = current.metadata.annotations or {}
        if not annotations.get(REASON, "").startswith(OWNED_PREFIX):
            return False
        taints = [_taint_dict(t) for t in (current.spec.taints or []) if t.key != self.config.taint_key]
        spec: dict[str, Any] = {"taints": taints or None}
        if annotations.get(CORDONED) == "true":
            spec["unschedulable"] = None
        self._patch_node(node, {"spec": spec, "metadata": {"annotations": {REASON: None, INCIDENT: None,
                                                                          CORDONED: None, DRAINED_AT: None}}})
        return True

    def node_names(self) -> list[str]:
        try:
            listed = self._call("list nodes", self.api.list_node)
        except self._api_exception as exc:
            raise ActuatorError(f"list nodes: {exc.status} {exc.reason}") from None
        return [str(n.metadata.name) for n in listed.items]

    def drained_since(self, node: str) -> float | None:
        current = self._node(_check_node(node))
        if not current.spec.unschedulable:
            return None
        return _float((current.metadata.annotations or {}).get(DRAINED_AT))

    def job_timing(self, job_id: str) -> JobTiming | None:
        """What the training side published on its pod: last checkpoint and expected end (epoch seconds)."""
        namespace, name = _split_job(job_id)
        annotations = self._annotations(namespace, name)
        timing = JobTiming(_float(annotations.get(LAST_CHECKPOINT)), _float(annotations.get(ENDS)))
        return timing if timing.last_checkpoint_ts is not None or timing.end_ts is not None else None

    def _annotations(self, namespace: str, name: str) -> dict[str, str]:
        try:
            pod = self._call(f"read pod {namespace}/{name}", self.api.read_namespaced_pod, name, namespace)
        except self._api_exception as exc:
            if exc.status == 404:
                return {}
            raise ActuatorError(f"read pod {namespace}/{name}: {exc.status} {exc.reason}") from None
        return dict(pod.metadata.annotations or {})


def _is_job(pod: Any) -> bool:
    meta = pod.metadata
    if meta.deletion_timestamp is not None or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
        return False
    if "kubernetes.io/config.mirror" in (meta.annotations or {}):
        return False
    return not any(ref.kind == "DaemonSet" for ref in (meta.owner_references or []))


def _taint_dict(taint: Any) -> dict[str, Any]:
    return {k: v for k, v in {"key": taint.key, "value": taint.value, "effect": taint.effect}.items() if v is not None}
