"""The ``kubernetes`` executor: each task is a Pod bound to the node the core chose.

On the aks platform an agent runs on every GPU node (a DaemonSet) with ``executor:
kubernetes``. The scheduler core has already placed the task on that node, so the pod is
created with ``spec.nodeName`` set (the Kubernetes scheduler is bypassed, as in Volcano's
binder): requests = limits from the task's resources, ``nvidia.com/gpu`` limits for GPUs
(the NVIDIA device plugin picks the devices and sets CUDA_VISIBLE_DEVICES), tolerations for
the GPU pool taints, the cluster share (an Azure Files PVC) mounted at the agent's
``share_dir``, and the discovery environment.

    TaskLaunch --build_pod()--> V1Pod --create_namespaced_pod--> pod on launch.node
    handle "<namespace>/<pod>" --poll()--> exit_code(V1Pod): None while running

Settings come from the agent's environment, set by the aks stack's DaemonSet:
``PASTURE_K8S_NAMESPACE`` (default: the pod's own namespace), ``PASTURE_K8S_SHARE_CLAIM``
(PVC of the share), ``PASTURE_K8S_IMAGE`` (image of tasks that name none),
``PASTURE_K8S_TOLERATIONS`` (JSON list of ``key=value:Effect`` taints to tolerate: the
pool's taints, plus ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule`` on a Spot
pool; parsed by :mod:`scheduler.agent.taints`). The node's capacity comes from its node
object (:mod:`scheduler.agent.k8s_capacity`), not from NVML in the agent's container.

Spot eviction: Azure deletes the node and the agent's pod with it, so the agent's
heartbeat stops; the loop marks the node ``lost`` and its tasks ``lost`` (the
infrastructure-fault path), it does not see a task failure.

Only :func:`build_pod`, :func:`pod_name` and :func:`exit_code` hold logic; they are pure
and tested against the Kubernetes client's models. The executor class is a thin wrapper
over ``CoreV1Api`` (no cluster exists on the test machine; see docs/platforms.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s

from scheduler.agent import taints
from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch, log_redirect

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TOLERATIONS = ("nvidia.com/gpu=present:NoSchedule",)
SHARE_VOLUME = "pasture-share"
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class PodSettings:
    """What every task pod of this agent shares.

    Attributes:
        namespace: namespace of task pods.
        share_claim: PersistentVolumeClaim of the cluster share; None mounts nothing.
        default_image: image of tasks whose role names none.
        tolerations: taints to tolerate, ``key[=value]:Effect`` (the GPU pools' taints).
        host_network: tasks use the node's network (the agent's ``task_network: host``),
            so discovery addresses are node addresses.
        service_account: service account of task pods (None: the namespace default).
        labels: extra labels on every task pod.
    """

    namespace: str = "pasture"
    share_claim: str | None = "pasture-share"
    default_image: str = "pasture:0.1.0"
    tolerations: tuple[str, ...] = DEFAULT_TOLERATIONS
    host_network: bool = True
    service_account: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, network: str = "host") -> PodSettings:
        """Settings from ``PASTURE_K8S_*`` variables (see the module docstring).

        Raises:
            ValueError: ``PASTURE_K8S_TOLERATIONS`` is not a JSON list of strings.
        """
        env = dict(os.environ if env is None else env)
        namespace = env.get("PASTURE_K8S_NAMESPACE")
        if not namespace and _SA_NAMESPACE.exists():
            namespace = _SA_NAMESPACE.read_text().strip()
        tolerations = DEFAULT_TOLERATIONS
        if env.get("PASTURE_K8S_TOLERATIONS"):
            try:
                parsed = json.loads(env["PASTURE_K8S_TOLERATIONS"])
            except json.JSONDecodeError as exc:
                raise ValueError(f"PASTURE_K8S_TOLERATIONS: not JSON: {exc}") from None
            if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed):
                raise ValueError(
                    "PASTURE_K8S_TOLERATIONS: expected a JSON list of 'key=value:Effect' "
                    f"strings, got {parsed!r}"
                )
            tolerations = tuple(parsed)
        return cls(
            namespace=namespace or "pasture",
            share_claim=env.get("PASTURE_K8S_SHARE_CLAIM", "pasture-share") or None,
            default_image=env.get("PASTURE_K8S_IMAGE", "pasture:0.1.0"),
            tolerations=tolerations,
            host_network=network == "host",
        )


def _label_value(value: str) -> str:
    """A Kubernetes label value (<= 63 chars of [A-Za-z0-9_.-], alphanumeric ends)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", value)[:63]
    return cleaned.strip("_.-") or "x"


def pod_name(task_id: str) -> str:
    """Pod name of a task: ``task-<task id>`` as a DNS-1123 label (lower-case, <= 63
    chars); names that had to be changed or cut get a hash suffix so they stay unique."""
    base = "task-" + task_id.lower()
    cleaned = re.sub(r"[^a-z0-9-]", "-", base)
    cleaned = re.sub(r"-+", "-", cleaned).strip("-")
    if cleaned == base and len(cleaned) <= 63:
        return cleaned
    digest = hashlib.sha256(task_id.encode()).hexdigest()[:8]
    return f"{cleaned[:54].rstrip('-')}-{digest}"


def build_pod(launch: TaskLaunch, settings: PodSettings) -> k8s.V1Pod:
    """The Pod that runs one task on the node the core chose.

    Args:
        launch: the task (identity, command, env, cpu_m millicores, memory bytes, gpus).
        settings: namespace, share claim, default image, tolerations, network.

    Returns:
        A ``V1Pod`` with ``spec.nodeName = launch.node``, ``restartPolicy: Never``,
        requests = limits (``<cpu_m>m``, memory in bytes, ``nvidia.com/gpu`` when the
        task has GPUs), the share mounted at ``launch.share_dir``, stdout/stderr appended
        to ``launch.log_path`` on the share, and ``launch.env`` as the environment. An
        entrypoint role (``launch.entrypoint``) gets no ``command`` and ``args =
        launch.args``, so the kubelet runs the image's ENTRYPOINT (Kubernetes' own
        semantics); its start-up lines do not run and its output stays in the pod's log
        (``kubectl logs``), since the ENTRYPOINT is only known to the node's runtime.

    Raises:
        ValueError: a taint in ``settings.tolerations`` is malformed.
    """
    limits = {"cpu": f"{launch.cpu_m}m", "memory": str(launch.memory)}
    if launch.gpus:
        limits[GPU_RESOURCE] = str(len(launch.gpus))
    script = f"{log_redirect(launch.log_path)}\n{launch.command}"
    mounts, volumes = [], []
    if settings.share_claim:
        mounts.append(k8s.V1VolumeMount(name=SHARE_VOLUME, mount_path=str(launch.share_dir)))
        volumes.append(
            k8s.V1Volume(
                name=SHARE_VOLUME,
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=settings.share_claim
                ),
            )
        )
    workdir = str(launch.share_dir) if settings.share_claim else None
    command: list[str] | None = ["/bin/sh", "-c", script]
    args = None
    if launch.entrypoint:  # the image's own ENTRYPOINT: no command, the role's args
        command, args, workdir = None, launch.args, launch.working_dir
    container = k8s.V1Container(
        name="task",
        image=launch.image or settings.default_image,
        command=command,
        args=args,
        env=[k8s.V1EnvVar(name=k, value=str(v)) for k, v in sorted(launch.env.items())],
        resources=k8s.V1ResourceRequirements(requests=dict(limits), limits=dict(limits)),
        volume_mounts=mounts or None,
        working_dir=workdir,
    )
    labels = {
        **settings.labels,
        "app.kubernetes.io/managed-by": "pasture",
        "pasture/job": _label_value(launch.job),
        "pasture/role": _label_value(launch.role),
        "pasture/index": str(launch.index),
        "pasture/attempt": str(launch.attempt),
    }
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(
            name=pod_name(launch.task_id),
            namespace=settings.namespace,
            labels=labels,
            annotations={"pasture/task-id": launch.task_id, "pasture/job": launch.job},
        ),
        spec=k8s.V1PodSpec(
            node_name=launch.node,
            restart_policy="Never",
            host_network=settings.host_network,
            dns_policy="ClusterFirstWithHostNet" if settings.host_network else "ClusterFirst",
            enable_service_links=False,
            automount_service_account_token=False,
            service_account_name=settings.service_account,
            tolerations=[k8s.V1Toleration(**t) for t in taints.tolerations(settings.tolerations)]
            or None,
            containers=[container],
            volumes=volumes or None,
        ),
    )


def exit_code(pod: k8s.V1Pod) -> int | None:
    """Exit code of a task pod: None while pending/running, the container's exit code once
    it terminated, 0/1 for a pod Succeeded/Failed without a container status (e.g.
    evicted before start: 1)."""
    status = pod.status
    phase = status.phase if status else None
    for cs in (status.container_statuses or []) if status else []:
        if cs.name == "task" and cs.state and cs.state.terminated:
            return int(cs.state.terminated.exit_code)
    if phase == "Succeeded":
        return 0
    if phase == "Failed":
        return 1
    return None


# How long a task pod that the infrastructure ended (drain, eviction, node shutdown) or
# that vanished is still reported as running: AKS drains a Spot node on its preemption
# notice and Azure deletes the VM about 30 s later, taking this agent with it, so the
# node's loss (an infrastructure fault) reaches the loop before any task failure would.
DISRUPTION_HOLD_S = 120.0


def disruption(pod: k8s.V1Pod | None) -> str | None:
    """Why the infrastructure ended a task pod, or None when it did not.

    Returns the reason of the pod's ``DisruptionTarget`` condition (Kubernetes >= 1.26:
    ``EvictionByEvictionAPI`` for a drain, such as AKS node auto-drain on a Spot
    preemption notice; ``DeletionByTaintManager``; ``TerminationByKubelet`` for a node
    shutdown; ``PreemptionByScheduler``; ``DeletionByPodGC``), or ``"pod deleted"`` for a
    pod that no longer exists (``pod`` None).
    """
    if pod is None:
        return "pod deleted"
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "DisruptionTarget" and cond.status == "True":
            return cond.reason or "DisruptionTarget"
    return None


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
    """

    kind = "kubernetes"

    def __init__(
        self,
        network: str = "host",
        settings: PodSettings | None = None,
        api: k8s.CoreV1Api | None = None,
        disruption_hold_s: float = DISRUPTION_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
        **_ignored: object,
    ) -> None:
        self.settings = settings or PodSettings.from_env(network=network)
        self.disruption_hold_s = disruption_hold_s
        self._clock = clock
        self._disrupted: dict[str, float] = {}  # handle -> when first seen disrupted
        self._deleted: set[str] = set()  # handles this executor deleted
        if api is None:
            from kubernetes import config as k8s_config

            try:
                k8s_config.load_incluster_config()
            except k8s_config.ConfigException:
                k8s_config.load_kube_config()
            api = k8s.CoreV1Api()
        self.api = api

    def start(self, launch: TaskLaunch) -> str:
        pod = build_pod(launch, self.settings)
        try:
            self.api.create_namespaced_pod(self.settings.namespace, pod)
        except k8s.ApiException as exc:
            if exc.status != 409:  # 409: already created (agent restarted): adopt it
                raise ExecutorError(
                    f"cannot create pod {pod.metadata.name} on {launch.node}: "
                    f"{exc.status} {exc.reason}"
                ) from None
        handle = f"{self.settings.namespace}/{pod.metadata.name}"
        if launch.entrypoint:
            with open(launch.log_path, "a+") as f:  # a+: see executor.log_redirect
                where = f"-n {self.settings.namespace} {pod.metadata.name}"
                f.write(f"pasture: runs its image's ENTRYPOINT; output: kubectl logs {where}\n")
        return handle

    def poll(self, handle: str) -> int | None:
        """Exit code of the task pod (-1: gone), None while it runs; a pod the
        infrastructure ended counts as running for ``disruption_hold_s`` (see
        :data:`DISRUPTION_HOLD_S`), unless this executor deleted it."""
        namespace, name = handle.split("/", 1)
        try:
            pod = self.api.read_namespaced_pod(name, namespace)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            pod = None
        code = -1 if pod is None else exit_code(pod)
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

    def stop(self, handle: str, grace_s: float) -> None:
        namespace, name = handle.split("/", 1)
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

    def cleanup(self, handle: str) -> None:
        namespace, name = handle.split("/", 1)
        self._disrupted.pop(handle, None)
        self._deleted.discard(handle)
        try:
            self.api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
