"""Starvation guard of least-attained-service orders: Tiresias' STARVELIMIT.

Source: Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning",
NSDI'19, section 4.2 and Algorithm 1, and its simulator (SymbioticLab/Tiresias,
``simulator/run_sim.py``, ``dlas_sim_jobs(..., solve_starvation)``): a job in a lower LAS
queue that has waited at least ``STARVELIMIT`` (PROMOTEKNOB) times its execution time is
promoted to the highest queue, and its executed time counts from zero again, so it goes
back down the queues only as it is served anew.

Here, without state kept between cycles (the core is pure), from two fields the caller
sets on a preempted job (:class:`scheduler.core.model.Job`):

* ``requeued_at``: when its last attempt ended; ``executed_s``: how long it has run in all
  its attempts so far (Tiresias' executed time).
* A pending job is **promoted** from ``requeued_at + starve_limit * executed_s`` on
  (:func:`promotion_time`): its LAS level is the highest (service 0), FIFO by submit time
  among the jobs there, so it goes ahead of every job that arrived after it.
* A running job whose attempt started at or after that instant was started promoted: its
  LAS level counts only what it received since (Tiresias resets the executed time at the
  promotion), and in **seconds** of this attempt, not GPU-seconds: the queue thresholds
  then give a promoted gang of g GPUs the same time in each queue as a one-GPU job
  (Tiresias' time-based discretised LAS, the simulator's ``dlas`` beside ``dlas-gpu``).
  In GPU-seconds a 48-GPU gang leaves the first queue (1 GPU-hour) after 75 s, less than
  the 60 s restart cost of its next preemption plus any progress: measured, promotion
  then made wide gangs thrash (scheduler/sim/README.md, "STARVELIMIT").

Differences from the Tiresias simulator, said plainly: there the waiting time accumulates
over every pending period since the last promotion and the executed time over every
attempt since the last promotion; here the wait is the one since the last preemption and
the executed time is the job's whole run time (never reset), so a job that has run long
must wait as long before it is promoted again: promotions of one job become rarer as it is
served, and long jobs do not take turns with each other every first-queue threshold
(measured: with the last attempt's run time instead, the rule's first version, ITP
cluster06 at 1,000 jobs was 1.55x Tiresias' mean JCT; with the whole run time 1.01x). The
promoted attempt's service is counted in seconds (above). And there a promoted job joins
the end of the first queue, behind the jobs already in it; here it ranks there by submit
time, ahead of every job that arrived after it (measured with Tiresias' place: itp-06 at
2,000 jobs went from 0.98x to 1.04x Tiresias' mean JCT and 1.38x to 1.81x the best p99;
scheduler/sim/README.md, "Issue 36, fourth round").

A promoted attempt's seconds count only as far as the job's **last checkpoint**
(:func:`saved_s`, from ``Job.checkpoint_interval_s``): a job that checkpoints every ``c``
seconds leaves the first queue at the first checkpoint at or past the threshold, and one
that declares no checkpoints keeps the first queue for the whole promoted attempt. Tiresias
assumes every job resumes from a checkpoint; without one, each preemption of a promoted
attempt throws the attempt away, and the job, promoted again after a longer wait, starts
over again. Measured before this rule, replayed with no checkpoints (``sim suite
--checkpoint-interval 1e9``, 500 jobs at load 0.8): mean JCT 5.7x Tiresias' on ITP
cluster06 and 10x on syn-16gpu, where one 1-GPU job of 27,945 s was preempted 198 times
(scheduler/sim/README.md, "Issue 36, eighth round").

What it bounds: a job that keeps being preempted waits at most ``starve_limit`` times its
run time so far before it outranks every job that has been served and every job submitted
after it; its promoted attempt is then a queue-order victim only after it has run one
first-queue threshold (in seconds) and saved it in a checkpoint, so each promotion buys at
least that much progress kept.

``starve_limit`` 1 (a job never waits, after a preemption, longer than it has run: its
slowdown stays bounded) is the value reasoned for this rule; the Tiresias simulator runs
``dlas-gpu`` without the rule and offers 0.5 to 1,000. Limit 1 was measured and left off
(it cost mean JCT and p99 on ITP cluster06). The ``pasture`` preset enables it with limit
2 (issue 36), fitted on ONE trace, the robustness suite's syn-16gpu at 2,000 jobs and load
0.8 (the largest of 1, 2 and 4 whose p99 stays within 1.5x the best baseline's), and
checked on every other row (scheduler/sim/README.md, "STARVELIMIT").
"""

from __future__ import annotations

import math

from scheduler.core.model import Job, RunningJob


def promotion_time(job: Job, starve_limit: float | None) -> float | None:
    """Seconds from which the preempted ``job`` is promoted to the highest LAS queue:
    ``requeued_at + starve_limit * executed_s``; None when the rule is off
    (``starve_limit`` None) or the job was never preempted (``requeued_at`` None or
    ``executed_s`` <= 0: it never ran, so it is in the highest queue anyway)."""
    if starve_limit is None or job.requeued_at is None or job.executed_s <= 0:
        return None
    return job.requeued_at + starve_limit * job.executed_s


def promoted(job: Job, now: float, starve_limit: float | None, run: RunningJob | None) -> bool:
    """True when ``job`` is promoted at ``now``: pending and past :func:`promotion_time`,
    or running an attempt started at or after it (``run`` is its RunningJob)."""
    at = promotion_time(job, starve_limit)
    if at is None:
        return False
    return (run.start_time if run is not None else now) >= at


def _whole(x: float, c: float) -> int:
    """The largest k with ``k * c <= x`` (c > 0), exact on the float products: ``x / c``
    may round across a multiple."""
    k = math.floor(x / c)
    if (k + 1) * c <= x:
        return k + 1
    return k - 1 if k * c > x else k


def saved_s(job: Job, ran_s: float) -> float:
    """Seconds of an attempt that has run ``ran_s`` seconds which ``job``'s checkpoints
    keep (what a preemption now would not lose): all of them when
    ``checkpoint_interval_s`` is 0, the last whole multiple of it when it is > 0, none
    when it is None (no checkpoints declared)."""
    c = job.checkpoint_interval_s
    if c is None:
        return 0.0
    if c <= 0:
        return ran_s
    return _whole(ran_s, c) * c


def saved_after(job: Job, served_s: float) -> float | None:
    """Seconds of running after which :func:`saved_s` first reaches ``served_s`` (> 0):
    the first checkpoint at or past it; None when ``job`` declares no checkpoints."""
    c = job.checkpoint_interval_s
    if c is None:
        return None
    if c <= 0:
        return served_s
    k = _whole(served_s, c)
    return k * c if k * c >= served_s else (k + 1) * c
