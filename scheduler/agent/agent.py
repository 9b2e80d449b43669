"""The node agent: register, heartbeat, run the tasks bound to this node, report them.

Pipeline of one pass (:meth:`Agent.reconcile`). The agent blocks on its node's wake-up
list (``node:<node>:wake``, BLPOP; pushed by the commit and the loop's task updates) for at
most LOCAL_POLL_S; the store is read when woken and at least every BINDINGS_REFRESH_S, the
local tasks are looked at on every pass::

    bindings (ledger set of this node) + task records
        -> start tasks that are scheduled here and desired to run (start-up: job dir,
           hostfile, ssh, code dir, env in agent/startup.py; log header
           "=== attempt N on NODE ==="; executor.start; report running)
        -> stop local tasks whose record says stop, moved on (other attempt), finished, or
           vanished (SIGTERM, grace, SIGKILL in a thread)
        -> poll local tasks; report exit codes (succeeded / failed / stopped)

Local state (``<work_dir>/agent-state.json``: handle, attempt, stopping of every task this
agent started) is written before each report, so an agent restarted while tasks run polls
and reports them (adoption) instead of starting them again, and stops those the store no
longer wants: no orphans, no double run.

Lease and fencing (docs/faults.md): a heartbeat thread renews the agent's lease with every
heartbeat the store answers (from the moment it was sent) and writes the deadline to
``<work_dir>/lease`` for the process executor's per-task watchdog; a fence thread kills
every local task (no grace) once the lease runs out without renewal, and no task starts
while it is expired. Tasks killed that way, and tasks the store thinks run here but this
agent has no record of, are reported ``lost`` with a cause, so their attempt is not charged.

Log times: a third thread looks at every local task's log every ``LOG_TIMES_POLL_S`` and
appends (size, now) to ``<role>-<index>.log.times`` when it grew, once more when the task
ended (before its report); the log itself stays what the task wrote (scheduler/logtimes.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from scheduler import tenants
from scheduler.agent import ssh, startup
from scheduler.agent.executor import (
    Executor,
    ExecutorError,
    TaskLaunch,
    executor_labels,
    task_id,
)
from scheduler.agent.gpu_dcgm import node_backend
from scheduler.agent.gpu_health import GpuHealthMonitor
from scheduler.agent.resources import detect_capacity, usage
from scheduler.agent.taskusage import TaskUsageSampler
from scheduler.k8s.capacity import capacity_watch_from_env
from scheduler.logpaths import task_log_path
from scheduler.logtimes import POLL_S as LOG_TIMES_POLL_S
from scheduler.logtimes import LogTimeRecorder
from scheduler.rules.diagnosis import diagnose_report
from scheduler.sealed import SealError, load_key, unseal
from scheduler.settings import AgentSettings
from scheduler.spec.model import JobSpec
from scheduler.spec.secrets import env_name
from scheduler.states import TaskState
from scheduler.store.agent_store import NodeStore
from scheduler.store.lease import fence_s
from scheduler.store.records import Cause, NodeRecord, TaskRecord
from scheduler.store.store import Store

log = logging.getLogger("pasture.agent")

FENCE_POLL_S = 0.25
"""Seconds between two checks of the lease by the fence thread."""
TENANT_EXECUTORS = ("process", "container", "kubernetes")
"""Executors that run a task as its VC's Unix identity with ``task_users: vc``."""
LOCAL_POLL_S = 0.5
"""Seconds between two looks at the local tasks (exits are reported within this)."""
BINDINGS_REFRESH_S = 5.0
"""Seconds between two reads of the node's bindings when no wake-up came (a safety net:
the commit and the loop's task updates wake the agent through ``node:<node>:wake``)."""
AUTH_REFUSALS_BEFORE_EXIT = 3
"""Refusals of this node's credentials in a row after which the agent exits (status 3)
for its supervisor to restart it with fresh ones (:meth:`Agent._refused`)."""
STORE_CALL_TIMEOUT_S = 10.0
"""Seconds one store call may take at most (capped by the lease): several heartbeats fit
in a lease, so a store that hangs, or a primary whose host vanished after a failover (no
RST), costs a few retries, not the lease (docs/faults.md "Bounds")."""


def make_executor(kind: str, **options: Any) -> Executor:
    """Executor by kind: ``process``, ``container`` (options: cli, network),
    ``kubernetes`` (implementations of :class:`scheduler.agent.executor.Executor`).
    Raises ValueError for an unknown kind."""
    if kind == "process":
        from scheduler.agent.process import ProcessExecutor

        return ProcessExecutor()
    if kind == "container":
        from scheduler.agent.container import ContainerExecutor

        return ContainerExecutor(
            cli=str(options.get("cli", "podman")), network=str(options.get("network", "host"))
        )
    if kind == "kubernetes":
        from scheduler.agent import kubernetes  # written against this interface

        return kubernetes.KubernetesExecutor(**options)
    raise ValueError(f"executor must be process, container or kubernetes, got {kind!r}")


@dataclass
class LocalTask:
    """A task this agent started: identity, executor handle, whether a stop was sent."""

    job: str
    key: str
    attempt: int
    handle: str
    stopping: bool = False
    stop_reason: str = ""
    fenced: bool = False
    uid: str = ""  # the job's uid (its log directory, its usage samples)
    gpus: list[int] = field(default_factory=list)  # GPU indices it holds on this node

    @property
    def lid(self) -> str:
        return f"{self.job}/{self.key}#{self.attempt}"


class Agent:
    """One node's agent.

    Args:
        settings: agent settings (node name, address, share, executor, work_dir...).
        store: the store (default: a :class:`NodeStore` of this node from
            ``settings.redis``, whose writes go only to this node's keys; tests may pass a
            full :class:`Store`, which applies reports directly).
        executor: the executor (default: ``settings.executor``).
    """

    def __init__(
        self,
        settings: AgentSettings,
        store: NodeStore | Store | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.s = settings
        self.node = settings.node_name
        self.lease_s = settings.lease
        # bounded calls: a partition must not hang the heartbeat thread forever, and a
        # call to a primary that vanished (a host lost, not a process: no RST) gives up in
        # time for the next heartbeats to ask the sentinels for the new one
        timeout = min(self.lease_s, STORE_CALL_TIMEOUT_S)
        self.store = store or NodeStore.from_settings(
            settings.redis,
            settings.node_name,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        self.executor = executor or make_executor(
            settings.executor, cli=settings.container_cli, network=settings.task_network
        )
        if settings.task_users == "vc" and self.executor.kind not in TENANT_EXECUTORS:
            raise ExecutorError(
                f"task_users: vc is not supported by the {self.executor.kind} executor (its"
                " tasks run as their image's user); set task_users: agent"
            )
        if settings.task_users == "vc" and not tenants.can_switch():
            raise ExecutorError(
                "task_users: vc runs each task as its VC's Unix user, which needs the agent"
                " to run as root; run it as root, or set task_users: agent (every tenant's"
                " tasks then run as the agent's user)"
            )
        self.fence_s = fence_s(self.lease_s, self.executor.kill_bound_s + FENCE_POLL_S)
        self.lease_file = Path(settings.work_dir) / "lease"
        self._deadline = 0.0  # CLOCK_MONOTONIC end of the lease; 0: none held
        self._auth_failures = 0  # credentials refused in a row (_refused)
        self.exit_code = 0  # non-zero: run_forever ends the process with it
        self.state_file = Path(settings.work_dir) / "agent-state.json"
        self.local: dict[str, LocalTask] = {}
        self._lock = threading.Lock()
        self._stoppers: dict[str, threading.Thread] = {}
        self._last_heartbeat = 0.0
        self._records: dict[tuple[str, str], TaskRecord] | None = None  # last read
        self.gpu_health = GpuHealthMonitor(node_backend(settings.nvml_recording))
        self.task_usage = TaskUsageSampler()  # per-task figures in each heartbeat
        self._task_figures: list[dict[str, Any]] | None = None  # last measure(); None: none yet
        self._measuring = False  # the _measures thread runs: heartbeats never measure
        self.log_times = LogTimeRecorder()  # <role>-<index>.log.times (scheduler/logtimes.py)
        self._capacity_watch = capacity_watch_from_env()  # aks: re-register on a change
        self._load_state()

    # ---- local state ----------------------------------------------------------------
    def _load_state(self) -> None:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        for d in data.get("tasks", []):
            t = LocalTask(**d)
            self.local[t.lid] = t
        if self.local:
            log.info("adopting %d task(s) from %s", len(self.local), self.state_file)

    def _save_state(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        with self._lock:
            data = {"node": self.node, "tasks": [asdict(t) for t in self.local.values()]}
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_file)

    # ---- lease --------------------------------------------------------------------
    def _renew(self, sent: float) -> None:
        """The store answered a heartbeat sent at monotonic ``sent``: the lease now runs
        until ``sent + lease_s``; the lease file says so to the task watchdogs."""
        deadline = sent + self.lease_s
        if deadline <= self._deadline:
            return
        if self._deadline and time.monotonic() >= self._deadline:
            # the lease ran out (a frozen node thawing, a hung agent): every task started
            # under it dies before the new deadline reaches the watchdogs, so a renewal
            # never revives a task whose node the loop may have given up on
            self._fence_now()
        self._deadline = deadline
        self.lease_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.lease_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"deadline": deadline, "node": self.node}))
        os.replace(tmp, self.lease_file)

    def _fence_now(self) -> None:
        """Fence every local task and wait for the kills (at most the executor's kill
        bound each)."""
        self.fence(expired=True)
        for th in list(self._stoppers.values()):
            if th.name.startswith("fence-"):
                th.join(self.executor.kill_bound_s)

    def lease_held(self) -> bool:
        """Whether the lease is still running (tasks may start)."""
        return time.monotonic() < self._deadline

    def fence(self, expired: bool = False) -> int:
        """Kill every local task not fenced yet (no grace), when the lease ran out
        (``expired``: the caller knows it did). Returns how many were fenced."""
        if not expired and self.lease_held():
            return 0
        with self._lock:
            todo = [t for t in self.local.values() if not t.fenced]
            for t in todo:
                t.fenced, t.stopping = True, True
                t.stop_reason = f"lease of {self.lease_s:g} s not renewed (fenced)"
        if not todo:
            return 0
        log.warning("lease expired: fencing %d task(s)", len(todo))
        self._save_state()
        for t in todo:
            th = threading.Thread(
                target=self.executor.kill, args=(t.handle,), name=f"fence-{t.lid}", daemon=True
            )
            self._stoppers[t.lid] = th
            th.start()
        return len(todo)

    # ---- registration / heartbeat ----------------------------------------------------
    def register(self) -> NodeRecord:
        """Register (or re-register) this node with detected / configured capacity; renews
        the lease."""
        sent = time.monotonic()
        node = self.executor.node_capacity(self.node)
        cap = detect_capacity(self.s.resources, self.gpu_health.backend, node=node)
        rec = NodeRecord(
            name=self.node,
            address=self.s.address,
            cpu_m=cap.cpu_m,
            memory=cap.memory,
            gpu=cap.gpu,
            gpu_model=cap.gpu_model,
            labels={
                **self.s.labels,
                **executor_labels(self.executor.kind),
                **self.executor.node_labels(),
            },
            port_range=self.s.port_range,
            usage=usage(self.gpu_health.backend),
            executor=self.executor.kind,
            lease_s=self.lease_s,
            fence_s=self.fence_s,
            heartbeat_interval_s=self.s.heartbeat_interval_s,
            task_users=self.s.task_users,
            task_login=self._task_login(),
        )
        self._last_heartbeat = time.monotonic()
        self.executor.before_register(self.node)
        out = self.store.register_node(rec)
        if not out.revoked:  # force-deleted: the lease runs out, tasks are fenced
            self._renew(sent)
        return out

    def _task_login(self) -> str:
        """The user name a task's sshd accepts when tasks run as the agent: the agent's
        own (process executor); "" where the task's image decides (containers, pods) or
        tasks run as their VC's user (the API names that one)."""
        if self.s.task_users != "agent" or self.executor.kind != "process":
            return ""
        import pwd

        try:
            return pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:  # a uid without a passwd entry: sshd refuses it anyway
            return ""

    def measure(self, gpu_samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Measure every local task (:class:`TaskUsageSampler`; one process-table scan)
        and keep the figures for the next heartbeat. ``gpu_samples``: the node's NVML
        samples. Returns the figures."""
        with self._lock:
            local = list(self.local.values())
        figures = self.task_usage.sample(local, gpu_samples)
        self._task_figures = figures
        return figures

    def _measures(self, stop: threading.Event) -> None:
        """Measure the tasks every ``heartbeat_interval_s`` until ``stop``, on its own
        thread: however long a sample takes (many tasks, a loaded node), it never delays
        a lease renewal; heartbeats carry the latest figures."""
        while not stop.is_set():
            try:
                self.measure(usage(self.gpu_health.backend)["gpus"])
            except Exception:  # noqa: BLE001 - a failed sample must not end measuring
                log.exception("measuring the tasks failed")
            stop.wait(self.s.heartbeat_interval_s)

    def heartbeat(self) -> None:
        """Send a heartbeat with usage, the tasks' latest figures and GPU health (renewing
        the lease); re-register when the store forgot this node; cordon it when a GPU
        turned unhealthy (:mod:`.gpu_health`). The tasks are measured here only when no
        :meth:`_measures` thread does it (a heartbeat called on its own)."""
        sent = self._last_heartbeat = time.monotonic()
        report = {**usage(self.gpu_health.backend), "gpu_health": self.gpu_health.report()}
        if self._measuring:  # the latest figures (none before the first sample)
            report["tasks"] = self._task_figures or []
        else:
            report["tasks"] = self.measure(report["gpus"])
            sent = time.monotonic()  # the lease runs from the store's request
        state = self.store.heartbeat(self.node, report)
        if state == "":
            log.warning("node %s unknown to the store; registering again", self.node)
            self.register()
        elif state == "revoked":  # force-deleted: no renewal; the lease fences the tasks
            log.warning("node %s deleted by an operator; its lease is revoked", self.node)
        else:
            self._renew(sent)
        if self._capacity_watch is not None and self._capacity_watch.changed():
            log.info("node %s: allocatable resources changed; registering again", self.node)
            self.register()
        self.gpu_health.check(self.store, self.node, report["gpu_health"])

    # ---- reconcile ------------------------------------------------------------------
    def reconcile(self, read: bool = True) -> None:
        """One pass: start, stop and report tasks (see the module docstring). ``read``
        False: only report local tasks that ended (no store read; tasks start only on a
        pass that read the store)."""
        if read or self._records is None:
            read = True
            self._records = self.store.bound_tasks(self.node)  # one pipelined read
        records = self._records
        # stop what the store no longer wants here
        for t in list(self.local.values()):
            rec = records.get((t.job, t.key))
            if rec is None or rec.attempt != t.attempt:
                self._stop(t, "no longer bound to this node")
            elif rec.desired == "stop" or rec.done:
                self._stop(t, "stop requested" if rec.desired == "stop" else f"task {rec.state}")
        # report what finished (one task's error never blocks the others: _isolated)
        for t in list(self.local.values()):
            if t.lid in self._stoppers and self._stoppers[t.lid].is_alive():
                continue
            self._isolated(f"task {t.lid}", self._report_if_ended, t)
        if not read:
            return
        # start what is bound here and not running yet
        running = {(t.job, t.key, t.attempt) for t in self.local.values()}
        for (job, key), rec in records.items():
            if (job, key, rec.attempt) in running:
                continue
            if rec.desired == "stop" and rec.state == TaskState.SCHEDULED:
                # stopped before this agent started it (a stop, a failed start): say so,
                # or the job's stop would wait for it forever
                self.store.report_task(
                    job,
                    key,
                    rec.attempt,
                    self.node,
                    TaskState.STOPPED,
                    None,
                    "stopped before it started",
                )
                continue
            if rec.desired != "run":
                continue
            if rec.state == TaskState.SCHEDULED and self.lease_held():
                self._start_isolated(job, rec)
            elif rec.state == TaskState.RUNNING:
                # running by the store's account but unknown here: lost with our state file
                self.store.report_task(
                    job,
                    key,
                    rec.attempt,
                    self.node,
                    TaskState.LOST,
                    None,
                    "agent restarted without a record of this task",
                    cause=Cause.AGENT_RESTART,
                )

    def _report_if_ended(self, t: LocalTask) -> None:
        """Report ``t`` when its executor says it ended (state, exit code, diagnosis, or
        ``lost``/``fenced`` when the lease killed it), then forget it."""
        code = self.executor.poll(t.handle)
        if code is None:
            return
        cause = ""
        fenced = t.fenced or self.executor.fenced(t.handle)
        platform = None
        if not t.stopping and code != 0:
            platform = self.executor.infrastructure_ending(t.handle)
        if platform is not None and not fenced:  # evicted, node shutdown, admission refused
            cause, why = platform
            state, msg = TaskState.LOST, f"ended by the platform ({why}), exit code {code}"
        elif fenced and code != 0:
            state, msg, cause = (
                TaskState.LOST,
                "killed by fencing: " + (t.stop_reason or "the agent's lease ran out"),
                Cause.FENCED,
            )
        elif fenced and code == 0:  # it exited by itself before the fence reached it
            state, msg = TaskState.SUCCEEDED, "exited with code 0"
        elif t.stopping:
            state, msg = TaskState.STOPPED, f"stopped ({t.stop_reason})"
        elif code == 0:
            state, msg = TaskState.SUCCEEDED, "exited with code 0"
        else:
            state, msg = TaskState.FAILED, f"exited with code {code}"
        self._time_log(t, last=True)  # its last lines get their time before it is reported
        diag = None
        if state == TaskState.FAILED or platform:  # classify the failure (rules are data)
            diag = diagnose_report(
                self._log_path(t),
                code,
                msg,
                self.executor.evidence(t.handle),
                self.s.diagnosis_rules,
            )
        self.store.report_task(
            t.job,
            t.key,
            t.attempt,
            self.node,
            state,
            code,
            msg,
            cause=cause,
            diagnosis=diag,
            usage=self.task_usage.final(t),  # kept in the task's record (sacct's)
        )
        log.info("task %s %s (exit %s)", t.lid, state, code)
        self.executor.cleanup(t.handle)
        self._remove_keys(t.job, t.key, t.attempt)
        with self._lock:
            self.local.pop(t.lid, None)
        self._save_state()

    def _log_path(self, t: LocalTask) -> Path:
        role, _, index = t.key.rpartition("-")
        return task_log_path(self.s.share_dir, t.job, t.uid, role, int(index))

    def _time_log(self, t: LocalTask | Path, last: bool = False) -> None:
        """Record when the task's log grew (:class:`LogTimeRecorder`); ``last``: the task
        ended, stop tracking its log. A failure of the share is logged, not raised: times
        are an aid, the task and its report go on."""
        path = t if isinstance(t, Path) else self._log_path(t)
        try:
            self.log_times.observe(path)
        except OSError as exc:
            log.warning("cannot record the times of log %s: %s", path, exc)
        if last:
            self.log_times.forget(path)

    def _log_timer(self, stop: threading.Event) -> None:
        """Every LOG_TIMES_POLL_S, record the growth of every local task's log (the
        times of ``pasture job logs --since/--timestamps``; scheduler/logtimes.py)."""
        while not stop.is_set():
            with self._lock:
                tasks = list(self.local.values())
            for t in tasks:
                try:
                    self._time_log(t)
                except Exception:  # noqa: BLE001 - never let the thread die for one task
                    log.exception("task %s: recording its log times failed", t.lid)
            stop.wait(LOG_TIMES_POLL_S)

    def _remove_keys(self, job: str, key: str, attempt: int) -> None:
        """Remove the ssh directory (the submission's key) of an attempt that ended or
        never started (:func:`ssh.remove_task_files`); a failure is logged, not raised."""
        role, _, index = key.rpartition("-")
        tid = task_id(job, role, int(index), attempt)
        try:
            ssh.remove_task_files(Path(self.s.work_dir) / "tasks" / tid / "ssh")
        except OSError as exc:
            log.warning("task %s/%s#%s: cannot remove its ssh key: %s", job, key, attempt, exc)

    def _isolated(self, what: str, action: Callable[..., None], *args: object) -> None:
        """Run one task's part of a pass; an error of the store (Redis) ends the pass (it
        is the node's, retried on the next one), any other error is logged and the pass
        goes on with the other tasks."""
        try:
            action(*args)
        except redis.RedisError:
            raise
        except Exception:  # noqa: BLE001 - one task's bug must not block the node
            log.exception("%s: agent pass step failed; going on with the other tasks", what)

    def _start_isolated(self, job: str, rec: TaskRecord) -> None:
        """:meth:`_start`, and when it raises anything but a store error (a value the
        executor refuses, a bug), report the task failed (``could not start
        (launch_error)``, classified ``start_failed``) instead of failing every pass of
        this node: the job's retry policy acts, ``job stop`` ends it, the node's other
        tasks start."""
        try:
            self._start(job, rec)
        except redis.RedisError:
            raise
        except Exception as exc:  # noqa: BLE001 - isolated to this task, reported
            log.exception("task %s/%s: launch failed", job, rec.key)
            detail = f"{type(exc).__name__}: {exc}".replace("\0", "\\0")[:500]
            self._report_failed(job, rec, f"could not start (launch_error): {detail}")

    def _start(self, job: str, rec: TaskRecord) -> None:
        job_rec = self.store.launch(self.node, job)  # its launch record: spec, user, secrets
        if job_rec is None:
            return
        spec = JobSpec.model_validate(job_rec.spec)
        user = None
        if self.s.task_users == "vc":  # the VC's own Unix identity (scheduler/tenants.py)
            try:
                # a pod needs only the numbers (runAsUser); the agent's own pod has no
                # tenant users in its passwd (k8s_pod.passwd_text gives the task its entry)
                kube = self.executor.kind == "kubernetes"
                user = tenants.planned(spec.vc) if kube else tenants.resolve(spec.vc)
            except tenants.TenantError as exc:
                log.warning("task %s/%s cannot start: %s", job, rec.key, exc)
                self._report_failed(job, rec, f"could not start: {exc}")
                return
        owner = (user.uid, user.gid) if user else None
        tasks = self.store.tasks(job)
        share = Path(self.s.share_dir)
        log_path = task_log_path(share, job, job_rec.uid, rec.role, rec.index)
        tid = task_id(job, rec.role, rec.index, rec.attempt)
        state_dir = Path(self.s.work_dir) / "tasks" / tid
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)  # logs/<uid>/ (logpaths.py)
            # start-up: job dir, hostfile, ssh, code dir, environment (agent/startup.py)
            boot = startup.prepare(
                job=job,
                user=job_rec.user,
                spec=spec,
                tasks=tasks,
                me=rec,
                node=self.node,
                share=share,
                task_dir=state_dir,
                task_id=tid,
                executor_kind=self.executor.kind,
                ssh_key=job_rec.ssh_key,
                owner=owner,
                job_uid=job_rec.uid,
                host_network=self.s.task_network == "host",
                exec_from=[str(n) for n in self.s.ssh_exec_from],
            )
            # earlier attempts' lines the agent never saw: time unknown (logtimes.py)
            self._time_log(log_path)
            # "a+", not "a": a write-only append fails on smbnetfs shares (see log_redirect)
            with open(log_path, "a+") as f:
                f.write(f"=== attempt {rec.attempt} on {self.node} ===\n")
                if owner is not None:  # a container task appends to it itself
                    os.fchown(f.fileno(), *owner)
            self._time_log(log_path)
            env = {**boot.env, **self._secret_env(job, spec)}  # values: the task's env only
            if self.executor.kind == "process":  # the task may check its own fence
                env["PASTURE_LEASE_FILE"] = str(self.lease_file)
        except OSError as exc:
            # A broken share mount must fail this task (so the job's retry policy acts),
            # not crash every agent pass while the task stays `scheduled` forever.
            log.warning("task %s/%s: cannot write to the share: %s", job, rec.key, exc)
            self._report_failed(job, rec, f"cannot write to the cluster share at {share}: {exc}")
            return
        except startup.StartupError as exc:
            log.warning("task %s/%s cannot start: %s", job, rec.key, exc)
            with open(log_path, "a+") as f:
                f.write(f"pasture: could not start the task: {exc}\n")
            self._time_log(log_path, last=True)
            self._report_failed(job, rec, f"could not start: {exc}")
            return
        declared = startup.declared_mounts(spec, share)  # one plan for every executor
        launch = TaskLaunch(
            task_id=tid,
            job=job,
            role=rec.role,
            index=rec.index,
            attempt=rec.attempt,
            node=self.node,
            command=boot.command,
            image=spec.role_image(rec.role),
            env=env,
            cpu_m=rec.cpu_m,
            memory=rec.memory,
            gpus=self.gpu_health.physical_gpus(list(rec.gpus)),  # the node's GPU set
            log_path=log_path,
            share_dir=share,
            state_dir=state_dir,
            # declared data: read-only unless the spec says read_only: false
            mounts=declared + boot.mounts,
            lease_file=self.lease_file,
            entrypoint=boot.entrypoint,
            args=boot.args,
            working_dir=boot.working_dir,
            user=user,
            visible=boot.visible + [source for source, _ in declared],
            read_only=[source for source, target in declared if target.endswith(":ro")],
        )
        try:
            handle = self.executor.start(launch)
        except ExecutorError as exc:
            log.warning("task %s/%s could not start: %s", job, rec.key, exc)
            with open(log_path, "a+") as f:
                f.write(f"pasture: could not start the task: {exc}\n")
            self._time_log(log_path, last=True)
            self._report_failed(job, rec, f"could not start: {exc}")
            return
        t = LocalTask(
            job=job,
            key=rec.key,
            attempt=rec.attempt,
            handle=handle,
            uid=job_rec.uid,
            gpus=list(rec.gpus),
        )
        with self._lock:
            self.local[t.lid] = t
        self._save_state()
        self.store.report_task(
            job, rec.key, rec.attempt, self.node, TaskState.RUNNING, handle=handle
        )
        log.info("task %s started", t.lid)

    def _secret_env(self, job: str, spec: JobSpec) -> dict[str, str]:
        """``PASTURE_SECRET_<NAME>`` -> value for each of the job's secrets, opened with
        this node's key; {} for a job without secrets. The values go to the task's
        environment only (never a log line, report or record).

        Raises:
            startup.StartupError: no key, another key, or a token missing. (The
                kubernetes executor puts these variables in a per-task Secret, not the pod
                spec: scheduler/agent/k8s_secrets.py.)
        """
        if not spec.secrets:
            return {}
        token = self.store.sealed_secrets(job)
        try:
            if not token:
                raise SealError("the job has no sealed secrets in the store")
            values = unseal(load_key(self.s.secrets_key_file), job, token)
        except SealError as exc:
            raise startup.StartupError(f"secrets: {exc}") from None
        missing = sorted(set(spec.secrets) - set(values))
        if missing:
            raise startup.StartupError(f"secrets: no sealed value for {missing}")
        return {env_name(n): values[n] for n in spec.secrets}

    def _report_failed(self, job: str, rec: TaskRecord, message: str) -> None:
        """Report this attempt of ``rec`` failed before it ran (no exit code), with why;
        its ssh key, if written, is removed."""
        self._remove_keys(job, rec.key, rec.attempt)
        diag = diagnose_report(None, None, message, None, self.s.diagnosis_rules)
        self.store.report_task(
            job, rec.key, rec.attempt, self.node, TaskState.FAILED, None, message, diagnosis=diag
        )

    def _stop(self, t: LocalTask, reason: str) -> None:
        if t.stopping and t.lid in self._stoppers:
            return
        t.stopping, t.stop_reason = True, reason
        self._save_state()
        log.info("stopping task %s: %s", t.lid, reason)
        th = threading.Thread(
            target=self.executor.stop,
            args=(t.handle, self.s.stop_grace_s),
            name=f"stop-{t.lid}",
            daemon=True,
        )
        self._stoppers[t.lid] = th
        th.start()

    # ---- forever --------------------------------------------------------------------
    def _heartbeats(self, stop: threading.Event) -> None:
        """Heartbeat every ``heartbeat_interval_s`` (renewing the lease) until ``stop``;
        its own thread, so that slow reconcile passes never delay a renewal."""
        while not stop.is_set():
            try:
                self.heartbeat()
                self._auth_failures = 0
            except redis.AuthenticationError as exc:
                self._refused(exc, stop)
            except Exception as exc:  # noqa: BLE001 - unreachable store: the lease runs out
                log.warning("heartbeat failed: %s", exc)
            stop.wait(self.s.heartbeat_interval_s)

    def _refused(self, exc: Exception, stop: threading.Event) -> None:
        """The store refused this node's credentials (``WRONGPASS``: e.g. a promoted
        replica or a restarted Redis without the node's user created at run time). After
        :data:`AUTH_REFUSALS_BEFORE_EXIT` in a row, stop with exit status 3, so that the
        supervisor restarts the agent: on AKS its start exchanges the pod's token again,
        which re-creates the user (docs/faults.md "Bounds"). Tasks keep running; the
        restarted agent adopts them within its lease."""
        self._auth_failures += 1
        log.warning("the store refused this node's credentials: %s", exc)
        if self._auth_failures >= AUTH_REFUSALS_BEFORE_EXIT:
            log.error(
                "credentials refused %d times in a row: exiting (status 3) for a restart "
                "that fetches them again",
                self._auth_failures,
            )
            self.exit_code = 3
            stop.set()

    def _fences(self, stop: threading.Event) -> None:
        """Fence the local tasks whenever the lease has run out, until ``stop``; no I/O
        but the kills, so a hung store cannot delay it."""
        while not stop.is_set():
            try:
                self.fence()
            except Exception:  # noqa: BLE001 - never let the fence die
                log.exception("fencing failed")
            stop.wait(FENCE_POLL_S)

    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Register, then heartbeat, fence and measure (a thread each) and reconcile until
        ``stop`` is set. Running tasks are left running on exit: an agent restarted within
        its lease adopts them; after it, their watchdogs (process executor) kill them."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                self.register()
                break
            except redis.AuthenticationError as exc:
                self._refused(exc, stop)
                stop.wait(1.0)
            except Exception as exc:  # noqa: BLE001 - the store may not be up yet
                log.warning("cannot register node %s yet: %s", self.node, exc)
                stop.wait(1.0)
        self._measuring = True  # before the threads: no heartbeat measures on its own
        threads = [
            threading.Thread(target=f, args=(stop,), name=f.__name__, daemon=True)
            for f in (self._heartbeats, self._fences, self._measures, self._log_timer)
        ]
        for th in threads:
            th.start()
        log.info(
            "agent %s started (executor %s, lease %g s, fence %g s)",
            self.node,
            self.executor.kind,
            self.lease_s,
            self.fence_s,
        )
        woken, last_read = True, 0.0
        try:
            while not stop.is_set():
                read = woken or time.monotonic() - last_read >= BINDINGS_REFRESH_S
                try:
                    self.reconcile(read=read)
                    if read:
                        last_read = time.monotonic()
                except Exception:  # noqa: BLE001 - Redis hiccups must not kill the agent
                    log.exception("agent pass failed")
                    stop.wait(1.0)
                woken = self._wait_woken(stop)
        finally:
            for th in threads:
                th.join(self.lease_s)
            self._measuring = False
        if self.exit_code:
            raise SystemExit(self.exit_code)

    def _wait_woken(self, stop: threading.Event) -> bool:
        """Wait up to LOCAL_POLL_S for a wake-up of this node (its bindings changed: the
        store's blocking read); True when woken or when the store could not be asked (so
        the next pass reads it)."""
        try:
            return self.store.wait_bindings(self.node, LOCAL_POLL_S)
        except Exception as exc:  # noqa: BLE001 - unreachable store: poll instead
            log.debug("waiting for bindings failed: %s", exc)
            stop.wait(LOCAL_POLL_S)
            return True
