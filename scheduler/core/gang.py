"""Transactional gang placement on the node index.

A job lands whole (at least ``min_available`` tasks of every role) or leaves no trace: all
allocations go through the index journal and a failed gang is rolled back (Volcano's
``Statement.Commit()/Discard()``). Per task:

    classes   static filters (schedulable, gpu-model, node-selector) once per node class
    candidates  the gang's own nodes that still fit (locality), plus up to
                CANDIDATES_PER_CLASS nodes drawn from the index in the direction of the
                policy's packing scorer (resource-fit is the bucket search itself)
    dynamic filters  on the candidates only
    scorers   weighted sum per candidate; highest wins, ties go to the earlier candidate
              (gang nodes first, then index order: deterministic)

Roles are placed widest first (GPUs, then cpu, then memory), so that a gang's big tasks
claim whole nodes before small ones fragment them. Replicas beyond ``min_available`` are
placed afterwards, best effort, one at a time while ``extra_ok`` allows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.core.index import NodeIndex
from scheduler.core.model import Job, TaskPlacement, TaskRole
from scheduler.core.plugins import FILTERS, SCORERS
from scheduler.core.policy import Policy
from scheduler.core.resources import Triple

CANDIDATES_PER_CLASS = 3
"""How many feasible nodes per node class the index yields per task for scoring. The index
already orders them by the packing scorer's preference, so a few suffice for the others
(locality, custom weights) to matter."""


@dataclass(slots=True)
class GangPlacement:
    """A gang placed on the index (allocations journaled, not yet rolled back).

    Attributes:
        tasks: (role, node id) per placed task, in placement order.
        scores: ``{node name: {stage: score}}`` at the first task placed on each node.
        alloc: total (cpu_m, memory, gpu) placed.
    """

    tasks: list[tuple[TaskRole, int]] = field(default_factory=list)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    alloc: list[int] = field(default_factory=lambda: [0, 0, 0])

    def placements(self, job: Job, names: list[str]) -> tuple[TaskPlacement, ...]:
        """TaskPlacements in role declaration order, replica indexes from 0."""
        by_role: dict[str, list[int]] = {}
        for role, i in self.tasks:
            by_role.setdefault(role.name, []).append(i)
        out = []
        for role in job.roles:
            for k, i in enumerate(by_role.get(role.name, ())):
                out.append(TaskPlacement(role.name, k, names[i], role.resources))
        return tuple(out)

    def per_node(self) -> dict[int, list[int]]:
        """{node id: [cpu_m, memory, gpu]} held by this gang."""
        out: dict[int, list[int]] = {}
        for role, i in self.tasks:
            r = role.resources
            v = out.setdefault(i, [0, 0, 0])
            v[0] += r.cpu_m
            v[1] += r.memory
            v[2] += r.gpu
        return out


@dataclass(frozen=True, slots=True)
class GangFailure:
    """Why a gang did not fit: ``fit`` of ``needed`` tasks of ``role`` could be placed
    (after the roles placed before it)."""

    role: TaskRole
    needed: int
    fit: int


def _widest_first(role: TaskRole) -> Triple:
    r = role.resources
    return (-r.gpu, -r.cpu_m, -r.memory)


def gang_request(job: Job) -> Triple:
    """(cpu millicores, memory bytes, GPUs) of ``job``'s gang: every role's
    min_available tasks."""
    # Called several times per pending job per cycle: a plain loop, not resources.py calls.
    c = m = g = 0
    for role in job.roles:
        r, n = role.resources, role.gang_min
        c += r.cpu_m * n
        m += r.memory * n
        g += r.gpu * n
    return (c, m, g)


class Placer:
    """Places gangs on a :class:`NodeIndex` following a policy's filters and scorers.

    Raises:
        ValueError: (construction) a plugin name the registries do not know.
    """

    __slots__ = (
        "_class_cache",
        "descending",
        "dynamic_filters",
        "index",
        "scorers",
        "static_filters",
    )

    def __init__(self, index: NodeIndex, policy: Policy) -> None:
        self.index = index
        try:
            filters = [FILTERS[n] for n in policy.filters]
            self.scorers = [(n, SCORERS[n].score, w) for n, w in policy.scorers]
        except KeyError as exc:
            raise ValueError(f"Policy {policy.name!r}: unknown plugin {exc.args[0]!r}") from None
        self.static_filters = [f for f in filters if f.static]
        self.dynamic_filters = [f for f in filters if not f.static and f.name != "resource-fit"]
        # The packing direction comes from the heaviest scorer that has one (best-fit by
        # default): the index then yields candidates in that scorer's preferred order.
        direction = "ascending"
        best_w = 0.0
        for n, w in policy.scorers:
            d = SCORERS[n].direction
            if d is not None and abs(w) > best_w:
                best_w = abs(w)
                direction = d if w > 0 else ("descending" if d == "ascending" else "ascending")
        self.descending = direction == "descending"
        self._class_cache: dict[tuple[object, ...], list[int]] = {}

    def classes_for(self, role: TaskRole, ignore_state: bool = False) -> list[int]:
        """Ids of node classes that pass every static filter for ``role``."""
        key = (role.gpu_model, tuple(sorted(role.node_selector.items())), ignore_state)
        cached = self._class_cache.get(key)
        if cached is None:
            free = (0, 0, 0)
            filters = [
                f for f in self.static_filters if not (ignore_state and f.name == "schedulable")
            ]
            cached = [
                c.cid
                for c in self.index.classes
                if all(f.check(c.rep, free, role) for f in filters)
            ]
            self._class_cache[key] = cached
        return cached

    def place_gang(
        self, job: Job, extra_ok: Callable[[Triple], bool] | None = None
    ) -> GangPlacement | GangFailure:
        """Place ``job``'s gang; on failure roll back and return a :class:`GangFailure`.

        On success the allocations stay in the index journal (the caller may roll them back
        to its own mark for a what-if). ``extra_ok(request)`` decides whether one more
        replica beyond ``min_available`` may be placed; None places no extras.
        """
        index = self.index
        mark = index.mark()
        roles = sorted(job.roles, key=_widest_first)
        gp = GangPlacement()
        on_node: dict[int, int] = {}
        for role in roles:
            n = self._place_tasks(role, role.gang_min, on_node, gp)
            if n < role.gang_min:
                index.rollback(mark)
                return GangFailure(role, role.gang_min, n)
        if extra_ok is not None:
            for role in roles:
                extra = role.replicas - role.gang_min
                req = role.resources.triple()
                while extra > 0 and extra_ok(req):
                    if self._place_tasks(role, 1, on_node, gp) < 1:
                        break
                    extra -= 1
        return gp

    def place_extra(
        self,
        role: TaskRole,
        count: int,
        near: dict[int, int],
        ok: Callable[[Triple], bool],
    ) -> GangPlacement:
        """Place up to ``count`` more tasks of ``role`` one at a time while ``ok(request)``
        admits each (no rollback: what is placed stays journaled). ``near`` is
        ``{node id: tasks of the job already there}`` (locality). Used for the replicas of
        a running job placed at ``min_available`` that did not fit then."""
        gp = GangPlacement()
        on_node = dict(near)
        req = role.resources.triple()
        for _ in range(count):
            if not ok(req) or self._place_tasks(role, 1, on_node, gp) < 1:
                break
        return gp

    def _place_tasks(
        self, role: TaskRole, count: int, on_node: dict[int, int], gp: GangPlacement
    ) -> int:
        index = self.index
        req = role.resources.triple()
        # The loop below is the hot path: it reads the index's per-node arrays and keeps
        # the request as local ints (c, m, g) rather than calling resources.py per node.
        c, m, g = req
        class_ids = self.classes_for(role)
        if not class_ids or count <= 0:
            return 0
        cls_set = set(class_ids) if len(class_ids) > 1 else None
        class_of = index.class_of
        only = class_ids[0]
        open_nodes = [
            i
            for i in on_node
            if (class_of[i] == only if cls_set is None else class_of[i] in cls_set)
            and index.fits(i, c, m, g)
        ]
        scorers = self.scorers
        dyn = self.dynamic_filters
        nodes = index.nodes
        free_cpu, free_mem, free_gpu = index.free_cpu, index.free_mem, index.free_gpu
        cap_cpu, cap_mem, cap_gpu = index.cap_cpu, index.cap_mem, index.cap_gpu
        names = index.names
        placed = 0
        for _ in range(count):
            cands = open_nodes[:CANDIDATES_PER_CLASS]
            cands += index.candidates(
                class_ids, c, m, g, CANDIDATES_PER_CLASS, self.descending, on_node
            )
            best = -1
            best_score = 0.0
            best_parts = None
            for i in cands:
                free = (free_cpu[i], free_mem[i], free_gpu[i])
                if dyn and not all(f.check(nodes[i], free, role) for f in dyn):
                    continue
                cap = (cap_cpu[i], cap_mem[i], cap_gpu[i])
                k = on_node.get(i, 0)
                parts = [(name, fn(cap, free, req, k)) for name, fn, _w in scorers]
                weighted = 0.0
                for (_, s), (_, _, w) in zip(parts, scorers, strict=True):
                    weighted += w * s
                if best < 0 or weighted > best_score:
                    best, best_score, best_parts = i, weighted, parts
            if best < 0:
                break
            index.allocate(best, c, m, g)
            placed += 1
            gp.tasks.append((role, best))
            a = gp.alloc
            a[0] += c
            a[1] += m
            a[2] += g
            name = names[best]
            if name not in gp.scores:
                gp.scores[name] = dict(best_parts)  # type: ignore[arg-type]
            was_open = best in on_node
            on_node[best] = on_node.get(best, 0) + 1
            still_fits = index.fits(best, c, m, g)
            if was_open:
                if not still_fits:
                    open_nodes.remove(best)
            elif still_fits:
                open_nodes.append(best)
        return placed


def gang_key(job: Job) -> tuple[object, ...]:
    """What placement and its reasons depend on: each role's name, per-task request,
    gang minimum and static constraints (not the job's name, VC or priority)."""
    return tuple(
        (
            r.name,
            r.resources.cpu_m,
            r.resources.memory,
            r.resources.gpu,
            r.gang_min,
            r.gpu_model,
            tuple(sorted(r.node_selector.items())) if r.node_selector else (),
        )
        for r in job.roles
    )
