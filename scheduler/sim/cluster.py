"""Cluster shapes, window load, cluster sizing, VC guarantees and gang shapes for a replay.

Synthesis rule (when a trace or machine list lacks CPU/memory), derived once from the
Alibaba openb trace (medians over its GPU pods and GPU nodes, rounded):
    a job asks, per GPU, :data:`JOB_CPU_M_PER_GPU` millicores and :data:`JOB_MEMORY_PER_GPU`
    bytes (openb median 9,810 m and 31,250 MiB per GPU);
    a node offers, per GPU, :data:`NODE_CPU_M_PER_GPU` millicores and
    :data:`NODE_MEMORY_PER_GPU` bytes (openb median 12,000 m and 61,440 MiB per GPU).
Because a job's per-GPU ask is below a node's per-GPU offer, GPUs stay the binding resource
on synthesised clusters, as in the lower bounds.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.core.model import Node, VirtualCluster
from scheduler.core.resources import Resources
from scheduler.sim.trace import TraceError, TraceJob

GIB = 1024**3
MIB = 1024**2
JOB_CPU_M_PER_GPU = 10_000
JOB_MEMORY_PER_GPU = 32 * GIB
NODE_CPU_M_PER_GPU = 12_000
NODE_MEMORY_PER_GPU = 60 * GIB


Kind = tuple[int, int, int, str | None]
"""A node shape's kind: (GPUs, millicores, memory bytes, GPU model)."""


@dataclass(frozen=True, slots=True)
class NodeShape:
    """A machine of a cluster shape (before it becomes a core :class:`Node`).

    Attributes:
        name: machine name.
        gpus: GPU devices.
        cpu_m: millicores (synthesised per GPU when the list has none).
        memory: bytes (synthesised per GPU when the list has none).
        gpu_model: GPU model or None.
    """

    name: str
    gpus: int
    cpu_m: int
    memory: int
    gpu_model: str | None = None

    @property
    def kind(self) -> Kind:
        return (self.gpus, self.cpu_m, self.memory, self.gpu_model)

    def to_node(self) -> Node:
        return Node(
            self.name, Resources(self.cpu_m, self.memory, self.gpus), gpu_model=self.gpu_model
        )


def synthesised_node(name: str, gpus: int, gpu_model: str | None = None) -> NodeShape:
    """A node whose CPU/memory follow the per-GPU synthesis rule (>= 1 GPU's worth)."""
    per = max(gpus, 1)
    return NodeShape(name, gpus, NODE_CPU_M_PER_GPU * per, NODE_MEMORY_PER_GPU * per, gpu_model)


def read_machine_list(path: str | Path) -> list[NodeShape]:
    """Read Philly's ``cluster_machine_list.csv`` (``machineId, number of GPUs, single GPU mem``).

    CPU and memory are synthesised per GPU; the model is named by GPU memory (e.g. "12GB").

    Raises:
        TraceError: file missing or a GPU count that is not a non-negative integer.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"machine list {str(path)!r} does not exist")
    shapes = []
    with path.open(newline="") as fh:
        rows = csv.reader(fh, skipinitialspace=True)
        next(rows, None)
        for i, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) < 2:
                raise TraceError(f"{path.name} row {i}: expected machineId,number of GPUs,...")
            try:
                gpus = int(row[1])
            except ValueError:
                raise TraceError(
                    f"{path.name} row {i}: 'number of GPUs' must be an integer, got {row[1]!r}"
                ) from None
            if gpus < 0:
                raise TraceError(f"{path.name} row {i}: 'number of GPUs' must be >= 0, got {gpus}")
            model = row[2].strip() if len(row) > 2 and row[2].strip() else None
            shapes.append(synthesised_node(row[0].strip(), gpus, model))
    return shapes


def read_openb_nodes(path: str | Path) -> list[NodeShape]:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``); nodes keep their own
    CPU, memory and GPU model.

    Raises:
        TraceError: file missing, a column absent or a value not an integer.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"node list {str(path)!r} does not exist")
    shapes = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        for i, row in enumerate(reader, start=2):
            try:
                shapes.append(
                    NodeShape(
                        row["sn"],
                        int(row["gpu"]),
                        int(row["cpu_milli"]),
                        int(row["memory_mib"]) * MIB,
                        row["model"] or None,
                    )
                )
            except KeyError as exc:
                raise TraceError(f"{path.name}: column {exc.args[0]!r} missing") from None
            except ValueError as exc:
                raise TraceError(f"{path.name} row {i}: expected integers ({exc})") from None
    return shapes


def homogeneous(nodes: int, gpus_per_node: int) -> list[NodeShape]:
    """``nodes`` identical synthesised nodes of ``gpus_per_node`` GPUs.

    Raises:
        TraceError: a count below 1.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise TraceError(f"--nodes and --gpus-per-node must be >= 1, got {nodes}, {gpus_per_node}")
    return [synthesised_node(f"node-{i}", gpus_per_node) for i in range(nodes)]


def gang_shape(gpus: int, max_node_gpus: int) -> tuple[int, int]:
    """(tasks, GPUs per task) for a job of ``gpus`` GPUs on nodes of at most ``max_node_gpus``.

    A job that fits one node is one task. A wider job becomes a gang of the fewest equal
    tasks that each fit a node: k = ceil(g / max), raised until k divides g (128 on 8-GPU
    nodes -> 16 x 8; 12 -> 2 x 6).
    """
    if gpus <= max_node_gpus:
        return 1, gpus
    k = math.ceil(gpus / max_node_gpus)
    while gpus % k:
        k += 1
    return k, gpus // k


def synthesise_requests(job: TraceJob) -> tuple[int, int]:
    """(cpu millicores, memory bytes) of the whole job: the trace's, or the per-GPU rule."""
    cpu = job.cpu_m if job.cpu_m is not None else JOB_CPU_M_PER_GPU * job.gpus
    mem = job.memory if job.memory is not None else JOB_MEMORY_PER_GPU * job.gpus
    return cpu, mem


def window_work(jobs: Sequence[TraceJob]) -> tuple[float, float, float]:
    """(GPU-seconds inside the window, window start, window end).

    The submission window is [first submit, last submit]; each job runs from its submit
    time on an infinite cluster and its work is cut off at the last submit time.
    """
    t0 = min(j.submit_s for j in jobs)
    t1 = max(j.submit_s for j in jobs)
    work = sum(j.gpus * max(0.0, min(j.submit_s + j.duration_s, t1) - j.submit_s) for j in jobs)
    return work, t0, t1


def window_load_gpus(jobs: Sequence[TraceJob]) -> float:
    """Mean GPU occupancy an infinite cluster would have during the submission window.

    ``sum_i g_i * (min(r_i + p_i, t_last) - r_i) / (t_last - t_first)``. Dividing by a
    cluster's GPU count gives its window load. (Total work / (GPUs x window) overstates
    load when long jobs outlive a short sample.)

    Raises:
        TraceError: all jobs submitted at the same instant (the window is empty).
    """
    work, t0, t1 = window_work(jobs)
    if t1 <= t0:
        raise TraceError("window load needs jobs submitted at two different times at least")
    return work / (t1 - t0)


def widest_need(jobs: Iterable[TraceJob], max_node_gpus: int) -> tuple[int, int]:
    """(tasks, GPUs per task) of the widest job's gang on nodes of ``max_node_gpus``."""
    widest = max(jobs, key=lambda j: j.gpus)
    return gang_shape(widest.gpus, max_node_gpus)


def size_cluster(
    shapes: Sequence[NodeShape], target_gpus: float, jobs: Sequence[TraceJob]
) -> list[NodeShape]:
    """Scale a machine list to about ``target_gpus`` GPUs, keeping its mix of machine kinds.

    Each kind (GPUs, CPU, memory, model) keeps its share of GPUs (largest-remainder rounding,
    machines taken in list order; beyond the list, machines are repeated with a ``~N``
    suffix). Nodes the jobs need whatever the target come first and count towards it: enough
    nodes of the widest kind for the widest job's gang, and for a task whose CPU/memory fits
    no kind present, one node of the smallest kind that fits it. Machines without GPUs are
    dropped.

    Raises:
        TraceError: no machine has a GPU, or a job needs more GPUs per task than any node.
    """
    gpu_shapes = [s for s in shapes if s.gpus > 0]
    if not gpu_shapes:
        raise TraceError("the cluster shape has no GPU nodes")
    max_gpus = max(s.gpus for s in gpu_shapes)
    by_kind: dict[Kind, list[NodeShape]] = {}
    for s in gpu_shapes:
        by_kind.setdefault(s.kind, []).append(s)
    total = sum(s.gpus for s in gpu_shapes)
    tasks, per_task = widest_need(jobs, max_gpus)
    wide_kinds = sorted((k for k in by_kind if k[0] >= per_task), key=lambda k: -k[0])
    needs = sorted({_task_need(j, max_gpus) for j in jobs}, reverse=True)
    forced = dict.fromkeys(by_kind, 0)  # nodes the jobs need whatever the target
    for _ in range(8):
        rest = max(target_gpus - sum(k[0] * n for k, n in forced.items()), 0.0)
        counts = _proportional(by_kind, rest / total)
        for k, n in forced.items():
            counts[k] += n
        changed = False
        # so that the widest job can run: enough nodes of the widest kind for its gang
        deficit = tasks - sum(counts[k] for k in wide_kinds)
        if deficit > 0 and wide_kinds:
            forced[wide_kinds[0]] += deficit
            changed = True
        # every job's task must fit some kind present (CPU and memory too, for traces that
        # carry them): one node of the smallest kind that fits a task that fits none
        for task in needs:
            if any(counts[k] and _fits(task, k) for k in by_kind):
                continue
            fitting = sorted((k for k in by_kind if _fits(task, k)), key=lambda k: k[:3])
            if not fitting:
                raise TraceError(
                    f"a task needing {task[0]} GPUs, {task[1]} millicores and {task[2]} "
                    "bytes fits no machine of the cluster shape"
                )
            forced[fitting[0]] += 1
            counts[fitting[0]] += 1
            changed = True
        if not changed:
            break
    out = []
    for k, members in by_kind.items():
        for i in range(counts[k]):
            base = members[i % len(members)]
            rep = i // len(members)
            out.append(base if rep == 0 else replace(base, name=f"{base.name}~{rep + 1}"))
    return out


def _proportional(by_kind: dict[Kind, list[NodeShape]], scale: float) -> dict[Kind, int]:
    """Nodes per kind so that each kind keeps its share of GPUs (largest remainder)."""
    target = sum(k[0] * len(v) for k, v in by_kind.items()) * scale
    exact = {k: len(v) * scale for k, v in by_kind.items()}
    counts = {k: int(x) for k, x in exact.items()}
    have = sum(k[0] * n for k, n in counts.items())
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True):
        if have + k[0] / 2 > target:
            continue
        counts[k] += 1
        have += k[0]
    return counts


def _task_need(job: TraceJob, max_node_gpus: int) -> tuple[int, int, int]:
    tasks, per_task = gang_shape(job.gpus, max_node_gpus)
    cpu, mem = synthesise_requests(job)
    return (per_task, cpu // tasks, mem // tasks)


def _fits(task: tuple[int, int, int], kind: Kind) -> bool:
    return task[0] <= kind[0] and task[1] <= kind[1] and task[2] <= kind[2]


def check_fits(shapes: Sequence[NodeShape], jobs: Sequence[TraceJob]) -> None:
    """Raise :class:`TraceError` when some job's gang could never fit the cluster."""
    max_gpus = max((s.gpus for s in shapes), default=0)
    if max_gpus < 1:
        raise TraceError("the cluster has no GPUs")
    for j in jobs:
        task = _task_need(j, max_gpus)
        if not any(_fits(task, s.kind) for s in shapes):
            raise TraceError(
                f"job {j.name}'s task ({task[0]} GPUs, {task[1]} millicores, {task[2]} bytes) "
                "fits no node of the cluster"
            )
    widest = max(jobs, key=lambda j: j.gpus)
    tasks, per_task = gang_shape(widest.gpus, max_gpus)
    if sum(1 for s in shapes if s.gpus >= per_task) < tasks:
        raise TraceError(
            f"job {widest.name} needs {tasks} nodes with {per_task} GPUs each; the cluster has "
            f"{sum(1 for s in shapes if s.gpus >= per_task)} (use --load or more --nodes)"
        )


def vc_guarantees(
    jobs: Sequence[TraceJob], shapes: Sequence[NodeShape]
) -> tuple[VirtualCluster, ...]:
    """One VC per trace VC, its guarantee proportional to its share of the window's work.

    GPUs by largest remainder so that guarantees sum to the cluster's GPUs; CPU and memory
    in the same proportion. Every VC may borrow idle capacity; none has a max.
    """
    work: dict[str, float] = {}
    _, _, t1 = window_work(jobs)
    for j in jobs:
        w = j.gpus * max(min(j.submit_s + j.duration_s, t1) - j.submit_s, 1.0)
        work[j.vc] = work.get(j.vc, 0.0) + w
    total_w = sum(work.values())
    gpus = sum(s.gpus for s in shapes)
    cpu = sum(s.cpu_m for s in shapes)
    mem = sum(s.memory for s in shapes)
    exact = {v: gpus * w / total_w for v, w in work.items()}
    share = {v: int(x) for v, x in exact.items()}
    left = gpus - sum(share.values())
    for v in sorted(exact, key=lambda v: exact[v] - share[v], reverse=True)[:left]:
        share[v] += 1
    return tuple(
        VirtualCluster(
            v,
            Resources(int(cpu * work[v] / total_w), int(mem * work[v] / total_w), share[v]),
        )
        for v in sorted(work)
    )
