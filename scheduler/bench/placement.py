"""Placement throughput of the scheduler core on a synthetic cluster.

Builds ``--nodes`` nodes of ``--gpus-per-node`` GPUs and pending jobs of mixed gang sizes
adding up to ``--tasks`` tasks (fixed seed), then runs scheduling cycles the way the
service loop does: ``schedule()`` on the snapshot (at most ``--jobs-per-cycle`` jobs
examined), apply the binds to the snapshot, repeat until a cycle binds nothing. Only the
``schedule()`` calls are timed.

Figures: ``placed`` task placements in ``seconds`` of core time, ``placements_per_s``,
``us_per_placement`` (core time per placed task; compare it across --nodes to see how the
cost grows with cluster size) and the per-cycle latency percentiles ``cycle_ms_p50`` /
``cycle_ms_p99``, all wall-clock. ``cpu_seconds`` / ``placements_per_cpu_s`` are the same
in process CPU time, which is the steadier figure on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from scheduler.core import (
    Backfill,
    Job,
    Node,
    Policy,
    Resources,
    RunningJob,
    Snapshot,
    TaskRole,
    VirtualCluster,
    schedule,
)

GiB = 1024**3
GANG_SIZES = (1, 1, 1, 1, 2, 2, 4, 8, 16)
# GPUs per task, weighted so that 20,000 tasks roughly fill 5,000 x 8 GPUs.
GPU_CHOICES = (0, 1, 1, 1, 1, 1, 2, 2, 2, 4, 8)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m scheduler.bench placement``."""
    parser.add_argument("--nodes", type=int, default=5000, help="number of nodes")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node")
    parser.add_argument("--tasks", type=int, default=20000, help="pending tasks in total")
    parser.add_argument(
        "--jobs-per-cycle", type=int, default=1000, help="Policy.max_jobs_per_cycle"
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed of the job mix")


def build(nodes: int, gpus_per_node: int, tasks: int, seed: int) -> tuple[list[Node], list[Job]]:
    """The synthetic cluster and job mix (deterministic for a seed)."""
    rng = random.Random(seed)
    node_list = [
        Node(
            name=f"node-{i}",
            capacity=Resources(
                cpu_m=8000 * gpus_per_node, memory=64 * GiB * gpus_per_node, gpu=gpus_per_node
            ),
        )
        for i in range(nodes)
    ]
    jobs: list[Job] = []
    made = 0
    while made < tasks:
        size = min(rng.choice(GANG_SIZES), tasks - made)
        gpu = min(rng.choice(GPU_CHOICES), gpus_per_node)
        cpu = 4000 if gpu == 0 else 6000 * gpu
        role = TaskRole(
            name="worker",
            replicas=size,
            resources=Resources(cpu_m=cpu, memory=(8 if gpu == 0 else 48 * gpu) * GiB, gpu=gpu),
        )
        jobs.append(
            Job(
                name=f"job-{len(jobs)}",
                vc="default",
                roles=(role,),
                priority=rng.choice((25, 50, 50, 50, 75)),
                submit_time=float(len(jobs)),
            )
        )
        made += size
    return node_list, jobs


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; returns the figures (see the module docstring)."""
    node_list, jobs = build(args.nodes, args.gpus_per_node, args.tasks, args.seed)
    policy = Policy(name="bench", max_jobs_per_cycle=args.jobs_per_cycle)
    vcs = (VirtualCluster(name="default"),)
    pending = {j.name: j for j in jobs}
    running: list[RunningJob] = []
    nodes = {n.name: n for n in node_list}
    cycle_s: list[float] = []
    cpu_s = 0.0
    placed = 0
    now = 1_000_000.0
    while pending:
        snap = Snapshot(
            nodes=tuple(nodes.values()),
            vcs=vcs,
            pending=tuple(pending.values()),
            running=tuple(running),
        )
        t0 = time.perf_counter()
        c0 = time.process_time()
        decision = schedule(snap, policy, now)
        cycle_s.append(time.perf_counter() - t0)
        cpu_s += time.process_time() - c0
        if not decision.binds:
            break
        add: dict[str, Resources] = {}
        for b in decision.binds:
            job = pending.pop(b.job)
            running.append(RunningJob(job=job, start_time=now, placements=b.placements))
            placed += len(b.placements)
            for p in b.placements:
                add[p.node] = add.get(p.node, Resources()) + p.resources
        for name, r in add.items():
            n = nodes[name]
            nodes[name] = Node(n.name, n.capacity, n.allocated + r, n.labels, n.gpu_model, n.state)
        now += 1.0
    seconds = sum(cycle_s)
    ordered = sorted(cycle_s)

    def pct(p: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "tasks": sum(r.replicas for j in jobs for r in j.roles),
        "jobs": len(jobs),
        "placed": placed,
        "cycles": len(cycle_s),
        "seconds": round(seconds, 3),
        "placements_per_s": round(placed / seconds, 1) if seconds else 0.0,
        "us_per_placement": round(1e6 * seconds / placed, 1) if placed else None,
        "cpu_seconds": round(cpu_s, 3),
        "placements_per_cpu_s": round(placed / cpu_s, 1) if cpu_s else 0.0,
        "cpu_us_per_placement": round(1e6 * cpu_s / placed, 1) if placed else None,
        "cycle_ms_p50": pct(0.5),
        "cycle_ms_p99": pct(0.99),
        "backfill": str(Backfill(policy.backfill)),
    }
