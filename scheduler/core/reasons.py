"""Pending reasons worded for people ("why is my job waiting?").

OpenPAI's most requested feature; every pending job not bound in a cycle gets exactly one
:class:`~scheduler.core.model.PendingReason` with a :class:`ReasonKind`, one sentence, and
structured details for the API. This module only formats: the scheduler decides the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    """Why ``job`` preempts, in words (Preemption.reason and the PREEMPTING reason)."""
    if mode is PreemptionMode.VC_RECLAIM:
        return f"reclaiming vc {job.vc}'s guarantee from borrowers"
    if mode is PreemptionMode.PRIORITY:
        return f"priority {job.priority} job {job.name} preempts lower priority"
    return f"queue order ranks {job.name} ahead"
