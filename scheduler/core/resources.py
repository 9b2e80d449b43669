"""Resource arithmetic of the core: the one home of the (cpu, memory, gpu) triple.

The three schedulable quantities, always in this order and these units:

    cpu_m   CPU millicores (1000 = one core)
    memory  bytes
    gpu     whole GPU devices

They take two forms:

* :class:`Resources`, the named, frozen, validated form of the model (snapshots,
  decisions, the service and the simulator build it);
* :data:`Triple`, a plain ``tuple[int, int, int]`` in the same order, what a scheduling
  cycle computes with (per-node free capacity, VC usage and demand, gang requests): a tuple
  of ints is several times cheaper to build and read than a dataclass in loops that run per
  node and per job. Accumulators that a cycle updates in place (a VC's usage, the releasing
  pool) are ``list[int]`` in the same order, changed with :func:`iadd` / :func:`isub`.

Every element-wise operation on triples is a function here. The innermost loops of
``index.py``, ``gang.py`` and the preemption what-if deliberately unpack to local ints
instead (a function call per node would cost more than the placement itself); they say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Triple = tuple[int, int, int]
"""(cpu millicores, memory bytes, GPUs)."""

ZERO3: Triple = (0, 0, 0)
DIM_NAMES = ("cpu_m", "memory", "gpu")
"""Field names of the components, by index (0 cpu_m, 1 memory, 2 gpu)."""


@dataclass(frozen=True, slots=True, order=True)
class Resources:
    """A vector of schedulable resources.

    Attributes:
        cpu_m: CPU in millicores (1000 = one core).
        memory: memory in bytes.
        gpu: GPU devices.

    Arithmetic is element-wise; ``a <= b`` is NOT element-wise (dataclass ordering), use
    :meth:`fits_in` for "a fits in b". :meth:`triple` gives the plain :data:`Triple`.

    Raises:
        TypeError: (construction) a component that is not an int.
    """

    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0

    def __post_init__(self) -> None:
        for name in DIM_NAMES:
            if not isinstance(getattr(self, name), int):
                raise TypeError(f"Resources.{name} must be int, got {getattr(self, name)!r}")

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory - other.memory, self.gpu - other.gpu)

    def __mul__(self, n: int) -> Resources:
        return Resources(self.cpu_m * n, self.memory * n, self.gpu * n)

    __rmul__ = __mul__

    def triple(self) -> Triple:
        """(cpu_m, memory, gpu) as a plain :data:`Triple`."""
        return (self.cpu_m, self.memory, self.gpu)

    def fits_in(self, other: Resources) -> bool:
        """True when every component of self is <= the same component of other."""
        return self.cpu_m <= other.cpu_m and self.memory <= other.memory and self.gpu <= other.gpu

    def is_nonnegative(self) -> bool:
        return self.cpu_m >= 0 and self.memory >= 0 and self.gpu >= 0

    def is_zero(self) -> bool:
        return self.cpu_m == 0 and self.memory == 0 and self.gpu == 0

    def clamp_min_zero(self) -> Resources:
        return Resources(max(self.cpu_m, 0), max(self.memory, 0), max(self.gpu, 0))

    def min(self, other: Resources) -> Resources:
        return Resources(
            min(self.cpu_m, other.cpu_m), min(self.memory, other.memory), min(self.gpu, other.gpu)
        )

    def exceeded_by(self, other: Resources) -> list[str]:
        """Names of the components in which ``other`` exceeds ``self`` (for reasons)."""
        return [n for n in ("gpu", "cpu_m", "memory") if getattr(other, n) > getattr(self, n)]


ZERO = Resources()


# -- triples (immutable results) ----------------------------------------------------------
def as_triple(a: Sequence[int]) -> Triple:
    """The first three values of ``a`` (cpu_m, memory, gpu) as a :data:`Triple`."""
    return (a[0], a[1], a[2])


def add(a: Sequence[int], b: Sequence[int]) -> Triple:
    """a + b, element-wise."""
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def sub(a: Sequence[int], b: Sequence[int]) -> Triple:
    """a - b, element-wise (may go negative)."""
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def scale(a: Sequence[int], n: int) -> Triple:
    """a * n, element-wise (n tasks of request a)."""
    return (a[0] * n, a[1] * n, a[2] * n)


def fits(a: Sequence[int], b: Sequence[int]) -> bool:
    """True when a <= b in every component (a fits in b)."""
    return a[0] <= b[0] and a[1] <= b[1] and a[2] <= b[2]


def take(want: Sequence[int], avail: Sequence[int]) -> Triple:
    """What can be taken of ``want`` from ``avail``: min(want, avail), never below 0."""
    return (
        max(min(want[0], avail[0]), 0),
        max(min(want[1], avail[1]), 0),
        max(min(want[2], avail[2]), 0),
    )


def excess(a: Sequence[int], b: Sequence[int]) -> Triple:
    """max(a - b, 0), element-wise: the part of a above b."""
    return (max(a[0] - b[0], 0), max(a[1] - b[1], 0), max(a[2] - b[2], 0))


def total(items: Iterable[Sequence[int]]) -> Triple:
    """Sum of triples ((0, 0, 0) when empty)."""
    c = m = g = 0
    for v in items:
        c += v[0]
        m += v[1]
        g += v[2]
    return (c, m, g)


# -- accumulators (list[int], changed in place) --------------------------------------------
def iadd(acc: list[int], v: Sequence[int]) -> None:
    """acc += v, in place."""
    acc[0] += v[0]
    acc[1] += v[1]
    acc[2] += v[2]


def isub(acc: list[int], v: Sequence[int]) -> None:
    """acc -= v, in place (may go negative)."""
    acc[0] -= v[0]
    acc[1] -= v[1]
    acc[2] -= v[2]


def isub_floor(acc: list[int], v: Sequence[int]) -> None:
    """acc = max(acc - v, 0), in place (demand that cannot go below nothing)."""
    acc[0] = max(acc[0] - v[0], 0)
    acc[1] = max(acc[1] - v[1], 0)
    acc[2] = max(acc[2] - v[2], 0)


class PrefixSums:
    """Triples added at positions 0..n-1 with prefix sums in O(log n): a Fenwick tree per
    component (Fenwick, "A new data structure for cumulative frequency tables", 1994),
    plus the running total.

    Args:
        n: number of positions.
    """

    __slots__ = ("n", "total", "tree")

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (3 * (n + 1))
        self.total = [0, 0, 0]

    def add(self, pos: int, v: Sequence[int]) -> None:
        """Add triple ``v`` at 0-based position ``pos``."""
        tree = self.tree
        iadd(self.total, v)
        i = pos + 1
        while i <= self.n:
            b = 3 * i
            tree[b] += v[0]
            tree[b + 1] += v[1]
            tree[b + 2] += v[2]
            i += i & -i

    def before(self, pos: int) -> list[int]:
        """Sum of what was added at positions < ``pos``."""
        tree = self.tree
        out = [0, 0, 0]
        i = pos
        while i > 0:
            b = 3 * i
            out[0] += tree[b]
            out[1] += tree[b + 1]
            out[2] += tree[b + 2]
            i -= i & -i
        return out
