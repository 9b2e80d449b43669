"""Task pods as data: what the ``kubernetes`` executor creates and how it reads them back.

Pure functions over the Kubernetes client's models (no API calls, no clock), shared by
the executor (:mod:`scheduler.agent.kubernetes`), the aks stack and the tests:

    TaskLaunch --build_pod()--> V1Pod (nodeName = the core's node, requests = limits,
                                       the fence sidecar, its parts of the share as
                                       subPaths, the VC's uid, tolerations)
    V1Pod --exit_code() / start_failure() / not_started() / pod_evidence()
          / disruption() / infrastructure_ending()--> what the agent reports

Task pods that the infrastructure ended are told from the task's own endings by
:func:`infrastructure_ending` (Kubernetes' own ``DisruptionTarget`` condition, which a Job's
``podFailurePolicy`` treats the same way; the kubelet's admission rejections; a graceful
node shutdown), so that the agent reports them ``lost`` with a named cause and the job is
requeued without charge (docs/platforms.md, "When Kubernetes ends a task").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s

from scheduler import logpaths
from scheduler.agent import k8s_secrets
from scheduler.agent.executor import TaskLaunch, log_redirect
from scheduler.agent.k8s_mounts import task_mounts
from scheduler.k8s import taints
from scheduler.k8s.autoscale import SAFE_TO_EVICT
from scheduler.k8s.nodes import FENCE_CONTAINER, FENCE_RESOURCES, GPU_RESOURCE
from scheduler.tenants import TenantUser

__all__ = ["FENCE_CONTAINER", "FENCE_RESOURCES", "GPU_RESOURCE", "SAFE_TO_EVICT"]  # re-exported

DEFAULT_TOLERATIONS = ("nvidia.com/gpu=present:NoSchedule",)
AGENT_VOLUME = "pasture-agent"
HOME_VOLUME = "pasture-home"
PASSWD_VOLUME = "pasture-passwd"
TASK_HOME = "/home/pasture"
"""The home directory (an emptyDir) of a task pod run as its VC's user, as in containers."""
PASSWD_FILE = "passwd"
"""The passwd file the executor writes in a task's state dir for a pod run as its VC's
user (:func:`passwd_text`), mounted at ``/etc/passwd`` (sshd and ssh need the uid's name)."""
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

GPU_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
"""Variables that choose a container's GPUs: set by pasture or the device plugin only."""
PENDING_TIMEOUT_S = 900.0
"""Seconds a task pod may be not running at all, whatever the reason (not admitted, its
sandbox or an Azure Files volume not created: ``ContainerCreating``,
``FailedCreatePodSandBox``; a start failure that comes and goes) before its task fails:
long enough for a cold pull of a multi-GB CUDA image, short of holding GPUs for hours."""
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
        pending_timeout_s: seconds a pod may be not running, whatever the reason, before
            its task fails (:data:`PENDING_TIMEOUT_S`; ``PASTURE_K8S_PENDING_TIMEOUT_S``).
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
    pending_timeout_s: float = PENDING_TIMEOUT_S

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, network: str = "host") -> PodSettings:
        """Settings from ``PASTURE_K8S_*`` variables (see the module docstring).

        Raises:
            ValueError: ``PASTURE_K8S_TOLERATIONS`` is not a JSON list of strings, or
                ``PASTURE_K8S_START_TIMEOUT_S`` or ``PASTURE_K8S_PENDING_TIMEOUT_S`` not a
                positive number.
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
        start_timeout_s = _seconds(env, "PASTURE_K8S_START_TIMEOUT_S", START_TIMEOUT_S)
        pending_timeout_s = _seconds(env, "PASTURE_K8S_PENDING_TIMEOUT_S", PENDING_TIMEOUT_S)
        return cls(
            namespace=namespace or "pasture",
            share_claim=env.get("PASTURE_K8S_SHARE_CLAIM", "pasture-share") or None,
            default_image=env.get("PASTURE_K8S_IMAGE", "pasture:0.1.0"),
            tolerations=tolerations,
            host_network=network == "host",
            agent_dir=env.get("PASTURE_K8S_AGENT_DIR") or None,
            fence_image=env.get("PASTURE_K8S_FENCE_IMAGE") or None,
            start_timeout_s=start_timeout_s,
            pending_timeout_s=pending_timeout_s,
        )


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    """A positive number of seconds from ``env[name]`` (``default`` when unset or empty).
    Raises ValueError naming the variable."""
    text = env.get(name) or str(default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}: expected a positive number of seconds, got {text!r}")
    return value


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
        task has GPUs), the task's parts of the share as ``subPath`` mounts of the claim
        at their paths (:func:`scheduler.agent.k8s_mounts.task_mounts`: the job's
        directory, which is the working directory, and ``launch.mounts``; never the
        claim's root), stdout/stderr appended to ``launch.log_path`` on the share, and
        ``launch.env`` as the environment; with ``launch.user`` (``task_users: vc``) the
        VC's uid/gid without privileges (:func:`pod_security`, :func:`task_security`,
        :func:`fence_security`), ``HOME`` an emptyDir and the task's passwd file
        (:func:`passwd_mount`); with
        ``settings.agent_dir`` and ``launch.lease_file`` also the fence sidecar
        (:func:`fence_sidecar`) and ``shareProcessNamespace: true``. An entrypoint role
        (``launch.entrypoint``) gets no ``command`` and ``args = launch.args``, so the
        kubelet runs the image's ENTRYPOINT (Kubernetes' own semantics); its start-up lines
        do not run and its output stays in the pod's log (``kubectl logs``), since the
        ENTRYPOINT is only known to the node's runtime.

    Raises:
        ValueError: a taint in ``settings.tolerations`` is malformed; a mount refused by
            :func:`scheduler.agent.k8s_mounts.task_mounts` (a link, ``..``, the share root).
    """
    limits = {"cpu": f"{launch.cpu_m}m", "memory": str(launch.memory)}
    if launch.gpus:
        limits[GPU_RESOURCE] = str(len(launch.gpus))
    script = f"{log_redirect(launch.log_path)}\n{launch.command}"
    # the job's directory, its code dir, team directory and declared data as subPaths of
    # the claim, never the claim's root (k8s_mounts.py)
    mounts, volumes = task_mounts(
        launch, settings.share_claim, settings.agent_dir, host_network=settings.host_network
    )
    if launch.user is not None:  # a writable home of its own (the image's may be root's)
        mounts.append(k8s.V1VolumeMount(name=HOME_VOLUME, mount_path=TASK_HOME))
        volumes.append(k8s.V1Volume(name=HOME_VOLUME, empty_dir=k8s.V1EmptyDirVolumeSource()))
        passwd = passwd_mount(launch, settings)
        if passwd is not None:
            mounts.append(passwd[0])
            volumes.append(passwd[1])
    job_dir = str(logpaths.job_dir(launch.share_dir, launch.job))
    workdir = launch.env.get("PASTURE_JOB_DIR", job_dir) if settings.share_claim else None
    command: list[str] | None = ["/bin/sh", "-c", script]
    args = None
    if launch.entrypoint:  # the image's own ENTRYPOINT: no command, the role's args
        command, args, workdir = None, launch.args, launch.working_dir
    container = k8s.V1Container(
        name="task",
        image=launch.image or settings.default_image,
        command=command,
        args=args,
        env=k8s_secrets.env_vars(gpu_isolation(launch), pod_name(launch.task_id)),
        resources=k8s.V1ResourceRequirements(requests=dict(limits), limits=dict(limits)),
        volume_mounts=mounts or None,
        working_dir=workdir,
        security_context=task_security(launch.user),
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
            security_context=pod_security(launch.user),
        ),
    )


def gpu_isolation(launch: TaskLaunch) -> dict[str, str]:
    """The task's environment with the GPU isolation of the container executor: a task
    without GPUs gets ``NVIDIA_VISIBLE_DEVICES=void`` and ``CUDA_VISIBLE_DEVICES=""`` (AKS
    GPU nodes run the NVIDIA container runtime, which would otherwise expose every GPU of
    the node to a pod that requests none, other tenants' included: the NVIDIA device
    plugin's documented warning); a task with GPUs gets neither from ``launch.env`` (the
    device plugin sets them to its allocated devices at admission)."""
    env = {k: v for k, v in launch.env.items() if k not in GPU_VARIABLES}
    if not launch.gpus:
        env.update(NVIDIA_VISIBLE_DEVICES="void", CUDA_VISIBLE_DEVICES="")
    if launch.user is not None:
        env["HOME"] = TASK_HOME
    return env


def pod_security(user: TenantUser | None) -> k8s.V1PodSecurityContext | None:
    """The pod-level security context of a task run as its VC's user (None: the image's
    user, ``task_users: agent``): ``runAsUser``/``runAsGroup`` the VC's uid/gid
    (:mod:`scheduler.tenants`), ``fsGroup`` its gid with ``fsGroupChangePolicy:
    OnRootMismatch`` (the emptyDir home; the share's claim is RWX without an fsType, which
    the kubelet does not re-own under a CSI driver's default ``fsGroupPolicy``), the
    runtime's default seccomp profile. The fence sidecar overrides the user
    (:func:`fence_security`)."""
    if user is None:
        return None
    return k8s.V1PodSecurityContext(
        run_as_user=user.uid,
        run_as_group=user.gid,
        fs_group=user.gid,
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )


def task_security(user: TenantUser | None) -> k8s.V1SecurityContext | None:
    """The task container's security context when it runs as its VC's user: that uid/gid,
    ``runAsNonRoot``, ``allowPrivilegeEscalation: false`` (no setuid gain), every
    capability dropped. None for ``task_users: agent``."""
    if user is None:
        return None
    return k8s.V1SecurityContext(
        run_as_user=user.uid,
        run_as_group=user.gid,
        run_as_non_root=True,
        allow_privilege_escalation=False,
        capabilities=k8s.V1Capabilities(drop=["ALL"]),
    )


def fence_security(user: TenantUser | None) -> k8s.V1SecurityContext | None:
    """The fence sidecar's security context beside a task run as its VC's user: root
    with every capability dropped but ``KILL`` (it signals the tenant's processes,
    ``kill(-1)``, and writes the fenced marker in the agent's root-owned task dir), no
    privilege escalation, a read-only root filesystem. Not the tenant's uid: the pods
    share a PID namespace, and a process of the same uid could reach the sidecar's
    mount of the agent's work dir through ``/proc/<pid>/root``. None for ``task_users:
    agent``."""
    if user is None:
        return None
    return k8s.V1SecurityContext(
        run_as_user=0,
        run_as_group=0,
        run_as_non_root=False,
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=k8s.V1Capabilities(drop=["ALL"], add=["KILL"]),
    )


def passwd_text(user: TenantUser) -> str:
    """``/etc/passwd`` of a task pod run as ``user``: root, the VC's user (home
    :data:`TASK_HOME`, shell ``/bin/sh``) and nobody; sshd and ssh look the uid up by
    name. The names are :func:`scheduler.tenants.user_name`'s (no ``:`` or newline)."""
    return (
        "root:x:0:0:root:/root:/bin/sh\n"
        f"{user.name}:x:{user.uid}:{user.gid}:pasture tenant:{TASK_HOME}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )


def passwd_mount(
    launch: TaskLaunch, settings: PodSettings
) -> tuple[k8s.V1VolumeMount, k8s.V1Volume] | None:
    """The mount of the task's passwd file (:data:`PASSWD_FILE` in its state dir, written
    by the executor) at ``/etc/passwd``, read-only, as a hostPath of the state dir; None
    without an agent dir (then the task runs with the image's passwd)."""
    if not settings.agent_dir or not Path(launch.state_dir).is_relative_to(settings.agent_dir):
        return None
    return (
        k8s.V1VolumeMount(
            name=PASSWD_VOLUME, mount_path="/etc/passwd", sub_path=PASSWD_FILE, read_only=True
        ),
        k8s.V1Volume(
            name=PASSWD_VOLUME,
            host_path=k8s.V1HostPathVolumeSource(path=str(launch.state_dir), type="Directory"),
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
        security_context=fence_security(launch.user),
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


def not_started(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """``(reason, message)`` while the pod's task container has not started (the pod not
    yet admitted or bound, its sandbox or volumes not created, an init container or the
    image pull still going), None once it runs or ended. The reason is the first that
    says most: the task container's (or a sidecar's) waiting reason, e.g.
    ``ContainerCreating``; else a false pod condition's reason (``PodScheduled``:
    ``Unschedulable``); else the pod's phase."""
    status = pod.status
    if status is None:
        return "Pending", "the pod has no status yet"
    task = [cs for cs in status.container_statuses or [] if cs.name == "task"]
    if task and task[0].state is not None and (task[0].state.running or task[0].state.terminated):
        return None
    if status.phase in ("Running", "Succeeded", "Failed") and not task:
        return None if status.phase != "Running" else ("Running", "no task container status")
    for cs in [*(status.init_container_statuses or []), *task]:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None and waiting.reason:
            return str(waiting.reason), str(waiting.message or "")
    for cond in status.conditions or []:
        if cond.status == "False" and cond.reason:
            return str(cond.reason), str(cond.message or "")
    return str(status.phase or "Pending"), str(status.message or "")


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
    for cond in pod.status.conditions or []:
        if cond.type == "DisruptionTarget" and cond.status == "True" and cond.reason:
            return {"k8s_reason": str(cond.reason), "k8s_message": str(cond.message or "")}
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


# Causes of task endings the infrastructure caused (scheduler.store.records.Cause values)
EVICTED = "evicted"
NODE_SHUTDOWN = "node_shutdown"
ADMISSION_REJECTED = "admission_rejected"
NOT_STARTED = "not_started"
"""Cause of a task whose pod was not running at all for ``pending_timeout_s`` (never
admitted, its sandbox or volumes never created): the node's fault, not the task's."""
SHUTDOWN_REASONS = ("TerminationByKubelet", "Shutdown", "Terminated", "NodeShutdown")
"""Pod condition or status reasons of the kubelet's graceful node shutdown (kubelet
``nodeshutdown`` manager: status reason ``Terminated``, message "Pod was terminated in
response to imminent node shutdown", and since Kubernetes 1.26 ``DisruptionTarget``
reason ``TerminationByKubelet``)."""
ADMISSION_REASONS = ("UnexpectedAdmissionError", "OutOfpods", "NodeAffinity", "NodeAffinityFailed")
"""Pod status reasons of the kubelet's admission rejections (kubelet ``lifecycle``
admit handlers); ``OutOf<resource>`` (``OutOfcpu``, ``OutOfmemory``,
``OutOfnvidia.com/gpu``...) are matched by prefix."""


def infrastructure_ending(pod: k8s.V1Pod | None) -> tuple[str, str] | None:
    """``(cause, reason)`` when the infrastructure, not the task, ended a task pod:

    - :data:`NODE_SHUTDOWN`: the kubelet's graceful node shutdown (:data:`SHUTDOWN_REASONS`
      in the ``DisruptionTarget`` condition or the pod's status reason; the task then
      ends 143 on SIGTERM);
    - :data:`EVICTED`: any other ``DisruptionTarget`` condition (a drain through the
      Eviction API, such as AKS' Spot auto-drain or an upgrade; the taint manager; the
      pod GC; preemption by kube-scheduler) or the kubelet's node-pressure eviction
      (status reason ``Evicted``);
    - :data:`ADMISSION_REJECTED`: the kubelet refused the pod at admission
      (:data:`ADMISSION_REASONS`, ``OutOf*``): the node did not have what the pod
      requests when it arrived.

    None for a pod the task itself ended, or a pod that is gone (``pod`` None: the node's
    loss decides, :func:`disruption`). The reason is the condition's or status' reason.
    """
    if pod is None or pod.status is None:
        return None
    reason = str(pod.status.reason or "")
    for cond in pod.status.conditions or []:
        if cond.type == "DisruptionTarget" and cond.status == "True":
            why = str(cond.reason or "DisruptionTarget")
            # TerminationByKubelet is also a node-pressure eviction (status reason Evicted)
            shutdown = reason in SHUTDOWN_REASONS or (
                why in SHUTDOWN_REASONS and reason != "Evicted"
            )
            return (NODE_SHUTDOWN if shutdown else EVICTED), why
    message = str(pod.status.message or "")
    if reason in SHUTDOWN_REASONS or "node shutdown" in message.lower():
        return NODE_SHUTDOWN, reason or "Shutdown"
    if reason == "Evicted":
        return EVICTED, reason
    if reason in ADMISSION_REASONS or reason.startswith("OutOf"):
        return ADMISSION_REJECTED, reason
    return None


def pod_of(handle: str) -> tuple[str, str]:
    """``(namespace, pod)`` of an executor handle ``<namespace>/<pod>[#<fenced file>]``."""
    namespace, name = handle.partition("#")[0].split("/", 1)
    return namespace, name
