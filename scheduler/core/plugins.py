"""Placement plugins: filters (may a task go on this node?) and scorers (how good is it?).

Each plugin is a small named function in an explicit registry (:data:`FILTERS`,
:data:`SCORERS`); a :class:`~scheduler.core.policy.Policy` names the ones it uses, in order,
with weights (Nomad's feasibility checkers and rankers; Volcano's predicate / nodeorder
plugins). Free and requested resources are passed as ``(cpu_m, memory, gpu)`` tuples of
ints (millicores, bytes, devices) so the hot path builds no objects.

Filters are *static* when they depend only on a node's state, labels and GPU model: the
node index evaluates them once per class of identical nodes instead of once per node.
``resource-fit`` is the one dynamic filter; the index's bucket search is its implementation
(candidates are only drawn from buckets whose free capacity holds the request), so every
policy must list it.

Scorers return a number in [0, 1]; a node's score is the weighted sum over the policy's
scorers. The ``direction`` of a scorer tells the index from which end of its free-capacity
order to draw candidates ("ascending" = tightest first, "descending" = emptiest first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from scheduler.core.model import Node, NodeState, TaskRole
from scheduler.core.resources import Triple


@dataclass(frozen=True, slots=True)
class Filter:
    """A named feasibility check.

    Attributes:
        name: registry key.
        static: True when ``check`` ignores free capacity (evaluated once per node class).
        check: ``check(node, free, role) -> bool``; free is (cpu_m, memory, gpu).
        reason: short phrase for a person when the filter rejects every node, formatted
            with ``role`` (e.g. "no node matches selector {sel}").
    """

    name: str
    static: bool
    check: Callable[[Node, Triple, TaskRole], bool]
    reason: str


def _schedulable(node: Node, free: Triple, role: TaskRole) -> bool:
    return node.state is NodeState.READY


def _gpu_model(node: Node, free: Triple, role: TaskRole) -> bool:
    return role.gpu_model is None or node.gpu_model == role.gpu_model


def _node_selector(node: Node, free: Triple, role: TaskRole) -> bool:
    labels = node.labels
    return all(labels.get(k) == v for k, v in role.node_selector.items())


def _resource_fit(node: Node, free: Triple, role: TaskRole) -> bool:
    r = role.resources
    return r.gpu <= free[2] and r.cpu_m <= free[0] and r.memory <= free[1]


FILTERS: Mapping[str, Filter] = MappingProxyType(
    {
        "schedulable": Filter(
            "schedulable", True, _schedulable, "every node that could hold it is not ready"
        ),
        "gpu-model": Filter("gpu-model", True, _gpu_model, "no node has GPU model {model}"),
        "node-selector": Filter(
            "node-selector", True, _node_selector, "no node matches selector {selector}"
        ),
        "resource-fit": Filter(
            "resource-fit", False, _resource_fit, "no node has the requested resources free"
        ),
    }
)


@dataclass(frozen=True, slots=True)
class Scorer:
    """A named node ranking.

    Attributes:
        name: registry key.
        score: ``score(capacity, free, request, tasks_of_gang_on_node) -> float`` in [0, 1];
            ``free`` is before placing the task.
        direction: "ascending" / "descending" candidate order it prefers, or None.
    """

    name: str
    score: Callable[[Triple, Triple, Triple, int], float]
    direction: str | None


def _utilisation_after(cap: Triple, free: Triple, req: Triple) -> float:
    """Used fraction of the node after placing the task, in the task's main resource (GPUs
    for GPU tasks, cpu otherwise) weighted 0.8, the other requested resources 0.2 as a
    tie-breaker. CPU-only tasks count a node's idle GPUs as waste (score halved), which
    keeps GPU nodes for GPU work."""
    main = 2 if req[2] > 0 else 0
    primary = 1.0 - (free[main] - req[main]) / cap[main] if cap[main] > 0 else 0.0
    total = 0.0
    n = 0
    for k in (0, 1):
        if k != main and req[k] > 0 and cap[k] > 0:
            total += 1.0 - (free[k] - req[k]) / cap[k]
            n += 1
    score = 0.8 * primary + (0.2 * total / n if n else 0.2 * primary)
    if main == 0 and free[2] > 0:
        score *= 0.5
    return score


def _best_fit(cap: Triple, free: Triple, req: Triple, on_node: int) -> float:
    """Bin-packing best fit: fullest node after placement scores highest, which keeps
    whole nodes free for wide tasks (less GPU fragmentation)."""
    return _utilisation_after(cap, free, req)


def _spread(cap: Triple, free: Triple, req: Triple, on_node: int) -> float:
    """Spread (worst fit): emptiest node after placement scores highest."""
    return 1.0 - _utilisation_after(cap, free, req)


def _gang_locality(cap: Triple, free: Triple, req: Triple, on_node: int) -> float:
    """Gang locality: 1 on a node already holding a task of the same job, else 0, so a
    job's tasks land on as few nodes as possible (fewer cross-node collectives)."""
    return 1.0 if on_node > 0 else 0.0


SCORERS: Mapping[str, Scorer] = MappingProxyType(
    {
        "best-fit": Scorer("best-fit", _best_fit, "ascending"),
        "spread": Scorer("spread", _spread, "descending"),
        "gang-locality": Scorer("gang-locality", _gang_locality, None),
    }
)


def check_plugin_names(filters: Iterable[str], scorers: Iterable[tuple[str, float]]) -> None:
    """Check a policy's filter and scorer names against :data:`FILTERS` and :data:`SCORERS`.

    Args:
        filters: ``Policy.filters``; scorers: ``Policy.scorers`` ((name, weight) pairs).

    Raises:
        ValueError: naming ``Policy.filters`` or ``Policy.scorers``, the known names and the
            unknown one given.
    """
    for f in filters:
        if f not in FILTERS:
            raise ValueError(f"Policy.filters: expected names from {sorted(FILTERS)}, got {f!r}")
    for n, _ in scorers:
        if n not in SCORERS:
            raise ValueError(f"Policy.scorers: expected names from {sorted(SCORERS)}, got {n!r}")
