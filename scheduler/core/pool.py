"""Capacity coming free during a cycle: the releasing pool and nominated holds.

* **Releasing pool**: what jobs already preempted or stopping (``RunningJob.releasing``)
  still hold and nobody has been promised yet, ``{node id: [cpu_m, memory, gpu]}``. A job
  that fits in it waits for it instead of preempting more; each releasing unit is promised
  to one waiter only.
* **Nominations** (Kubernetes' nominated node): what the previous cycle's preemptions freed
  or are freeing for a job, held for it until the cycle reaches it, so that a job ahead in
  queue order cannot take it and make it preempt again.

Split out of :mod:`scheduler.core.scheduler` (issue 14 item 5). Pure: it only moves
capacity on the cycle's :class:`~scheduler.core.index.NodeIndex`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scheduler.core.index import NodeIndex
from scheduler.core.model import RunningJob, TaskPlacement
from scheduler.core.preemption import per_node
from scheduler.core.triple import add_into, clip, minus_floor, sub_into


class ReleasingPool:
    """The pool and the nominated holds of one cycle.

    Args:
        index: the cycle's node index (holds are allocated on it).
        releasing: running jobs marked releasing.
        nodes_of: {node id: [c, m, g]} a running job holds.
    """

    def __init__(
        self,
        index: NodeIndex,
        releasing: Sequence[RunningJob],
        nodes_of: Callable[[RunningJob], dict[int, list[int]]],
    ) -> None:
        self.index = index
        self.free: dict[int, list[int]] = {}
        self.jobs: dict[int, list[str]] = {}
        for rj in releasing:
            for i, v in nodes_of(rj).items():
                acc = self.free.setdefault(i, [0, 0, 0])
                add_into(acc, v)
                self.jobs.setdefault(i, []).append(rj.job.name)
        # {job: (taken from the index, taken from the pool)}, both {node id: (c, m, g)}
        self.nominated: dict[str, tuple[dict[int, tuple], dict[int, tuple]]] = {}

    def live(self) -> list[tuple[int, list[int]]]:
        """(node id, [c, m, g]) entries of the pool with something left."""
        return [(i, v) for i, v in self.free.items() if any(v)]

    def claim(
        self, need: Mapping[int, Sequence[int]], released: Mapping | None = None
    ) -> list[str]:
        """Take ``need`` ({node id: [c, m, g]}) from the pool first, then from free capacity
        on the index (less what ``released`` victims will free there). Returns the names of
        releasing jobs whose capacity was promised (for reasons)."""
        index = self.index
        frees = (index.free_cpu, index.free_mem, index.free_gpu)
        waits: list[str] = []
        for i, v in need.items():
            rel = released.get(i, (0, 0, 0)) if released else (0, 0, 0)
            q = (0, 0, 0)
            p = self.free.get(i)
            if p is not None:
                q = clip(v, p)
                sub_into(p, q)
                if any(q):
                    waits.extend(n for n in self.jobs[i] if n not in waits)
            take = clip(
                minus_floor(minus_floor(v, q), rel), (frees[0][i], frees[1][i], frees[2][i])
            )
            if any(take):
                index.allocate(i, *take)
        return waits

    def hold_nominations(
        self, nominations: Mapping[str, tuple[TaskPlacement, ...]], pending: set[str]
    ) -> None:
        """Hold what the previous cycle nominated for each still-pending job: the free part
        on the index, the rest from the pool (so neither a job ahead of it nor another
        waiting job takes it)."""
        index = self.index
        frees = (index.free_cpu, index.free_mem, index.free_gpu)
        for name in sorted(nominations):
            if name not in pending:
                continue
            taken: dict[int, tuple] = {}
            pooled: dict[int, tuple] = {}
            for i, v in per_node(nominations[name], index.id_of).items():
                t = clip(v, (frees[0][i], frees[1][i], frees[2][i]))
                if any(t):
                    index.allocate(i, *t)
                    taken[i] = t
                pool = self.free.get(i)
                if pool is not None:
                    q = clip(minus_floor(v, t), pool)
                    if any(q):
                        sub_into(pool, q)
                        pooled[i] = q
            self.nominated[name] = (taken, pooled)

    def lift(self, name: str) -> bool:
        """Give job ``name`` back what was held for it (just before it is considered).
        Returns whether anything was given back (free capacity grew)."""
        taken, pooled = self.nominated.pop(name)
        for i, t in taken.items():
            self.index.release(i, *t)
        for i, q in pooled.items():
            pool = self.free[i]
            add_into(pool, q)
        return bool(taken or pooled)
