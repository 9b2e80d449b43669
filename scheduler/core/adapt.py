"""The policy in force: an adaptive policy's values derived from the VCs and the
:class:`scheduler.core.history.History` of finished jobs (the rules and their sources are in
:mod:`scheduler.core.history`'s docstring).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from scheduler.core.history import History, quantile
from scheduler.core.model import VirtualCluster
from scheduler.core.policy import Backfill, Policy, PreemptionMode

LAS_QUANTILES = (0.9, 0.99)


def tenants(vcs: Iterable[VirtualCluster]) -> int:
    """How many VCs hold a guaranteed GPU share (the tenants VC guarantees isolate)."""
    return sum(1 for vc in vcs if vc.guarantee.gpu > 0)


def adapt(policy: Policy, history: History | None, vcs: Iterable[VirtualCluster] = ()) -> Policy:
    """The policy in force given the VCs and what has been observed.

    For ``policy.adaptive`` policies:

    * with at least two tenants (``policy.vc_quota`` and :func:`tenants` of ``vcs`` >= 2):
      ``las_thresholds`` at the ``LAS_QUANTILES`` of finished jobs' attained service (those
      estimable; strictly increasing, positive), the policy's static values until then;
    * with one tenant (or none): plain Tiresias 2D-LAS: the policy's static thresholds, no
      ``preemption_min_runtime_s`` floor and, for a ``las`` order with queue-order
      preemption, no backfill (see the module docstring); ``starve_limit`` is kept;

    Other policies are returned unchanged, and so is a policy for which nothing changes.
    """
    if not policy.adaptive:
        return policy
    changes: dict[str, Any] = {}
    shared = policy.vc_quota and tenants(vcs) >= 2
    if not shared and policy.preemption_min_runtime_s:
        changes["preemption_min_runtime_s"] = 0.0
    if (
        not shared
        and policy.queue_order == "las"
        and PreemptionMode.QUEUE_ORDER in policy.preemption
        and policy.backfill is not Backfill.NONE
    ):
        changes["backfill"] = Backfill.NONE
    if history is not None:
        th: list[float] = []
        if shared:
            for q in LAS_QUANTILES:
                v = quantile(history.services_gpu_s, q)
                if v is not None and v > 0 and (not th or v > th[-1]):
                    th.append(v)
        if th:
            changes["las_thresholds"] = tuple(th)
    return replace(policy, **changes) if changes else policy
