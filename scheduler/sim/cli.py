"""``pasture sim`` / ``python -m scheduler.sim``: replay a trace under every policy, side by side.

Example (the issue's benchmark)::

    python -m scheduler.sim --trace-format philly --jobs 5000 --skip 10000 --load 0.8
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from scheduler.core.presets import PRESETS
from scheduler.sim.engine import check_checkpoint_interval, check_restart_cost
from scheduler.sim.fill import fill
from scheduler.sim.metrics import PolicyMetrics
from scheduler.sim.scenario import (
    Scenario,
    build_scenario,
    lower_bounds,
    parse_policies,
    run_many,
    to_json,
)
from scheduler.sim.trace import TraceError

app = typer.Typer(help=__doc__, no_args_is_help=False, add_completion=False)


def _restart_cost(value: float) -> float:
    """``--restart-cost``, checked as the engine checks it (:func:`check_restart_cost`)."""
    try:
        return check_restart_cost(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _checkpoint_interval(value: float | None) -> float | None:
    """``--checkpoint-interval``, checked as the engine checks it
    (:func:`check_checkpoint_interval`)."""
    try:
        return check_checkpoint_interval(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


RESTART_COST_HELP = "seconds of a job's GPUs lost per preemption"
CHECKPOINT_HELP = (
    "checkpoint interval (s) for jobs that declare none; work since one is lost "
    "(longer than any run: jobs that never checkpoint)"
)


def _hours(s: float) -> str:
    return f"{s / 3600:.2f}"


def _table(scenario: Scenario, results: dict[str, PolicyMetrics], lower: dict[str, float]) -> Table:
    t = Table(
        title=Text(
            f"{scenario.trace}: {len(scenario.jobs)} jobs, {scenario.gpus} GPUs on "
            f"{len(scenario.shapes)} nodes, window load {scenario.load:.2f}"
        ),
        caption=(
            "times in hours; x LB = mean JCT / lower bound; alloc = time-averaged GPU allocation"
        ),
    )
    for col in (
        "policy",
        "mean JCT",
        "x LB",
        "p50 JCT",
        "p99 JCT",
        "mean queue",
        "makespan",
        "alloc",
        "alloc@1st wait",
        "preempt",
        "GPU-h lost",
        "ms/call",
        "p99 ms",
    ):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, m in results.items():
        t.add_row(
            name,
            _hours(m.jct_mean_s),
            f"{m.jct_mean_s / lower['jct_mean_s']:.2f}",
            _hours(m.jct_p50_s),
            _hours(m.jct_p99_s),
            _hours(m.queue_mean_s),
            _hours(m.makespan_s),
            f"{m.gpu_alloc_frac:.3f}",
            "-" if m.alloc_at_first_wait is None else f"{m.alloc_at_first_wait:.3f}",
            str(m.preemptions),
            f"{m.gpu_hours_lost:.1f}",
            f"{m.decision_ms_mean:.2f}",
            f"{m.decision_ms_p99:.1f}",
        )
    t.add_row(
        "lower bound",
        _hours(lower["jct_mean_s"]),
        "1.00",
        "",
        "",
        "",
        _hours(lower["makespan_s"]),
        *[""] * 6,
        style="dim",
    )
    return t


def _vc_table(results: dict[str, PolicyMetrics]) -> Table:
    t = Table(title="mean queueing delay per VC (hours)")
    t.add_column("vc")
    for name in results:
        t.add_column(name, justify="right")
    vcs = sorted({vc for m in results.values() for vc in m.queue_by_vc_s})
    for vc in vcs:
        t.add_row(Text(vc), *(_hours(m.queue_by_vc_s.get(vc, 0.0)) for m in results.values()))
    return t


def plot_cdfs(results: dict[str, PolicyMetrics], path: Path, title: str) -> None:
    """JCT CDF per policy (log-scale hours) into a PNG (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, m in results.items():
        x = np.sort(np.asarray(m.jcts)) / 3600.0
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _refuse(err: Console, exc: Exception) -> NoReturn:
    """Print ``error: <exc>`` (its text as data: a name or field value in it is never read
    as Rich markup) and exit 2."""
    err.print(Text.assemble(("error:", "red"), " ", str(exc)))
    raise typer.Exit(2)


@app.callback(invoke_without_command=True)
def sim(
    ctx: typer.Context,
    trace_format: str = typer.Option(
        "philly", help="philly | openb | csv (generic, needs --trace and --columns)"
    ),
    trace: Path | None = typer.Option(
        None, help="trace file (default: the shared trace of the format)"
    ),
    columns: str | None = typer.Option(
        None,
        help=(
            "csv: submit=COL,duration=COL,gpus=COL"
            "[,vc=COL,cpu=COL,memory=COL,checkpoint=COL,name=COL]"
        ),
    ),
    time_format: str = typer.Option("seconds", help="csv submit column: seconds | datetime"),
    machines: Path | None = typer.Option(
        None, help="machine list CSV (machineId, number of GPUs, ...)"
    ),
    node_list: Path | None = typer.Option(
        None, help="openb-style node list CSV (sn,cpu_milli,memory_mib,gpu,model)"
    ),
    nodes: int | None = typer.Option(None, help="homogeneous cluster of N nodes"),
    gpus_per_node: int = typer.Option(
        8, help="GPUs per node for --nodes (or for --load on csv traces)"
    ),
    jobs: int | None = typer.Option(None, help="replay N consecutive jobs by submit time"),
    skip: int = typer.Option(0, help="after skipping the first K jobs"),
    load: float | None = typer.Option(None, help="size the cluster so that the window load is L"),
    policies: str | None = typer.Option(None, help="comma-separated policy names (default: all)"),
    restart_cost: float = typer.Option(60.0, help=RESTART_COST_HELP, callback=_restart_cost),
    checkpoint_interval: float | None = typer.Option(
        None, help=CHECKPOINT_HELP, callback=_checkpoint_interval
    ),
    plot: Path | None = typer.Option(None, help="write JCT CDFs per policy to this PNG"),
    json_out: bool = typer.Option(False, "--json", help="print the results as one JSON object"),
    fill_mode: bool = typer.Option(
        False,
        "--fill",
        help="instead of the replay: the FGD fill experiment (allocation ratio as tasks "
        "arrive and never leave) on the cluster as given",
    ),
    workers: int | None = typer.Option(
        None, help="policies replayed in parallel processes (default: min(CPUs, 2))"
    ),
) -> None:
    """Replay a GPU-cluster trace through the scheduler core under each policy."""
    if ctx.invoked_subcommand is not None:
        return  # e.g. ``suite``: its own options
    err = Console(stderr=True)
    try:
        names = parse_policies(policies)
        scenario = build_scenario(
            trace_format,
            trace,
            columns=columns,
            time_format=time_format,
            machines=machines,
            node_list=node_list,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            jobs=jobs,
            skip=skip,
            load=load,
        )
    except (TraceError, OSError) as exc:
        _refuse(err, exc)
    if scenario.stats.skipped:
        err.print(f"trace rows skipped: {scenario.stats.skipped}")
    if fill_mode:
        _fill(scenario, names, json_out)
        return
    n = len(scenario.jobs)
    with Progress(
        TextColumn("{task.description:>14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=json_out,
    ) as bar:
        tasks = {name: bar.add_task(name, total=n) for name in names}
        runs = run_many(
            scenario,
            names,
            workers=workers if workers is not None else min(os.cpu_count() or 1, 2),
            on_progress=lambda name, done: bar.update(tasks[name], completed=done),
            restart_cost_s=restart_cost,
            checkpoint_s=checkpoint_interval,
        )
    results = {name: r[0] for name, r in runs.items()}
    lower = lower_bounds(scenario)
    if json_out:
        typer.echo(json.dumps(to_json(scenario, results, lower), indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)  # files and pipes get the whole table, not folded cells
        out.print(_table(scenario, results, lower))
        out.print(_vc_table(results))
        out.print(
            "seconds per policy (wall/cpu): "
            + ", ".join(f"{k} {w:.1f}/{c:.1f}" for k, (_, w, c) in runs.items())
        )
    if plot is not None:
        plot_cdfs(
            results,
            plot,
            f"{scenario.trace}: {n} jobs, {scenario.gpus} GPUs, load {scenario.load:.2f}",
        )
        err.print(f"wrote {plot}", markup=False, highlight=False)


@app.command("suite")
def suite_cmd(
    jobs: int = typer.Option(2000, help="jobs per trace window (synthetic: jobs generated)"),
    loads: str = typer.Option("0.6,0.8,0.95", help="comma-separated target window loads"),
    policies: str | None = typer.Option(None, help="comma-separated policy names (default: all)"),
    cases: str | None = typer.Option(
        None, help="comma-separated case names of the set replayed (default: all of it)"
    ),
    held_out: bool = typer.Option(
        False,
        "--held-out",
        help="replay the held-out cases (windows and seeds no policy was tuned on) instead",
    ),
    plot: Path | None = typer.Option(None, help="write the criteria ratios per case to this PNG"),
    json_out: bool = typer.Option(False, "--json", help="print the rows as one JSON array"),
    workers: int | None = typer.Option(
        None, help="policies replayed in parallel processes (default: min(CPUs, 2))"
    ),
    restart_cost: float = typer.Option(60.0, help=RESTART_COST_HELP, callback=_restart_cost),
    checkpoint_interval: float | None = typer.Option(
        None, help=CHECKPOINT_HELP, callback=_checkpoint_interval
    ),
) -> None:
    """Every trace (Philly x3, openb, ITP 04/06, synthetic) x load x policy, as ratios."""
    from scheduler.sim.suite import plot_ratios, run_suite

    err = Console(stderr=True)
    try:
        names = parse_policies(policies)
        load_list = [float(x) for x in loads.split(",") if x.strip()]
    except (TraceError, ValueError) as exc:
        _refuse(err, exc)
    try:
        rows = run_suite(
            names,
            jobs=jobs,
            loads=load_list,
            only=[c.strip() for c in cases.split(",")] if cases else None,
            held_out=held_out,
            workers=workers if workers is not None else min(os.cpu_count() or 1, 2),
            restart_cost_s=restart_cost,
            checkpoint_s=checkpoint_interval,
            log=lambda line: err.print(line, markup=False, highlight=False),
        )
    except ValueError as exc:
        _refuse(err, exc)
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
    else:
        vs_t = "tiresias-las" in names
        unit = "/ Tiresias-LAS's" if vs_t else "x mean-JCT lower bound"
        t = Table(
            title=f"robustness suite: {jobs} jobs per case; mean / p99 JCT {unit}; "
            f"a preemption costs {restart_cost:g} s"
            + (
                f" + the work since a checkpoint (every {checkpoint_interval:g} s)"
                if checkpoint_interval
                else ""
            ),
            caption="ratios on mean JCT unless p99; criteria: pasture/tiresias <= 1, "
            "pasture p99/best (rigid) <= 1.5, backfill/fifo <= 1, elastic/tiresias <= 0.67, "
            "elastic/afs-like <= 1, p99 elastic/tiresias <= 1",
        )
        for col in ("case", "load", "GPUs", *names):
            t.add_column(col, justify="left" if col == "case" else "right")
        for col in (
            "pasture/tiresias",
            "p99 pasture/best",
            "backfill/fifo",
            "pasture/srtf",
            "elastic/tiresias",
            "p99 elastic/tiresias",
            "afs-like/tiresias",
            "elastic/afs-like",
            "elastic/afs-las",
            "p99 elastic/best",
            "pollux-like/tiresias",
            "elastic/pollux-like",
        ):
            t.add_column(col, justify="right")
        for r in rows:
            if "error" in r:
                t.add_row(r["case"], str(r["target_load"]), "-", Text(f"failed: {r['error']}"))
                continue
            pol = r["vs_tiresias"] if vs_t and r.get("vs_tiresias") else r["policies"]
            ra = r["ratios"]
            t.add_row(
                r["case"],
                f"{r['load']:.2f}",
                str(r["gpus"]),
                *(f"{pol[n]['mean']:.2f}/{pol[n]['p99']:.2f}" for n in names),
                *("-" if v is None else f"{v:.2f}" for v in ra.values()),
            )
        Console(width=220).print(t)
    if plot is not None:
        plot_ratios(rows, plot)
        err.print(f"wrote {plot}", markup=False, highlight=False)


def _fill(scenario: Scenario, names: list[str], json_out: bool) -> None:
    nodes = [s.to_node() for s in scenario.shapes]
    results = {}
    err = Console(stderr=True)
    for name in names:
        if name not in PRESETS:  # a simulator baseline has no core policy to fill with
            err.print(f"fill: {name} skipped (a simulator baseline, not a core policy)")
            continue
        with err.status(f"fill: {name}"):
            results[name] = fill(nodes, scenario.jobs, PRESETS[name])
    if json_out:
        doc = {
            "trace": scenario.trace,
            "gpus": scenario.gpus,
            "fill": {
                n: {
                    "curve": [list(p) for p in r.curve],
                    "arrived": r.arrived,
                    "failed": r.failed,
                    "first_failure_alloc": r.first_failure_alloc,
                }
                for n, r in results.items()
            },
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    t = Table(
        title=f"fill on {scenario.gpus} GPUs, {len(scenario.shapes)} nodes: "
        "GPU allocation ratio when arrived requests reach x of capacity"
    )
    t.add_column("policy")
    points = [p for p, _ in next(iter(results.values())).curve]
    for p in points:
        t.add_column(f"{p:.0%}", justify="right")
    t.add_column("failed tasks", justify="right")
    t.add_column("alloc at 1st failure", justify="right")
    for name, r in results.items():
        first = "-" if r.first_failure_alloc is None else f"{r.first_failure_alloc:.3f}"
        t.add_row(name, *(f"{a:.3f}" for _, a in r.curve), str(r.failed), first)
    Console(width=160).print(t)


def main() -> None:
    app()
