"""Scale AKS GPU pools with pasture's queue: placeholder pods the cluster autoscaler sees.

Task pods are created with ``spec.nodeName`` set (the core already chose the node), so the
Kubernetes scheduler never marks them unschedulable and the cluster autoscaler, which
scales up only for unschedulable pods, never adds a node for them. The loop therefore
shows it the demand the way Kubernetes batch schedulers do with the autoscaler (the
"balloon" or overprovisioning pattern of the cluster-autoscaler FAQ; Kueue's
ProvisioningRequest is not offered by AKS' managed autoscaler):

    pending job, reason no-fit-ever / insufficient-resources / gang-incomplete,
    whose every task fits one node of a GPU pool below its maxCount
      -> one placeholder pod per task (the task's cpu, memory and nvidia.com/gpu
         requests, the pool's tolerations, nodeSelector pasture/pool=<pool>,
         priorityClassName pasture-placeholder (negative, preemptionPolicy Never),
         the pause image, anti-affinity to nodes already registered with pasture)
      -> the autoscaler adds a node to the pool; the placeholder lands on it
      -> the node's agent registers it; the next cycle deletes the placeholders on
         registered nodes BEFORE the core runs, and the core places the job there
      -> the job's placeholders go when it is placed, stopped, or no longer waits.

The pending reason of such a job says "waiting for the autoscaler to add a node to pool
<pool>" instead of "can never fit". Scale-down never removes a node with running tasks:
task pods carry ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``
(:data:`SAFE_TO_EVICT`, set by :func:`scheduler.agent.kubernetes.build_pod`).

The pools come from ``PASTURE_K8S_POOLS`` (JSON, written by the aks stack on the
scheduler Deployment): ``[{name, cpu_m, memory, gpu, gpu_model, max_count, taints,
labels}]`` with what one node of the pool offers. Not run against AKS here (no Azure on
the build machine): the objects are validated with kubernetes-validate and the loop's use
is tested over a real redis-server with an in-memory ``CoreV1Api``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client as k8s

from scheduler.core.model import Decision, Job, NodeState, PendingReason, ReasonKind, Snapshot
from scheduler.k8s import taints
from scheduler.k8s.nodes import FENCE_RESOURCES, REGISTERED_LABEL, Held, KubeNodes, NodeFacts
from scheduler.spec.quantity import parse_cpu, parse_memory

log = logging.getLogger("pasture.autoscale")

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""Pod annotation the cluster autoscaler reads: "false" on task pods, "true" on placeholders."""
POOLS_ENV = "PASTURE_K8S_POOLS"
NAMESPACE_ENV = "PASTURE_K8S_NAMESPACE"
PAUSE_IMAGE_ENV = "PASTURE_K8S_PAUSE_IMAGE"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PRIORITY_CLASS = "pasture-placeholder"
"""PriorityClass of placeholder pods (value :data:`PLACEHOLDER_PRIORITY`, preemptionPolicy
Never, created by the aks stack): any real pod may preempt them, they preempt nothing."""
PLACEHOLDER_PRIORITY = -10
POOL_LABEL = "pasture/pool"
PLACEHOLDER_LABEL = "pasture/placeholder"  # = scheduler.k8s.nodes.PLACEHOLDER_LABEL
JOB_ANNOTATION = "pasture/job"
WAITING = (ReasonKind.NO_FIT_EVER, ReasonKind.INSUFFICIENT_RESOURCES, ReasonKind.GANG_INCOMPLETE)
"""Pending kinds a new node can cure (not quota, queue order or reservations)."""
RECONCILE_EVERY_S = 5.0
"""At most one LIST of placeholders per this many seconds (deletions of placed jobs'
placeholders are not delayed)."""


AKS_CPU_RESERVED_M = ((1, 60), (2, 100), (4, 140), (8, 180), (16, 260), (32, 420), (64, 740))
"""AKS kube-reserved CPU (millicores) by the VM's cores (Microsoft, "Node resource
reservations in AKS", https://learn.microsoft.com/azure/aks/node-resource-reservations);
between two rows linear, above 64 cores 10 m per core more (the slope of the last rows)."""
AKS_EVICTION_MI = 100
"""The kubelet's ``memory.available<100Mi`` hard eviction threshold on AKS >= 1.29."""
AKS_MAX_PODS = 250
"""Pods per node of AKS' default network (Azure CNI Overlay); the memory reservation
grows with it."""
DAEMONSET_CPU_M = 160
DAEMONSET_MEMORY = 576 * 2**20
"""Requests of pasture's own DaemonSets on a GPU node (agent, NVIDIA device plugin, log
shipper): what a pool's node offers to tasks is its allocatable less these."""


def aks_allocatable(vm_cpu: int, vm_memory: int, max_pods: int = AKS_MAX_PODS) -> tuple[int, int]:
    """What a node of an AKS (>= 1.29) Linux pool offers to pods (its ``allocatable``).

    Args:
        vm_cpu: the VM size's cores. vm_memory: its memory in bytes.
        max_pods: the pool's maximum pods per node.

    Returns:
        ``(cpu_m millicores, memory bytes)``: the VM less kube-reserved CPU
        (:data:`AKS_CPU_RESERVED_M`), less kube-reserved memory ``min(20 MiB * max_pods +
        50 MiB, 25 % of the VM's memory)`` and the 100 MiB eviction threshold (same source).
        E.g. 24 cores -> 23,660 m.

    Raises:
        ValueError: a size that is not positive.
    """
    if vm_cpu < 1 or vm_memory <= 0 or max_pods < 1:
        raise ValueError(
            f"expected a VM of >= 1 core, > 0 bytes and >= 1 pod per node, "
            f"got {vm_cpu} cores, {vm_memory} bytes, {max_pods} pods"
        )
    table = AKS_CPU_RESERVED_M
    if vm_cpu >= table[-1][0]:
        reserved = table[-1][1] + 10 * (vm_cpu - table[-1][0])
    else:
        (c0, r0), (c1, r1) = next(
            (a, b) for a, b in zip(table, table[1:], strict=False) if b[0] > vm_cpu
        )
        reserved = r0 + (r1 - r0) * (vm_cpu - c0) // (c1 - c0)
    mi = 2**20
    kube_memory = min(20 * mi * max_pods + 50 * mi, vm_memory // 4)
    return vm_cpu * 1000 - reserved, vm_memory - kube_memory - AKS_EVICTION_MI * mi


@dataclass(frozen=True)
class Pool:
    """One autoscaled GPU pool: what one node offers and how many nodes it may have.

    Attributes:
        name: AKS pool name (node label ``pasture/pool``).
        cpu_m: millicores one node offers to pods. memory: bytes. gpu: devices.
        gpu_model: the pool's GPU model (None: any).
        max_count: the autoscaler's upper bound of nodes.
        taints: ``key[=value]:Effect`` taints of the pool's nodes (Spot included).
        labels: the pool's node labels.
        daemonset_cpu_m / daemonset_memory: what the DaemonSets take on each node
            (default pasture's own: :data:`DAEMONSET_CPU_M`, :data:`DAEMONSET_MEMORY`).
    """

    name: str
    cpu_m: int
    memory: int
    gpu: int
    gpu_model: str | None = None
    max_count: int = 0
    taints: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    daemonset_cpu_m: int = DAEMONSET_CPU_M
    daemonset_memory: int = DAEMONSET_MEMORY

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Pool:
        """A pool from its ``PASTURE_K8S_POOLS`` entry: what one node offers to pods as
        ``cpu_m`` and ``memory`` (its allocatable), or as the VM size ``vm_cpu`` (cores)
        and ``vm_memory`` (bytes) with optional ``max_pods``, turned into allocatable by
        :func:`aks_allocatable`; optional ``daemonset_cpu_m`` / ``daemonset_memory``.
        Raises ValueError naming the missing or mistyped field."""
        try:
            if "vm_cpu" in raw:
                cpu_m, memory = aks_allocatable(
                    int(raw["vm_cpu"]),
                    int(raw["vm_memory"]),
                    int(raw.get("max_pods") or AKS_MAX_PODS),
                )
            else:
                cpu_m, memory = int(raw["cpu_m"]), int(raw["memory"])
            return cls(
                name=str(raw["name"]),
                cpu_m=cpu_m,
                memory=memory,
                gpu=int(raw["gpu"]),
                gpu_model=raw.get("gpu_model") or None,
                max_count=int(raw["max_count"]),
                taints=tuple(str(t) for t in raw.get("taints") or ()),
                labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
                daemonset_cpu_m=int(raw.get("daemonset_cpu_m", DAEMONSET_CPU_M)),
                daemonset_memory=int(raw.get("daemonset_memory", DAEMONSET_MEMORY)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{POOLS_ENV}: expected {{name, cpu_m, memory, gpu, max_count, ...}}, "
                f"got {dict(raw)!r} ({exc!r})"
            ) from None

    def fits(self, role_resources: Any, gpu_model: str | None, selector: Mapping[str, str]) -> bool:
        """Whether one task (core ``Resources``, GPU model, node selector) fits one empty
        node of this pool: its requests plus its pod's fence sidecar
        (:data:`~scheduler.k8s.nodes.FENCE_RESOURCES`) within the node's allocatable
        less the DaemonSets'."""
        r = role_resources
        cpu_m = self.cpu_m - self.daemonset_cpu_m - parse_cpu(FENCE_RESOURCES["cpu"])
        memory = self.memory - self.daemonset_memory - parse_memory(FENCE_RESOURCES["memory"])
        if r.cpu_m > cpu_m or r.memory > memory or r.gpu > self.gpu:
            return False
        if gpu_model is not None and gpu_model != self.gpu_model:
            return False
        labels = {**self.labels, POOL_LABEL: self.name}
        return all(labels.get(k) == v for k, v in selector.items())


def pools_from_env(env: Mapping[str, str] | None = None) -> tuple[Pool, ...]:
    """The pools of ``PASTURE_K8S_POOLS`` (none when unset). Raises ValueError."""
    text = (os.environ if env is None else env).get(POOLS_ENV, "")
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{POOLS_ENV}: not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ValueError(f"{POOLS_ENV}: expected a JSON list of pools, got {raw!r}")
    return tuple(Pool.from_dict(p) for p in raw)


def pool_for(job: Job, pools: Iterable[Pool], nodes_in_pool: Mapping[str, int]) -> Pool | None:
    """The first pool below its ``max_count`` (``nodes_in_pool``: registered nodes per
    pool) on one of whose nodes every task of ``job`` fits; None when none."""
    for pool in pools:
        if nodes_in_pool.get(pool.name, 0) >= pool.max_count:
            continue
        if all(pool.fits(r.resources, r.gpu_model, r.node_selector) for r in job.roles):
            return pool
    return None


def _dns(text: str) -> str:
    cleaned = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")
    return cleaned or "x"


def placeholder_name(job: str, role: str, index: int) -> str:
    """``ph-<job>-<role>-<index>`` as a DNS-1123 label (<= 63 chars; a hash suffix keeps
    cut or changed names unique)."""
    base = f"ph-{job}-{role}-{index}"
    cleaned = _dns(base)
    if cleaned == base and len(cleaned) <= 63:
        return cleaned
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{cleaned[:54].rstrip('-')}-{digest}"


def _label_value(value: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", value)[:63]
    return cleaned.strip("_.-") or "x"


def placeholder_pods(
    job: Job,
    pool: Pool,
    namespace: str,
    *,
    registered: Iterable[str] = (),
    image: str = PAUSE_IMAGE,
) -> list[k8s.V1Pod]:
    """One placeholder pod per task of ``job`` for ``pool`` (module docstring).

    Args:
        job: the pending job (core model): each role's replicas and per-task resources.
        pool: the pool that can fit it.
        namespace: namespace of the pods.
        registered: names of nodes already registered with pasture. A placeholder only
            ever asks for a new node: node affinity requires the absence of
            :data:`~scheduler.k8s.nodes.REGISTERED_LABEL` (set by each agent before
            it registers its node, so it holds for nodes that register later) and, in
            case an agent could not set it, ``NotIn`` these names.
        image: the pause image.

    Returns:
        ``V1Pod`` objects with requests = limits of the task (``<cpu_m>m``, memory in bytes,
        ``nvidia.com/gpu`` when it has GPUs), the pool's tolerations and node selector,
        ``priorityClassName`` :data:`PRIORITY_CLASS`, grace period 0.

    Raises:
        ValueError: a malformed taint in ``pool.taints``.
    """
    # kept off every node pasture schedules, by a label its agent sets before it registers
    # the node (live: a node that registers after this pod was made is avoided too)
    terms = [
        k8s.V1NodeSelectorRequirement(key=REGISTERED_LABEL, operator="DoesNotExist"),
    ]
    avoid = sorted(set(registered))
    if avoid:  # and the nodes registered now, should an agent lack the right to label
        terms.append(
            k8s.V1NodeSelectorRequirement(
                key="kubernetes.io/hostname", operator="NotIn", values=avoid
            )
        )
    affinity = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[k8s.V1NodeSelectorTerm(match_expressions=terms)]
            )
        )
    )
    tolerations = [
        k8s.V1Toleration(
            key=t.get("key"), operator=t.get("operator"), value=t.get("value"), effect=t["effect"]
        )
        for t in taints.tolerations(pool.taints)
    ] or None
    pods = []
    for role in job.roles:
        limits = {"cpu": f"{role.resources.cpu_m}m", "memory": str(role.resources.memory)}
        if role.resources.gpu:
            limits["nvidia.com/gpu"] = str(role.resources.gpu)
        for index in range(role.replicas):
            pods.append(
                k8s.V1Pod(
                    api_version="v1",
                    kind="Pod",
                    metadata=k8s.V1ObjectMeta(
                        name=placeholder_name(job.name, role.name, index),
                        namespace=namespace,
                        labels={
                            "app.kubernetes.io/managed-by": "pasture",
                            PLACEHOLDER_LABEL: _label_value(job.name),
                            POOL_LABEL: pool.name,
                        },
                        # a placeholder may always go: it holds no work
                        annotations={JOB_ANNOTATION: job.name, SAFE_TO_EVICT: "true"},
                    ),
                    spec=k8s.V1PodSpec(
                        priority_class_name=PRIORITY_CLASS,
                        termination_grace_period_seconds=0,
                        automount_service_account_token=False,
                        enable_service_links=False,
                        node_selector={POOL_LABEL: pool.name},
                        affinity=affinity,
                        tolerations=tolerations,
                        containers=[
                            k8s.V1Container(
                                name="placeholder",
                                image=image,
                                resources=k8s.V1ResourceRequirements(
                                    requests=dict(limits), limits=dict(limits)
                                ),
                            )
                        ],
                    ),
                )
            )
    return pods


def placeholder_name_of(pod: k8s.V1Pod) -> str:
    """A pod's name ('' when it has none)."""
    return str(pod.metadata.name or "") if pod.metadata is not None else ""


def waiting_reason(pool: Pool, reason: PendingReason, said: str = "") -> PendingReason:
    """``reason`` rewritten to say the job waits for the autoscaler to grow ``pool``, and
    what the autoscaler last ``said`` about the job's placeholders ('' for nothing: a
    ``NotTriggerScaleUp`` event, e.g. "1 in backoff after failed scale-up" on a quota or
    Spot-capacity error, "max node group size reached")."""
    message = f"waiting for the autoscaler to add a node to pool {pool.name} ({reason.message})"
    details = {**reason.details, "autoscaler_pool": pool.name}
    if said:
        message += f"; the cluster autoscaler says: {said}"
        details["autoscaler_says"] = said
    return PendingReason(reason.kind, message, details)


AUTOSCALER_REASONS = ("NotTriggerScaleUp", "FailedScaleUp", "FailedToScaleUpGroup")
"""Reasons of the Events the cluster autoscaler records on a pod it could not add a node
for (cluster-autoscaler ``EventingScaleUpStatusProcessor``)."""


def autoscaler_says(events: Iterable[Any], pods: Iterable[str]) -> str:
    """The message of the newest autoscaler Event (:data:`AUTOSCALER_REASONS`) about one of
    ``pods`` (names), '' when none. ``events`` are ``CoreV1Event`` objects; newest by
    ``last_timestamp``, else ``event_time``, else resourceVersion."""
    names = set(pods)
    best: tuple[str, str] | None = None
    for ev in events:
        obj = ev.involved_object
        if ev.reason not in AUTOSCALER_REASONS or obj is None or obj.name not in names:
            continue
        when = str(ev.last_timestamp or ev.event_time or "")
        rv = str(ev.metadata.resource_version if ev.metadata else "").zfill(20)
        key = f"{when}|{rv}"
        if best is None or key > best[0]:
            best = (key, str(ev.message or ev.reason)[:300])
    return best[1] if best else ""


class Autoscaler:
    """The loop's placeholder pods (module docstring).

    Args:
        pools: the autoscaled pools, in the order tried.
        api: a ``CoreV1Api`` (the loop's service account may create, list and delete pods
            in ``namespace``).
        namespace: namespace of the placeholders.
        image: the pause image.
        clock: monotonic clock (s).
        nodes: the pod and node informers (:class:`~scheduler.k8s.nodes.KubeNodes`);
            None: placeholders are listed every :data:`RECONCILE_EVERY_S` and no node
            facts are given to the core.
    """

    def __init__(
        self,
        pools: tuple[Pool, ...],
        api: Any,
        namespace: str,
        image: str = PAUSE_IMAGE,
        clock: Callable[[], float] = time.monotonic,
        nodes: KubeNodes | None = None,
    ) -> None:
        self.pools = pools
        self.api = api
        self.namespace = namespace
        self.image = image
        self.clock = clock
        self.nodes = nodes
        self._listed_at: float | None = None
        self._pods: dict[str, dict[str, str]] = {}  # job -> {pod name: node name or ""}
        self._registered: set[str] = set()
        self._made: dict[tuple[str, str], float] = {}  # (job, pod) -> when this loop made it

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Autoscaler | None:
        """An autoscaler when ``PASTURE_K8S_POOLS`` names pools (the loop on AKS), with the
        in-cluster ``CoreV1Api``; None otherwise. Raises ValueError for a bad variable."""
        env = os.environ if env is None else env
        pools = pools_from_env(env)
        if not pools:
            return None
        from kubernetes import config as k8s_config

        k8s_config.load_incluster_config()
        api = k8s.CoreV1Api()
        return cls(
            pools,
            api,
            env.get(NAMESPACE_ENV, "pasture"),
            env.get(PAUSE_IMAGE_ENV) or PAUSE_IMAGE,
            nodes=KubeNodes(api, events_namespace=env.get(NAMESPACE_ENV, "pasture")),
        )

    # ---- the loop's two calls --------------------------------------------------------
    def before_core(self, registered: Iterable[str]) -> dict[str, NodeFacts]:
        """Before the core runs: delete the placeholders of every job whose placeholders
        all sit on nodes registered with pasture (the whole gang's nodes have come: the
        core may now place the job there; a job whose other nodes are still coming keeps
        them, so that nothing else takes its nodes and no node is asked for twice), and
        return the node facts (:class:`~scheduler.k8s.nodes.NodeFacts`: what other
        pods hold, placeholders still in place included; cordons) for the core. A newly
        registered node makes the placeholders be listed again at once (without
        informers). Errors of the API server are logged (the loop goes on, with the
        facts it has)."""
        known = set(registered)
        try:
            self._refresh(force=bool(known - self._registered))
            self._registered = known
            self._free(known)
        except Exception as exc:  # the API server is one more thing that can be down
            log.warning("placeholders not reconciled: %s", exc)
        if self.nodes is None or not self.nodes.synced:
            return {}
        facts = self.nodes.facts()
        for name in known - set(facts):  # registered, but the cloud removed the machine
            facts[name] = NodeFacts(Held(), False, "its Kubernetes Node object is gone")
        return facts

    def _free(self, known: set[str]) -> None:
        for job, pods in list(self._pods.items()):
            if pods and all(node and node in known for node in pods.values()):
                log.info(
                    "every node of job %s registered (%s): its placeholders deleted",
                    job,
                    ", ".join(sorted(set(pods.values()))),
                )
                for name in list(pods):
                    self._delete(job, name)

    def after_core(self, snapshot: Snapshot, decision: Decision) -> Decision:
        """Delete the placeholders of jobs bound now or no longer waiting, create those of
        jobs that a pool below its max could fit, and return ``decision`` with their
        pending reasons saying so (call before the commit). Errors of the API server are
        logged and the reasons still rewritten."""
        try:
            return self._after_core(snapshot, decision)
        except Exception as exc:  # the API server is one more thing that can be down
            log.warning("placeholders not reconciled: %s", exc)
            return decision

    def _after_core(self, snapshot: Snapshot, decision: Decision) -> Decision:
        for bind in decision.binds:
            for name in list(self._pods.get(bind.job, {})):
                self._delete(bind.job, name)
        in_pool: dict[str, int] = {}
        registered: dict[str, list[str]] = {}
        for node in snapshot.nodes:
            label = node.labels.get(POOL_LABEL)
            if label and node.state != NodeState.LOST:  # a lost node counts toward nothing
                in_pool[label] = in_pool.get(label, 0) + 1
                registered.setdefault(label, []).append(node.name)
        if self.nodes is not None and self.nodes.synced:
            # the Node objects the pool has now (ready or cordoned): what maxCount bounds
            in_pool = self.nodes.pool_sizes(POOL_LABEL)
        jobs = {j.name: j for j in snapshot.pending}
        reasons = dict(decision.pending)
        waiting: dict[str, Pool] = {}
        for name, reason in decision.pending.items():
            job = jobs.get(name)
            pool = (
                None
                if job is None or reason.kind not in WAITING
                else pool_for(job, self.pools, in_pool)
            )
            if pool is not None and job is not None:
                waiting[name] = pool
                said = ""
                if self.nodes is not None and self.nodes.events is not None:
                    said = autoscaler_says(
                        self.nodes.events.objects(), self._pods.get(name, {}).keys()
                    )
                reasons[name] = waiting_reason(pool, reason, said)
        for job_name in [j for j in self._pods if j not in waiting]:
            for name in list(self._pods.get(job_name, {})):
                self._delete(job_name, name)
        for name, pool in waiting.items():
            self._ensure(jobs[name], pool, registered.get(pool.name, []))
        return replace(decision, pending=reasons)

    # ---- Kubernetes ------------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        """The placeholders as they are now: from the pod informer (every cycle), else a
        LIST at most every :data:`RECONCILE_EVERY_S` (``force``: now)."""
        if self.nodes is not None:
            if self.nodes.synced:
                pods = [
                    p
                    for p in self.nodes.pods.objects()
                    if p.metadata is not None
                    and p.metadata.namespace == self.namespace
                    and PLACEHOLDER_LABEL in (p.metadata.labels or {})
                ]
                self._index(pods, keep_unseen=True)
            return
        now = self.clock()
        if not force and self._listed_at is not None and now - self._listed_at < RECONCILE_EVERY_S:
            return
        self._listed_at = now
        found = self.api.list_namespaced_pod(self.namespace, label_selector=PLACEHOLDER_LABEL)
        self._index(found.items, keep_unseen=False)

    def _index(self, found: Iterable[k8s.V1Pod], *, keep_unseen: bool) -> None:
        """``self._pods`` from the placeholder pods ``found``; ``keep_unseen``: keep those
        this loop created that the informer has not shown yet."""
        pods: dict[str, dict[str, str]] = {}
        for pod in found:
            meta = pod.metadata
            job = str(((meta.annotations if meta else None) or {}).get(JOB_ANNOTATION, ""))
            node = str((pod.spec.node_name if pod.spec else None) or "")
            pods.setdefault(job, {})[placeholder_name_of(pod)] = node
        if keep_unseen:
            now = self.clock()
            for (job, name), made in list(self._made.items()):
                if now - made > RECONCILE_EVERY_S:
                    del self._made[(job, name)]
                elif name not in pods.get(job, {}):
                    pods.setdefault(job, {})[name] = ""
        self._pods = pods

    def _ensure(self, job: Job, pool: Pool, registered: list[str]) -> None:
        have = self._pods.setdefault(job.name, {})
        wanted = placeholder_pods(
            job, pool, self.namespace, registered=registered, image=self.image
        )
        for pod in wanted:
            name = placeholder_name_of(pod)
            if name in have:
                continue
            try:
                self.api.create_namespaced_pod(self.namespace, pod)
            except k8s.ApiException as exc:
                if exc.status != 409:
                    log.warning("cannot create placeholder %s: %s", name, exc.reason)
                    continue
            have[name] = ""
            self._made[(job.name, name)] = self.clock()
            log.info("placeholder %s asks pool %s for a node (job %s)", name, pool.name, job.name)

    def _delete(self, job: str, name: str) -> None:
        try:
            self.api.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except k8s.ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete placeholder %s: %s", name, exc.reason)
                return
        self._made.pop((job, name), None)
        if self.nodes is not None:  # gone now for this loop, before its DELETED event
            self.nodes.pods.forget(self.namespace, name)
        pods = self._pods.get(job, {})
        pods.pop(name, None)
        if not pods:
            self._pods.pop(job, None)
