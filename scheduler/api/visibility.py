"""What ``/metrics`` shows one caller: no other tenant's job names (issue 25's rule for
every answer, applied to the metrics registry).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

JOB_LABEL = "job_name"
"""The label naming a pasture job. Not ``job``: Prometheus sets ``job`` to the scrape
job's name on every series and would rename ours to ``exported_job``."""
HIDDEN_JOB_FAMILIES = ("pasture_gpu_",)
"""Families whose series stay for every caller with the job and task blanked when the
caller may not see the job's VC (the per-GPU series: the GPU's figures are the node's);
other job-labelled series (``pasture_task_*``) are left out for such a caller."""


class VisibleMetrics:
    """The registry's families as one caller may see them: a series labelled with a job
    (``job_name``) of a VC the caller may not use has ``job_name`` and ``task`` blanked
    (per-GPU series) or is left out (per-task series), so /metrics names no other
    tenant's job, as the job API does not (an admin token sees everything).

    Args:
        registry: the app's registry. may_see: ``vc -> bool`` (``TokenInfo.may_use_vc``).
    """

    def __init__(self, registry: CollectorRegistry, may_see: Callable[[str], bool]) -> None:
        self.registry = registry
        self.may_see = may_see

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if not any(s.labels.get(JOB_LABEL) for s in family.samples):
                yield family
                continue
            blank = family.name.startswith(HIDDEN_JOB_FAMILIES)
            kept = []
            for s in family.samples:
                if not s.labels.get(JOB_LABEL) or self.may_see(s.labels.get("vc", "")):
                    kept.append(s)
                elif blank:
                    kept.append(s._replace(labels={**s.labels, JOB_LABEL: "", "task": ""}))
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = kept
            yield out
