"""Lower bounds for rigid gang jobs on G GPUs (valid for any schedule).

From ../shared/traces/README.md:
    makespan >= max( max_i(r_i + p_i),  max_t [ t + sum_{r_i >= t} g_i p_i / G ] )
    sum of JCTs >= sum of flow times of preemptive SRPT on ONE machine of speed G processing
        work g_i p_i (SRPT is optimal for total flow time on one preemptive machine,
        Schrage 1968, and a speed-G machine can imitate any schedule on G GPUs).
Also, trivially, every JCT_i >= p_i, so sum of JCTs >= sum p_i. The mean-JCT bound reported
is the larger of the two means (both are valid, so their maximum is).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from scheduler.sim.trace import TraceJob


def makespan_lower_bound(jobs: Sequence[TraceJob], gpus: int) -> float:
    """Seconds from the first submit to the last completion, at least (README bound).

    Raises:
        ValueError: no jobs or gpus < 1.
    """
    if not jobs or gpus < 1:
        raise ValueError(f"need jobs and gpus >= 1, got {len(jobs)} jobs, {gpus} GPUs")
    t0 = min(j.submit_s for j in jobs)
    end = max(j.submit_s + j.duration_s for j in jobs)
    tail = 0.0
    for j in sorted(jobs, key=lambda j: j.submit_s, reverse=True):
        tail += j.gpus * j.duration_s
        end = max(end, j.submit_s + tail / gpus)
    return end - t0


def srpt_mean_flow(jobs: Sequence[TraceJob], gpus: int) -> float:
    """Mean flow time (completion - submit) of preemptive SRPT on one machine of speed G.

    Raises:
        ValueError: no jobs or gpus < 1.
    """
    if not jobs or gpus < 1:
        raise ValueError(f"need jobs and gpus >= 1, got {len(jobs)} jobs, {gpus} GPUs")
    order = sorted(jobs, key=lambda j: j.submit_s)
    heap: list[tuple[float, int]] = []  # (remaining work in GPU-seconds, index)
    now = order[0].submit_s
    total_flow = 0.0
    i = 0
    n = len(order)
    while i < n or heap:
        if not heap:
            now = max(now, order[i].submit_s)
        while i < n and order[i].submit_s <= now:
            heapq.heappush(heap, (order[i].gpus * order[i].duration_s, i))
            i += 1
        work, k = heapq.heappop(heap)
        next_r = order[i].submit_s if i < n else float("inf")
        finish = now + work / gpus
        if finish <= next_r:
            now = finish
            total_flow += now - order[k].submit_s
        else:
            heapq.heappush(heap, (work - (next_r - now) * gpus, k))
            now = next_r
    return total_flow / n


def jct_mean_lower_bound(jobs: Sequence[TraceJob], gpus: int) -> float:
    """max(SRPT mean flow on one speed-G machine, mean duration), seconds."""
    mean_p = sum(j.duration_s for j in jobs) / len(jobs)
    return max(srpt_mean_flow(jobs, gpus), mean_p)
