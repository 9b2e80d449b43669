"""The scheduling loop: lifecycle -> snapshot -> core -> commit, on events and on a timer.

One cycle (:meth:`Loop.cycle`)::

    heartbeats      nodes the loop observed silent for longer than their lost limit ->
                    lost (their tasks: lost, cause node_lost); when most nodes go silent
                    at once: a cluster condition instead (scheduler/rules/health.py)
    lifecycle       submitted -> queued; stop requests; task outcomes -> scheduler.rules.lifecycle
                    (retry / fail / succeed / restart a task / release waiting tasks);
                    draining nodes; when every task of an ending job is done: release its
                    ledger entries, then requeue (attempt + 1) or finish it; delete
                    finished jobs past their ttl
    snapshot        store -> Snapshot (version read first)
    core            scheduler.core.schedule(snapshot, policy, now) -> Decision
    commit          binds + preemptions + pending reasons in one Lua script, refused when
                    the version moved (so two loops, or a restarted one, never
                    double-allocate)

The loop wakes on pub/sub notifications (submit, stop, task, node) and at least every
``loop.interval_s``. All lifecycle steps are idempotent, so a loop killed at any point
resumes from the store.

What ends a job, restarts a task in place, releases ``depends_on`` tasks or requeues it
is decided by :func:`scheduler.rules.lifecycle.decide` (docs/jobs.md); this module applies it.
Preemption, drains and infrastructure faults (``TaskRecord.disrupted``) requeue without
counting a failure; every ended attempt is recorded in ``JobRecord.attempts`` with its
cause and charge. Finished jobs are deleted ``ttl_after_finished`` (else
``loop.finished_job_ttl_s``) seconds after they ended. Reads between cycles are cached
(scheduler/store/view.py); a cycle's writes go in one batch (scheduler/store/batch.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from scheduler.core.grow import growing
from scheduler.core.history import HistoryWindow
from scheduler.core.model import Decision, Job, NodeState, Snapshot
from scheduler.core.policy import Policy
from scheduler.k8s.capacity import gone_probe
from scheduler.rules import lifecycle
from scheduler.rules.discovery import ordered_tasks
from scheduler.rules.health import NodeHealth
from scheduler.settings import SchedulerSettings, load_scheduler_settings
from scheduler.spec.facts import WAIT
from scheduler.spec.model import JobSpec
from scheduler.spec.policies import volume_dir
from scheduler.spec.schedule import Run, ScheduleSpec
from scheduler.spec.schedule import decide as decide_schedule
from scheduler.states import JobState, TaskState
from scheduler.store.notify import Notifications
from scheduler.store.records import (
    Cause,
    JobRecord,
    NodeRecord,
    TaskRecord,
)
from scheduler.store.reports import apply_node_reports
from scheduler.store.schedules import ScheduleRecord, ScheduleStore
from scheduler.store.snapshot import commit_payload, take_snapshot, with_releasing
from scheduler.store.store import JobActiveError, JobExistsError, JobNotFoundError, Store
from scheduler.store.view import JobsView, LedgerView

if TYPE_CHECKING:
    from scheduler.k8s.autoscale import Autoscaler

log = logging.getLogger("pasture.loop")

# seconds between full lifecycle passes (every placed job's tasks re-read)
FULL_PASS_S = 15.0

# seconds (of the silence clock) between two reads of every node's heartbeat time, at
# most; never more than a 20th of the heartbeat timeout
HEARTBEATS_EVERY_S = 1.0
SCHEDULES_EVERY_S = 5.0
"""Seconds between looks at the scheduled jobs (a run starts at most this late)."""

ScheduleFn = Callable[[Snapshot, Policy, float], Decision]


def load_policy(name: str) -> Policy:
    """The named policy from :mod:`scheduler.core.presets` (``Policy()`` when the presets
    module is missing). Raises KeyError for an unknown name."""
    try:
        from scheduler.core.presets import get_preset
    except ImportError:
        return Policy(name=name)
    return get_preset(name)


def default_schedule() -> ScheduleFn:
    """``scheduler.core.schedule``. Raises ImportError when the core has none yet."""
    from scheduler.core import schedule

    return schedule


@dataclass
class CycleResult:
    """What one cycle did: jobs bound, preempted, changed; commit outcome; seconds spent
    per phase (lifecycle, snapshot, core, commit)."""

    bound: int = 0
    preempted: int = 0
    transitions: int = 0
    committed: bool = True
    detail: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


class Loop:
    """The scheduling loop over one store.

    Args:
        store: the Redis store.
        settings: scheduler settings (uses ``loop.*``).
        policy: the policy (default: ``settings.loop.policy`` from presets).
        schedule: the core entry point (default ``scheduler.core.schedule``).
        clock: monotonic clock (s) heartbeat silences are measured on (tests pass their
            own to play time forward).
    """

    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        policy: Policy | None = None,
        schedule: ScheduleFn | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self.policy = policy or load_policy(settings.loop.policy)
        self.schedule = schedule or default_schedule()
        self._core_jobs: dict[tuple[object, ...], Job] = {}
        self.jobs = JobsView()  # active jobs and specs; only new / changed ones read
        self._batch = store.batch()
        self.view = LedgerView()  # nodes, VCs, ledger; re-read on a version gap only
        self._last_full = 0.0
        self._node_states: dict[str, str] = {}
        self._draining: list[str] = []
        self._beats_read = 0.0  # silence clock of the last heartbeat read
        # jobs whose task failure waits for the verdict on a peer's silent node
        # (lifecycle.PeerWatch): looked at every cycle until decided
        self._held: set[str] = set()
        self._schedules = ScheduleStore(store)  # scheduled jobs (spec/schedule.py)
        self._schedules_read = 0.0  # store clock of the last look at the schedules
        # the last committed Decision's nominations, handed to the next cycle's core
        self._nominations: dict[str, Any] = {}
        self._health = NodeHealth(
            store, settings.loop.heartbeat_timeout_s, clock, node_gone=gone_probe()
        )  # node_gone: the loop in a Kubernetes pod asks whether a silent node still exists
        # AKS: placeholder pods that make the cluster autoscaler add nodes for waiting jobs
        self.autoscale: Autoscaler | None = None
        if os.environ.get("PASTURE_K8S_POOLS"):  # set by the aks stack only
            from scheduler.k8s.autoscale import Autoscaler

            self.autoscale = Autoscaler.from_env()
        # run times and GPU-seconds of jobs that succeeded since this loop started: the
        # adaptive policy's thresholds (scheduler/core/history.py; relearned after a restart)
        self.history = HistoryWindow()

    def _flush(self) -> None:
        """Send this cycle's queued writes (one round trip); the view follows releases."""
        for r in self._batch.execute():
            self.view.released(r.job, r.entries, r.version)

    def _transition(
        self,
        job: JobRecord,
        state: str,
        reason: str,
        *,
        now: float,
        attempt: int,
        **fields: Any,
    ) -> None:
        """Queue a transition (:meth:`Store.transition`) and apply it to the cached record."""
        self._batch.transition(job.name, state, reason, now=now, attempt=attempt, **fields)
        job.state, job.reason, job.updated, job.attempt = str(state), reason, now, attempt
        for name, value in fields.items():
            setattr(job, name, value)

    def _spec(self, job: JobRecord) -> JobSpec:
        return self.jobs.specs[(job.name, job.created)]

    def forget(self) -> None:
        """Drop every cached read (after a failed cycle or a refused commit)."""
        self.view.invalidate()
        self.jobs.forget()
        self._beats_read = 0.0
        self._last_full = 0.0
        self._batch = self.store.batch()

    # ---- one cycle ------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        """Run heartbeats, lifecycle, snapshot -> core -> commit once."""
        result = CycleResult()
        t0 = time.perf_counter()
        apply_node_reports(self.store)  # agents' task reports, checked against the ledger
        now = self.store.now()
        self.view.refresh(self.store)
        # heartbeat times (one HGET per node) are read at most every HEARTBEATS_EVERY_S
        # of the silence clock: a node's silence is measured in seconds, not cycles
        beat_every = min(HEARTBEATS_EVERY_S, self.settings.loop.heartbeat_timeout_s / 20)
        if self._health.clock() - self._beats_read >= beat_every or not self._beats_read:
            self._beats_read = self._health.clock()
            nodes = self.view.nodes_now(self.store)
            # lost nodes, or the cluster condition instead (scheduler/rules/health.py)
            self._health.check(nodes, now)
        else:
            nodes = dict(self.view.nodes)
        self._clean_up_finished(now)
        if now - self._schedules_read >= SCHEDULES_EVERY_S:
            self._schedules_read = now
            self._run_schedules(now)
        # A full pass (every FULL_PASS_S, and when a node changed state) reads every active
        # job and placed job's tasks; in between only new, changed, dirty and ending ones.
        node_states = {n: r.state for n, r in nodes.items()}
        full = (
            now - self._last_full >= max(FULL_PASS_S, self.settings.loop.interval_s)
            or node_states != self._node_states
        )
        if full:
            self._last_full = now
        self._node_states = node_states
        self._draining = [n for n, st in node_states.items() if st == "draining"]
        active, dirty = self.jobs.read(self.store, full)
        for name, why in list(self.jobs.invalid.items()):
            result.transitions += self._fail_invalid(self.jobs.records[name], why, now)
        placed = [
            j
            for j in active
            if j.state not in (JobState.SUBMITTED, JobState.QUEUED)
            and (full or j.name in dirty or j.ending or j.stop_requested or j.name in self._held)
        ]
        tasks = self.store.tasks_of([j.name for j in placed])
        todo = [j for j in active if j.state in (JobState.SUBMITTED, JobState.QUEUED)] + placed
        for job in todo:
            result.transitions += self._advance(job, tasks.get(job.name, []), nodes, now)
        self._flush()  # the cached records were changed along with the queued writes
        live_names = {j.name for j in active}
        for key in [k for k in self._core_jobs if k[0] not in live_names]:
            del self._core_jobs[key]
        t1 = time.perf_counter()
        snapshot, ctx = take_snapshot(
            self.store, self.jobs.specs, active, self._core_jobs, view=self.view
        )
        snapshot = with_releasing(snapshot, ctx.jobs, self._nominations)
        snapshot = replace(snapshot, history=self.history.history())
        t2 = time.perf_counter()
        result.seconds = {"lifecycle": t1 - t0, "snapshot": t2 - t1}
        if self.autoscale is not None:  # a node that came for a placeholder is freed first
            facts = self.autoscale.before_core(
                n.name for n in snapshot.nodes if n.state != NodeState.LOST
            )
            from scheduler.k8s.nodes import as_kubelet_sees  # kubernetes client: AKS only

            # each node as its kubelet admits: less what other pods hold; Node cordons
            snapshot = replace(snapshot, nodes=as_kubelet_sees(snapshot.nodes, facts))
        if not snapshot.pending and not growing(snapshot.running):
            if self.autoscale is not None:
                self.autoscale.after_core(snapshot, Decision())  # the queue emptied
            return result
        decision = self.schedule(snapshot, self.policy, now)
        if self.autoscale is not None:
            decision = self.autoscale.after_core(snapshot, decision)
        t3 = time.perf_counter()
        payload = commit_payload(decision, ctx)
        ok, detail = self.store.commit(ctx.version, payload)
        result.seconds.update(core=t3 - t2, commit=time.perf_counter() - t3)
        result.committed, result.detail = ok, detail
        if ok:
            self.view.committed(ctx.version, int(detail), payload)
            self.jobs.committed(payload, self.store.committed_at or now)
            self._nominations = dict(decision.nominations)
            if decision.shrinks:
                self._apply_shrinks(decision, ctx.jobs, now)
            result.bound = len(payload["binds"])
            result.preempted = len(payload["preemptions"])
            if payload["binds"] or payload["preemptions"] or payload["grows"]:
                grows = len(payload["grows"])
                log.info(
                    f"committed {result.bound} binds, {grows} grows, "
                    f"{result.preempted} preemptions (version {detail})"
                )
        else:
            log.info("commit refused: %s", detail)
            self.forget()
        return result

    def _apply_shrinks(self, decision: Decision, jobs: Mapping[str, JobRecord], now: float) -> None:
        """Elastic resizes (:func:`scheduler.rules.lifecycle.shrink_keys`): take the shrunk
        replicas' tasks away (their agents stop them), with an event on the job. Not a
        preemption: the job keeps its attempt and nothing is charged."""
        for sh in decision.shrinks:
            job = jobs.get(sh.job)
            if job is None:
                continue
            keys = lifecycle.shrink_keys(sh.placements)
            if self.store.remove_tasks(sh.job, job.attempt, keys, now=now):
                self.view.invalidate()  # a version bump the view does not follow
                rec = self.jobs.records.get(sh.job)
                if rec is not None:  # as written: the regrow cool-down counts from here
                    rec.resized_at = now
                self._batch.add_event(
                    sh.job,
                    lifecycle.shrink_reason(keys, sh.for_job),
                    now=now,
                    state=job.state,
                    attempt=job.attempt,
                )
        self._flush()

    # ---- lifecycle ------------------------------------------------------------------
    def _advance(
        self, job: JobRecord, tasks: list[TaskRecord], nodes: dict[str, NodeRecord], now: float
    ) -> bool:
        """Move one job along its lifecycle; True when it changed state."""
        st = JobState(job.state)
        if st in (JobState.SUBMITTED, JobState.QUEUED) and job.stop_requested:
            self._transition(
                job,
                JobState.STOPPED,
                job.stop_requested,
                now=now,
                attempt=job.attempt,
                end_time=now,
            )
            return True
        if st == JobState.SUBMITTED:
            self._transition(
                job,
                JobState.QUEUED,
                f"queued in virtual cluster {job.vc}",
                now=now,
                attempt=job.attempt,
            )
            return True
        if st == JobState.QUEUED:
            return False
        spec = self._spec(job)
        tasks = ordered_tasks(spec, tasks)
        self._mark_lost(job, tasks, nodes, now)
        changed = False
        if st == JobState.SCHEDULED and any(t.state != TaskState.SCHEDULED for t in tasks):
            self._transition(
                job,
                JobState.RUNNING,
                "tasks started",
                now=now,
                attempt=job.attempt,
                start_time=now,
            )
            job.start_time = now
            changed = True
        ending = lifecycle.Ending.from_dict(job.ending) if job.ending else None
        if ending is None:
            step = self._outcome(job, spec, tasks, nodes, now)
            if step.held and job.name not in self._held:
                log.info("job %s held: %s", job.name, step.held)
                self._batch.add_event(
                    job.name, step.held, now=now, state=job.state, attempt=job.attempt
                )
            if step.held:
                self._held.add(job.name)
            else:
                self._held.discard(job.name)
            if step.ending is None:
                return self._apply_step(job, tasks, step, now) or changed
            ending = step.ending
            self._batch.set_job_fields(job.name, ending=ending.to_dict())
            job.ending = ending.to_dict()
            log.info("job %s ending -> %s: %s", job.name, ending.state, ending.reason)
        stop = [t for t in tasks if not t.done and t.desired != "stop"]
        for t in stop:
            if t.desired == WAIT:  # never started: nothing for an agent to stop
                t.state, t.message = TaskState.STOPPED, "stopped before it started"
            t.desired = "stop"
        self._batch.update_tasks(job.name, stop)
        if not all(t.done for t in tasks):
            return changed
        return self._finish(job, spec, tasks, ending, now)

    def _fail_invalid(self, job: JobRecord, why: str, now: float) -> bool:
        """Fail a job whose stored spec no longer validates (``JobsView.invalid``): at once
        when nothing is placed; else stop its tasks first, then release its allocation
        and fail it. True when it changed state."""
        reason = f"its stored spec is no longer valid ({why}); failed"
        tasks = self.store.tasks(job.name)
        running = [t for t in tasks if not t.done]
        if running:
            stop = [t for t in running if t.desired != "stop"]
            for t in stop:
                t.desired = "stop"
            if stop:
                self._batch.update_tasks(job.name, stop)
            return False
        if tasks:
            self._batch.release(job.name)
        log.warning("job %s: %s", job.name, reason)
        self._transition(job, JobState.FAILED, reason, now=now, attempt=job.attempt, end_time=now)
        return True

    def _mark_lost(
        self, job: JobRecord, tasks: list[TaskRecord], nodes: dict[str, NodeRecord], now: float
    ) -> None:
        lost = []
        for t in tasks:
            node = nodes.get(t.node)
            if not t.done and (node is None or node.state == "lost"):
                t.state = TaskState.LOST
                t.exit_code = None
                t.message = f"node {t.node} lost"
                t.cause = Cause.NODE_LOST
                lost.append(t)
        if lost:
            self._batch.update_tasks(job.name, lost, notify=False)
            why = {t.node: nodes[t.node].state_reason if t.node in nodes else "" for t in lost}
            self._batch.add_event(
                job.name,
                "tasks lost with node(s) "
                + ", ".join(f"{n} ({why[n]})" if why[n] else n for n in sorted(why)),
                now=now,
                state=job.state,
                attempt=job.attempt,
            )

    def _outcome(
        self,
        job: JobRecord,
        spec: JobSpec,
        tasks: list[TaskRecord],
        nodes: dict[str, NodeRecord],
        now: float,
    ) -> lifecycle.Step:
        """What happens next to this attempt (:func:`scheduler.rules.lifecycle.decide`), with
        the heartbeats and heartbeat gaps of its nodes for the peer-loss rule (store
        clock)."""
        beats = {t.node: nodes[t.node].heartbeat for t in tasks if t.node in nodes}
        gaps = {
            t.node: (nodes[t.node].gap_from, nodes[t.node].gap_to)
            for t in tasks
            if t.node in nodes and nodes[t.node].gap_to > 0
        }
        grace = self.settings.loop.peer_loss_grace_s
        return lifecycle.decide(
            spec,
            tasks,
            failures=job.failures,
            stop_requested=job.stop_requested,
            draining=self._draining,
            peers=lifecycle.PeerWatch(beats, now, grace, gaps),
            now=now,
        )

    def _apply_step(
        self, job: JobRecord, tasks: list[TaskRecord], step: lifecycle.Step, now: float
    ) -> bool:
        """Apply a :class:`scheduler.rules.lifecycle.Step`: restarts in place, releases, stops (of a
        restarting role), freed allocations. True when any task changed."""
        by_key = {t.key: t for t in tasks}
        changed = []
        for r in step.restart:
            t = by_key[r.key]
            t.state, t.desired, t.restarts, t.message = TaskState.SCHEDULED, "run", r.number, ""
            t.exit_code = t.started = t.finished = None
            t.handle = ""
            changed.append(t)
            self._batch.add_event(
                job.name,
                f"task {r.key} restarted in place: {r.reason}",
                now=now,
                state=job.state,
                attempt=job.attempt,
            )
        for keys, desired in ((step.release, "run"), (step.stop, "stop")):  # stop: restart_role
            for key in keys:
                by_key[key].desired = desired
                changed.append(by_key[key])
        if changed:
            self._batch.update_tasks(job.name, changed)
        if step.free:
            self._flush()
            if self.store.free_tasks(job.name, step.free):
                self.view.invalidate()  # a version bump the view does not follow
        return bool(changed)

    def _finish(
        self,
        job: JobRecord,
        spec: JobSpec,
        tasks: list[TaskRecord],
        ending: lifecycle.Ending,
        now: float,
    ) -> bool:
        """Release the ledger, then requeue or finish (release first: a crash in between
        leaves an ending job without allocation, which the next cycle completes)."""
        self._batch.release(job.name)  # this cycle's snapshot (taken next) sees the room
        self._held.discard(job.name)
        started = job.start_time or job.scheduled_time or now
        weight = sum(t.gpu for t in tasks) or sum(t.cpu_m for t in tasks) / 1000
        attained = job.attained_service + max(0.0, now - started) * weight
        failures = job.failures + (1 if ending.failure else 0)
        state = ending.state
        cause = ending.cause or ("preempted" if ending.preempted else "")
        attempts = [
            *job.attempts,
            {
                "attempt": job.attempt,
                "state": state.value,
                "reason": ending.reason,
                "cause": cause,
                "charged": ending.failure,
                "nodes": sorted({t.node for t in tasks}),
                "started": job.start_time or job.scheduled_time,
                "ended": now,
            },
        ]
        if state == JobState.QUEUED:
            self._transition(
                job,
                JobState.QUEUED,
                ending.reason,
                now=now,
                attempt=job.attempt + 1,
                failures=failures,
                ending=None,
                scheduled_time=None,
                start_time=None,
                attained_service=attained,
                exit_code=ending.exit_code,
                attempts=attempts,
            )
        else:
            self._transition(
                job,
                state,
                ending.reason,
                now=now,
                attempt=job.attempt,
                failures=failures,
                ending=None,
                end_time=now,
                attained_service=attained,
                exit_code=ending.exit_code,
                attempts=attempts,
            )
            if state == JobState.SUCCEEDED and weight:
                self.history.record(attained / weight, attained)
            ttl: float | None = spec.ttl_after_finished
            ttl = self.settings.loop.finished_job_ttl_s if ttl is None else ttl
            if ttl is not None:
                self._batch.expire_job_at(job.name, now + ttl)
        return True

    def _clean_up_finished(self, now: float) -> None:
        """Delete finished jobs whose ``ttl_after_finished`` (or the cluster's
        ``loop.finished_job_ttl_s``) has passed since they ended."""
        for name in self.store.expired_jobs(now):
            job = self.store.get_job(name)
            try:
                self.store.delete_job(name)
                log.info("job %s deleted: finished longer ago than its ttl", name)
            except (JobActiveError, JobNotFoundError):
                self.store.drop_expiry(name)
                continue
            if job is not None and job.spec.get("volumes"):
                self._remove_volumes(name, job.uid, job.spec["volumes"])

    def _run_schedules(self, now: float) -> None:
        """Start, stop and prune the runs of every scheduled job as
        :func:`scheduler.spec.schedule.decide` says (Kubernetes CronJob semantics). A run
        is the schedule's job named ``<schedule>-<minutes>``, created with the schedule's
        user and VC (both checked when the schedule was submitted). Errors of one schedule
        are logged; the others go on."""
        for rec in self._schedules.all():
            try:
                self._run_schedule(rec, now)
            except Exception:  # one bad schedule must not stop the loop
                log.exception("schedule %s: not run this cycle", rec.name)

    def _run_schedule(self, rec: ScheduleRecord, now: float) -> None:
        spec = ScheduleSpec.model_validate(rec.spec)
        runs, gone = [], []
        for name in rec.runs:
            job = self.store.get_job(name)
            if job is None:
                gone.append(name)
                continue
            scheduled = float(name.rsplit("-", 1)[-1]) * 60
            runs.append(Run(name, str(job.state), scheduled))
        self._schedules.forget_runs(rec.name, gone)
        decision = decide_schedule(spec, rec.last, runs, now)
        for name in decision.stop:
            self.store.request_stop(name, f"replaced by a newer run of schedule {rec.name}")
        for name in decision.delete:
            with contextlib.suppress(JobActiveError, JobNotFoundError):
                self.store.delete_job(name)
        if decision.why and decision.why != "suspended":
            log.info("schedule %s: %s", rec.name, decision.why)
        if decision.start is not None:
            run = spec.run_spec(decision.start)
            try:
                self.store.create_job(run, user=rec.user)
            except JobExistsError:
                log.warning("schedule %s: job %s exists; run skipped", rec.name, run.name)
            self._schedules.started(rec.name, decision.start, run.name)
            log.info("schedule %s: started %s", rec.name, run.name)

    def _remove_volumes(self, job: str, uid: str, volumes: list[dict[str, object]]) -> None:
        """Remove the share directories of a deleted job's ``volumes`` not marked ``keep``
        (``jobs/<job>/volumes/<uid>/<name>`` under ``share_dir``; Volcano deletes a job's
        new claims with it). A failure is logged: the job is gone either way."""
        for v in volumes:
            if v.get("keep") or not isinstance(v.get("name"), str):
                continue
            path = self.settings.share_dir / volume_dir(job, str(v["name"]), uid)
            try:
                shutil.rmtree(path)
                log.info("job %s: volume %s removed (%s)", job, v["name"], path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("job %s: volume %s not removed: %s", job, v["name"], exc)

    # ---- forever --------------------------------------------------------------------
    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Cycle on every notification and at least every ``loop.interval_s`` until
        ``stop`` is set. Errors of one cycle are logged, not fatal (Redis restarts)."""
        stop = stop or threading.Event()
        notes = Notifications(self.store, self.store.loop_channel)
        interval = self.settings.loop.interval_s
        log.info("loop started (policy %s, interval %gs)", self.policy.name, interval)
        try:
            while not stop.is_set():
                try:
                    started = time.perf_counter()
                    self.cycle()
                    self.store.record_cycle(time.perf_counter() - started)  # for /metrics
                except Exception:  # noqa: BLE001 - keep the loop alive, say what broke
                    log.exception("scheduling cycle failed")
                    self.forget()
                    self._health.blind()  # silences restart when the store answers again
                    stop.wait(interval)
                notes.wait(interval)  # a notification, or the interval
        finally:
            notes.close()


def run_forever(settings: SchedulerSettings, stop: threading.Event | None = None) -> None:
    """Entry point of ``pasture serve loop``: apply the VCs of ``settings`` and loop until
    SIGTERM / SIGINT (or ``stop``)."""
    # bounded calls: after a failover a connection to a primary whose host vanished must
    # not hang the loop for the kernel's TCP timeouts (minutes)
    store = Store.from_settings(settings.redis, socket_timeout=30.0, socket_connect_timeout=5.0)
    store.apply_vcs(settings.virtual_clusters)
    loop = Loop(store, settings)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    loop.run_forever(stop)


def main(argv: list[str] | None = None) -> None:
    """``python -m scheduler.loop --config /etc/pasture/scheduler.yaml``."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.loop")
    parser.add_argument("--config", default=None, help="scheduler settings file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run_forever(load_scheduler_settings(args.config))


if __name__ == "__main__":
    main()
