"""Indexed free capacity of the cluster, with a journal for transactional placement.

Why an index: a scan of every node for every task costs O(nodes) per placement; at 5,000
nodes and 20,000 tasks that is 10^8 checks per cycle. Instead nodes are grouped twice:

    NodeIndex
      classes: nodes with identical static attributes (state, gpu model, the label values
               that some pending job's node selector asks about). Static filters run once
               per class, not once per node.
        by free GPU count  (sorted list of distinct values + dict)      gpu_keys, by_gpu
          by free cpu (m)  (sorted list of distinct values + dict)      cpu_keys, by_cpu
            nodes          (insertion-ordered dict: deterministic)

Best-fit asks "the smallest free GPU count >= g, then the smallest free cpu >= c": two
bisections, then the first node whose memory also fits. Spread walks the same structure
from the other end. Moving a node between buckets after an allocation is O(log k) with k
distinct free values (k <= GPUs per node + 1 in the first level).

Transactions follow Volcano's ``Statement``: every change is journaled; ``mark()`` returns
a position and ``rollback(mark)`` undoes everything after it, so a gang that does not fit
whole leaves no trace. Rolling back re-inserts nodes at the end of their bucket, which
keeps decisions deterministic (the journal depends only on the input).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Hashable, Sequence

from scheduler.core.model import Node, NodeState
from scheduler.core.resources import Triple


class _GpuBucket:
    """Nodes of one class with the same free GPU count, by free cpu."""

    __slots__ = ("by_cpu", "cpu_keys")

    def __init__(self) -> None:
        self.cpu_keys: list[int] = []
        self.by_cpu: dict[int, dict[int, None]] = {}


class NodeClass:
    """Nodes sharing every static attribute a filter can look at.

    Attributes:
        cid: class id (index into ``NodeIndex.classes``).
        rep: one member node, on which static filters are evaluated for the whole class.
        members: node ids, in snapshot order.
        capacities: distinct capacities (cpu_m, memory, gpu) of the members with one
            member node id each (for "could it ever fit" reasons).
    """

    __slots__ = ("by_gpu", "capacities", "cid", "gpu_keys", "members", "rep")

    def __init__(self, cid: int, rep: Node) -> None:
        self.cid = cid
        self.rep = rep
        self.members: list[int] = []
        self.capacities: dict[Triple, int] = {}
        self.gpu_keys: list[int] = []
        self.by_gpu: dict[int, _GpuBucket] = {}


def _remove_sorted(keys: list[int], value: int) -> None:
    del keys[bisect_left(keys, value)]


class NodeIndex:
    """Free capacity of every node, indexed for best-fit / spread candidate search.

    Args:
        nodes: the snapshot's nodes (any state); node ids are positions in this sequence.
        class_key: maps a node to the hashable key of its static class.

    Raises:
        ValueError: two nodes share a name.

    Free capacity is ``capacity - allocated`` per component and may be negative for an
    over-committed node (it then never matches a request).
    """

    __slots__ = (
        "cap_cpu",
        "cap_gpu",
        "cap_mem",
        "class_of",
        "classes",
        "free_cpu",
        "free_gpu",
        "free_mem",
        "id_of",
        "journal",
        "names",
        "nodes",
        "ready",
        "ready_free",
    )

    def __init__(self, nodes: Sequence[Node], class_key: Callable[[Node], Hashable]) -> None:
        self.nodes = nodes
        self.names = [n.name for n in nodes]
        self.id_of = {name: i for i, name in enumerate(self.names)}
        if len(self.id_of) != len(self.names):
            seen: set[str] = set()
            dup = next(n for n in self.names if n in seen or seen.add(n))  # type: ignore[func-returns-value]
            raise ValueError(f"Snapshot.nodes: node name {dup!r} appears more than once")
        # One pass over the nodes: this is the fixed cost of every cycle. Capacity is kept
        # as per-component lists of plain ints and unpacked to locals here, deliberately
        # not through resources.py (a call per node would cost more than the work).
        cap_cpu: list[int] = []
        cap_mem: list[int] = []
        cap_gpu: list[int] = []
        free_cpu: list[int] = []
        free_mem: list[int] = []
        free_gpu: list[int] = []
        ready_list: list[bool] = []
        class_of: list[int] = []
        rf0 = rf1 = rf2 = 0
        by_key: dict[Hashable, NodeClass] = {}
        classes: list[NodeClass] = []
        ready_state = NodeState.READY
        for i, n in enumerate(nodes):
            cap = n.capacity
            alloc = n.allocated
            cc, cm, cg = cap.cpu_m, cap.memory, cap.gpu
            fc, fm, fg = cc - alloc.cpu_m, cm - alloc.memory, cg - alloc.gpu
            cap_cpu.append(cc)
            cap_mem.append(cm)
            cap_gpu.append(cg)
            free_cpu.append(fc)
            free_mem.append(fm)
            free_gpu.append(fg)
            r = n.state is ready_state
            ready_list.append(r)
            if r:
                rf0 += fc if fc > 0 else 0
                rf1 += fm if fm > 0 else 0
                rf2 += fg if fg > 0 else 0
            key = class_key(n)
            cls = by_key.get(key)
            if cls is None:
                cls = NodeClass(len(classes), n)
                by_key[key] = cls
                classes.append(cls)
            class_of.append(cls.cid)
            cls.members.append(i)
            cls.capacities.setdefault((cc, cm, cg), i)
            b = cls.by_gpu.get(fg)
            if b is None:
                b = cls.by_gpu[fg] = _GpuBucket()
            d = b.by_cpu.get(fc)
            if d is None:
                d = b.by_cpu[fc] = {}
            d[i] = None
        self.cap_cpu, self.cap_mem, self.cap_gpu = cap_cpu, cap_mem, cap_gpu
        self.free_cpu, self.free_mem, self.free_gpu = free_cpu, free_mem, free_gpu
        self.ready = ready_list
        self.ready_free = [rf0, rf1, rf2]
        self.journal: list[tuple[int, int, int, int]] = []
        self.classes = classes
        for cls in self.classes:
            cls.gpu_keys = sorted(cls.by_gpu)
            for b in cls.by_gpu.values():
                b.cpu_keys = sorted(b.by_cpu)
        self.class_of = class_of

    # -- mutation -------------------------------------------------------------------------
    def _move(self, i: int, dc: int, dm: int, dg: int) -> None:
        """Change node i's free capacity by (dc, dm, dg), keeping the buckets right."""
        if self.ready[i]:
            # aggregate of positive free capacity on ready nodes
            rf = self.ready_free
            fc, fm, fg = self.free_cpu[i], self.free_mem[i], self.free_gpu[i]
            rf[0] += max(fc + dc, 0) - max(fc, 0)
            rf[1] += max(fm + dm, 0) - max(fm, 0)
            rf[2] += max(fg + dg, 0) - max(fg, 0)
        self.free_mem[i] += dm
        if dc == 0 and dg == 0:
            return
        cls = self.classes[self.class_of[i]]
        g0 = self.free_gpu[i]
        c0 = self.free_cpu[i]
        b = cls.by_gpu[g0]
        d = b.by_cpu[c0]
        del d[i]
        if not d:
            del b.by_cpu[c0]
            _remove_sorted(b.cpu_keys, c0)
            if not b.by_cpu:
                del cls.by_gpu[g0]
                _remove_sorted(cls.gpu_keys, g0)
        g1 = g0 + dg
        c1 = c0 + dc
        self.free_gpu[i] = g1
        self.free_cpu[i] = c1
        nb = cls.by_gpu.get(g1)
        if nb is None:
            nb = cls.by_gpu[g1] = _GpuBucket()
            insort(cls.gpu_keys, g1)
        nd = nb.by_cpu.get(c1)
        if nd is None:
            nd = nb.by_cpu[c1] = {}
            insort(nb.cpu_keys, c1)
        nd[i] = None

    def allocate(self, i: int, cpu_m: int, memory: int, gpu: int) -> None:
        """Take (cpu_m, memory, gpu) from node i's free capacity (journaled)."""
        self._move(i, -cpu_m, -memory, -gpu)
        self.journal.append((i, cpu_m, memory, gpu))

    def release(self, i: int, cpu_m: int, memory: int, gpu: int) -> None:
        """Give (cpu_m, memory, gpu) back to node i's free capacity (journaled)."""
        self._move(i, cpu_m, memory, gpu)
        self.journal.append((i, -cpu_m, -memory, -gpu))

    def mark(self) -> int:
        """A journal position for :meth:`rollback` (start of a transaction)."""
        return len(self.journal)

    def rollback(self, mark: int) -> None:
        """Undo every change made after ``mark`` (discard a transaction)."""
        journal = self.journal
        while len(journal) > mark:
            i, c, m, g = journal.pop()
            self._move(i, c, m, g)

    # -- queries --------------------------------------------------------------------------
    def free_of(self, i: int) -> Triple:
        """Node i's free capacity (cpu_m, memory bytes, gpu); negative when over-committed."""
        return (self.free_cpu[i], self.free_mem[i], self.free_gpu[i])

    def fits(self, i: int, cpu_m: int, memory: int, gpu: int) -> bool:
        """True when node i's free capacity holds (cpu_m, memory, gpu)."""
        return self.free_gpu[i] >= gpu and self.free_cpu[i] >= cpu_m and self.free_mem[i] >= memory

    def candidates(
        self,
        class_ids: Sequence[int],
        cpu_m: int,
        memory: int,
        gpu: int,
        limit: int,
        descending: bool,
        skip: Container[int],
    ) -> list[int]:
        """Up to ``limit`` node ids per class whose free capacity holds the request.

        Ascending (best-fit) yields the tightest nodes first: smallest free GPU count >= gpu,
        then smallest free cpu >= cpu_m; descending (spread) the emptiest first. Nodes in
        ``skip`` are passed over. Cost: O(log k) bisections plus the nodes visited, which
        is ``limit`` unless memory is the binding constraint.
        """
        out: list[int] = []
        free_mem = self.free_mem
        for cid in class_ids:
            cls = self.classes[cid]
            gk = cls.gpu_keys
            gstart = bisect_left(gk, gpu)
            if gstart == len(gk):
                continue
            found = 0
            grange = range(len(gk) - 1, gstart - 1, -1) if descending else range(gstart, len(gk))
            for gi in grange:
                b = cls.by_gpu[gk[gi]]
                ck = b.cpu_keys
                cstart = bisect_left(ck, cpu_m)
                crange = (
                    range(len(ck) - 1, cstart - 1, -1) if descending else range(cstart, len(ck))
                )
                for ci in crange:
                    for i in b.by_cpu[ck[ci]]:
                        if free_mem[i] >= memory and i not in skip:
                            out.append(i)
                            found += 1
                            if found >= limit:
                                break
                    if found >= limit:
                        break
                if found >= limit:
                    break
        return out

    def largest_free(self, class_ids: Sequence[int], by_cpu: bool = False) -> int | None:
        """Node id with the largest free GPU count (then cpu) among the classes, or with the
        largest free cpu when ``by_cpu``; None when the classes are empty."""
        best: tuple[int, int] | None = None
        best_i: int | None = None
        for cid in class_ids:
            cls = self.classes[cid]
            if not cls.gpu_keys:
                continue
            if by_cpu:
                for g in cls.gpu_keys:
                    b = cls.by_gpu[g]
                    c = b.cpu_keys[-1]
                    key = (c, g)
                    if best is None or key > best:
                        best, best_i = key, next(iter(b.by_cpu[c]))
            else:
                g = cls.gpu_keys[-1]
                b = cls.by_gpu[g]
                c = b.cpu_keys[-1]
                key = (g, c)
                if best is None or key > best:
                    best, best_i = key, next(iter(b.by_cpu[c]))
        return best_i
