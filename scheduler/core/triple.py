"""One home for the resource triple the core computes with: (CPU millicores, memory bytes,
GPUs), in that order, as plain ints.

:class:`scheduler.core.model.Resources` is the typed value jobs and nodes carry; inside a
cycle the core works on triples (immutable :data:`Triple`, or a mutable :data:`Vec` it
accumulates into) because the placement loop runs per task and per node, where attribute
access and object creation cost measurably (``python -m scheduler.bench placement``). The
helpers below are written out per dimension, not as ``range(3)`` loops, for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scheduler.core.model import Resources

Triple = tuple[int, int, int]
Vec = list[int]


def of(r: Resources) -> Triple:
    """``r`` as a (cpu millicores, memory bytes, GPUs) triple."""
    return (r.cpu_m, r.memory, r.gpu)


def add_into(acc: Vec, v: Sequence[int]) -> None:
    """acc += v, per dimension."""
    acc[0] += v[0]
    acc[1] += v[1]
    acc[2] += v[2]


def sub_into(acc: Vec, v: Sequence[int]) -> None:
    """acc -= v, per dimension."""
    acc[0] -= v[0]
    acc[1] -= v[1]
    acc[2] -= v[2]


def sub_floor_into(acc: Vec, v: Sequence[int]) -> None:
    """acc = max(acc - v, 0), per dimension."""
    acc[0] = max(acc[0] - v[0], 0)
    acc[1] = max(acc[1] - v[1], 0)
    acc[2] = max(acc[2] - v[2], 0)


def plus(a: Sequence[int], b: Sequence[int]) -> Vec:
    """a + b, per dimension (a new list)."""
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]


def minus_floor(a: Sequence[int], b: Sequence[int]) -> Vec:
    """max(a - b, 0), per dimension (a new list)."""
    return [max(a[0] - b[0], 0), max(a[1] - b[1], 0), max(a[2] - b[2], 0)]


def clip(v: Sequence[int], cap: Sequence[int]) -> Triple:
    """min(v, cap) floored at 0, per dimension: how much of ``v`` can be taken from
    ``cap``."""
    return (max(min(v[0], cap[0]), 0), max(min(v[1], cap[1]), 0), max(min(v[2], cap[2]), 0))
