"""The executor interface: how an agent runs one task on its node.

An executor is small on purpose (start / poll / stop / cleanup over an opaque string
handle) so that a new kind (``kubernetes.py`` binds pods) only implements these four
methods. Handles are strings the agent persists in its local state file, so that an agent
restarted while tasks run can ``poll`` and ``stop`` them again (adoption):

    handle = executor.start(launch)      # returns quickly; the task runs detached
    executor.poll(handle) -> None        # still running
    executor.poll(handle) -> 0 / 1 / ... # finished with that exit code (-1: vanished,
                                         # e.g. killed while nobody watched)
    executor.stop(handle, grace_s)       # SIGTERM, wait up to grace_s, then SIGKILL; blocks
    executor.evidence(handle) -> dict    # what the runtime saw (OOM kill), for diagnosis
    executor.cleanup(handle)             # forget leftovers (container, exit file)

Implementations: ``process`` (:mod:`scheduler.agent.process`), ``container``
(:mod:`scheduler.agent.container`), ``kubernetes`` (:mod:`scheduler.agent.kubernetes`).
All raise :class:`ExecutorError` when a task cannot be started.
"""

from __future__ import annotations

import abc
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.spec.model import ENTRYPOINT_LABEL, EXECUTOR_LABEL
from scheduler.tenants import TenantUser

if TYPE_CHECKING:
    from scheduler.k8s.capacity import Capacity


def log_redirect(log_path: Path) -> str:
    """The shell lines that send a task's stdout and stderr to the end of ``log_path``.

    A task's log is appended to (the agent's ``=== attempt N on NODE ===`` header and the
    earlier attempts come first), but not with ``exec >>LOG``: ``>>`` opens the file
    write-only, and on a share mounted with smbnetfs (``samba_client_mount_type: fuse``)
    libsmbclient must query the size of the open file for O_APPEND, which a write-only SMB
    handle may not do (no FILE_READ_ATTRIBUTES), so the open fails with EIO. The script
    opens the log read-write instead and reads it to its end: reads and writes share one
    file offset, so every write lands after what was there (one writer per log). The
    agent's own writers open logs with mode ``a+`` for the same reason.

    Returns:
        Three lines for ``/bin/sh``; the script exits 125 if the log cannot be read.
    """
    q = shlex.quote(str(log_path))
    return f"exec 3<>{q}\ncat <&3 >/dev/null || exit 125\nexec 1>&3 2>&3 3>&-"


def gpu_env(visible: list[str]) -> dict[str, str]:
    """The GPU variables every task gets, whatever its executor: ``CUDA_VISIBLE_DEVICES``
    = the devices it may use as the task sees them (``""`` for a task without GPUs: CUDA
    then sees none, where unset it would see every GPU of the node) and
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA numbers devices like NVML, by which pasture
    allocates them; CUDA's default puts the fastest first on a node of mixed GPUs).

    Args:
        visible: device indices or UUIDs, in the task's numbering.
    """
    return {"CUDA_VISIBLE_DEVICES": ",".join(visible), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


class ExecutorError(RuntimeError):
    """A task could not be started (the message says why; reported as the task's message)."""


@dataclass(frozen=True)
class TaskLaunch:
    """Everything an executor needs to start one task.

    Attributes:
        task_id: unique per attempt, ``<job>-<role>-<index>-a<attempt>`` (safe for
            container names: ``task-<task_id>``).
        job, role, index, attempt, node: identity.
        command: shell script, run by ``/bin/sh -c``.
        image: container image (None for the process executor).
        env: the complete task environment to add (job/role env + discovery env).
        cpu_m: CPU limit in millicores. memory: memory limit in bytes.
        gpus: GPU device indices on the node (CUDA ordinal / CDI index).
        log_path: file to append the task's stdout and stderr to.
        share_dir: the cluster share on this node (bind-mounted at the same path).
        mounts: (host path, path inside the task) pairs, for containers.
        state_dir: a directory private to this task on the node (exit code file, env file).
        lease_file: the agent's lease file (:mod:`scheduler.agent.watchdog`); executors
            that can tie a task's life to it do (the process executor), None: not tied.
        entrypoint: run the image's own ENTRYPOINT with ``args`` (None: the image's CMD)
            after ``command`` (then only start-up lines); executors that cannot resolve an
            image's ENTRYPOINT (process) raise ExecutorError.
        working_dir: the role's working directory (already a ``cd`` line of ``command``;
            the kubernetes executor sets it on the pod for entrypoint roles).
        user: the Unix identity of the job's VC (:mod:`scheduler.tenants`) the task runs
            as; None: the agent's own user (``task_users: agent``).
        visible: the share paths a task run as ``user`` may see (job directory, code dir,
            team directory, the job's mount sources); the process executor hides the rest
            of the share from it ([]: the whole share mount, as before).
        read_only: share paths the process executor shows the task read-only (the job's
            declared data, :class:`scheduler.spec.policies.MountSpec`), in the same mount
            namespace as ``visible``; containers get ``:ro`` in ``mounts`` instead.
    """

    task_id: str
    job: str
    role: str
    index: int
    attempt: int
    node: str
    command: str
    image: str | None
    env: dict[str, str]
    cpu_m: int
    memory: int
    gpus: list[int]
    log_path: Path
    share_dir: Path
    state_dir: Path
    mounts: list[tuple[str, str]] = field(default_factory=list)
    lease_file: Path | None = None
    entrypoint: bool = False
    args: list[str] | None = None
    working_dir: str | None = None
    user: TenantUser | None = None
    visible: list[str] = field(default_factory=list)
    read_only: list[str] = field(default_factory=list)


RUNS_IMAGE_ENTRYPOINT = ("container", "kubernetes")
"""Executor kinds that can run an image's own ENTRYPOINT (a role with ``entrypoint: true``)."""


def executor_labels(kind: str) -> dict[str, str]:
    """Labels an agent adds to its node's own for its executor ``kind``:
    ``pasture.io/executor: <kind>``, and ``pasture.io/image-entrypoint: "true"``
    (:data:`scheduler.spec.model.ENTRYPOINT_LABEL`) when the executor can run an image's
    ENTRYPOINT, which ``entrypoint: true`` roles select."""
    labels = {EXECUTOR_LABEL: kind}
    if kind in RUNS_IMAGE_ENTRYPOINT:
        labels[ENTRYPOINT_LABEL] = "true"
    return labels


def task_id(job: str, role: str, index: int, attempt: int) -> str:
    """``<job>-<role>-<index>-a<attempt>`` with unsafe characters replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{job}-{role}-{index}-a{attempt}")


class Executor(abc.ABC):
    """Runs tasks on this node (see the module docstring for the contract)."""

    kind: str = ""
    kill_bound_s: float = 10.0
    """Seconds from :meth:`kill` (or a lease watchdog's expiry) until the task's processes
    are surely gone; part of the agent's fence time (scheduler/store/lease.py)."""

    @abc.abstractmethod
    def start(self, launch: TaskLaunch) -> str:
        """Start the task detached; return its handle. Raises ExecutorError."""

    @abc.abstractmethod
    def poll(self, handle: str) -> int | None:
        """None while running, else the exit code (-1 when it vanished without one)."""

    @abc.abstractmethod
    def stop(self, handle: str, grace_s: float) -> None:
        """SIGTERM, wait up to ``grace_s`` seconds, then SIGKILL. Blocks until stopped."""

    def kill(self, handle: str) -> None:
        """Kill the task at once (fencing: no grace). Blocks until it is gone or
        :attr:`kill_bound_s` passed. Default: ``stop(handle, 0)``."""
        self.stop(handle, 0.0)

    def fenced(self, handle: str) -> bool:
        """Whether the task was killed by its lease watchdog (default: never)."""
        return False

    def node_labels(self) -> dict[str, str]:
        """Labels the node adds for what this executor enforces on this host (the process
        executor: ``pasture.io/memory-limit``, ``pasture.io/task-kill``). Default: none."""
        return {}

    def cleanup(self, handle: str) -> None:  # noqa: B027 - optional hook
        """Remove what the task left on the node (default: nothing)."""

    def node_capacity(self, node: str) -> Capacity | None:
        """What the platform says node ``node`` offers to tasks (the kubernetes executor:
        its Node object's allocatable), None to detect it on the host. Raises
        NodeCapacityError when the platform cannot be read."""
        return None

    def before_register(self, node: str) -> None:  # noqa: B027 - optional hook
        """Called before the agent registers ``node`` with pasture (the kubernetes
        executor labels its Node object so that placeholders keep off). Default: nothing."""

    def infrastructure_ending(self, handle: str) -> tuple[str, str] | None:
        """``(cause, reason)`` when the platform, not the task, ended the task of ``handle``
        (a :class:`scheduler.store.records.Cause` value and the platform's own reason),
        so that the agent reports it ``lost`` and the job is requeued without charge.
        Call after :meth:`poll` returned an exit code, before :meth:`cleanup`. Default:
        never (the container and process executors' tasks end by themselves)."""
        return None

    def evidence(self, handle: str) -> dict[str, Any]:
        """What the runtime saw of a finished task, for the failure diagnosis
        (:mod:`scheduler.rules.diagnosis` rules match it), e.g. ``{"oom_killed": True}``. Call
        before :meth:`cleanup`. Default: nothing."""
        return {}
