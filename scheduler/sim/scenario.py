"""From command-line choices to a replayable scenario, and running policies on it.

Pipeline: read trace -> take the job window (--skip, --jobs) -> cluster shape (machine
list, openb node list or --nodes x --gpus-per-node) -> size it to the window load (--load)
-> VC guarantees -> one :class:`~scheduler.sim.engine.Simulator` per policy -> metrics,
lower bounds.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from queue import Empty
from typing import Any

from scheduler.core.model import VirtualCluster
from scheduler.core.policy import Policy
from scheduler.core.presets import ELASTIC_REPLAY, ORACLE_ESTIMATES, PRESETS
from scheduler.sim import bounds, pollux
from scheduler.sim.cluster import (
    NodeShape,
    check_fits,
    homogeneous,
    read_machine_list,
    read_openb_nodes,
    size_cluster,
    vc_guarantees,
    widest_need,
    window_load_gpus,
)
from scheduler.sim.engine import Decide, Rate, Simulator
from scheduler.sim.metrics import PolicyMetrics, summarise
from scheduler.sim.trace import (
    TraceError,
    TraceJob,
    TraceStats,
    parse_columns,
    read_csv,
    read_openb_pods,
    read_philly,
    select_window,
)

TRACE_FORMATS = ("philly", "openb", "csv")

# Simulator-only baselines (not configurations of the core): name -> (the Policy the engine
# is given, the decide that replaces scheduler.core.schedule, the progress rate of elastic
# jobs). Each replays every trace job elastically, like ELASTIC_REPLAY's policies.
SIM_BASELINES: dict[str, tuple[Policy, Decide, Rate]] = {
    pollux.NAME: (pollux.POLICY, pollux.decide, pollux.rate),
}


def traces_dir() -> Path:
    """Where the shared traces live: ``$PASTURE_TRACES_DIR`` or ``<repo>/../shared/traces``."""
    env = os.environ.get("PASTURE_TRACES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "traces"


DEFAULT_FILES = {
    "philly": ("philly/philly_jobs.csv", "philly/cluster_machine_list.csv"),
    "openb": (
        "alibaba-gpu-2023/openb_pod_list_default.csv",
        "alibaba-gpu-2023/openb_node_list_gpu_node.csv",
    ),
}


@dataclass(slots=True)
class Scenario:
    """A trace window on a cluster.

    Attributes:
        trace: label (file name).
        jobs: the window's jobs, by submit time.
        shapes: the cluster's machines.
        vcs: VCs with guarantees proportional to window work.
        gpus: cluster GPUs.
        load: window load on this cluster (window-load GPUs / cluster GPUs).
        stats: what the reader kept and skipped.
    """

    trace: str
    jobs: list[TraceJob]
    shapes: list[NodeShape]
    vcs: tuple[VirtualCluster, ...]
    gpus: int
    load: float
    stats: TraceStats = field(default_factory=TraceStats)


def build_scenario(
    trace_format: str = "philly",
    trace: str | Path | None = None,
    *,
    columns: str | None = None,
    time_format: str = "seconds",
    machines: str | Path | None = None,
    node_list: str | Path | None = None,
    nodes: int | None = None,
    gpus_per_node: int = 8,
    jobs: int | None = None,
    skip: int = 0,
    load: float | None = None,
) -> Scenario:
    """Read, window, shape and size (see the module docstring).

    Raises:
        TraceError: bad flags or files (message names the flag or field).
    """
    if trace_format not in TRACE_FORMATS:
        raise TraceError(f"--trace-format: expected one of {TRACE_FORMATS}, got {trace_format!r}")
    if load is not None and not (0 < load <= 10):
        raise TraceError(f"--load must be in (0, 10], got {load}")
    if load is not None and nodes is not None:
        raise TraceError("give either --load (the cluster is sized for it) or --nodes, not both")
    stats = TraceStats()
    base = traces_dir()
    if trace_format == "csv":
        if trace is None or columns is None:
            raise TraceError("--trace-format csv needs --trace FILE and --columns submit=..,...")
        all_jobs = read_csv(trace, parse_columns(columns), time_format, stats)
    else:
        path = Path(trace) if trace else base / DEFAULT_FILES[trace_format][0]
        reader = read_philly if trace_format == "philly" else read_openb_pods
        all_jobs = reader(path, stats)
        trace = path
        if machines is None and node_list is None and nodes is None:
            default_nodes = base / DEFAULT_FILES[trace_format][1]
            if trace_format == "philly":
                machines = default_nodes
            else:
                node_list = default_nodes
    window = select_window(all_jobs, jobs, skip)
    if machines is not None:
        shapes = read_machine_list(machines)
    elif node_list is not None:
        shapes = read_openb_nodes(node_list)
    elif nodes is not None:
        shapes = homogeneous(nodes, gpus_per_node)
    elif load is not None:
        shapes = homogeneous(1, gpus_per_node)  # the kind; the count follows from --load
    else:
        raise TraceError("a csv trace needs a cluster: --machines, --node-list, --nodes or --load")
    demand = window_load_gpus(window)
    if load is not None:
        if nodes is None and machines is None and node_list is None:
            tasks, _ = widest_need(window, gpus_per_node)
            count = max(math.ceil(demand / load / gpus_per_node), tasks, 1)
            shapes = homogeneous(count, gpus_per_node)
        else:
            shapes = size_cluster(shapes, demand / load, window)
    check_fits(shapes, window)
    gpus = sum(s.gpus for s in shapes)
    return Scenario(
        trace=Path(trace).name if trace else trace_format,
        jobs=window,
        shapes=shapes,
        vcs=vc_guarantees(window, shapes),
        gpus=gpus,
        load=demand / gpus,
        stats=stats,
    )


def parse_policies(spec: str | None) -> list[str]:
    """``a,b,c`` -> names (default: all presets in table order).

    Raises:
        TraceError: an unknown policy name.
    """
    known = [*PRESETS, *SIM_BASELINES]
    if not spec:
        return known
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise TraceError(f"--policies: unknown {unknown}; expected names from {known}")
    return names


def run_policy(
    scenario: Scenario,
    name: str,
    *,
    restart_cost_s: float = 60.0,
    checkpoint_s: float | None = None,
    decide: Decide | None = None,
    progress: Callable[[int], None] | None = None,
) -> PolicyMetrics:
    """Replay the scenario under one named preset (or simulator baseline,
    :data:`SIM_BASELINES`) and summarise it."""
    rate: Rate | None = None
    if name in SIM_BASELINES:
        policy, decide, rate = SIM_BASELINES[name]
    else:
        policy = PRESETS[name]
    sim = Simulator(
        [s.to_node() for s in scenario.shapes],
        scenario.vcs,
        scenario.jobs,
        policy,
        oracle_estimates=name in ORACLE_ESTIMATES,
        elastic=name in ELASTIC_REPLAY or name in SIM_BASELINES,
        restart_cost_s=restart_cost_s,
        checkpoint_s=checkpoint_s,
        decide=decide,
        progress=progress,
        rate=rate,
    )
    return summarise(sim.run())


def lower_bounds(scenario: Scenario) -> dict[str, float]:
    """``{"jct_mean_s", "makespan_s"}`` of the scenario (see :mod:`scheduler.sim.bounds`)."""
    return {
        "jct_mean_s": bounds.jct_mean_lower_bound(scenario.jobs, scenario.gpus),
        "makespan_s": bounds.makespan_lower_bound(scenario.jobs, scenario.gpus),
    }


def to_json(
    scenario: Scenario, results: dict[str, PolicyMetrics], lower: dict[str, float]
) -> dict[str, Any]:
    """The issue's JSON shape."""
    return {
        "trace": scenario.trace,
        "jobs": len(scenario.jobs),
        "gpus": scenario.gpus,
        "load": round(scenario.load, 4),
        "policies": {n: m.to_json() for n, m in results.items()},
        "lower_bound": dict(lower),
    }


def run_all(scenario: Scenario, names: Sequence[str], **kwargs: Any) -> dict[str, PolicyMetrics]:
    """Every named policy on the scenario, in order."""
    return {n: run_policy(scenario, n, **kwargs) for n in names}


# -- several policies at once (one process each, up to ``workers``) ------------------------
_progress_queue: Queue[tuple[str, int]] | None = None  # set in workers by _init_worker


def _init_worker(queue: Queue[tuple[str, int]]) -> None:
    global _progress_queue
    _progress_queue = queue


def _run_in_worker(
    scenario: Scenario, name: str, kwargs: dict[str, Any]
) -> tuple[str, PolicyMetrics, float, float]:
    queue = _progress_queue
    step = max(len(scenario.jobs) // 200, 1)
    last = [0]

    def progress(done: int) -> None:
        if queue is not None and (done - last[0] >= step or done == len(scenario.jobs)):
            last[0] = done
            queue.put((name, done))

    w0, c0 = time.perf_counter(), time.process_time()
    metrics = run_policy(scenario, name, progress=progress, **kwargs)
    return name, metrics, time.perf_counter() - w0, time.process_time() - c0


# Rough relative cost per policy (longest first balances the workers: LPT).
_COST_ORDER = (
    pollux.NAME,
    "elastic",
    "afs-like",
    "afs-las",
    "pasture",
    "tiresias-las",
    "srtf-oracle",
    "fifo-backfill",
    "capacity",
    "drf",
    "fifo",
)


def run_many(
    scenario: Scenario,
    names: Sequence[str],
    *,
    workers: int = 1,
    on_progress: Callable[[str, int], None] | None = None,
    **kwargs: Any,
) -> dict[str, tuple[PolicyMetrics, float, float]]:
    """Run each named policy; ``{name: (metrics, wall seconds, cpu seconds)}`` in ``names``
    order. ``workers`` > 1 runs policies in that many processes (fork), longest first.
    """
    out: dict[str, tuple[PolicyMetrics, float, float]] = {}
    if workers <= 1 or len(names) <= 1:
        for name in names:
            w0, c0 = time.perf_counter(), time.process_time()
            cb = (lambda done, name=name: on_progress(name, done)) if on_progress else None
            m = run_policy(scenario, name, progress=cb, **kwargs)
            out[name] = (m, time.perf_counter() - w0, time.process_time() - c0)
        return out
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    rank = {n: i for i, n in enumerate(_COST_ORDER)}
    ordered = sorted(names, key=lambda n: rank.get(n, -1))
    with ProcessPoolExecutor(
        max_workers=min(workers, len(names)),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(queue,),
    ) as pool:
        futures = [pool.submit(_run_in_worker, scenario, n, kwargs) for n in ordered]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2)
            while True:
                try:
                    name, count = queue.get_nowait()
                except Empty:
                    break
                if on_progress:
                    on_progress(name, count)
            for f in done:
                name, m, wall, cpu = f.result()
                out[name] = (m, wall, cpu)
                if on_progress:
                    on_progress(name, len(scenario.jobs))
    return {n: out[n] for n in names}
