"""Discrete-event replay of a trace through the scheduler core.

The clock is simulated: it jumps from event to event (job arrival, job completion, and for
least-attained-service orders the instant a running job crosses an LAS threshold and,
with ``Policy.starve_limit``, the instant a preempted job is promoted). All
events at one timestamp are applied first, then the core is called once
(``schedule(snapshot, policy, now)``, the same function the service's loop calls) and its
Decision applied: preemptions release their allocation at once and requeue the victim,
binds allocate. When a Decision preempted something the core is called again at the same
instant, so that the freed capacity is used (the service does the same on its next cycle),
with the Decision's nominations in the snapshot so that the capacity goes to the job that
preempted for it.

Preemption cost model (per preemption of a job holding g GPUs that ran for ``ran`` s in
this attempt):
    lost_ckpt = ran mod checkpoint_s  when the job declares a checkpoint interval, else 0
    the job's remaining work grows back by restart_cost_s + lost_ckpt
    GPU-seconds lost = g * (restart_cost_s + lost_ckpt)
so that GPU-seconds served = sum(g * p) + GPU-seconds lost, exactly.

Elastic jobs (``elastic=True``, issue 29; rule in :mod:`scheduler.sim.profiles`): a job's
remaining is work in replica-seconds at speedup 1 and progresses at ``speedup(n)`` while it
holds n replicas; a Decision's shrinks and grows resize it at once (settling its progress
and attained service first), without any cost; a preemption costs it
``speedup(n) x (restart_cost_s + lost_ckpt)`` of work and n GPUs' worth of lost time.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.adapt import adapt
from scheduler.core.history import HistoryWindow
from scheduler.core.model import (
    Decision,
    Job,
    Node,
    RunningJob,
    Snapshot,
    TaskPlacement,
    TaskRole,
    VirtualCluster,
)
from scheduler.core.policy import Policy
from scheduler.core.resources import Resources
from scheduler.core.starvation import promoted, promotion_time, saved_after
from scheduler.sim.cluster import gang_shape, synthesise_requests
from scheduler.sim.profiles import MAX_FACTOR, Profile, profile_of
from scheduler.sim.trace import TraceJob

Decide = Callable[[Snapshot, Policy, float], Decision]
# An elastic job's progress rate on n GPUs given its profile (default: profile.speedup(n));
# a baseline that changes more than the width (scheduler.sim.pollux: the batch size) sets it.
Rate = Callable[[Profile, int], float]

_DONE, _ARRIVE, _TICK = 0, 1, 2  # completions first at equal times (frees capacity)
MAX_CYCLES_PER_INSTANT = 32


class SimulationError(RuntimeError):
    """The replay cannot continue (a Decision broke an invariant, or jobs can never run)."""


@dataclass(slots=True)
class JobRecord:
    """What happened to one job.

    Attributes:
        trace: the job as the trace gave it.
        gpus: GPUs the job holds when running.
        first_start: seconds, first allocation (None if it never ran).
        end: seconds, completion (None if it never completed).
        run_s: total seconds holding an allocation over all attempts.
        preemptions: times it was preempted.
        lost_gpu_s: GPU-seconds lost to preemptions (restart cost + work since checkpoint).
        completions: times it completed (exactly 1 in a correct replay).
    """

    trace: TraceJob
    gpus: int
    first_start: float | None = None
    end: float | None = None
    run_s: float = 0.0
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    completions: int = 0

    @property
    def jct(self) -> float:
        assert self.end is not None
        return self.end - self.trace.submit_s

    @property
    def queue_s(self) -> float:
        """Time spent pending (first wait and waits after preemptions)."""
        return self.jct - self.run_s


@dataclass(slots=True)
class SimResult:
    """Outcome of one replay.

    Attributes:
        policy: the policy's name.
        records: per job, in trace order.
        gpus: cluster GPUs.
        start, end: first submit and last completion, seconds.
        gpu_busy_s: integral of allocated GPUs over time, GPU-seconds.
        decision_s: wall time of each core call, seconds.
        alloc_at_first_wait: allocated GPU fraction when a job first had to wait on arrival.
        peak_alloc: largest allocated GPU fraction reached.
    """

    policy: str
    records: list[JobRecord]
    gpus: int
    start: float
    end: float
    gpu_busy_s: float
    decision_s: list[float] = field(default_factory=list)
    alloc_at_first_wait: float | None = None
    peak_alloc: float = 0.0


@dataclass(slots=True)
class _Live:
    record: JobRecord
    job: Job
    remaining: float
    epoch: int = 0
    start: float = 0.0
    running: RunningJob | None = None
    profile: Profile | None = None  # elastic jobs only (a rigid job progresses at rate 1)
    n: int = 0  # GPUs held now (an elastic job's 1-GPU replicas)
    attempt_start: float = 0.0  # when this attempt began (start moves at resizes)


def check_restart_cost(seconds: float) -> float:
    """A preemption's restart cost, seconds: finite and >= 0 (returned as given).

    Raises:
        ValueError: anything else (the message says what was expected and given).
    """
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"expected seconds >= 0, got {seconds}")
    return seconds


def check_checkpoint_interval(seconds: float | None) -> float | None:
    """A checkpoint interval, seconds: finite and > 0, or None (no work lost; returned as
    given).

    Raises:
        ValueError: anything else (the message says what was expected and given).
    """
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"expected seconds > 0, got {seconds}")
    return seconds


def _default_decide() -> Decide:
    import scheduler.core as core  # the service's entry point

    schedule: Decide | None = getattr(core, "schedule", None)
    if schedule is None:  # core package not yet re-exporting it
        from scheduler.core.scheduler import schedule as defined

        return defined
    return schedule


def declared_checkpoint(tj: TraceJob, checkpoint_s: float | None) -> float:
    """The ``Job.checkpoint_interval_s`` a trace job declares to the core: its own interval,
    else the replay's ``checkpoint_s``, else 0 (no checkpoint interval means the replay's
    free checkpoints: a preemption loses no work), so that the core knows what the engine
    will charge (:meth:`Simulator._stop`)."""
    return tj.checkpoint_s or checkpoint_s or 0.0


def build_job(
    tj: TraceJob, max_node_gpus: int, estimate: bool, checkpoint_s: float | None = None
) -> tuple[Job, int]:
    """The core Job for a trace job: one role "worker" of k whole-node-or-smaller tasks.

    Returns (job, gpus). ``estimate`` fills ``estimated_duration_s`` with the true duration
    (the SRTF oracle); otherwise it stays None. ``checkpoint_s``: the replay's checkpoint
    interval (:func:`declared_checkpoint`).
    """
    tasks, per_task = gang_shape(tj.gpus, max_node_gpus)
    cpu, mem = synthesise_requests(tj)
    role = TaskRole(
        "worker", tasks, Resources(max(cpu // tasks, 0), max(mem // tasks, 0), per_task)
    )
    job = Job(
        name=tj.name,
        vc=tj.vc,
        roles=(role,),
        submit_time=tj.submit_s,
        estimated_duration_s=tj.duration_s if estimate else None,
        checkpoint_interval_s=declared_checkpoint(tj, checkpoint_s),
    )
    return job, tasks * per_task


def build_elastic_job(
    tj: TraceJob, estimate: bool, checkpoint_s: float | None = None
) -> tuple[Job, int, Profile]:
    """The core Job for a trace job run elastically (:mod:`scheduler.sim.profiles`): one
    elastic role "worker" of 1-GPU replicas, 1 to ``MAX_FACTOR`` x the trace's GPUs, with
    its profile's speedup table. Returns (job, requested GPUs, profile); ``checkpoint_s`` as
    :func:`build_job`'s."""
    g = max(tj.gpus, 1)
    cpu, mem = synthesise_requests(tj)
    hi = MAX_FACTOR * g
    prof = profile_of(tj.name)
    role = TaskRole(
        "worker",
        hi,
        Resources(max(cpu // g, 0), max(mem // g, 0), 1),
        min_available=1,
        elastic=True,
    )
    job = Job(
        name=tj.name,
        vc=tj.vc,
        roles=(role,),
        submit_time=tj.submit_s,
        estimated_duration_s=tj.duration_s if estimate else None,
        scaling=prof.table(hi),
        checkpoint_interval_s=declared_checkpoint(tj, checkpoint_s),
    )
    return job, g, prof


class Simulator:
    """Replays jobs on nodes under one policy.

    Args:
        nodes: the cluster (empty allocations).
        vcs: virtual clusters (every job's VC must be among them).
        jobs: trace jobs (names unique).
        policy: the core policy.
        oracle_estimates: give the core each job's true duration as its estimate.
        restart_cost_s: seconds of a job's GPUs lost per preemption (default 60).
        checkpoint_s: checkpoint interval for jobs whose trace declares none (None = none).
        decide: the core entry point (default ``scheduler.core.schedule``).
        progress: called with the number of completed jobs after each instant.
        history_size: finished jobs an ``adaptive`` policy learns from (the last N;
            :class:`scheduler.core.history.HistoryWindow`).
        elastic: run every trace job elastically (:func:`build_elastic_job`).
        rate: an elastic job's progress rate on n GPUs (default ``profile.speedup(n)``);
            its work is always ``duration x profile.speedup(trace GPUs)``.

    Raises:
        SimulationError: from :meth:`run`, see there.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        vcs: Sequence[VirtualCluster],
        jobs: Sequence[TraceJob],
        policy: Policy,
        *,
        oracle_estimates: bool = False,
        restart_cost_s: float = 60.0,
        checkpoint_s: float | None = None,
        decide: Decide | None = None,
        progress: Callable[[int], None] | None = None,
        history_size: int = 1000,
        elastic: bool = False,
        rate: Rate | None = None,
    ) -> None:
        try:
            check_restart_cost(restart_cost_s)
        except ValueError as exc:
            raise ValueError(f"restart_cost_s: {exc}") from None
        try:
            check_checkpoint_interval(checkpoint_s)
        except ValueError as exc:
            raise ValueError(f"checkpoint_s: {exc}") from None
        self.policy = policy
        self.decide = decide or _default_decide()
        self.restart_cost_s = restart_cost_s
        self.progress = progress
        self.vcs = tuple(vcs)
        self._nodes: dict[str, Node] = {n.name: n for n in nodes}
        self._node_tuple: tuple[Node, ...] | None = None
        self.gpus = sum(n.capacity.gpu for n in nodes)
        max_node_gpus = max((n.capacity.gpu for n in nodes), default=0)
        self._live: dict[str, _Live] = {}
        for tj in jobs:
            if tj.name in self._live:
                raise ValueError(f"duplicate job name {tj.name!r} in the trace")
            if elastic:
                job, g, prof = build_elastic_job(tj, oracle_estimates, checkpoint_s)
                work = tj.duration_s * prof.speedup(g)
                self._live[tj.name] = _Live(JobRecord(tj, g), job, work, profile=prof)
                continue
            job, g = build_job(tj, max_node_gpus, oracle_estimates, checkpoint_s)
            self._live[tj.name] = _Live(JobRecord(tj, g), job, tj.duration_s)
        self._pending: dict[str, Job] = {}
        self._running: dict[str, RunningJob] = {}
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._alloc_gpus = 0
        self._busy = 0.0
        self._last_t = 0.0
        self._done = 0
        self._las = policy.queue_order == "las"
        self._nominations: Mapping[str, tuple[TaskPlacement, ...]] = {}
        # Finished jobs, as the service's loop records them (adaptive policies learn here).
        self._history = HistoryWindow(history_size) if policy.adaptive else None
        self._elastic = elastic
        self._rate_fn = rate

    # -- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: int, name: str, epoch: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, name, epoch))

    def _advance(self, t: float) -> None:
        self._busy += self._alloc_gpus * (t - self._last_t)
        self._last_t = t

    def _snapshot(self) -> Snapshot:
        if self._node_tuple is None:
            self._node_tuple = tuple(self._nodes.values())
        return Snapshot(
            nodes=self._node_tuple,
            vcs=self.vcs,
            pending=tuple(self._pending.values()),
            running=tuple(self._running.values()),
            nominations=self._nominations,
            history=self._history.history() if self._history is not None else None,
        )

    def _allocate(self, placements: Sequence[TaskPlacement], sign: int) -> None:
        for p in placements:
            node = self._nodes.get(p.node)
            if node is None:
                raise SimulationError(f"decision placed a task on unknown node {p.node!r}")
            if sign > 0:
                alloc = node.allocated + p.resources
                if not alloc.fits_in(node.capacity):
                    raise SimulationError(
                        f"decision overcommits node {p.node}: {alloc} > {node.capacity}"
                    )
            else:
                alloc = node.allocated - p.resources
            self._nodes[p.node] = replace(node, allocated=alloc)
            self._alloc_gpus += sign * p.resources.gpu
        self._node_tuple = None

    # -- one start/stop path: a rigid job is an elastic job of fixed width --------------
    def _rate(self, live: _Live, gpus: int) -> float:
        """Work per second on ``gpus`` GPUs: the elastic profile's speedup (or the
        ``rate`` given), 1 for a rigid job (whose remaining work is its remaining run
        time)."""
        if live.profile is None:
            return 1.0
        if self._rate_fn is not None:
            return self._rate_fn(live.profile, gpus)
        return live.profile.speedup(gpus)

    def _start(self, live: _Live, placements: tuple[TaskPlacement, ...], now: float) -> None:
        """Begin an attempt of ``live`` on ``placements`` (checked against its role: a
        rigid job's ``min_available`` is all its replicas, so only that width passes)."""
        role = live.job.roles[0]
        per_task = role.resources.gpu
        if not role.gang_min <= len(placements) <= role.replicas or any(
            p.resources.gpu != per_task for p in placements
        ):
            gpus = sum(p.resources.gpu for p in placements)
            raise SimulationError(
                f"job {live.job.name}: bound {len(placements)} tasks / {gpus} GPUs, expected "
                f"{role.gang_min}..{role.replicas} tasks of {per_task} GPUs"
            )
        self._allocate(placements, +1)
        del self._pending[live.job.name]
        live.attempt_start = now
        if live.record.first_start is None:
            live.record.first_start = now
        self._run(live, placements, now)

    def _run(self, live: _Live, placements: tuple[TaskPlacement, ...], now: float) -> None:
        """(Re)start ``live``'s segment at ``now`` on ``placements``: its completion event
        and, under LAS, its threshold crossings at this width."""
        live.n = sum(p.resources.gpu for p in placements)
        live.start = now
        live.epoch += 1
        live.running = RunningJob(live.job, now, placements)
        self._running[live.job.name] = live.running
        self._push(
            now + live.remaining / self._rate(live, live.n), _DONE, live.job.name, live.epoch
        )
        if not self._las:
            return
        g = max(live.n, 1)
        # thresholds in force now (adaptive ones move as jobs finish; a move between
        # events takes effect at the next event)
        hist = self._history.history() if self._history is not None else None
        thresholds = adapt(self.policy, hist, self.vcs).las_thresholds
        # a job started promoted (starve_limit) is served anew from 0, in seconds of this
        # attempt saved by its checkpoints (scheduler.core.starvation)
        if promoted(live.job, now, self.policy.starve_limit, None):
            for threshold in thresholds:
                after = saved_after(live.job, threshold)
                if after is not None:
                    self._push(now + after, _TICK, "", 0)
            return
        base = live.job.attained_service
        for threshold in thresholds:
            if threshold > base:
                self._push(now + (threshold - base) / g, _TICK, "", 0)

    def _settle(self, live: _Live, now: float) -> None:
        """Fold a running job's progress and service since its segment began."""
        ran = now - live.start
        live.remaining = max(live.remaining - self._rate(live, live.n) * ran, 0.0)
        live.job = replace(live.job, attained_service=live.job.attained_service + live.n * ran)
        live.start = now

    def _resize(
        self,
        live: _Live,
        now: float,
        add: Sequence[TaskPlacement] = (),
        remove: Sequence[TaskPlacement] = (),
    ) -> None:
        """Grow or shrink a running elastic job at ``now`` (no cost: a resize)."""
        rj = live.running
        if rj is None or live.profile is None:
            raise SimulationError(f"decision resizes {live.job.name!r}, not a running elastic job")
        gone = {(p.role, p.index) for p in remove}
        if len(gone & {(p.role, p.index) for p in rj.placements}) != len(gone):
            raise SimulationError(f"decision shrinks replicas {live.job.name!r} does not hold")
        kept = tuple(p for p in rj.placements if (p.role, p.index) not in gone) + tuple(add)
        role = live.job.roles[0]
        if not role.gang_min <= len(kept) <= role.replicas:
            raise SimulationError(
                f"elastic job {live.job.name}: resized to {len(kept)} replicas, expected "
                f"{role.gang_min}..{role.replicas}"
            )
        self._allocate(remove, -1)
        self._allocate(add, +1)
        self._settle(live, now)
        self._run(live, kept, now)

    def _stop(self, live: _Live, now: float, finished: bool) -> None:
        """End ``live``'s attempt at ``now``: completed, or preempted (its remaining work
        grows by the restart cost and the work since its checkpoint, at its width's rate;
        it is requeued keeping its submit time)."""
        assert live.running is not None
        self._settle(live, now)
        self._allocate(live.running.placements, -1)
        del self._running[live.job.name]
        ran = now - live.attempt_start
        live.record.run_s += ran
        live.running = None
        live.epoch += 1
        if finished:
            live.record.end = now
            live.record.completions += 1
            live.remaining = 0.0
            self._done += 1
            if self._history is not None:
                self._history.record(live.record.run_s, live.job.attained_service)
            return
        ckpt = live.job.checkpoint_interval_s  # declared_checkpoint: 0 = free checkpoints
        lost = self.restart_cost_s + (ran % ckpt if ckpt else 0.0)
        live.remaining += self._rate(live, live.n) * lost
        live.record.lost_gpu_s += live.n * lost
        live.record.preemptions += 1
        live.job = replace(
            live.job, attempt=live.job.attempt + 1, executed_s=live.record.run_s, requeued_at=now
        )
        self._pending[live.job.name] = live.job
        at = promotion_time(live.job, self.policy.starve_limit) if self._las else None
        if at is not None and at > now:  # its LAS level changes then, with no other event
            self._push(at, _TICK, "", 0)

    # -- the core ---------------------------------------------------------------------------
    def _cycle(self, now: float, result: SimResult) -> None:
        for _ in range(MAX_CYCLES_PER_INSTANT):
            snap = self._snapshot()
            t0 = time.perf_counter()
            decision = self.decide(snap, self.policy, now)
            result.decision_s.append(time.perf_counter() - t0)
            # as the service's loop does: the next cycle holds what this one nominated
            self._nominations = decision.nominations
            for sh in decision.shrinks:
                live = self._live.get(sh.job)
                if live is None:
                    raise SimulationError(f"decision shrinks unknown job {sh.job!r}")
                self._resize(live, now, remove=sh.placements)
            for pre in decision.preemptions:
                live = self._live.get(pre.job)
                if live is None or live.running is None:
                    raise SimulationError(f"decision preempts {pre.job!r}, which is not running")
                self._stop(live, now, finished=False)
            for bind in decision.binds:
                live = self._live.get(bind.job)
                if live is None or bind.job not in self._pending:
                    raise SimulationError(f"decision binds {bind.job!r}, which is not pending")
                self._start(live, bind.placements, now)
            for gr in decision.grows:
                live = self._live.get(gr.job)
                if live is None:
                    raise SimulationError(f"decision grows unknown job {gr.job!r}")
                self._resize(live, now, add=gr.placements)
            if not decision.preemptions and not decision.shrinks:
                return

    def run(self) -> SimResult:
        """Replay every job to completion.

        Raises:
            SimulationError: a Decision bound a job that is not pending, overcommitted a
                node, preempted a job that is not running, or jobs stay pending with
                nothing left to happen (they can never fit).
        """
        for live in self._live.values():
            self._push(live.record.trace.submit_s, _ARRIVE, live.job.name)
        start = min((r.record.trace.submit_s for r in self._live.values()), default=0.0)
        self._last_t = start
        result = SimResult(
            self.policy.name, [v.record for v in self._live.values()], self.gpus, start, start, 0.0
        )
        heap = self._heap
        while heap:
            now = heap[0][0]
            self._advance(now)
            arrived = False
            changed = False
            while heap and heap[0][0] == now:
                _, kind, _, name, epoch = heapq.heappop(heap)
                if kind == _ARRIVE:
                    live = self._live[name]
                    self._pending[name] = live.job
                    arrived = changed = True
                elif kind == _DONE:
                    live = self._live[name]
                    if live.running is not None and live.epoch == epoch:
                        self._stop(live, now, finished=True)
                        changed = True
                else:
                    changed = changed or bool(self._running) and bool(self._pending)
            if not changed:
                continue
            # nothing to decide otherwise: the core would return at once (elastic jobs may
            # grow into what a completion freed)
            if self._pending or (self._elastic and self._running):
                self._cycle(now, result)
            frac = self._alloc_gpus / self.gpus if self.gpus else 0.0
            result.peak_alloc = max(result.peak_alloc, frac)
            if arrived and self._pending and result.alloc_at_first_wait is None:
                result.alloc_at_first_wait = frac
            if self.progress is not None:
                self.progress(self._done)
        if self._pending or self._running:
            stuck = sorted(self._pending)[:5]
            raise SimulationError(
                f"{len(self._pending)} jobs can never be placed (e.g. {stuck}); "
                "check the cluster shape and the policy's quotas"
            )
        # the last completion (a threshold or promotion event may come after it)
        result.end = max((r.end for r in result.records if r.end is not None), default=start)
        result.gpu_busy_s = self._busy
        return result
