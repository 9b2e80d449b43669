"""The ``kubernetes`` executor: each task is a Pod bound to the node the core chose.

On the aks platform an agent runs on every GPU node (a DaemonSet) with ``executor:
kubernetes``. The scheduler core has already placed the task on that node, so the pod is
created with ``spec.nodeName`` set (the Kubernetes scheduler is bypassed, as in Volcano's
binder): requests = limits from the task's resources, ``nvidia.com/gpu`` limits for GPUs
(the NVIDIA device plugin picks the devices and sets CUDA_VISIBLE_DEVICES), tolerations for
the GPU pool taints, the task's parts of the cluster share (an Azure Files PVC) as
``subPath`` mounts at their paths under the agent's ``share_dir`` (its job's directory,
code dir, team directory, declared data; never the claim's root: :mod:`.k8s_mounts`), the
VC's uid without privileges with ``task_users: vc`` (:func:`.k8s_pod.pod_security`; the
executor writes the task's ``/etc/passwd`` in its state dir before creating the pod), and
the discovery environment.

    TaskLaunch --build_pod()--> V1Pod --create_namespaced_pod--> pod on launch.node
    handle "<namespace>/<pod>[#<fenced file>]" --poll()--> exit_code(V1Pod): None while running

Settings come from the agent's environment, set by the aks stack's DaemonSet:
``PASTURE_K8S_NAMESPACE`` (default: the pod's own namespace), ``PASTURE_K8S_SHARE_CLAIM``
(PVC of the share), ``PASTURE_K8S_IMAGE`` (image of tasks that name none),
``PASTURE_K8S_TOLERATIONS`` (JSON list of ``key=value:Effect`` taints to tolerate: the
pool's taints, plus ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule`` on a Spot
pool; parsed by :mod:`scheduler.k8s.taints`). The node's capacity comes from its node
object (:mod:`scheduler.k8s.capacity`), not from NVML in the agent's container.

Fencing without the agent (docs/faults.md): kubelet, not the agent, owns a task pod, so a
dead agent's pods would run on. When ``PASTURE_K8S_AGENT_DIR`` names the agent's work dir
(a hostPath, mounted at the same path in the agent, so that the agent's lease file is on
the node), every task pod gets a fence sidecar: a restartable init container (Kubernetes
>= 1.29 native sidecars: it starts before the task, does not keep the pod alive after the
task ended, and its requests add to the pod's) of ``PASTURE_K8S_FENCE_IMAGE`` (default:
``PASTURE_K8S_IMAGE``, the pasture image, which has the watchdog) running ``python3 -m
scheduler.agent.watchdog <lease> <state_dir>/fenced --pod`` with the agent dir mounted, in
a pod with ``shareProcessNamespace: true``. When the lease file's deadline
(CLOCK_MONOTONIC, one clock for the whole node, containers included) passed or the file is
gone, it SIGKILLs every process of the pod but the pause process and itself, the task
container ends (restart policy Never), and ``fenced`` tells a restarted agent why
(:meth:`KubernetesExecutor.fenced`). Node-local on purpose: no API server or network is
needed for the kill, as with the other executors' watchdogs. Not run against a cluster
here (none on the test machine): the generated manifest is unit-tested, the watchdog's pod
mode in a real PID namespace.

Pods that never start: a task container (or its fence sidecar) waiting with a reason of
:data:`START_FAILURES` (``ImagePullBackOff``, ``ErrImagePull``, ``CreateContainerConfigError``
...) for ``PASTURE_K8S_START_TIMEOUT_S`` seconds (default :data:`START_TIMEOUT_S`; at once
for the permanent ``InvalidImageName`` and ``ErrImageNeverPull``) ends the task with exit
code :data:`START_FAILED_EXIT` and the reason as evidence, so the failure diagnosis
(``scheduler/rules/diagnosis_rules.yaml``: ``image_pull``, ``invalid_image_name``,
``container_config``) says why; the pod is deleted by the agent's cleanup. What the
kubelet saw of a finished pod reaches the classifier too (:func:`pod_evidence`):
``OOMKilled`` (``oom_killed``), ``Evicted``, ``UnexpectedAdmissionError``.

Spot eviction: Azure deletes the node and the agent's pod with it, so the agent's
heartbeat stops; the loop marks the node ``lost`` and its tasks ``lost`` (the
infrastructure-fault path), it does not see a task failure.

Job secrets go to a per-task Secret the pod references (:mod:`.k8s_secrets`), ssh's
node-local directory to a hostPath volume (:mod:`.k8s_mounts`). The builders are pure and
tested as the client's models; the executor wraps ``CoreV1Api`` (no cluster here).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from scheduler.agent import k8s_secrets
from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch
from scheduler.agent.k8s_pod import (
    AGENT_VOLUME,
    DEFAULT_TOLERATIONS,
    DISRUPTION_HOLD_S,
    FENCE_CONTAINER,
    FENCE_RESOURCES,
    GPU_RESOURCE,
    NOT_STARTED,
    PASSWD_FILE,
    PERMANENT_START_FAILURES,
    SAFE_TO_EVICT,
    START_FAILED_EXIT,
    START_FAILURES,
    START_TIMEOUT_S,
    PodSettings,
    build_pod,
    disruption,
    exit_code,
    fence_sidecar,
    infrastructure_ending,
    not_started,
    passwd_text,
    pod_evidence,
    pod_name,
    pod_of,
    start_failure,
)
from scheduler.k8s.capacity import NODE_ENV, Capacity, NodeCapacityError, read_capacity
from scheduler.k8s.nodes import REGISTERED_LABEL

__all__ = [
    "AGENT_VOLUME",
    "DEFAULT_TOLERATIONS",
    "DISRUPTION_HOLD_S",
    "FENCE_CONTAINER",
    "FENCE_RESOURCES",
    "GPU_RESOURCE",
    "KubernetesExecutor",
    "NOT_STARTED",
    "PERMANENT_START_FAILURES",
    "PodSettings",
    "SAFE_TO_EVICT",
    "START_FAILED_EXIT",
    "START_FAILURES",
    "START_TIMEOUT_S",
    "build_pod",
    "disruption",
    "exit_code",
    "infrastructure_ending",
    "not_started",
    "fence_sidecar",
    "pod_evidence",
    "pod_name",
    "pod_of",
    "start_failure",
]

log = logging.getLogger(__name__)


class KubernetesExecutor(Executor):
    """Runs tasks as pods bound to this agent's node (see the module docstring).

    Args:
        network: the agent's ``task_network`` (``host`` = hostNetwork pods).
        settings: pod settings; default from the environment (:meth:`PodSettings.from_env`).
        api: a ``CoreV1Api``; default from the in-cluster service account (or kubeconfig).
        cli: ignored (the agent passes the container CLI to every executor).
        disruption_hold_s: seconds a pod ended by the infrastructure, or gone, is still
            reported as running (:data:`DISRUPTION_HOLD_S`, see :func:`disruption`);
            then its exit code (-1 when gone) is reported.
        clock: monotonic clock in seconds.
        capacity_wait_s: seconds :meth:`node_capacity` waits for a GPU node's device
            plugin to advertise its GPUs.
        node_objects: read and label this agent's Node object (:meth:`node_capacity`,
            :meth:`before_register`); default: when ``PASTURE_K8S_NODE_NAME`` is set (the
            agent DaemonSet of the aks stack).
    """

    kind = "kubernetes"

    def __init__(
        self,
        network: str = "host",
        settings: PodSettings | None = None,
        api: k8s.CoreV1Api | None = None,
        disruption_hold_s: float = DISRUPTION_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
        capacity_wait_s: float = 300.0,
        node_objects: bool | None = None,
        **_ignored: object,
    ) -> None:
        self.capacity_wait_s = capacity_wait_s
        self.node_objects = bool(os.environ.get(NODE_ENV)) if node_objects is None else node_objects
        self.settings = settings or PodSettings.from_env(network=network)
        self.disruption_hold_s = disruption_hold_s
        self._clock = clock
        self._disrupted: dict[str, float] = {}  # handle -> when first seen disrupted
        self._deleted: set[str] = set()  # handles this executor deleted
        self._secrets: set[str] = set()  # pods with a Secret made by this executor
        self._waiting: dict[str, float] = {}  # handle -> when first seen failing to start
        self._evidence: dict[str, dict[str, object]] = {}  # handle -> why it never started
        self._last: dict[str, k8s.V1Pod | None] = {}  # handle -> the pod poll() last read
        self._pending: dict[str, float] = {}  # handle -> when first seen not running
        if api is None:
            from kubernetes import config as k8s_config

            try:
                k8s_config.load_incluster_config()
            except k8s_config.ConfigException:
                k8s_config.load_kube_config()
            api = k8s.CoreV1Api()
        self.api = api

    def start(self, launch: TaskLaunch) -> str:
        """Create the task's pod, then its Secret when it has job secrets. Raises
        ExecutorError: the pod cannot be built or created, or its Secret not created."""
        try:
            pod = build_pod(launch, self.settings)
        except ValueError as exc:
            raise ExecutorError(str(exc)) from None
        if launch.user is not None and self.settings.agent_dir:  # its /etc/passwd (k8s_pod)
            launch.state_dir.mkdir(parents=True, exist_ok=True)
            passwd = launch.state_dir / PASSWD_FILE
            passwd.write_text(passwd_text(launch.user))
            passwd.chmod(0o644)
        ns = self.settings.namespace
        assert pod.metadata is not None and pod.metadata.name is not None  # set by build_pod
        assert pod.spec is not None
        name = pod.metadata.name
        uid = None  # the pod's, for the Secret's owner reference
        try:
            created = self.api.create_namespaced_pod(ns, pod)
            uid = getattr(getattr(created, "metadata", None), "uid", None)
        except k8s.ApiException as exc:
            if exc.status != 409:  # 409: already created (agent restarted): adopt it
                raise ExecutorError(
                    f"cannot create pod {name} on {launch.node}: {exc.status} {exc.reason}"
                ) from None
        secret = k8s_secrets.build_secret(launch.env, pod, uid)
        if secret is not None:
            try:
                self.api.create_namespaced_secret(ns, secret)
            except k8s.ApiException as exc:
                if exc.status != 409:  # 409: made before an agent restart
                    self._delete(name, ns, secret=False)
                    raise ExecutorError(
                        f"cannot create secret {k8s_secrets.secret_name(name)} "
                        "of the job's secrets: "
                        f"{exc.status} {exc.reason} (the agent's Role needs secrets create)"
                    ) from None
            self._secrets.add(name)
        handle = f"{self.settings.namespace}/{name}"
        if pod.spec.init_containers:  # the fence sidecar: say where it leaves its mark
            handle += f"#{launch.state_dir / 'fenced'}"
        if launch.entrypoint:
            with open(launch.log_path, "a+") as f:  # a+: see executor.log_redirect
                where = f"-n {self.settings.namespace} {name}"
                f.write(f"pasture: runs its image's ENTRYPOINT; output: kubectl logs {where}\n")
        return handle

    def poll(self, handle: str) -> int | None:
        """Exit code of the task pod (-1: gone), None while it runs; a pod the
        infrastructure ended counts as running for ``disruption_hold_s`` (see
        :data:`DISRUPTION_HOLD_S`), unless this executor deleted it; a pod that cannot
        start ends with :data:`START_FAILED_EXIT` after ``settings.start_timeout_s`` (see
        :func:`start_failure`; its reason is the task's :meth:`evidence`)."""
        if handle in self._evidence:
            return START_FAILED_EXIT
        namespace, name = pod_of(handle)
        try:
            pod = self.api.read_namespaced_pod(name, namespace)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            pod = None
        self._last[handle] = pod
        code = -1 if pod is None else exit_code(pod)
        if code is None and pod is not None:
            return self._start_failed(handle, pod)
        why = None if code is None or handle in self._deleted else disruption(pod)
        if why is None:
            return code
        now = self._clock()
        since = self._disrupted.setdefault(handle, now)
        if since == now:
            log.warning(
                "task pod %s ended by the infrastructure (%s): reported as running for %.0f s "
                "so that a node going away is seen as lost, not as the task's failure",
                handle,
                why,
                self.disruption_hold_s,
            )
        if now - since < self.disruption_hold_s:
            return None
        return code

    def _start_failed(self, handle: str, pod: k8s.V1Pod) -> int | None:
        """None while the pod may still start; :data:`START_FAILED_EXIT` once its start
        failure lasted ``settings.start_timeout_s`` (at once for a permanent one)."""
        pending = not_started(pod)
        if pending is None:  # it runs: neither clock goes on
            self._pending.pop(handle, None)
            self._waiting.pop(handle, None)
            return None
        now = self._clock()
        pending_since = self._pending.setdefault(handle, now)
        failure = start_failure(pod)
        if failure is None:
            self._waiting.pop(handle, None)
            if now - pending_since < self.settings.pending_timeout_s:
                return None
            reason, message = pending  # stuck before any container could start
            message = (
                f"not running after {now - pending_since:.0f} s (limit "
                f"{self.settings.pending_timeout_s:g} s): {message}"
            ).rstrip(": ")
        else:
            reason, message = failure
            since = self._waiting.setdefault(handle, now)
            if (
                reason not in PERMANENT_START_FAILURES
                and now - since < self.settings.start_timeout_s
                and now - pending_since < self.settings.pending_timeout_s
            ):
                return None
        log.warning("task pod %s never started: %s: %s", handle, reason, message)
        self._evidence[handle] = {"k8s_reason": reason, "k8s_message": message}
        if failure is None:  # no start failure of its own: it never ran, whatever why
            self._evidence[handle]["k8s_not_running"] = True
        return START_FAILED_EXIT

    def node_capacity(self, node: str) -> Capacity | None:
        """The allocatable of this agent's Node object (:func:`read_capacity`: waiting for
        a GPU node's device plugin to advertise its GPUs); None without ``node_objects``.
        Raises NodeCapacityError."""
        if not self.node_objects:
            return None

        def fetch(name: str) -> dict[str, Any]:
            try:
                raw = self.api.read_node(name)
            except k8s.ApiException as exc:
                raise NodeCapacityError(
                    f"node {name}: cannot read its Node object: {exc.status} {exc.reason}"
                ) from None
            out: dict[str, Any] = k8s.ApiClient().sanitize_for_serialization(raw)
            return out

        return read_capacity(node, fetch=fetch, wait_s=self.capacity_wait_s)

    def before_register(self, node: str) -> None:
        """Label this node's Node object :data:`REGISTERED_LABEL` (``"true"``) before the
        agent registers it: placeholder pods require its absence, so that kube-scheduler
        puts none where pasture binds tasks. A refusal (the agent's ClusterRole lacks
        ``patch`` on nodes) is logged; the loop still counts placeholders against the
        node's capacity (:mod:`.k8s_nodes`). Nothing without ``node_objects``."""
        if not self.node_objects:
            return
        body = {"metadata": {"labels": {REGISTERED_LABEL: "true"}}}
        try:
            self.api.patch_node(node, body)
        except k8s.ApiException as exc:
            log.error(
                "cannot label node %s %s=true (%s %s): placeholder pods may land on it; "
                "the agent's ClusterRole needs 'patch' on 'nodes'",
                node,
                REGISTERED_LABEL,
                exc.status,
                exc.reason,
            )

    def infrastructure_ending(self, handle: str) -> tuple[str, str] | None:
        """``(cause, reason)`` of a task pod that Kubernetes ended (an eviction, a node
        shutdown, an admission rejection: :func:`infrastructure_ending` of the pod last read
        by :meth:`poll`), or that was not running at all for ``pending_timeout_s``
        (:data:`NOT_STARTED`, with the pod's last reason, e.g. ``ContainerCreating`` after a
        ``FailedCreatePodSandBox`` or a failed Azure Files mount); None when the task ended
        by itself or could not start for a reason of its own (:data:`START_FAILURES`)."""
        if handle in self._evidence:
            evidence = self._evidence[handle]
            if evidence.get("k8s_not_running"):
                return NOT_STARTED, str(evidence.get("k8s_reason") or "Pending")
            return None
        return infrastructure_ending(self._last.get(handle))

    def evidence(self, handle: str) -> dict[str, object]:
        """Why the pod never started (:meth:`poll`), else what the kubelet saw of it
        (:func:`pod_evidence`); ``{}`` when it is gone."""
        if handle in self._evidence:
            return dict(self._evidence[handle])
        namespace, name = pod_of(handle)
        try:
            return pod_evidence(self.api.read_namespaced_pod(name, namespace))
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            return {}

    def stop(self, handle: str, grace_s: float) -> None:
        namespace, name = pod_of(handle)
        self._deleted.add(handle)
        try:
            self.api.delete_namespaced_pod(
                name, namespace, grace_period_seconds=max(int(grace_s), 0)
            )
        except k8s.ApiException as exc:
            if exc.status == 404:
                return
            raise
        deadline = time.monotonic() + grace_s + 30
        while time.monotonic() < deadline:
            try:
                self.api.read_namespaced_pod(name, namespace)
            except k8s.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(1.0)

    def fenced(self, handle: str) -> bool:
        """Whether the pod's fence sidecar killed the task: its ``fenced`` file, on the
        node's agent dir, named in the handle (handles of pods without a sidecar are
        ``<namespace>/<pod>`` and never fenced)."""
        _, _, fenced = handle.partition("#")
        return bool(fenced) and Path(fenced).exists()

    def cleanup(self, handle: str) -> None:
        _, _, fenced = handle.partition("#")
        if fenced:
            Path(fenced).unlink(missing_ok=True)
        namespace, name = pod_of(handle)
        self._disrupted.pop(handle, None)
        self._waiting.pop(handle, None)
        self._evidence.pop(handle, None)
        self._last.pop(handle, None)
        self._pending.pop(handle, None)
        self._deleted.discard(handle)
        self._delete(name, namespace, secret=name in self._secrets)
        self._secrets.discard(name)

    def _delete(self, name: str, namespace: str, *, secret: bool) -> None:
        """Delete a task pod now, and its Secret when ``secret`` (one this executor made;
        a Secret made before an agent restart goes with its pod, by its owner
        reference). Gone already is fine."""
        calls: list[tuple[Callable[..., object], str]] = [(self.api.delete_namespaced_pod, name)]
        if secret:
            calls.append((self.api.delete_namespaced_secret, k8s_secrets.secret_name(name)))
        for call, what in calls:
            try:
                call(what, namespace, grace_period_seconds=0)
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise
