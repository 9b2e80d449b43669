"""A Pollux-like baseline for the simulator (issue 36).

Pollux (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep
Learning", OSDI 2021; reference code petuum/adaptdl, ``simulator/goodput.py`` and
``simulator/pollux.py``) sizes every job by its *goodput*, throughput x statistical
efficiency, and co-adapts each job's batch size to the GPUs it is given. This module is a
baseline of that idea on the simulator's elastic replay (every trace job elastic, 1-GPU
replicas, 1 to ``MAX_FACTOR`` x its trace GPUs; :mod:`scheduler.sim.profiles`); it is not
the production scheduler (``scheduler.core``) and no service policy uses it.

**Goodput model** (one truth for every elastic policy: at the job's reference per-GPU
batch ``m0`` its progress rate on n GPUs is exactly its profile's ``speedup(n)``, which
is what ``elastic`` and ``afs-like`` run at; only this baseline may change the batch):

- step time on n GPUs at local batch m: ``t(n, m) = t_c(m) + sigma t_c(m0) (n - 1)``,
  where ``t_c`` is the one-GPU step time of the job's model interpolated linearly between
  the measured local batch sizes (``profiles.MEASURED``: cifar10 32/129/1024, imagenet
  20/57/200, placement ``1`` of adaptdl's ``simulator/traces/<model>/placements.csv``;
  Pollux's own ``_predict_accum_time`` is linear in the batch too) and ``sigma`` the
  profile's Amdahl fraction (the synchronisation part; Pollux's ``gamma`` = 1, no
  overlap);
- statistical efficiency of a global batch M relative to the job's reference global batch
  ``n m0``: ``E = (phi + n m0) / (phi + M)``, the gradient-noise-scale form of Pollux
  (``GoodputFunction.efficiency``: ``(PGNS + M0) / (PGNS + M)``), where ``phi`` is the
  model's noise scale :data:`NOISE_SCALE`;
- goodput(n) = ``max over m of [n m / t(n, m)] / [m0 / t_c(m0)] x E``, m on a geometric
  grid of :data:`BATCH_GRID` local sizes between the model's smallest and largest measured
  local batch, and m0 itself (so goodput(n) >= speedup(n)); Pollux searches 50 global
  sizes (``np.geomspace``) the same way.

**Noise scale rule** (fixed before any run, one value per model, not per job, so it looks
at no outcome): ``phi = init batch x median over epochs of grad_var / grad_sqr`` of the
smallest-batch validation trace of adaptdl's simulator (``cifar10/validation-256.csv``:
median ratio about 60, phi = 15,360; ``imagenet/validation-200.csv``: about 56.8, phi =
11,360). The noise scale grows during training in reality; a constant is a
simplification.

**Allocation** (:func:`decide`, called by the engine in place of ``scheduler.core``):
maximise Pollux's fitness with p = :data:`P_NORM` (-1, Pollux's default: the harmonic
form, sum of ``-1 / SPEEDUP_j``) where ``SPEEDUP_j(n) = goodput_j(n) / goodput_j(f)`` and
``f = ceil(cluster GPUs / jobs)`` is the fair share (Pollux's ``fair_replicas``).
Simplifications (documented, not Pollux's genetic algorithm): running jobs keep at least
one replica (nobody is preempted); waiting jobs get one replica each in submit order while
GPUs are left; the remaining GPUs go one at a time to the job whose next replica raises
the fitness most (greedy marginal gain, exact for concave goodput curves); no restart
penalty (a resize is free in the engine, as for ``elastic`` and ``afs-like``); no
placement effect on speed; no global batch cap.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

from scheduler.core.model import (
    Bind,
    Decision,
    Job,
    Node,
    NodeState,
    Shrink,
    Snapshot,
    TaskPlacement,
)
from scheduler.core.policy import Policy
from scheduler.core.presets import PRESETS
from scheduler.sim.profiles import MEASURED, Profile, profile_of

NAME = "pollux-like"
P_NORM = -1.0  # Pollux's fitness exponent (OSDI'21 section 4.2; -1 in its evaluation)
BATCH_GRID = 25  # local batch sizes tried per replica count
# phi = init batch x median(grad_var / grad_sqr) of adaptdl simulator/traces (module doc)
NOISE_SCALE: dict[str, float] = {"cifar10": 256 * 60.0, "imagenet": 200 * 56.8}

# The engine needs a Policy: FIFO order, no preemption; the allocation is decide()'s.
POLICY: Policy = replace(PRESETS["fifo"], name=NAME, strict_order=False)


def _model_and_batch(profile: Profile) -> tuple[str, int]:
    model, _, bsz = profile.name.partition("-bsz")
    return model, int(bsz)


def _compute_points(model: str) -> tuple[tuple[int, float], ...]:
    return tuple(
        sorted(
            (int(n.partition("-bsz")[2]), t1)
            for n, t1, _t4 in MEASURED
            if n.startswith(model + "-")
        )
    )


def _step_compute(points: Sequence[tuple[int, float]], m: float) -> float:
    """One-GPU step time (s) at local batch ``m``, linear between measured points."""
    xs = [p[0] for p in points]
    i = min(max(bisect.bisect_left(xs, m), 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (m - x0) / (x1 - x0)


@cache
def goodput(profile: Profile, n: int) -> tuple[float, int]:
    """Best goodput of a job of ``profile`` on ``n`` 1-GPU replicas and the local batch
    that gives it: ``(goodput relative to one GPU at the reference batch, local batch)``.
    ``(0.0, 0)`` for n <= 0. Model in the module docstring; goodput >= ``speedup(n)``.

    Raises:
        KeyError: a profile of a model without a noise scale.
    """
    if n <= 0:
        return 0.0, 0
    model, m0 = _model_and_batch(profile)
    points = _compute_points(model)
    phi = NOISE_SCALE[model]
    lo, hi = points[0][0], points[-1][0]
    t0 = _step_compute(points, m0)
    sync = profile.sigma * t0 * (n - 1)
    base = m0 / t0
    grid = {m0} | {round(lo * (hi / lo) ** (k / (BATCH_GRID - 1))) for k in range(BATCH_GRID)}
    best = (0.0, m0)
    for m in sorted(grid):
        rate = n * m / (_step_compute(points, m) + sync) / base
        eff = efficiency(phi, n * m0, n * m)
        best = max(best, (rate * eff, m))
    return best


def efficiency(phi: float, reference: float, batch: float) -> float:
    """Pollux's statistical efficiency of global batch ``batch`` relative to
    ``reference`` for gradient noise scale ``phi`` (samples): ``(phi + reference) / (phi +
    batch)`` (adaptdl ``GoodputFunction.efficiency``)."""
    return (phi + reference) / (phi + batch)


def rate(profile: Profile, n: int) -> float:
    """The engine's progress rate of a job under this baseline: :func:`goodput`'s value."""
    return goodput(profile, n)[0]


def _fitness(s: float) -> float:
    if s <= 0:
        return -math.inf
    v = float(s**P_NORM)
    return v if P_NORM > 0 else -v


def targets(jobs: Sequence[Job], running: set[str], gpus: int) -> dict[str, int]:
    """Replicas per job (``{name: count}``, 0 = stays waiting) for ``jobs`` on ``gpus``
    GPUs: running jobs keep >= 1, waiting ones get 1 in submit order while GPUs are left,
    then greedy marginal gain of the p-norm fitness (module docstring). Each job's maximum
    is its role's replicas."""
    if not jobs:
        return {}
    fair = max(1, math.ceil(gpus / len(jobs)))
    out: dict[str, int] = {}
    left = gpus
    for job in sorted(jobs, key=lambda j: (j.name not in running, j.submit_time, j.name)):
        out[job.name] = 1 if left > 0 else 0
        left -= out[job.name]
    prof = {j.name: profile_of(j.name) for j in jobs}
    cap = {j.name: j.roles[0].replicas for j in jobs}

    def gain(name: str) -> float:
        n, p = out[name], prof[name]
        ref = goodput(p, min(fair, cap[name]))[0]
        return _fitness(rate(p, n + 1) / ref) - _fitness(rate(p, n) / ref)

    heap = [(-gain(n), n) for n, c in out.items() if 0 < c < cap[n]]
    heapq.heapify(heap)
    while left > 0 and heap:
        g, name = heapq.heappop(heap)
        if -g <= 0:
            break
        out[name] += 1
        left -= 1
        if out[name] < cap[name]:
            heapq.heappush(heap, (-gain(name), name))
    return out


def decide(snap: Snapshot, policy: Policy, now: float) -> Decision:
    """The baseline's allocation for one instant (the engine's ``Decide``): shrinks of
    running jobs above their target (highest replica indexes first), then grows and binds
    of 1-GPU replicas into free room (first fit over ready nodes). ``policy`` and ``now``
    are unused (the signature of ``scheduler.core.schedule``).

    Raises:
        ValueError: a job that is not one elastic role of 1-GPU replicas.
    """
    del policy, now
    nodes: list[Node] = [n for n in snap.nodes if n.state == NodeState.READY]
    free = {n.name: n.capacity - n.allocated for n in nodes}
    jobs = [rj.job for rj in snap.running] + list(snap.pending)
    for j in jobs:
        if len(j.roles) != 1 or not j.roles[0].elastic or j.roles[0].resources.gpu != 1:
            raise ValueError(f"{NAME}: job {j.name!r}: expected one elastic role of 1-GPU replicas")
    held = {rj.job.name: rj.placements for rj in snap.running}
    want = targets(jobs, set(held), sum(n.capacity.gpu for n in nodes))
    shrinks: list[Shrink] = []
    for rj in snap.running:
        extra = len(rj.placements) - max(want[rj.job.name], 1)
        if extra > 0:
            gone = tuple(sorted(rj.placements, key=lambda p: p.index)[-extra:])
            for p in gone:
                free[p.node] = free[p.node] + p.resources
            shrinks.append(Shrink(rj.job.name, gone, "", f"{NAME}: goodput reallocation"))
            held[rj.job.name] = tuple(p for p in rj.placements if p not in gone)
    order = [n.name for n in nodes]

    def place(job: Job, count: int, used: set[int]) -> tuple[TaskPlacement, ...]:
        role = job.roles[0]
        out: list[TaskPlacement] = []
        index = 0
        for node in order:
            while len(out) < count and role.resources.fits_in(free[node]):
                while index in used:
                    index += 1
                used.add(index)
                out.append(TaskPlacement(role.name, index, node, role.resources))
                free[node] = free[node] - role.resources
            if len(out) == count:
                break
        return tuple(out)

    grows: list[Bind] = []
    for rj in snap.running:
        add = want[rj.job.name] - len(held[rj.job.name])
        if add > 0:
            got = place(rj.job, add, {p.index for p in held[rj.job.name]})
            if got:
                grows.append(Bind(rj.job.name, got))
    binds: list[Bind] = []
    for job in sorted(snap.pending, key=lambda j: (j.submit_time, j.name)):
        if want[job.name] > 0:
            got = place(job, want[job.name], set())
            if len(got) >= job.roles[0].gang_min:
                binds.append(Bind(job.name, got))
            else:  # not enough room: give back what was taken
                for p in got:
                    free[p.node] = free[p.node] + p.resources
    return Decision(binds=tuple(binds), grows=tuple(grows), shrinks=tuple(shrinks))
