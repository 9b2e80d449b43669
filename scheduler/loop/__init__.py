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
is decided by :func:`scheduler.rules.lifecycle.decide` (docs/jobs.md);
:mod:`scheduler.loop.apply` applies it, this module drives the cycle.
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
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from scheduler.core import schedule as core_schedule
from scheduler.core.grow import growing
from scheduler.core.history import HistoryWindow
from scheduler.core.model import Decision, Job, NodeState, Snapshot
from scheduler.core.policy import Policy
from scheduler.core.presets import get_preset
from scheduler.jobref import job_key, short_name
from scheduler.k8s.capacity import gone_probe
from scheduler.loop.apply import StepApplier
from scheduler.loop.throughput import MeasuredThroughput
from scheduler.rules.health import NodeHealth
from scheduler.settings import SchedulerSettings, load_scheduler_settings
from scheduler.spec.schedule import Run, ScheduleSpec
from scheduler.spec.schedule import decide as decide_schedule
from scheduler.states import JobState
from scheduler.store.migrate import migrate
from scheduler.store.notify import Notifications
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


class Loop(StepApplier):
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
        # loop.policy names a preset: the settings refuse any other name on load
        self.policy = policy or get_preset(settings.loop.policy)
        self.schedule = schedule or core_schedule
        self._core_jobs: dict[tuple[object, ...], Job] = {}
        self.jobs = JobsView()  # active jobs and specs; only new / changed ones read
        self._batch = store.batch()
        self.view = LedgerView()  # nodes, VCs, ledger; re-read on a version gap only
        self._last_full = 0.0
        self._node_states: dict[str, str] = {}
        self._draining: list[str] = []
        self._beats_read = 0.0  # silence clock of the last heartbeat read
        # jobs whose task failure waits for the verdict on a peer's silent node
        # (peerloss.PeerWatch): looked at every cycle until decided
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
        # rates that running elastic jobs measure and write to their job directory
        # (loop/throughput.py, issue 36): their speedup tables for the elastic stage
        self.throughput = MeasuredThroughput(settings.share_dir)

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
        snapshot = self.throughput.apply(snapshot, now, ctx.jobs)
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
            scheduled = float(short_name(name).rsplit("-", 1)[-1]) * 60  # <schedule>-<minute>
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
            # a run is named by its job key (its VC's: scheduler/jobref.py), as the store does
            self._schedules.started(rec.name, decision.start, job_key(run.vc, run.name))
            log.info("schedule %s: started %s", rec.name, run.name)

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
    migrate(store, share_dir=settings.share_dir, backup_dir=settings.backup_dir)
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
