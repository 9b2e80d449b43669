"""A stand-in for the Kubernetes API of an AKS cluster that models what pasture depends on:
kube-scheduler binding pending pods, kubelet admission, the cluster autoscaler, drains,
Spot evictions and node objects. No cluster exists on the build machine; the real loop,
agents and kubernetes executor talk to this object through the ``CoreV1Api`` calls they
make, and the loop's informers read it through the client's own ``kubernetes.watch``.

What it models (and the source of each rule):

- **kube-scheduler** binds every pending pod without ``nodeName`` to a feasible node
  (Ready, not ``spec.unschedulable``, taints tolerated, ``nodeSelector`` and required node
  affinity matched, requests within allocatable minus the requests of every non-terminal
  pod there; higher ``priorityClassName`` first), and retries unschedulable pods whenever
  a pod is deleted or a node changes (its "move to active queue" events; in a real cluster
  within about a second: here at once, the worst case for a race).
- **kubelet admission** of a bound pod: the device manager first (``nvidia.com/gpu``
  devices not held by another non-terminal pod, else ``UnexpectedAdmissionError``), then
  the resource fit (``OutOfcpu`` / ``OutOfmemory`` against allocatable minus every
  non-terminal pod's requests); a pod bound to a node that is gone or not Ready is never
  admitted (it stays ``Pending``).
- **cluster autoscaler** (:meth:`autoscale`): a node per unschedulable pod of a pool below
  its maxCount (pods packed onto the planned nodes first), and scale-down of pool nodes
  whose only pods are DaemonSet pods.
- **drain / Spot eviction** (:meth:`evict_node`): every non-DaemonSet pod of the node gets
  a ``DisruptionTarget`` condition and ends (143), then the node is deleted with its pods.
- **graceful node shutdown** (:meth:`shutdown_node`), **cordon** (:meth:`cordon`),
  ``NoExecute`` taints and the ``Ready`` condition on Node objects.
- **API validation of volume mounts** (``pkg/apis/core/validation``:
  ``ValidateVolumeMounts``, ``validateLocalDescendingPath``): each mount names a volume of
  the pod, ``mountPath`` unique per container, ``subPath`` relative and without ``..``;
  otherwise 422 Invalid. **What the kubelet mounts** (:meth:`container_view`): each mount
  as the node path it binds (a claim's directory or a hostPath, joined with ``subPath``),
  read-only or not, so a test sees what a task container can reach.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from collections.abc import Iterable
from typing import Any

from kubernetes import client as k8s

from scheduler.spec.quantity import parse_cpu, parse_memory

API = k8s.ApiClient()
GPU = "nvidia.com/gpu"
PRIORITIES = {"pasture-placeholder": -10}
TERMINAL = ("Succeeded", "Failed")


def _model(wire: dict[str, Any], kind: str) -> Any:
    return API.deserialize(json.dumps(wire), kind, "application/json")


def _gone(what: str) -> k8s.ApiException:
    return k8s.ApiException(status=404, reason=f"NotFound: {what}")


def requests_of(pod: dict[str, Any]) -> tuple[int, int, int]:
    """(cpu_m, memory, gpu) a pod requests, sidecars included (as the kubelet counts)."""
    total = [0, 0, 0]
    spec = pod.get("spec", {})
    init_max = [0, 0, 0]
    for c, sidecar in [(c, True) for c in spec.get("containers", [])] + [
        (c, c.get("restartPolicy") == "Always") for c in spec.get("initContainers", [])
    ]:
        req = (c.get("resources") or {}).get("requests") or {}
        one = [
            parse_cpu(str(req["cpu"])) if "cpu" in req else 0,
            parse_memory(str(req["memory"])) if "memory" in req else 0,
            int(req.get(GPU, 0)),
        ]
        if sidecar:
            total = [a + b for a, b in zip(total, one, strict=True)]
        else:
            init_max = [max(a, b) for a, b in zip(init_max, one, strict=True)]
    return tuple(max(a, b) for a, b in zip(total, init_max, strict=True))  # type: ignore[return-value]


class _WatchResponse:
    """The streaming answer of ``?watch=true``: one JSON event per line, from the events
    after ``resource_version`` until ``timeout_seconds`` or ``close()``."""

    status = 200

    def __init__(self, kube: KubeStandIn, kind: str, rv: int, timeout_s: float) -> None:
        self.kube, self.kind, self.rv, self.timeout_s = kube, kind, rv, timeout_s
        self.closed = False

    def stream(self, amt: Any = None, decode_content: bool = False):
        deadline = time.monotonic() + self.timeout_s
        while not self.closed and time.monotonic() < deadline:
            with self.kube.cond:
                new = [e for e in self.kube.events if e[0] > self.rv and e[1] == self.kind]
                if not new:
                    self.kube.cond.wait(0.05)
                    continue
            for rv, _, typ, wire in new:
                self.rv = rv
                yield (json.dumps({"type": typ, "object": wire}) + "\n").encode()

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


class KubeStandIn:
    """The ``CoreV1Api`` calls pasture makes, over in-memory nodes and pods (module
    docstring). Thread-safe (the informers watch from threads)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.rv = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], Any] = {}
        self.k8s_events: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []
        self.rejections: list[tuple[str, str, str]] = []  # (pod, reason, message)
        self.bindings: list[tuple[str, str]] = []  # (pod, node) by kube-scheduler
        self.pools: dict[str, dict[str, Any]] = {}
        self.added: list[str] = []  # nodes the autoscaler added, in order
        self.removed: list[str] = []
        self._seq = itertools.count()
        self._idle: dict[str, int] = {}  # node -> autoscaler passes it had no pod but DaemonSets'
        self.unneeded_passes = 3

    # ---- bookkeeping -----------------------------------------------------------------
    def _emit(self, kind: str, typ: str, wire: dict[str, Any]) -> None:
        self.rv += 1
        wire["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, typ, copy.deepcopy(wire)))
        self.cond.notify_all()

    def _on(self, node: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.values()
            if p["spec"].get("nodeName") == node and p["status"].get("phase") not in TERMINAL
        ]

    def used(self, node: str, but: dict[str, Any] | None = None) -> tuple[int, int, int]:
        """Requests of the non-terminal pods bound to ``node`` (``but`` excluded)."""
        out = [0, 0, 0]
        for p in self._on(node):
            if p is not but:
                out = [a + b for a, b in zip(out, requests_of(p), strict=True)]
        return tuple(out)  # type: ignore[return-value]

    def allocatable(self, node: str) -> tuple[int, int, int]:
        a = self.nodes[node]["status"]["allocatable"]
        return parse_cpu(a["cpu"]), parse_memory(a["memory"]), int(a.get(GPU, "0"))

    @staticmethod
    def _ready(node: dict[str, Any]) -> bool:
        conds = node["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    # ---- nodes -----------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        cpu_m: int,
        memory: int,
        gpu: int = 0,
        labels: dict[str, str] | None = None,
        taints: Iterable[str] = (),
        daemonsets: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        """A node with its allocatable and its DaemonSet pods ((name, cpu_m, memory)),
        Ready."""
        taint_list = []
        for t in taints:
            kv, _, effect = t.rpartition(":")
            key, _, value = kv.partition("=")
            taint_list.append({"key": key, "value": value or None, "effect": effect})
        wire = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": taint_list or None},
            "status": {
                "allocatable": {"cpu": f"{cpu_m}m", "memory": str(memory), GPU: str(gpu)},
                "capacity": {"cpu": f"{cpu_m}m", "memory": str(memory), GPU: str(gpu)},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
        with self.cond:
            self.nodes[name] = wire
            self._emit("node", "ADDED", wire)
            for ds, cpu, mem in daemonsets:
                self._create(
                    "kube-system",
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": f"{ds}-{name}",
                            "namespace": "kube-system",
                            "ownerReferences": [
                                {
                                    "apiVersion": "apps/v1",
                                    "kind": "DaemonSet",
                                    "name": ds,
                                    "uid": ds,
                                }
                            ],
                        },
                        "spec": {
                            "nodeName": name,
                            "containers": [
                                {
                                    "name": ds,
                                    "image": ds,
                                    "resources": {
                                        "requests": {"cpu": f"{cpu}m", "memory": str(mem)}
                                    },
                                }
                            ],
                        },
                    },
                )
            self.schedule()

    def _node_changed(self, name: str) -> None:
        self._emit("node", "MODIFIED", self.nodes[name])
        self.schedule()

    def cordon(self, name: str, on: bool = True) -> None:
        """``kubectl cordon`` / ``uncordon``: ``spec.unschedulable``."""
        with self.cond:
            self.nodes[name]["spec"]["unschedulable"] = on or None
            self._node_changed(name)

    def taint(self, name: str, key: str, effect: str) -> None:
        with self.cond:
            taints = self.nodes[name]["spec"].get("taints") or []
            taints.append({"key": key, "effect": effect})
            self.nodes[name]["spec"]["taints"] = taints
            self._node_changed(name)

    def set_ready(self, name: str, ready: bool) -> None:
        with self.cond:
            (cond,) = [c for c in self.nodes[name]["status"]["conditions"] if c["type"] == "Ready"]
            cond.update(
                status="True" if ready else "False",
                reason="KubeletReady" if ready else "KubeletNotReady",
            )
            self._node_changed(name)

    def delete_node(self, name: str) -> None:
        """The cloud removed the machine: the Node object and every pod bound there go."""
        with self.cond:
            wire = self.nodes.pop(name)
            for key, p in list(self.pods.items()):
                if p["spec"].get("nodeName") == name:
                    del self.pods[key]
                    self._emit("pod", "DELETED", p)
            self._emit("node", "DELETED", wire)
            self.removed.append(name)
            self.schedule()

    def evict_node(self, name: str) -> None:
        """A Spot eviction: AKS drains the node (each non-DaemonSet pod gets a
        ``DisruptionTarget`` condition, EvictionByEvictionAPI, and ends on SIGTERM: 143),
        then Azure deletes the VM."""
        self.end_pods(name, "EvictionByEvictionAPI", reason=None)
        self.delete_node(name)

    def shutdown_node(self, name: str) -> None:
        """The kubelet's graceful node shutdown: pods end 143 with status reason
        ``Terminated`` and ``DisruptionTarget`` TerminationByKubelet; the node goes NotReady."""
        self.end_pods(name, "TerminationByKubelet", reason="Terminated")
        self.set_ready(name, False)

    def end_pods(self, node: str, condition: str, reason: str | None) -> None:
        with self.cond:
            for p in self._on(node):
                owners = p["metadata"].get("ownerReferences") or []
                if any(o["kind"] == "DaemonSet" for o in owners):
                    continue
                p["status"]["conditions"] = [
                    {"type": "DisruptionTarget", "status": "True", "reason": condition}
                ] + (p["status"].get("conditions") or [])
                self._terminate(p, 143, reason=reason)

    # ---- pods ------------------------------------------------------------------------
    @staticmethod
    def _validate_mounts(wire: dict[str, Any]) -> None:
        """The API server's checks of volume mounts (module docstring); 422 when refused."""
        spec = wire.get("spec") or {}
        volumes = {v["name"] for v in spec.get("volumes") or []}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            paths: set[str] = set()
            for i, m in enumerate(c.get("volumeMounts") or []):
                where = f"spec.containers[{c['name']}].volumeMounts[{i}]"
                sub = m.get("subPath") or ""
                why = ""
                if m["name"] not in volumes:
                    why = "name: Not found"
                elif m["mountPath"] in paths:
                    why = "mountPath: must be unique"
                elif sub.startswith("/"):
                    why = "subPath: must be a relative path"
                elif ".." in sub.split("/"):
                    why = "subPath: must not contain '..'"
                if why:
                    raise k8s.ApiException(status=422, reason=f"Invalid: {where}.{why}")
                paths.add(m["mountPath"])

    def container_view(
        self,
        name: str,
        claims: dict[str, str],
        namespace: str = "pasture",
        container: str = "task",
    ) -> dict[str, tuple[str | None, bool]]:
        """What the kubelet mounts into ``container`` of pod ``name``: mount path ->
        (node path bound there, read-only). ``claims`` maps a claim name to the node
        directory its volume is (the share); a hostPath is its path; ``subPath`` is
        joined to either; an emptyDir is None (fresh, the pod's own)."""
        with self.cond:
            spec = self.pods[(namespace, name)]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        (c,) = [
            c
            for c in [*(spec.get("initContainers") or []), *spec["containers"]]
            if c["name"] == container
        ]
        view: dict[str, tuple[str | None, bool]] = {}
        for m in c.get("volumeMounts") or []:
            v = volumes[m["name"]]
            if "persistentVolumeClaim" in v:
                base: str | None = claims[v["persistentVolumeClaim"]["claimName"]]
            elif "hostPath" in v:
                base = v["hostPath"]["path"]
            else:
                base = None
            if base is not None and m.get("subPath"):
                base = f"{base.rstrip('/')}/{m['subPath']}"
            view[m["mountPath"]] = (base, bool(m.get("readOnly")))
        return view

    def _create(self, namespace: str, wire: dict[str, Any]) -> dict[str, Any]:
        key = (namespace, wire["metadata"]["name"])
        if key in self.pods:
            raise k8s.ApiException(status=409, reason="AlreadyExists")
        self._validate_mounts(wire)
        wire["metadata"].update(
            namespace=namespace, uid=f"uid-{next(self._seq)}", creationTimestamp=None
        )
        wire["status"] = {"phase": "Pending"}
        wire["metadata"]["annotations"] = wire["metadata"].get("annotations") or {}
        self.pods[key] = wire
        self._emit("pod", "ADDED", wire)
        if wire["spec"].get("nodeName"):
            self._admit(wire)
        return wire

    def _admit(self, p: dict[str, Any]) -> None:
        """The kubelet: device manager, then the OutOf* resource check."""
        node = p["spec"]["nodeName"]
        if node not in self.nodes or not self._ready(self.nodes[node]):
            return  # never admitted: stays Pending
        cpu, mem, gpu = requests_of(p)
        acpu, amem, agpu = self.allocatable(node)
        ucpu, umem, ugpu = self.used(node, but=p)
        name = p["metadata"]["name"]
        if gpu and gpu > agpu - ugpu:
            message = (
                "Allocate failed due to requested number of devices unavailable for "
                f"nvidia.com/gpu. Requested: {gpu}, Available: {max(agpu - ugpu, 0)}, "
                "which is unexpected"
            )
            return self._reject(p, "UnexpectedAdmissionError", message)
        for what, need, have, used in (("cpu", cpu, acpu, ucpu), ("memory", mem, amem, umem)):
            if need > have - used:
                message = (
                    f"Node didn't have enough resource: {what}, requested: {need}, "
                    f"used: {used}, capacity: {have}"
                )
                return self._reject(p, f"OutOf{what}", message)
        p["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": "",
                    "state": {"running": {"startedAt": None}},
                }
                for c in p["spec"]["containers"]
            ],
        }
        self._emit("pod", "MODIFIED", p)
        del name

    def _reject(self, p: dict[str, Any], reason: str, message: str) -> None:
        p["status"] = {"phase": "Failed", "reason": reason, "message": message}
        self.rejections.append((p["metadata"]["name"], reason, message))
        self._emit("pod", "MODIFIED", p)

    def _terminate(self, p: dict[str, Any], code: int, reason: str | None = None) -> None:
        p["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        if reason:
            p["status"]["reason"] = reason
        for cs in p["status"].get("containerStatuses") or []:
            cs["state"] = {
                "terminated": {"exitCode": code, "reason": "Error" if code else "Completed"}
            }
            cs["ready"] = False
        self._emit("pod", "MODIFIED", p)

    def finish(self, name: str, code: int = 0, namespace: str = "pasture") -> None:
        """The task container of pod ``name`` exits with ``code``."""
        with self.cond:
            self._terminate(self.pods[(namespace, name)], code)
            self.schedule()

    def running(self, namespace: str = "pasture") -> list[str]:
        """Names of the pods running in ``namespace``."""
        with self.cond:
            return sorted(
                n
                for (ns, n), p in self.pods.items()
                if ns == namespace and p["status"].get("phase") == "Running"
            )

    # ---- kube-scheduler --------------------------------------------------------------
    @staticmethod
    def _tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
        if taint["effect"] == "PreferNoSchedule":
            return True
        for t in pod["spec"].get("tolerations") or []:
            if t.get("key") != taint["key"] or t.get("effect") not in (None, taint["effect"]):
                continue
            if t.get("operator") == "Exists" or t.get("value") == taint.get("value"):
                return True
        return False

    @staticmethod
    def _affinity(pod: dict[str, Any], labels: dict[str, str]) -> bool:
        aff = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        if not aff:
            return True
        for term in aff["nodeSelectorTerms"]:  # terms are ORed, expressions ANDed
            ok = True
            for e in term.get("matchExpressions") or []:
                have = labels.get(e["key"])
                op = e["operator"]
                if op == "In":
                    ok &= have in e["values"]
                elif op == "NotIn":
                    ok &= have not in e["values"]
                elif op == "Exists":
                    ok &= have is not None
                elif op == "DoesNotExist":
                    ok &= have is None
            if ok:
                return True
        return False

    def feasible(
        self, pod: dict[str, Any], node: str, extra: tuple[int, int, int] = (0, 0, 0)
    ) -> bool:
        n = self.nodes[node]
        labels = n["metadata"].get("labels") or {}
        if not self._ready(n) or n["spec"].get("unschedulable"):
            return False
        if not all(self._tolerates(pod, t) for t in n["spec"].get("taints") or []):
            return False
        selector = pod["spec"].get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            return False
        if not self._affinity(pod, labels):
            return False
        need = requests_of(pod)
        free = [
            a - u - x
            for a, u, x in zip(self.allocatable(node), self.used(node), extra, strict=True)
        ]
        return all(n_ <= f for n_, f in zip(need, free, strict=True))

    def _pending(self) -> list[dict[str, Any]]:
        pods = [
            p
            for p in self.pods.values()
            if not p["spec"].get("nodeName") and p["status"].get("phase") == "Pending"
        ]
        prio = lambda p: -PRIORITIES.get(p["spec"].get("priorityClassName") or "", 0)  # noqa: E731
        return sorted(pods, key=lambda p: (prio(p), int(p["metadata"]["uid"].split("-")[1])))

    def schedule(self) -> None:
        """kube-scheduler's pass over every pending pod (called on every pod delete and
        node change, as its event handlers move unschedulable pods back to the queue)."""
        with self.cond:
            for p in self._pending():
                for node in sorted(self.nodes):
                    if self.feasible(p, node):
                        p["spec"]["nodeName"] = node
                        self.bindings.append((p["metadata"]["name"], node))
                        self._emit("pod", "MODIFIED", p)
                        self._admit(p)
                        break

    # ---- cluster autoscaler ----------------------------------------------------------
    def add_pool(self, name: str, *, max_count: int, **template: Any) -> None:
        """An autoscaled pool: ``template`` = :meth:`add_node` keywords; its nodes carry
        ``pasture/pool=<name>``."""
        template.setdefault("labels", {})
        template["labels"] = {**template["labels"], "pasture/pool": name}
        self.pools[name] = {"max_count": max_count, "template": template, "seq": itertools.count()}

    def pool_nodes(self, pool: str) -> list[str]:
        with self.cond:
            return sorted(
                n
                for n, w in self.nodes.items()
                if (w["metadata"].get("labels") or {}).get("pasture/pool") == pool
            )

    def autoscale(self) -> list[str]:
        """One cluster-autoscaler pass: scale up for unschedulable pods (packing them onto
        the planned nodes), then scale down pool nodes that had only DaemonSet pods for
        :attr:`unneeded_passes` passes in a row (the autoscaler's
        ``scale-down-unneeded-time``). Returns the nodes added."""
        added = []
        with self.cond:
            planned: dict[str, list[tuple[int, int, int]]] = {}  # pool -> free of planned nodes
            for p in self._pending():
                pool = (p["spec"].get("nodeSelector") or {}).get("pasture/pool")
                if pool not in self.pools:
                    continue
                spec = self.pools[pool]
                t = spec["template"]
                need = requests_of(p)
                free = planned.setdefault(pool, [])
                for i, f in enumerate(free):
                    if all(a <= b for a, b in zip(need, f, strict=True)):
                        free[i] = tuple(b - a for a, b in zip(need, f, strict=True))
                        break
                else:
                    if spec.get("backoff"):
                        self.record_event(
                            p,
                            "NotTriggerScaleUp",
                            "pod didn't trigger scale-up: 1 in backoff after failed "
                            f"scale-up ({spec['backoff']})",
                        )
                        continue
                    if len(self.pool_nodes(pool)) + len(free) >= spec["max_count"]:
                        self.record_event(
                            p,
                            "NotTriggerScaleUp",
                            "pod didn't trigger scale-up: 1 max node group size reached",
                        )
                        continue
                    ds = [(c, m) for _, c, m in t.get("daemonsets", ())]
                    cap = (
                        t["cpu_m"] - sum(c for c, _ in ds),
                        t["memory"] - sum(m for _, m in ds),
                        t.get("gpu", 0),
                    )
                    if not all(a <= b for a, b in zip(need, cap, strict=True)):
                        continue
                    free.append(tuple(b - a for a, b in zip(need, cap, strict=True)))
            for pool, free in planned.items():
                for _ in free:
                    name = f"aks-{pool}-vmss{next(self.pools[pool]['seq']):06d}"
                    self.add_node(name, **self.pools[pool]["template"])
                    self.added.append(name)
                    added.append(name)
            for pool in self.pools:
                for node in self.pool_nodes(pool):
                    others = [
                        p
                        for p in self._on(node)
                        if not any(
                            o["kind"] == "DaemonSet"
                            for o in p["metadata"].get("ownerReferences") or []
                        )
                    ]
                    idle = self._idle.get(node, 0) + 1 if not others else 0
                    self._idle[node] = idle
                    if idle >= self.unneeded_passes:  # scale-down-unneeded-time passed
                        self.delete_node(node)
        return added

    def fail_scale_up(self, pool: str, why: str | None) -> None:
        """Scale-ups of ``pool`` fail from now on with ``why`` (a quota, no Spot capacity),
        and the autoscaler backs off; None: they work again."""
        self.pools[pool]["backoff"] = why

    def record_event(self, pod: dict[str, Any], reason: str, message: str) -> None:
        """An Event about ``pod`` (as the cluster autoscaler records one)."""
        with self.cond:
            ns = pod["metadata"]["namespace"]
            name = f"{pod['metadata']['name']}.{next(self._seq)}"
            wire = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": ns},
                "reason": reason,
                "message": message,
                "source": {"component": "cluster-autoscaler"},
                "type": "Normal",
            }
            self.k8s_events[(ns, name)] = wire
            self._emit("event", "ADDED", wire)

    # ---- CoreV1Api -------------------------------------------------------------------
    def create_namespaced_pod(self, namespace: str, body: Any, **kw: Any) -> Any:
        wire = API.sanitize_for_serialization(body)
        with self.cond:
            out = self._create(namespace, wire)
            if not wire["spec"].get("nodeName"):
                self.schedule()
            return _model(out, "V1Pod")

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        with self.cond:
            if (namespace, name) not in self.pods:
                raise _gone(f"pod {name}")
            return _model(self.pods[(namespace, name)], "V1Pod")

    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> None:
        with self.cond:
            wire = self.pods.pop((namespace, name), None)
            if wire is None:
                raise _gone(f"pod {name}")
            self._emit("pod", "DELETED", wire)
            self.schedule()  # kube-scheduler retries unschedulable pods on a pod delete

    def list_namespaced_pod(self, namespace: str, label_selector: str = "", **kw: Any) -> Any:
        key, _, value = label_selector.partition("=")
        with self.cond:
            items = [
                _model(p, "V1Pod")
                for (ns, _), p in self.pods.items()
                if ns == namespace
                and (not key or key in (p["metadata"].get("labels") or {}))
                and (not value or p["metadata"]["labels"][key] == value)
            ]
            return k8s.V1PodList(
                items=items, metadata=k8s.V1ListMeta(resource_version=str(self.rv))
            )

    def list_pod_for_all_namespaces(self, watch: bool = False, **kw: Any) -> Any:
        """List or watch pods.

        :rtype: V1PodList
        """
        return self._list_or_watch("pod", watch, kw)

    def list_node(self, watch: bool = False, **kw: Any) -> Any:
        """List or watch nodes.

        :rtype: V1NodeList
        """
        return self._list_or_watch("node", watch, kw)

    def list_namespaced_event(self, namespace: str, watch: bool = False, **kw: Any) -> Any:
        """List or watch the events of a namespace.

        :rtype: CoreV1EventList
        """
        with self.cond:
            if watch:
                rv = int(kw.get("resource_version") or 0)
                return _WatchResponse(self, "event", rv, kw.get("timeout_seconds") or 60)
            items = [
                _model(w, "CoreV1Event")
                for (ns, _), w in self.k8s_events.items()
                if ns == namespace
            ]
            meta = k8s.V1ListMeta(resource_version=str(self.rv))
            return k8s.CoreV1EventList(items=items, metadata=meta)

    def _list_or_watch(self, kind: str, watch: bool, kw: dict[str, Any]) -> Any:
        with self.cond:
            if watch:
                return _WatchResponse(
                    self,
                    kind,
                    int(kw.get("resource_version") or 0),
                    kw.get("timeout_seconds") or 60,
                )
            src = self.pods.values() if kind == "pod" else self.nodes.values()
            model = "V1Pod" if kind == "pod" else "V1Node"
            items = [_model(w, model) for w in src]
            meta = k8s.V1ListMeta(resource_version=str(self.rv))
            if kind == "pod":
                return k8s.V1PodList(items=items, metadata=meta)
            return k8s.V1NodeList(items=items, metadata=meta)

    def read_node(self, name: str, **kw: Any) -> Any:
        with self.cond:
            if name not in self.nodes:
                raise _gone(f"node {name}")
            return _model(self.nodes[name], "V1Node")

    def patch_node(self, name: str, body: dict[str, Any], **kw: Any) -> Any:
        with self.cond:
            if name not in self.nodes:
                raise _gone(f"node {name}")
            labels = (body.get("metadata") or {}).get("labels") or {}
            self.nodes[name]["metadata"]["labels"].update(labels)
            self._node_changed(name)
            return _model(self.nodes[name], "V1Node")

    def create_namespaced_secret(self, namespace: str, body: Any, **kw: Any) -> Any:
        with self.cond:
            self.secrets[(namespace, body.metadata.name)] = body
            return body

    def delete_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> None:
        with self.cond:
            if self.secrets.pop((namespace, name), None) is None:
                raise _gone(f"secret {name}")

    def nodes_gone(self, names: Iterable[str]) -> set[str]:
        """:func:`scheduler.k8s.capacity.nodes_gone` over this API."""
        with self.cond:
            return {n for n in names if n not in self.nodes}
