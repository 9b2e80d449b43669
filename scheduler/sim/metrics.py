"""Per-policy metrics of a replay (what the table, the JSON and the plot show)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler.sim.engine import SimResult


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    """Summary of one replay. Times in seconds.

    Attributes:
        jct_mean_s, jct_p50_s, jct_p99_s: job completion time (completion - submit).
        queue_mean_s: mean time pending (JCT minus time holding an allocation).
        makespan_s: last completion - first submit.
        gpu_alloc_frac: time-averaged allocated GPUs / cluster GPUs over the makespan.
        preemptions: total preemptions.
        gpu_hours_lost: GPU-hours lost to preemptions (restart cost + lost checkpoint work).
        decision_ms_mean, decision_ms_p99: wall time of one core call, milliseconds.
        cycles: core calls.
        queue_by_vc_s: mean time pending per VC.
        alloc_at_first_wait: allocated GPU fraction when an arriving job first had to wait
            (how full the cluster got before it refused work; cf. FGD, ATC'23).
        peak_alloc: largest allocated GPU fraction reached.
        jcts: every JCT, for CDFs.
    """

    jct_mean_s: float
    jct_p50_s: float
    jct_p99_s: float
    queue_mean_s: float
    makespan_s: float
    gpu_alloc_frac: float
    preemptions: int
    gpu_hours_lost: float
    decision_ms_mean: float
    decision_ms_p99: float
    cycles: int
    queue_by_vc_s: dict[str, float] = field(default_factory=dict)
    alloc_at_first_wait: float | None = None
    peak_alloc: float = 0.0
    jcts: tuple[float, ...] = ()

    def to_json(self) -> dict[str, float | int]:
        """The issue's JSON shape for one policy."""
        return {
            "jct_mean_s": self.jct_mean_s,
            "jct_p50_s": self.jct_p50_s,
            "jct_p99_s": self.jct_p99_s,
            "queue_mean_s": self.queue_mean_s,
            "makespan_s": self.makespan_s,
            "gpu_alloc_frac": self.gpu_alloc_frac,
            "preemptions": self.preemptions,
            "decision_ms_mean": self.decision_ms_mean,
        }


def summarise(result: SimResult) -> PolicyMetrics:
    """Metrics of a finished replay (every job must have completed)."""
    recs = result.records
    jct = np.array([r.jct for r in recs])
    queue = np.array([r.queue_s for r in recs])
    by_vc: dict[str, list[float]] = {}
    for r in recs:
        by_vc.setdefault(r.trace.vc, []).append(r.queue_s)
    makespan = result.end - result.start
    dec = np.array(result.decision_s) * 1000.0 if result.decision_s else np.zeros(1)
    return PolicyMetrics(
        jct_mean_s=float(jct.mean()),
        jct_p50_s=float(np.percentile(jct, 50)),
        jct_p99_s=float(np.percentile(jct, 99)),
        queue_mean_s=float(queue.mean()),
        makespan_s=makespan,
        gpu_alloc_frac=result.gpu_busy_s / (result.gpus * makespan) if makespan > 0 else 0.0,
        preemptions=sum(r.preemptions for r in recs),
        gpu_hours_lost=sum(r.lost_gpu_s for r in recs) / 3600.0,
        decision_ms_mean=float(dec.mean()),
        decision_ms_p99=float(np.percentile(dec, 99)),
        cycles=len(result.decision_s),
        queue_by_vc_s={vc: float(np.mean(v)) for vc, v in sorted(by_vc.items())},
        alloc_at_first_wait=result.alloc_at_first_wait,
        peak_alloc=result.peak_alloc,
        jcts=tuple(float(x) for x in jct),
    )
