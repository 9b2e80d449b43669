"""The loop's lifecycle half: applying what :func:`scheduler.rules.lifecycle.decide` says
to the store (reconcile apart from apply: the cycle driver in :mod:`scheduler.loop` reads
the store, asks the core, commits; this applies each job's :class:`Step`).

A job moves submitted -> queued -> scheduled -> running; its tasks' outcomes give a
:class:`scheduler.rules.lifecycle.Step` (restart tasks in place, release waiting tasks,
free finished tasks' allocations) or an :class:`scheduler.rules.lifecycle.Ending` (stop
what runs, then release the ledger and requeue or finish, recording the attempt). Writes
go in the cycle's batch (scheduler/store/batch.py); every step is idempotent, so a loop
killed at any point resumes from the store.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from scheduler.core.history import HistoryWindow
from scheduler.rules import lifecycle
from scheduler.rules.discovery import ordered_tasks
from scheduler.rules.peerloss import PeerWatch
from scheduler.settings import SchedulerSettings
from scheduler.spec.facts import WAIT
from scheduler.spec.model import JobSpec
from scheduler.spec.policies import volume_dir
from scheduler.states import JobState, TaskState
from scheduler.store.records import Cause, JobRecord, NodeRecord, TaskRecord
from scheduler.store.store import JobActiveError, JobNotFoundError, Store
from scheduler.store.view import JobsView, LedgerView

log = logging.getLogger("pasture.loop")


class StepApplier:
    """Applies the lifecycle's steps to the store for :class:`scheduler.loop.Loop` (which
    sets these attributes: the store, settings, cached views, the cycle's write batch)."""

    store: Store
    settings: SchedulerSettings
    jobs: JobsView
    view: LedgerView
    history: HistoryWindow
    _batch: Any
    _held: set[str]
    _draining: list[str]

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
            peers=PeerWatch(beats, now, grace, gaps),
            now=now,
            requeues=lifecycle.FreeRequeues(
                lifecycle.free_requeue_streak(job.attempts), self.settings.loop.max_free_requeues
            ),
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
        ended: dict[str, Any] = {
            "attempt": job.attempt,
            "state": state.value,
            "reason": ending.reason,
            "cause": cause,
            "charged": ending.failure,
            "nodes": sorted({t.node for t in tasks}),
            "started": job.start_time or job.scheduled_time,
            "ended": now,
        }
        # what each task used (sacct's per-step figures), kept after the task records go
        used = {t.key: {"node": t.node, **t.usage} for t in tasks if t.usage}
        if used:
            ended["usage"] = used
        attempts = [*job.attempts, ended]
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
