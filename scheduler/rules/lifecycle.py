"""The job lifecycle in one place: from a job's spec and its tasks' states, what happens next.

Pure: no Redis, no clock (``now`` is an argument). The loop reads the store, calls
:func:`decide`, and applies the returned :class:`Step` (scheduler/loop/apply.py ``_advance``).

::

    JobSpec + job facts (stop requested, failed attempts) + TaskRecords + draining nodes
      -> events per task       task_failed    a task exited non-zero
                               task_evicted   a task stopped without the loop asking
                               unknown        a task's node stopped heartbeating (lost)
                               task_completed every replica of a role succeeded
      -> first matching ``policies.on_events`` rule, else the defaults below
      -> Step(ending | restart these tasks | release these waiting tasks | keep running)

Defaults (FrameworkController's completion policy, which OpenPAI v1/v2 compile to):

- A task that failed (or was evicted) is restarted in place while it has restarts left
  (role ``max_task_retries``); the job's attempt is not charged.
- Otherwise it counts towards its role's ``completion.min_failed`` (default 1): once that
  many tasks of the role failed, the attempt fails and ``retry`` decides: requeued
  (``attempt + 1``) while the exit code is retryable and fewer than ``retry.max_attempts``
  attempts failed, else the job fails. ``policies.on_task_failure: fail_job`` fails it at
  once. A task the infrastructure ended (``TaskRecord.disrupted``: lost with its node,
  fenced by its agent, unknown to a restarted agent) ends the attempt too, but the job is
  requeued whatever its retry policy and the attempt is not charged (``infrastructure``,
  ``failure`` false, ``cause``: Kubernetes podFailurePolicy's DisruptionTarget, Slurm
  JobRequeue; docs/faults.md). Only an explicit ``on_events`` rule for ``unknown`` other
  than a restart overrides that. Free requeues are capped: once ``max_free_requeues``
  attempts in a row ended so (:func:`free_requeue_streak`), the next one the
  infrastructure ends fails the job, naming the causes and the setting
  (``loop.max_free_requeues``): a job whose pods can never start, or that takes its node
  down each time, does not loop forever.
- A task's own failure within a grace period after a peer's node went silent is charged
  to nobody either (:class:`scheduler.rules.peerloss.PeerWatch`): the ranks of a gang
  (NCCL, Gloo, MPI) exit non-zero when a peer vanishes, before the loop can declare the
  peer's node lost. Such a failure is held (no decision) while a peer's node on another
  machine has not heartbeated since the task ended; once that node is lost (or the peer
  fenced) the job is requeued free; once it heartbeats again, the failure is the task's
  own.
- The job succeeds as soon as ``completion.min_succeeded`` tasks of some role succeeded
  (legacy ``policies.completion {role, when: any|all}`` means 1 | all replicas of that
  role), or job ``min_succeeded`` tasks of any roles (Volcano ``minSuccess``); its
  other tasks are stopped.
- Else it succeeds when every replica of every role, counted from the spec (not from the
  tasks placed so far), has ended: succeeded, or failed within its role's tolerance.
  A gang placed at ``min_available`` (fewer tasks than replicas) therefore keeps running
  until the remaining replicas have been placed, run and ended (Volcano's Job reaches
  ``Completed`` only when succeeded + failed == replicas, pkg/controllers/job/state/
  running.go).
- A task on a draining node requeues the job (not a failure).

``on_events`` actions (Volcano Job policies; the first rule whose event matches and whose
``role`` is the task's, or None, wins; a rule with ``after_s``, Volcano's ``timeout``,
acts only once the event has lasted that long since the task ended, the job held
meanwhile with the time it acts at):

- ``complete_job``: the job succeeds (Volcano CompleteJob); other tasks are stopped.
- ``fail_job``: the job fails (Volcano AbortJob; no retry).
- ``terminate_job``: the job is stopped (Volcano TerminateJob).
- ``restart_job``: the attempt ends and the job is requeued while fewer than
  ``retry.max_attempts`` attempts failed (Volcano RestartJob / maxRetry), whatever the exit
  code; else it fails.
- ``restart_task``: the task is restarted in place (same node, same allocation) while it
  has restarts left: role ``max_task_retries``, or ``retry.max_attempts - 1`` when the
  role sets none (Volcano's RestartPod). A lost task cannot restart in place (its node is
  gone): the job restarts instead (also for ``restart_role``).
- ``restart_role`` (Volcano RestartTask): every task of the role restarts in place, running
  ones included: they are stopped first (``Step.stop``), and once none of them runs, all
  of them restart (same nodes, same allocations, ``restarts`` + 1); tasks of other roles
  keep running. Each role restart uses one retry of the job's budget, shared with the
  attempts that failed: allowed while failures + role restarts + 1 < ``retry.max_attempts``,
  else the job fails (Volcano: RetryCount + 1 per RestartTask, Failed at maxRetry). A
  ``task_completed -> restart_role`` rule runs the role again while retries are left,
  then the job succeeds.

``depends_on``: tasks of a role with dependencies are bound ``desired: wait``; they are
released (``desired: run``) once every placed task of each named role is running (or has
succeeded) (Volcano ``dependsOn``: a task starts after the tasks it depends on run).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scheduler.rules.diagnosis import Diagnosis, diagnose_task
from scheduler.rules.peerloss import PeerLost, PeerWatch
from scheduler.spec.facts import (
    WAIT,
    min_failed,
    min_succeeded,
    role_target,
    task_retry_limit,
)
from scheduler.spec.model import JobSpec
from scheduler.spec.policies import EventRule
from scheduler.states import JobState, TaskState
from scheduler.store.records import Cause, TaskRecord

Event = Literal["task_completed", "task_failed", "task_evicted", "unknown"]


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt ends, kept on the job record (``ending``) while its tasks stop.

    Attributes:
        state: the job state it ends in: succeeded, failed, stopped, or queued (requeued
            for another attempt).
        reason: one sentence for ``job show``.
        failure: the attempt counts as failed (``JobRecord.failures`` + 1 when finished).
        exit_code: the exit code that decided it, when any.
        preempted: requeued by preemption or a drain (not a failure).
        infrastructure: caused by the cluster (node lost, fencing, agent restart), not by
            the task itself: requeued, not charged.
        cause: what ended it when not the tasks: a ``records.Cause`` (node_lost, fenced,
            agent_restart) or ``drained``; '' otherwise (preemption: ``preempted``).
    """

    state: JobState
    reason: str
    failure: bool = False
    exit_code: int | None = None
    preempted: bool = False
    infrastructure: bool = False
    cause: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The stored form ``{"state", "reason", ...}`` (false / None extras left out)."""
        out: dict[str, Any] = {"state": self.state.value, "reason": self.reason}
        if self.failure:
            out["failure"] = True
            out["exit_code"] = self.exit_code
        if self.preempted:
            out["preempted"] = True
        if self.infrastructure:
            out["infrastructure"] = True
        if self.cause:
            out["cause"] = self.cause
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ending:
        """Inverse of :meth:`to_dict` (also reads the commit script's preemption ending).
        Raises ValueError for an unknown state."""
        return cls(
            state=JobState(d["state"]),
            reason=str(d.get("reason", "")),
            failure=bool(d.get("failure")),
            exit_code=d.get("exit_code"),
            preempted=bool(d.get("preempted")),
            infrastructure=bool(d.get("infrastructure")),
            cause=str(d.get("cause") or ""),
        )


@dataclass(frozen=True, slots=True)
class Restart:
    """Restart task ``key`` in place: its ``restarts`` count becomes ``number``."""

    key: str
    number: int
    reason: str


@dataclass(frozen=True, slots=True)
class Step:
    """What the loop does next with one job.

    Attributes:
        ending: the attempt ends (stop every task not done, then finish); None: it goes on.
        restart: tasks to restart in place (only when ``ending`` is None).
        release: keys of waiting tasks whose dependencies now run (set ``desired: run``).
        missing: replicas of the spec not placed yet ({role: count}); the core places
            them when they fit (scheduler/core/grow.py).
        free: keys of finished tasks whose allocation may be given back while the job
            goes on (only while replicas are missing: the rest of the gang may need it).
        stop: keys of running tasks to stop (``desired: stop``) because their role
            restarts (``restart_role``); they restart in place once every one has ended.
    """

    ending: Ending | None = None
    restart: tuple[Restart, ...] = ()
    release: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    missing: dict[str, int] = field(default_factory=dict)
    free: tuple[str, ...] = ()
    held: str = ""
    """Non-empty: a task's failure waits for the verdict on a silent peer's node (why)."""


def task_event(task: TaskRecord) -> Event | None:
    """The failure-type event a finished task raised, or None (running, or succeeded, or
    stopped at the loop's request)."""
    if task.state == TaskState.FAILED:
        return "task_failed"
    if task.state == TaskState.LOST:
        return "unknown"
    if task.state == TaskState.STOPPED and task.desired != "stop":
        return "task_evicted"
    return None


def rule_for(spec: JobSpec, event: Event, role: str) -> EventRule | None:
    """The first ``policies.on_events`` rule for ``event`` on a task of ``role``."""
    for rule in spec.policies.on_events:
        if rule.event == event and rule.role in (None, role):
            return rule
    return None


def _diagnosis(t: TaskRecord) -> Diagnosis | None:
    """The failure class of ``t`` (issue 19, scheduler/rules/diagnosis.py): the agent's, or
    ``node_lost`` for a lost task; None otherwise."""
    return diagnose_task(t) if t.diagnosis or t.state == TaskState.LOST else None


def _failure_why(t: TaskRecord) -> str:
    if t.state == TaskState.LOST:
        why = f"task {t.key} lost: {t.message}"
    elif t.state == TaskState.STOPPED:
        why = f"task {t.key} stopped on {t.node} without a stop request"
    elif t.exit_code is None and t.message.startswith("could not start"):
        # never ran: its message says why, once (not "exited with code None")
        return f"task {t.key} on {t.node} {t.message}"
    else:
        why = f"task {t.key} exited with code {t.exit_code} on {t.node}"
    d = _diagnosis(t)
    return f"{why} [{d.kind}: {d.summary}]" if d else why


NOT_INFRASTRUCTURE = frozenset({"", "preempted", "drained"})
"""Attempt causes that are not infrastructure faults: the tasks' own outcome, a preemption,
a drain (``attempts[].cause``)."""


@dataclass(frozen=True, slots=True)
class FreeRequeues:
    """The job's current run of free requeues and the cap on it.

    Attributes:
        streak: the causes of the latest attempts that the infrastructure ended one after
            another, oldest first (:func:`free_requeue_streak`).
        limit: how many such attempts in a row are requeued free (``loop.max_free_requeues``);
            None: no cap.
    """

    streak: tuple[str, ...] = ()
    limit: int | None = None


def free_requeue_streak(attempts: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The causes of the job's latest attempts that were requeued free, one after another.

    Args:
        attempts: ``JobRecord.attempts``, oldest first (``{state, cause, charged, ...}``).

    Returns:
        The causes (e.g. ``("not_started", "not_started")``) of the attempts, counted back
        from the latest, that ended ``queued``, not charged, with an infrastructure cause;
        the first attempt that ended any other way (its tasks' own outcome, charged or not,
        a preemption, a drain, the job's end) stops the count.
    """
    streak: list[str] = []
    for a in reversed(attempts):
        cause = str(a.get("cause") or "")
        if a.get("state") != JobState.QUEUED.value or a.get("charged"):
            break
        if cause in NOT_INFRASTRUCTURE:
            break
        streak.append(cause)
    return tuple(reversed(streak))


def _requeued_free(why: str, cause: str, requeues: FreeRequeues) -> Ending:
    """The ending of an attempt the infrastructure ended (``cause``; ``why`` names it):
    requeued without charge while fewer than ``requeues.limit`` attempts in a row ended so, else
    failed with a reason naming the causes and the setting."""
    limit = requeues.limit
    if limit is None or len(requeues.streak) < limit:
        return Ending(
            JobState.QUEUED,
            f"{why}; requeued, not charged to the retry budget",
            infrastructure=True,
            cause=cause,
        )
    causes = [*requeues.streak, cause]
    counts = ", ".join(f"{c} x{causes.count(c)}" for c in sorted(set(causes), key=causes.index))
    return Ending(
        JobState.FAILED,
        f"{why}; failed: {len(causes)} attempts in a row were ended by the "
        f"infrastructure ({counts}) and loop.max_free_requeues is {limit}",
        failure=True,
        infrastructure=True,
        cause=cause,
    )


def _attempt_failed(
    spec: JobSpec,
    failures: int,
    t: TaskRecord,
    why: str,
    *,
    force_retry: bool = False,
    requeues: FreeRequeues = FreeRequeues(),
) -> Ending:
    """The default ending of an attempt that failed because of task ``t``; requeued and not
    charged when the infrastructure ended ``t`` (``TaskRecord.disrupted``: the one place
    that tells the infrastructure's faults from the task's own), within ``requeues``' cap."""
    code = None if t.state in (TaskState.LOST, TaskState.STOPPED) else t.exit_code
    if t.disrupted:
        cause = t.cause or Cause.NODE_LOST.value
        return _requeued_free(f"{why} ({cause})", cause, requeues)
    attempts = failures + 1
    limit = spec.retry.max_attempts
    if not force_retry and spec.policies.on_task_failure == "fail_job":
        state, why = JobState.FAILED, f"{why}; on_task_failure is fail_job"
    elif not force_retry and not spec.retry.retryable(code, getattr(_diagnosis(t), "kind", None)):
        state, why = JobState.FAILED, f"{why}; exit code {code} is not retried"
    elif attempts >= limit:
        state, why = JobState.FAILED, f"{why}; {attempts} of {limit} attempts failed"
    else:
        state, why = JobState.QUEUED, f"{why}; retrying ({attempts} of {limit} attempts failed)"
    return Ending(state, why, failure=True, exit_code=code)


def _by_action(
    spec: JobSpec,
    failures: int,
    rule: EventRule,
    t: TaskRecord | None,
    why: str,
    requeues: FreeRequeues = FreeRequeues(),
) -> Ending | None:
    """The ending an ``on_events`` action gives (None for restart_task: handled apart)."""
    because = f"{why}; policy {rule.event} -> {rule.action}"
    if rule.action == "complete_job":
        return Ending(JobState.SUCCEEDED, because)
    if rule.action == "fail_job":
        code = t.exit_code if t is not None and t.state == TaskState.FAILED else None
        return Ending(JobState.FAILED, because, failure=t is not None, exit_code=code)
    if rule.action == "terminate_job":
        return Ending(JobState.STOPPED, because)
    if rule.action == "restart_job":
        if t is None:  # task_completed -> restart_job: another attempt, within the budget
            if failures + 1 >= spec.retry.max_attempts:
                return Ending(JobState.SUCCEEDED, f"{because}; no attempts left to restart")
            return Ending(JobState.QUEUED, because, failure=True)
        return _attempt_failed(spec, failures, t, because, force_retry=True, requeues=requeues)
    return None


def role_restarts(spec: JobSpec, by_role: dict[str, list[TaskRecord]]) -> int:
    """Role restarts (``restart_role``) charged so far in this attempt, summed over roles
    with a ``restart_role`` rule: a role restart restarts each of its placed tasks once, so
    the role's count is the fewest ``restarts`` among them."""
    roles = {
        r.role
        for r in spec.policies.on_events
        if r.action == "restart_role" and r.role is not None  # None: every role (below)
    }
    if any(r.action == "restart_role" and r.role is None for r in spec.policies.on_events):
        roles = set(spec.roles)
    return sum(min((t.restarts for t in by_role.get(r, [])), default=0) for r in roles)


def _restart_role(
    spec: JobSpec,
    failures: int,
    role: str,
    by_role: dict[str, list[TaskRecord]],
    t: TaskRecord | None,
    why: str,
) -> Ending | tuple[list[Restart], list[str]]:
    """Volcano RestartTask for ``role`` (pkg/controllers/job/state/running.go: KillTarget
    on the task, the job's RetryCount + 1, failed once it reaches maxRetry): every task of
    the role restarts in place, running ones included. Charged like ``restart_job``: one
    of ``retry.max_attempts - 1`` retries, shared with the attempts that already failed.

    Returns the ending when no retry is left, else (restarts, stops): the running tasks to
    stop first, and once none runs, every placed task of the role to restart (tasks held
    by ``depends_on`` are left waiting)."""
    because = f"{why}; policy -> restart_role"
    used = failures + role_restarts(spec, by_role)
    limit = spec.retry.max_attempts
    if used + 1 >= limit:
        reason = f"{because}; no retries left ({used} of {limit - 1} used)"
        if t is None:  # task_completed -> restart_role: the role ran to the end
            return Ending(JobState.SUCCEEDED, reason)
        code = t.exit_code if t.state == TaskState.FAILED else None
        return Ending(JobState.FAILED, reason, failure=True, exit_code=code)
    tasks = [x for x in by_role.get(role, []) if x.desired != WAIT]
    running = [x.key for x in tasks if x.state == TaskState.RUNNING]
    if running:
        return [], running
    n = used + 1
    return [
        Restart(x.key, x.restarts + 1, f"{because} (retry {n} of {limit - 1})") for x in tasks
    ], []


def decide(
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    *,
    failures: int = 0,
    stop_requested: str = "",
    draining: Iterable[str] = (),
    peers: PeerWatch | None = None,
    now: float | None = None,
    requeues: FreeRequeues = FreeRequeues(),
) -> Step:
    """What happens next to a placed job (see the module docstring for the rules).

    Args:
        spec: the job's spec.
        tasks: its current attempt's task records (any order; only placed tasks exist).
        failures: attempts that failed so far (``JobRecord.failures``).
        stop_requested: non-empty: a user asked to stop it (the reason).
        draining: names of nodes being drained.
        peers: the nodes' heartbeats for the peer-loss rule (:class:`PeerWatch`); None:
            the rule is off (every own failure is charged as it comes).
        now: the store clock (s), for rules with ``after_s`` (Volcano ``timeout``); None:
            such rules act at once.
        requeues: the job's run of free requeues so far and its cap (:class:`FreeRequeues`;
            the default: none so far, no cap).

    Returns:
        A :class:`Step`. Pure and deterministic: tasks are looked at in role declaration
        order, then replica index.
    """
    if stop_requested:
        return Step(ending=Ending(JobState.STOPPED, stop_requested))
    order = {r: i for i, r in enumerate(spec.roles)}
    tasks = sorted(tasks, key=lambda t: (order.get(t.role, len(order)), t.index))
    by_role: dict[str, list[TaskRecord]] = {r: [] for r in spec.roles}
    for t in tasks:
        by_role.setdefault(t.role, []).append(t)
    missing = {
        r: role_target(spec, r) - len(ts)
        for r, ts in by_role.items()
        if r in spec.roles and len(ts) < role_target(spec, r)
    }

    # 1. failure-type events: restart in place, a policy's action, or the role's tolerance
    restarts: list[Restart] = []
    stops: list[str] = []
    roles_restarting: set[str] = set()
    failed_count: dict[str, int] = {}
    for t in tasks:
        event = task_event(t)
        if event is None or t.role not in spec.roles or t.role in roles_restarting:
            continue
        why = _failure_why(t)
        rule = rule_for(spec, event, t.role)
        wait = _waiting(rule, t.finished, now, why)
        if wait:
            return Step(missing=missing, held=wait)
        if rule is not None and rule.action == "restart_role" and event != "unknown":
            out = _restart_role(spec, failures, t.role, by_role, t, why)
            if isinstance(out, Ending):
                return Step(ending=out)
            roles_restarting.add(t.role)
            restarts += out[0]
            stops += out[1]
            continue
        wants_restart = rule is None or rule.action == "restart_task"
        limit = task_retry_limit(spec, t.role, explicit=rule is not None)
        if wants_restart and event != "unknown" and t.restarts < limit:
            restarts.append(
                Restart(t.key, t.restarts + 1, f"{why}; restart {t.restarts + 1} of {limit}")
            )
            continue
        if peers is not None and event != "unknown":
            verdict = peers.verdict(t, tasks)
            if isinstance(verdict, PeerLost):
                why = f"{_failure_why(t)} {verdict.because}"
                return Step(ending=_requeued_free(why, verdict.cause, requeues))
            if verdict:
                return Step(missing=missing, held=verdict)
        if (
            rule is not None
            and rule.action in ("restart_task", "restart_role")
            and event == "unknown"
        ):
            return Step(
                ending=_attempt_failed(spec, failures, t, why, force_retry=True, requeues=requeues)
            )
        if rule is not None and rule.action not in ("restart_task", "restart_role"):
            ending = _by_action(spec, failures, rule, t, why, requeues)
            if ending is not None:
                return Step(ending=ending)
        failed_count[t.role] = failed_count.get(t.role, 0) + 1
        tolerance = min_failed(spec, t.role)
        if tolerance > 0 and failed_count[t.role] >= tolerance:
            if tolerance > 1:
                why = f"{why}; {failed_count[t.role]} task(s) of role {t.role} failed"
            return Step(ending=_attempt_failed(spec, failures, t, why, requeues=requeues))

    if roles_restarting:  # the roles restart first; completion is looked at afterwards
        return Step(restart=tuple(restarts), stop=tuple(stops), missing=missing)

    # 2. a drain requeues the job without charging it
    drain = set(draining)
    on_draining = sorted({t.node for t in tasks if not t.done and t.node in drain})
    if on_draining:
        return Step(
            ending=Ending(
                JobState.QUEUED,
                f"node(s) {', '.join(on_draining)} draining; requeued",
                preempted=True,
                cause="drained",
            )
        )

    # 3. successes: task_completed policies, then completion rules
    for role, ts in by_role.items():
        if role not in spec.roles:
            continue
        ok = sum(1 for t in ts if t.state == TaskState.SUCCEEDED)
        if ok == spec.roles[role].replicas:
            rule = rule_for(spec, "task_completed", role)
            ended = max((t.finished for t in ts if t.finished is not None), default=None)
            wait = _waiting(rule, ended, now, f"every task of role {role} succeeded")
            if wait:
                return Step(missing=missing, held=wait)
            if rule is not None and rule.action == "restart_role":
                why = f"every task of role {role} succeeded"
                out = _restart_role(spec, failures, role, by_role, None, why)
                if isinstance(out, Ending):
                    return Step(ending=out)
                return Step(restart=tuple(out[0]), missing=missing)
            if rule is not None:
                why = f"every task of role {role} succeeded"
                ending = _by_action(spec, failures, rule, None, why)
                if ending is not None:
                    return Step(ending=ending)
        need = min_succeeded(spec, role)
        if need is not None and ok >= need:
            replicas = spec.roles[role].replicas
            why = f"{ok} of {replicas} task(s) of role {role} succeeded (completion needs {need})"
            return Step(ending=Ending(JobState.SUCCEEDED, why))

    need = spec.min_succeeded
    ok = sum(1 for t in tasks if t.state == TaskState.SUCCEEDED)
    if need is not None and ok >= need:
        why = f"{ok} task(s) succeeded (min_succeeded is {need})"
        return Step(ending=Ending(JobState.SUCCEEDED, why))

    # 4. everything ended within tolerance (replicas counted from the spec)
    restarting = {r.key for r in restarts}
    if not missing and not restarting and tasks and all(t.done for t in tasks):
        ok = sum(1 for t in tasks if t.state == TaskState.SUCCEEDED)
        total = spec.task_count()
        reason = (
            "all tasks succeeded"
            if ok == total
            else f"all tasks ended: {ok} of {total} succeeded, the failures within tolerance"
        )
        return Step(ending=Ending(JobState.SUCCEEDED, reason))

    # 5. dependencies: waiting tasks whose roles' dependencies run
    release = tuple(t.key for t in tasks if t.desired == WAIT and _deps_running(spec, t, by_role))
    free = tuple(t.key for t in tasks if t.done and t.key not in restarting) if missing else ()
    return Step(restart=tuple(restarts), release=release, missing=missing, free=free)


def _waiting(rule: EventRule | None, since: float | None, now: float | None, why: str) -> str:
    """Why the job is held while ``rule``'s ``after_s`` has not passed since the event
    (``since``, s), else "" (no rule, no delay, no clock, or the time has come)."""
    if rule is None or rule.after_s is None or now is None or since is None:
        return ""
    due = since + rule.after_s
    if now >= due:
        return ""
    return (
        f"{why}; the {rule.event} policy ({rule.action}) acts after {rule.after_s:g} s, "
        f"at {dt.datetime.fromtimestamp(due, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    )


def _deps_running(spec: JobSpec, t: TaskRecord, by_role: dict[str, list[TaskRecord]]) -> bool:
    for dep in spec.roles[t.role].depends_on:
        ts = by_role.get(dep, [])
        if not ts or any(x.state not in (TaskState.RUNNING, TaskState.SUCCEEDED) for x in ts):
            return False
    return True


def expired(end_time: float | None, ttl: float | None, now: float) -> bool:
    """Whether a finished job's records are due for clean-up: ``ttl`` seconds after
    ``end_time`` (None ttl: kept forever)."""
    return end_time is not None and ttl is not None and now - end_time >= ttl
