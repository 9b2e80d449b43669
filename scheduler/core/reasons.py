"""Pending reasons worded for people ("why is my job waiting?").

OpenPAI's most requested feature; every pending job not bound in a cycle gets exactly one
:class:`~scheduler.core.model.PendingReason` with a :class:`ReasonKind`, one sentence, and
structured details for the API. This module only formats: the scheduler decides the kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from scheduler.core.model import Job, PendingReason, ReasonKind
from scheduler.core.policy import PreemptionMode
from scheduler.units import format_bytes, format_millicores

DIM_NAMES = ("cpu_m", "memory", "gpu")


def fmt_gpu(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def fmt_cpu(millicores: int) -> str:
    """'2 cpu', '500m cpu' (:func:`scheduler.units.format_millicores`, as the CLI prints)."""
    return f"{format_millicores(millicores)} cpu"


def fmt_mem(nbytes: int) -> str:
    """'64Gi', '512Mi' (:func:`scheduler.units.format_bytes`, as the CLI prints)."""
    return format_bytes(nbytes)


def fmt_dim(d: int, amount: int) -> str:
    """Format ``amount`` of dimension d (0 cpu_m, 1 memory, 2 gpu)."""
    return (fmt_cpu, fmt_mem, fmt_gpu)[d](amount)


def fmt_request(cpu_m: int, memory: int, gpu: int) -> str:
    """'8 GPUs, 32 cpu and 64Gi' (zero components left out)."""
    parts = []
    if gpu:
        parts.append(fmt_gpu(gpu))
    if cpu_m:
        parts.append(fmt_cpu(cpu_m))
    if memory:
        parts.append(fmt_mem(memory))
    if not parts:
        return "nothing"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def fmt_selector(selector: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(selector.items())) + "}"


def reason(kind: ReasonKind, message: str, **details: object) -> PendingReason:
    """A PendingReason with read-only details."""
    return PendingReason(kind=kind, message=message, details=MappingProxyType(details))


def preemption_phrase(mode: PreemptionMode, job: Job) -> str:
    """Why ``job`` preempts, in words that name no job (the PREEMPTING reason of ``job``
    and each victim's reason, whatever the victim's VC, use it)."""
    if mode is PreemptionMode.VC_RECLAIM:
        return f"reclaiming vc {job.vc}'s guarantee from borrowers"
    if mode is PreemptionMode.PRIORITY:
        return f"a priority {job.priority} job preempts lower priority"
    return "queue order ranks it ahead"


def job_ref(name: str, vc: str | None, reader_vc: str) -> str:
    """How a reason stored on a job of ``reader_vc`` names the job ``name`` of ``vc``: by
    name inside the same VC, as ``a job of VC <vc>`` outside it, so that a reason or an
    event never tells one tenant the name of another tenant's job (issue 25). A VC of
    None (unknown) is named as ``another job``."""
    if vc == reader_vc:
        return f"job {name}"
    return f"a job of VC {vc}" if vc is not None else "another job"


def jobs_ref(jobs: Sequence[tuple[str, str | None]], reader_vc: str) -> str:
    """``[(name, vc)]`` as :func:`job_ref` names them, grouped: ``job a, job b and 2 jobs
    of VC research``."""
    own = [f"job {n}" for n, vc in jobs if vc == reader_vc]
    others: dict[str | None, int] = {}
    for _, vc in jobs:
        if vc != reader_vc:
            others[vc] = others.get(vc, 0) + 1
    for vc, n in sorted(others.items(), key=lambda kv: str(kv[0])):
        where = f"of VC {vc}" if vc is not None else "of another VC"
        own.append(f"a job {where}" if n == 1 else f"{n} jobs {where}")
    if len(own) <= 1:
        return "".join(own)
    return ", ".join(own[:-1]) + " and " + own[-1]


def preempted_reason(victim_vc: str, for_job: Job, mode: PreemptionMode) -> str:
    """The reason stored on a victim of ``for_job``: ``preempted for <job_ref>: <why>``."""
    return f"preempted for {job_ref(for_job.name, for_job.vc, victim_vc)}: " + preemption_phrase(
        mode, for_job
    )


def shrunk_reason(keys: Sequence[str], shrunk_vc: str, for_job: Job) -> str:
    """The event of an elastic resize on the shrunk job (of VC ``shrunk_vc``): which of its
    replicas (task keys ``<role>-<index>``) stopped and for whom, the latter named as
    :func:`job_ref` names it for that VC (never another tenant's job name)."""
    return (
        f"resized: replica(s) {', '.join(keys)} stopped to start "
        f"{job_ref(for_job.name, for_job.vc, shrunk_vc)} "
        "(elastic; not a preemption, nothing charged)"
    )
