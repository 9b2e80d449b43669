"""Scaling profiles for elastic trace jobs (issue 29), and the rule that gives each trace
job one.

Source: the Pollux simulator's measured step times (petuum/adaptdl, ``simulator/traces/
{cifar10,imagenet}/placements.csv``; Qiao et al., OSDI 2021). Each profile is one model at
one fixed per-GPU batch size (data-parallel weak scaling, what ``torchrun`` elastic jobs
with a fixed local batch do): its step time on one GPU (placement ``1``) and on four GPUs
on four nodes (placement ``1111``). From those two the profile fits Amdahl's law,
``speedup(n) = n / (1 + sigma (n - 1))``, solved exactly at n = 4:
``sigma = (4 / S4 - 1) / 3`` where ``S4 = 4 t1 / t4`` is the measured 4-GPU speedup.

Assignment rule (fixed before any result was looked at): a trace job's profile is
``PROFILES[sha256(job name) mod len(PROFILES)]``; it runs on 1-GPU replicas, between 1 and
twice the GPUs the trace gives it (AFS and Pollux size jobs freely; the trace's request is
taken as a middle, not a cap); the trace's duration is its run time at the requested GPU
count, so its work is ``duration x speedup(requested)`` replica-seconds at speedup 1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# (name, step time on 1 GPU s, step time on 4 x 1 GPU s) from placements.csv (see above).
_MEASURED: tuple[tuple[str, float, float], ...] = (
    ("cifar10-bsz32", 0.0427886962890625, 0.1268904447555542),
    ("cifar10-bsz129", 0.10385050773620605, 0.15143196582794188),
    ("cifar10-bsz1024", 0.7020925283432007, 0.7817227602005005),
    ("imagenet-bsz20", 0.14740917682647706, 0.33392465114593506),
    ("imagenet-bsz57", 0.32392780780792235, 0.3661052942276001),
    ("imagenet-bsz200", 0.923530888557434, 0.9843716382980346),
)

MEASURED = _MEASURED  # the measured step times, public (scheduler.sim.pollux fits on them)

MAX_FACTOR = 2  # an elastic trace job may grow to this many times its requested GPUs


@dataclass(frozen=True, slots=True)
class Profile:
    """One model's scaling: ``speedup(n) = n / (1 + sigma (n - 1))`` (Amdahl).

    Attributes:
        name: model and per-GPU batch size.
        sigma: serial fraction, dimensionless, in [0, 1).
    """

    name: str
    sigma: float

    def speedup(self, n: int) -> float:
        """Throughput on ``n`` GPUs relative to one (0 for n <= 0)."""
        return n / (1.0 + self.sigma * (n - 1)) if n > 0 else 0.0

    def table(self, n: int) -> tuple[float, ...]:
        """``(speedup(1), ..., speedup(n))``, the core's ``Job.scaling``."""
        return tuple(self.speedup(k) for k in range(1, n + 1))


def _fit(name: str, t1: float, t4: float) -> Profile:
    s4 = 4.0 * t1 / t4
    return Profile(name, max((4.0 / s4 - 1.0) / 3.0, 0.0))


PROFILES: tuple[Profile, ...] = tuple(_fit(*m) for m in _MEASURED)


def profile_of(job_name: str) -> Profile:
    """The profile the assignment rule gives trace job ``job_name`` (stable across runs
    and machines: sha256, not Python's salted hash)."""
    h = int.from_bytes(hashlib.sha256(job_name.encode()).digest()[:8], "big")
    return PROFILES[h % len(PROFILES)]
