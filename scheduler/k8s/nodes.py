"""Each Kubernetes node as its kubelet sees it, for the loop: what is free and whether it
takes new pods.

On AKS pasture binds task pods by ``spec.nodeName``: it is the scheduler of those nodes,
and the kubelet admits a pod only when the node's allocatable minus the requests of every
non-terminal pod already bound there holds it (kubelet admission, ``OutOfcpu`` /
``OutOfmemory``; the device manager's ``UnexpectedAdmissionError`` for GPUs). So the loop
keeps two caches, filled by a list and then kept current by a watch (the client-go
informer pattern, :class:`Informer`):

    pods  (every namespace, bound ones) --held()-->  requests of DaemonSet pods, system pods,
                                                     placeholders, the fence sidecar's share
    nodes --node_facts()--> {node: NodeFacts(held, schedulable, why)}

and the loop hands the core, for each registered node, its allocatable minus ``held``
(pasture's own task containers are in the ledger already) and ``cordoned`` when the Node
object says it takes no new pods (``spec.unschedulable``: a cordon, an AKS upgrade's
drain; a ``NoExecute`` taint; the ``Ready`` condition not True).

Pods are read through the client's models (``V1Pod``, ``V1Node``); the loop's service
account needs ``list`` and ``watch`` on pods in every namespace and on nodes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from scheduler.core.model import Node, NodeState
from scheduler.core.resources import Resources
from scheduler.spec.quantity import parse_cpu, parse_memory

log = logging.getLogger("pasture.k8s")

GPU_RESOURCE = "nvidia.com/gpu"
FENCE_CONTAINER = "fence"
FENCE_RESOURCES = {"cpu": "10m", "memory": "48Mi"}
"""Requests = limits of the fence sidecar of every task pod (a sleeping Python process;
:func:`scheduler.agent.k8s_pod.fence_sidecar`): what a task pod holds beyond its task."""

REGISTERED_LABEL = "pasture.io/registered"
"""Node label the agent sets on its Node object before it registers the node with
pasture (value ``"true"``): placeholder pods require its absence (node affinity
``DoesNotExist``), so that kube-scheduler never puts a placeholder on a node pasture
schedules, whenever the node registered."""
TASK_LABEL = "pasture/job"
PLACEHOLDER_LABEL = "pasture/placeholder"
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Held:
    """Resources that pods other than pasture's task containers hold on a node.

    Attributes:
        cpu_m: millicores. memory: bytes. gpu: ``nvidia.com/gpu`` devices.
    """

    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Held) -> Held:
        return Held(self.cpu_m + other.cpu_m, self.memory + other.memory, self.gpu + other.gpu)


@dataclass(frozen=True)
class NodeFacts:
    """What the Kubernetes API says of one node.

    Attributes:
        held: requests of its non-terminal pods that are not pasture task containers.
        schedulable: False when it takes no new pods (cordon, NoExecute taint, not Ready).
        why: why not schedulable ('' when it is), naming the field.
    """

    held: Held = Held()
    schedulable: bool = True
    why: str = ""


def _requests(container: k8s.V1Container) -> Held:
    req = (container.resources.requests if container.resources else None) or {}
    return Held(
        parse_cpu(str(req["cpu"])) if "cpu" in req else 0,
        parse_memory(str(req["memory"])) if "memory" in req else 0,
        int(req.get(GPU_RESOURCE, 0)),
    )


def _max(a: Held, b: Held) -> Held:
    return Held(max(a.cpu_m, b.cpu_m), max(a.memory, b.memory), max(a.gpu, b.gpu))


def pod_requests(pod: k8s.V1Pod) -> Held:
    """A pod's effective requests as the kubelet admits it (Kubernetes "Resource sharing
    within containers": the larger of the app containers plus restartable sidecars and
    the largest init container); limits do not count."""
    spec = pod.spec
    if spec is None:
        return Held()
    run = Held()
    for c in spec.containers or []:
        run = run + _requests(c)
    init = Held()
    for c in spec.init_containers or []:
        if c.restart_policy == "Always":  # a native sidecar runs beside the app containers
            run = run + _requests(c)
        else:
            init = _max(init, _requests(c))
    return _max(run, init)


def is_task_pod(pod: k8s.V1Pod) -> bool:
    """Whether the pod is one of pasture's task pods (labels ``pasture/job``, no
    ``pasture/placeholder``): its task container is in pasture's ledger already."""
    labels = (pod.metadata.labels if pod.metadata else None) or {}
    return TASK_LABEL in labels and PLACEHOLDER_LABEL not in labels


def held_by(pod: k8s.V1Pod) -> Held:
    """What a pod holds beyond pasture's ledger: every request of a non-task pod, the
    fence sidecar's share of a task pod (its task container is in the ledger); nothing
    for a terminal or unbound pod."""
    if pod.spec is None or not pod.spec.node_name:
        return Held()
    if pod.status is not None and pod.status.phase in TERMINAL:
        return Held()
    if not is_task_pod(pod):
        return pod_requests(pod)
    out = Held()
    for c in pod.spec.init_containers or []:
        if c.name == FENCE_CONTAINER:
            out = out + _requests(c)
    return out


def schedulable(node: k8s.V1Node) -> tuple[bool, str]:
    """``(True, "")`` when the Node object takes new pods, else ``(False, why)``:
    ``spec.unschedulable`` (a cordon: ``kubectl cordon``, an AKS upgrade's drain), a
    ``NoExecute`` taint, or the ``Ready`` condition not True (as the node lifecycle
    controller's ``node.kubernetes.io/not-ready`` taint)."""
    spec = node.spec
    if spec is not None and spec.unschedulable:
        return False, "cordoned on Kubernetes (spec.unschedulable)"
    for taint in (spec.taints if spec else None) or []:
        if taint.effect == "NoExecute":
            value = f"={taint.value}" if taint.value else ""
            return False, f"NoExecute taint {taint.key}{value} on the Node object"
    conditions = (node.status.conditions if node.status else None) or []
    ready = [c for c in conditions if c.type == "Ready"]
    if ready and ready[0].status != "True":
        why = ready[0].reason or ready[0].status
        return False, f"Node condition Ready is {ready[0].status} ({why})"
    return True, ""


def node_facts(nodes: Iterable[k8s.V1Node], pods: Iterable[k8s.V1Pod]) -> dict[str, NodeFacts]:
    """:class:`NodeFacts` of every node in ``nodes`` (by name) from the pods bound to them
    (:func:`held_by`) and their own spec and status (:func:`schedulable`)."""
    held: dict[str, Held] = {}
    for pod in pods:
        bound = pod.spec.node_name if pod.spec else None
        if bound:
            held[bound] = held.get(bound, Held()) + held_by(pod)
    out = {}
    for node in nodes:
        name = str(node.metadata.name) if node.metadata else ""
        ok, why = schedulable(node)
        out[name] = NodeFacts(held.get(name, Held()), ok, why)
    return out


def _key(obj: Any) -> str:
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else str(meta.name)


class Informer:
    """A cache of one kind of Kubernetes object kept current by list-then-watch (the
    client-go informer pattern): one LIST, then a WATCH from its ``resourceVersion``
    (``kubernetes.watch.Watch``), re-listed when the watch expires (410 Gone) or fails.

    Args:
        list_fn: the client's list call (``CoreV1Api.list_pod_for_all_namespaces``,
            ``CoreV1Api.list_node``).
        what: name for logs.
        timeout_s: seconds one WATCH request lasts before it is renewed.
        retry_s: seconds between attempts while the API server fails.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        what: str,
        *,
        timeout_s: int = 60,
        retry_s: float = 1.0,
    ) -> None:
        self.list_fn = list_fn
        self.what = what
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.synced = threading.Event()
        self.resource_version = ""
        self._objects: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        """Start the list-and-watch thread (a daemon); returns self."""
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.what}")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the thread ends within a watch's timeout at most)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def objects(self) -> list[Any]:
        """The cached objects now (a copy of the list; the objects are shared)."""
        with self._lock:
            return list(self._objects.values())

    def forget(self, namespace: str, name: str) -> None:
        """Drop an object this process just deleted, before its DELETED event arrives."""
        with self._lock:
            self._objects.pop(f"{namespace}/{name}" if namespace else name, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list()
                self._follow()
            except Exception as exc:  # the API server is one more thing that can be down
                if self._stop.is_set():
                    return
                log.warning("%s informer: %s; listing again", self.what, exc)
                self._stop.wait(self.retry_s)

    def _list(self) -> None:
        listed = self.list_fn()
        with self._lock:
            self._objects = {_key(o): o for o in listed.items or []}
            self.resource_version = str(listed.metadata.resource_version or "")
        self.synced.set()

    def _follow(self) -> None:
        while not self._stop.is_set():
            self._watch = k8s_watch.Watch()
            for event in self._watch.stream(
                self.list_fn,
                resource_version=self.resource_version,
                timeout_seconds=self.timeout_s,
            ):
                obj = event["object"]
                kind = event["type"]
                with self._lock:
                    if kind == "DELETED":
                        self._objects.pop(_key(obj), None)
                    elif kind in ("ADDED", "MODIFIED"):
                        self._objects[_key(obj)] = obj
                    rv = obj.metadata.resource_version if obj.metadata else None
                    if rv:
                        self.resource_version = str(rv)
                if self._stop.is_set():
                    return


class KubeNodes:
    """The loop's view of the Kubernetes nodes: a pod informer and a node informer (and
    optionally one of a namespace's Events).

    Args:
        api: a ``CoreV1Api`` (list and watch pods in every namespace and nodes, and events
            in ``events_namespace``).
        start: start the informers now (tests may pass False and call :meth:`start`).
        events_namespace: also watch the Events of this namespace (what the cluster
            autoscaler says about placeholder pods); None: not.
    """

    def __init__(
        self, api: Any, *, start: bool = True, events_namespace: str | None = None
    ) -> None:
        self.pods = Informer(api.list_pod_for_all_namespaces, "pods")
        self.nodes = Informer(api.list_node, "nodes")
        self.events: Informer | None = None
        if events_namespace is not None:

            def list_events(**kw: Any) -> Any:
                """Events of the namespace (the cluster autoscaler's about placeholders).

                :rtype: CoreV1EventList
                """
                return api.list_namespaced_event(events_namespace, **kw)

            self.events = Informer(list_events, "events")
        if start:
            self.start()

    def _all(self) -> list[Informer]:
        return [self.pods, self.nodes] + ([self.events] if self.events is not None else [])

    def start(self) -> None:
        """Start the informers."""
        for informer in self._all():
            informer.start()

    def stop(self) -> None:
        """Stop the informers."""
        for informer in self._all():
            informer.stop()

    @property
    def synced(self) -> bool:
        """Whether both caches were listed at least once."""
        return self.pods.synced.is_set() and self.nodes.synced.is_set()

    def wait_synced(self, timeout_s: float = 10.0) -> bool:
        """Wait until both caches were listed once; False on timeout."""
        deadline = time.monotonic() + timeout_s
        return self.pods.synced.wait(timeout_s) and self.nodes.synced.wait(
            max(0.0, deadline - time.monotonic())
        )

    def facts(self) -> dict[str, NodeFacts]:
        """:func:`node_facts` of the cached nodes and pods ({} before the first list)."""
        if not self.synced:
            return {}
        return node_facts(self.nodes.objects(), self.pods.objects())

    def pool_sizes(self, label: str) -> dict[str, int]:
        """Nodes per value of node label ``label`` that count toward a pool's maxCount:
        those that exist and are Ready (cordoned ones included: they come back after an
        upgrade); not Ready nodes (being deleted, or never joined) do not."""
        out: dict[str, int] = {}
        for node in self.nodes.objects():
            labels: Mapping[str, str] = (node.metadata.labels if node.metadata else None) or {}
            pool = labels.get(label)
            if not pool:
                continue
            conditions = (node.status.conditions if node.status else None) or []
            if any(c.type == "Ready" and c.status != "True" for c in conditions):
                continue
            out[pool] = out.get(pool, 0) + 1
        return out


def as_kubelet_sees(nodes: Iterable[Node], facts: Mapping[str, NodeFacts]) -> tuple[Node, ...]:
    """The core's nodes as their kubelets will admit pods: each node with facts gets its
    capacity less what other pods hold (never below zero) and, when its Node object takes
    no new pods, state ``cordoned`` (a ready node only: draining and lost stay). Nodes
    without facts (not on Kubernetes, or not yet in the informer's cache) are unchanged."""
    out = []
    for node in nodes:
        f = facts.get(node.name)
        if f is None:
            out.append(node)
            continue
        held = Resources(f.held.cpu_m, f.held.memory, f.held.gpu)
        state = node.state
        if not f.schedulable and state == NodeState.READY:
            state = NodeState.CORDONED
        capacity = (node.capacity - held).clamp_min_zero()
        out.append(replace(node, capacity=capacity, state=state))
    return tuple(out)
