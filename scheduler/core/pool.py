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
from scheduler.core.model import RunningJob, TaskPlacement, per_node
from scheduler.core.resources import ZERO3, Triple, iadd, isub, sub, take


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
                iadd(self.free.setdefault(i, [0, 0, 0]), v)
                self.jobs.setdefault(i, []).append(rj.job.name)
        # {job: (taken from the index, taken from the pool)}, both {node id: (c, m, g)}
        self.nominated: dict[str, tuple[dict[int, Triple], dict[int, Triple]]] = {}

    def live(self) -> list[tuple[int, list[int]]]:
        """(node id, [c, m, g]) entries of the pool with something left."""
        return [(i, v) for i, v in self.free.items() if any(v)]

    def release_live(self) -> int | None:
        """What-if: release what is left of the pool on the index, as if the releasing
        jobs were gone. Returns the index mark to roll back to, or None when the pool is
        empty (nothing changed)."""
        live = self.live()
        if not live:
            return None
        index = self.index
        mark = index.mark()
        for i, v in live:
            index.release(i, v[0], v[1], v[2])
        return mark

    def claim(
        self, need: Mapping[int, Sequence[int]], released: Mapping[int, Sequence[int]] | None = None
    ) -> list[str]:
        """Take ``need`` ({node id: [c, m, g]}) from the pool first, then from free capacity
        on the index (less what ``released`` victims will free there). Returns the names of
        releasing jobs whose capacity was promised (for reasons)."""
        index = self.index
        waits: list[str] = []
        for i, v in need.items():
            rel = released.get(i, ZERO3) if released else ZERO3
            q = ZERO3
            p = self.free.get(i)
            if p is not None:
                q = take(v, p)
                isub(p, q)
                if any(q):
                    waits.extend(n for n in self.jobs[i] if n not in waits)
            t = take(sub(sub(v, q), rel), index.free_of(i))
            if any(t):
                index.allocate(i, *t)
        return waits

    def hold_nominations(
        self, nominations: Mapping[str, tuple[TaskPlacement, ...]], pending: set[str]
    ) -> None:
        """Hold what the previous cycle nominated for each still-pending job: the free part
        on the index, the rest from the pool (so neither a job ahead of it nor another
        waiting job takes it)."""
        index = self.index
        for name in sorted(nominations):
            if name not in pending:
                continue
            taken: dict[int, Triple] = {}
            pooled: dict[int, Triple] = {}
            for i, v in per_node(nominations[name], index.id_of).items():
                t = take(v, index.free_of(i))
                if any(t):
                    index.allocate(i, *t)
                    taken[i] = t
                pool = self.free.get(i)
                if pool is not None:
                    q = take(sub(v, t), pool)
                    if any(q):
                        isub(pool, q)
                        pooled[i] = q
            self.nominated[name] = (taken, pooled)

    def lift(self, name: str) -> bool:
        """Give job ``name`` back what was held for it (just before it is considered).
        Returns whether anything was given back (free capacity grew)."""
        taken, pooled = self.nominated.pop(name)
        for i, t in taken.items():
            self.index.release(i, *t)
        for i, q in pooled.items():
            iadd(self.free[i], q)
        return bool(taken or pooled)
