"""The ``kubernetes`` executor: each task is a Pod bound to the node the core chose.

On the aks platform an agent runs on every GPU node (a DaemonSet) with ``executor:
kubernetes``. The scheduler core has already placed the task on that node, so the pod is
created with ``spec.nodeName`` set (the Kubernetes scheduler is bypassed, as in Volcano's
binder): requests = limits from the task's resources, ``nvidia.com/gpu`` limits for GPUs
(the NVIDIA device plugin picks the devices and sets CUDA_VISIBLE_DEVICES), tolerations for
the GPU pool taints, the cluster share (an Azure Files PVC) mounted at the agent's
``share_dir``, and the discovery environment.

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

from scheduler.agent import k8s_secrets
from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch, log_redirect
from scheduler.agent.k8s_mounts import SHARE_VOLUME, task_mounts
from scheduler.k8s import taints
from scheduler.k8s.autoscale import SAFE_TO_EVICT

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TOLERATIONS = ("nvidia.com/gpu=present:NoSchedule",)
AGENT_VOLUME = "pasture-agent"
FENCE_CONTAINER = "fence"
FENCE_RESOURCES = {"cpu": "10m", "memory": "48Mi"}
"""Requests = limits of the fence sidecar (a sleeping Python process), per task pod."""
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

START_TIMEOUT_S = 300.0
"""Seconds a task pod may wait with a start failure (image pull backing off, a missing
Secret) before its task fails: a registry that blinks recovers within it; an image that
does not exist never does."""
START_FAILURES = (
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)
"""Waiting reasons of a container the kubelet cannot start (kubelet ``images`` and
``kuberuntime`` packages)."""
PERMANENT_START_FAILURES = ("InvalidImageName", "ErrImageNeverPull")
"""Start failures no wait can cure: the task fails at once."""
START_FAILED_EXIT = 125
"""Exit code reported for a task whose container never started (Docker's and podman's code
for "the container failed to run")."""


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
        agent_dir: the agent's work dir, a hostPath on the node mounted at the same path
            in the agent (its lease file is there); None: no fence sidecar.
        fence_image: image of the fence sidecar, one with the pasture package (None:
            ``default_image``, the pasture image on AKS; not the task's image, which need
            not have Python).
        start_timeout_s: seconds a pod may wait with a start failure before its task
            fails (:data:`START_TIMEOUT_S`).
    """

    namespace: str = "pasture"
    share_claim: str | None = "pasture-share"
    default_image: str = "pasture:0.1.0"
    tolerations: tuple[str, ...] = DEFAULT_TOLERATIONS
    host_network: bool = True
    service_account: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    agent_dir: str | None = None
    fence_image: str | None = None
    start_timeout_s: float = START_TIMEOUT_S

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, network: str = "host") -> PodSettings:
        """Settings from ``PASTURE_K8S_*`` variables (see the module docstring).

        Raises:
            ValueError: ``PASTURE_K8S_TOLERATIONS`` is not a JSON list of strings, or
                ``PASTURE_K8S_START_TIMEOUT_S`` not a positive number.
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
        timeout = env.get("PASTURE_K8S_START_TIMEOUT_S") or str(START_TIMEOUT_S)
        try:
            start_timeout_s = float(timeout)
        except ValueError:
            start_timeout_s = -1.0
        if not start_timeout_s > 0:
            raise ValueError(
                "PASTURE_K8S_START_TIMEOUT_S: expected a positive number of seconds, "
                f"got {timeout!r}"
            )
        return cls(
            namespace=namespace or "pasture",
            share_claim=env.get("PASTURE_K8S_SHARE_CLAIM", "pasture-share") or None,
            default_image=env.get("PASTURE_K8S_IMAGE", "pasture:0.1.0"),
            tolerations=tolerations,
            host_network=network == "host",
            agent_dir=env.get("PASTURE_K8S_AGENT_DIR") or None,
            fence_image=env.get("PASTURE_K8S_FENCE_IMAGE") or None,
            start_timeout_s=start_timeout_s,
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
        to ``launch.log_path`` on the share, and ``launch.env`` as the environment; with
        ``settings.agent_dir`` and ``launch.lease_file`` also the fence sidecar
        (:func:`fence_sidecar`) and ``shareProcessNamespace: true``. An entrypoint role
        (``launch.entrypoint``) gets no ``command`` and ``args = launch.args``, so the
        kubelet runs the image's ENTRYPOINT (Kubernetes' own semantics); its start-up lines
        do not run and its output stays in the pod's log (``kubectl logs``), since the
        ENTRYPOINT is only known to the node's runtime.

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
    extra_mounts, extra_volumes = task_mounts(
        launch, settings.share_claim, settings.agent_dir, host_network=settings.host_network
    )
    mounts += extra_mounts
    volumes += extra_volumes
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
        env=k8s_secrets.env_vars(launch.env, pod_name(launch.task_id)),
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
    fence = fence_sidecar(launch, settings)
    if fence is not None and settings.agent_dir:  # (fence_sidecar needs agent_dir)
        volumes.append(
            k8s.V1Volume(
                name=AGENT_VOLUME,
                host_path=k8s.V1HostPathVolumeSource(path=settings.agent_dir, type="Directory"),
            )
        )
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(
            name=pod_name(launch.task_id),
            namespace=settings.namespace,
            labels=labels,
            annotations={
                "pasture/task-id": launch.task_id,
                "pasture/job": launch.job,
                # the cluster autoscaler never scales away a node with a running task
                SAFE_TO_EVICT: "false",
            },
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
            init_containers=[fence] if fence is not None else None,
            share_process_namespace=True if fence is not None else None,
            volumes=volumes or None,
        ),
    )


def fence_sidecar(launch: TaskLaunch, settings: PodSettings) -> k8s.V1Container | None:
    """The fence sidecar of a task pod (module docstring), None when the settings name no
    agent dir or the launch no lease file.

    Raises:
        ValueError: the lease file or the task's state dir is not inside ``agent_dir``
            (the sidecar would watch a file the agent never writes).
    """
    if not settings.agent_dir or launch.lease_file is None:
        return None
    agent_dir = Path(settings.agent_dir)
    for what, path in (("lease file", launch.lease_file), ("state dir", launch.state_dir)):
        if not Path(path).is_relative_to(agent_dir):
            raise ValueError(
                f"PASTURE_K8S_AGENT_DIR: the agent's {what} {path} is not under {agent_dir}; "
                "set it to the agent's work_dir"
            )
    return k8s.V1Container(
        name=FENCE_CONTAINER,
        image=settings.fence_image or settings.default_image,  # has the watchdog
        command=[
            "python3",
            "-m",
            "scheduler.agent.watchdog",
            str(launch.lease_file),
            str(launch.state_dir / "fenced"),
            "--pod",
        ],
        restart_policy="Always",  # a native sidecar (Kubernetes >= 1.29)
        resources=k8s.V1ResourceRequirements(
            requests=dict(FENCE_RESOURCES), limits=dict(FENCE_RESOURCES)
        ),
        volume_mounts=[k8s.V1VolumeMount(name=AGENT_VOLUME, mount_path=str(agent_dir))],
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


def start_failure(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """``(reason, message)`` of a container of the pod (task or fence sidecar) that the
    kubelet cannot start (a waiting reason of :data:`START_FAILURES`), None otherwise."""
    status = pod.status
    if status is None:
        return None
    for cs in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None and waiting.reason in START_FAILURES:
            return str(waiting.reason), str(waiting.message or "")
    return None


def pod_evidence(pod: k8s.V1Pod | None) -> dict[str, object]:
    """What the kubelet saw of a finished task pod, for the failure diagnosis:
    ``{"oom_killed": True, "k8s_reason": "OOMKilled"}`` when the task container was
    OOM-killed, ``{"k8s_reason": "Evicted" | "UnexpectedAdmissionError" | ...,
    "k8s_message": ...}`` from the pod's status reason (node pressure eviction, the device
    plugin refusing its GPUs at admission); ``{}`` for a gone pod or nothing to say."""
    if pod is None or pod.status is None:
        return {}
    for cs in pod.status.container_statuses or []:
        term = cs.state.terminated if cs.name == "task" and cs.state else None
        if term is not None and term.reason == "OOMKilled":
            return {"oom_killed": True, "k8s_reason": "OOMKilled"}
    if pod.status.reason:
        return {"k8s_reason": str(pod.status.reason), "k8s_message": str(pod.status.message or "")}
    return {}


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


def pod_of(handle: str) -> tuple[str, str]:
    """``(namespace, pod)`` of an executor handle ``<namespace>/<pod>[#<fenced file>]``."""
    namespace, name = handle.partition("#")[0].split("/", 1)
    return namespace, name


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
        self._secrets: set[str] = set()  # pods with a Secret made by this executor
        self._waiting: dict[str, float] = {}  # handle -> when first seen failing to start
        self._evidence: dict[str, dict[str, object]] = {}  # handle -> why it never started
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
        failure = start_failure(pod)
        if failure is None:
            self._waiting.pop(handle, None)
            return None
        reason, message = failure
        now = self._clock()
        since = self._waiting.setdefault(handle, now)
        if reason not in PERMANENT_START_FAILURES and now - since < self.settings.start_timeout_s:
            return None
        log.warning("task pod %s never started: %s: %s", handle, reason, message)
        self._evidence[handle] = {"k8s_reason": reason, "k8s_message": message}
        return START_FAILED_EXIT

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
