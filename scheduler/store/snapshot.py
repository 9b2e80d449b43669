"""Read a consistent-enough Snapshot for the core, and turn its Decision into a commit.

Consistency: the ledger version is read FIRST; every write that changes what the core may
rely on (allocations, node capacity/state, VCs) bumps it, and the commit script rejects a
Decision whose version is stale. So a snapshot torn by a concurrent change is harmless: its
Decision is refused and the next cycle retries.

Ports and GPU devices are chosen here, at commit time: for each placed task, the lowest
free ports of its node's ``port_range`` (one per named port, ``main`` by default) and the
lowest free GPU indices, free meaning not held by any ledger entry on that node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.model import (
    Decision,
    Job,
    RunningJob,
    Snapshot,
    VirtualCluster,
)
from scheduler.core.resources import Resources
from scheduler.spec.facts import initial_desired, port_names
from scheduler.spec.model import JobSpec
from scheduler.states import JobState
from scheduler.store.records import JobRecord, NodeRecord
from scheduler.store.store import Store
from scheduler.store.view import LedgerView


@dataclass
class SnapshotContext:
    """What the commit needs besides the Decision: nodes, specs, used ports / GPUs."""

    version: int
    nodes: dict[str, NodeRecord]
    jobs: dict[str, JobRecord]
    specs: dict[str, JobSpec]
    used_ports: dict[str, set[int]] = field(default_factory=dict)
    used_gpus: dict[str, set[int]] = field(default_factory=dict)


def _res(d: dict[str, int] | None) -> Resources | None:
    if d is None:
        return None
    return Resources(cpu_m=int(d["cpu_m"]), memory=int(d["memory"]), gpu=int(d["gpu"]))


def run_history(job: JobRecord) -> tuple[float, float | None]:
    """(seconds the job's ended attempts held an allocation, when the last of them ended)
    from ``JobRecord.attempts``: the core's ``Job.executed_s`` and ``Job.requeued_at``, the
    input of Tiresias' STARVELIMIT (:mod:`scheduler.core.starvation`); (0.0, None) for a
    job that has not ended an attempt. Entries without both times count 0 s."""
    executed = 0.0
    for a in job.attempts:
        started, ended = a.get("started"), a.get("ended")
        if isinstance(started, int | float) and isinstance(ended, int | float):
            executed += max(0.0, float(ended) - float(started))
    last = job.attempts[-1].get("ended") if job.attempts else None
    return executed, float(last) if isinstance(last, int | float) else None


def take_snapshot(
    store: Store,
    spec_cache: dict[tuple[str, float], JobSpec] | None = None,
    jobs: list[JobRecord] | None = None,
    core_cache: dict[tuple[object, ...], Job] | None = None,
    view: LedgerView | None = None,
) -> tuple[Snapshot, SnapshotContext]:
    """Snapshot of nodes, VCs, queued jobs and allocations (see module docstring).

    Args:
        spec_cache: ``{(job, created): JobSpec}``; avoids fetching and validating unchanged
            specs in every cycle; filled as a side effect.
        jobs: the active jobs when the caller has just read them (the loop). Job records
            need no version protection: the commit script re-checks state and attempt.
        core_cache: the core's Job per (name, created, attempt, attained, user); the
            caller prunes it.
        view: the loop's :class:`~scheduler.store.view.LedgerView` (refreshed here, so
            nodes, VCs and ledger are read only after a version gap); None reads them.
    """
    core_cache = {} if core_cache is None else core_cache
    jobs_list = store.active_jobs(with_spec=False) if jobs is None else jobs
    if view is None:
        view = LedgerView()
    version = view.refresh(store)
    node_recs, vcs = view.nodes, view.vcs
    by_name = {j.name: j for j in jobs_list if not JobState(j.state).terminal}
    cache = {} if spec_cache is None else spec_cache
    missing = [j.name for j in by_name.values() if (j.name, j.created) not in cache]
    raw_specs = store.job_specs(missing) if missing else {}
    specs: dict[str, JobSpec] = {}
    for j in list(by_name.values()):
        key = (j.name, j.created)
        if key not in cache:
            if j.name not in raw_specs:
                del by_name[j.name]  # vanished meanwhile
                continue
            cache[key] = JobSpec.model_validate(raw_specs[j.name])
        specs[j.name] = cache[key]
    nodes = view.core_nodes()
    pending = []
    running = []
    for name, j in by_name.items():
        ckey = (name, j.created, j.attempt, j.attained_service, j.user)
        core_job = core_cache.get(ckey)
        if core_job is None:
            executed_s, requeued_at = run_history(j)
            core_job = core_cache[ckey] = replace(
                specs[name].to_core(
                    submit_time=j.created,
                    user=j.user,
                    attempt=j.attempt,
                    attained_service=j.attained_service,
                ),
                executed_s=executed_s,
                requeued_at=requeued_at,
            )
        placements = view.placements(name)
        if placements:
            running.append(
                RunningJob(
                    job=core_job,
                    start_time=j.scheduled_time or j.created,
                    placements=placements,
                    resized_at=j.resized_at,
                )
            )
        elif j.state == JobState.QUEUED and not j.stop_requested:
            pending.append(core_job)
    snapshot = Snapshot(
        nodes=nodes,
        vcs=tuple(
            VirtualCluster(
                name=v["name"],
                guarantee=_res(v["guarantee"]) or Resources(),
                max=_res(v["max"]),
                can_borrow=bool(v["can_borrow"]),
            )
            for v in vcs.values()
        ),
        pending=tuple(pending),
        running=tuple(running),
        version=version,
    )
    return snapshot, SnapshotContext(
        version, node_recs, by_name, specs, view.used_ports, view.used_gpus
    )


class PortsExhaustedError(RuntimeError):
    """A node's port range has no free port left for a placed task."""


def commit_payload(decision: Decision, ctx: SnapshotContext) -> dict[str, Any]:
    """The commit script's payload for ``decision``: binds (and grows: tasks added to
    running jobs placed at min_available) with ledger entries and task records (ports and
    GPU indices chosen), preemptions and pending reasons.

    Binds whose ports cannot be assigned are left out (the job stays queued with a reason
    in ``payload['pending']``).
    """
    used_ports: dict[str, set[int]] = {}  # copies of the nodes this Decision touches
    used_gpus: dict[str, set[int]] = {}
    binds: list[dict[str, Any]] = []
    pending = {job: _reason_json(r.kind.value, r.message) for job, r in decision.pending.items()}
    grows: list[dict[str, Any]] = []
    for kind, bind in [("bind", b) for b in decision.binds] + [("grow", b) for b in decision.grows]:
        job = ctx.jobs.get(bind.job)
        spec = ctx.specs.get(bind.job)
        if job is None or spec is None or not bind.placements:
            continue
        tasks = []
        try:
            for pl in bind.placements:
                node = ctx.nodes[pl.node]
                names = port_names(spec, pl.role)
                if pl.node not in used_ports:
                    used_ports[pl.node] = set(ctx.used_ports.get(pl.node, ()))
                    used_gpus[pl.node] = set(ctx.used_gpus.get(pl.node, ()))
                ports = _take_ports(node, used_ports[pl.node], len(names))
                gpus = _take_gpus(node, used_gpus[pl.node], pl.resources.gpu)
                alloc = {
                    "job": bind.job,
                    "role": pl.role,
                    "index": pl.index,
                    "attempt": job.attempt,
                    "node": pl.node,
                    "cpu_m": pl.resources.cpu_m,
                    "memory": pl.resources.memory,
                    "gpu": pl.resources.gpu,
                    "gpus": gpus,
                    "ports": ports,
                }
                task = {
                    "role": pl.role,
                    "index": pl.index,
                    "attempt": job.attempt,
                    "node": pl.node,
                    "address": node.address,
                    "ports": dict(zip(names, ports, strict=True)),
                    "gpus": gpus,
                    "cpu_m": pl.resources.cpu_m,
                    "memory": pl.resources.memory,
                    "gpu": pl.resources.gpu,
                    "state": "scheduled",
                    "desired": initial_desired(spec, pl.role),
                    "exit_code": None,
                    "message": "",
                    "handle": "",
                }
                tasks.append(
                    {"key": f"{pl.role}-{pl.index}", "node": pl.node, "alloc": alloc, "task": task}
                )
        except PortsExhaustedError as exc:
            if kind == "bind":
                pending[bind.job] = _reason_json("insufficient-resources", str(exc))
            continue
        nodes = sorted({pl.node for pl in bind.placements})
        (binds if kind == "bind" else grows).append(
            {"job": bind.job, "attempt": job.attempt, "tasks": tasks, "nodes": ", ".join(nodes)}
        )
    return {
        "binds": binds,
        "grows": grows,
        "preemptions": [
            {"job": p.job, "reason": p.reason}  # worded by the core for the victim's VC
            for p in decision.preemptions
        ],
        "pending": pending,
    }


def _reason_json(kind: str, message: str) -> str:
    import json

    return json.dumps({"kind": kind, "message": message})


def _take_ports(node: NodeRecord, used: set[int], n: int) -> list[int]:
    lo, hi = node.port_range
    out: list[int] = []
    port = lo
    while len(out) < n and port <= hi:
        if port not in used:
            out.append(port)
            used.add(port)
        port += 1
    if len(out) < n:
        raise PortsExhaustedError(f"node {node.name} has no free port in {lo}-{hi}")
    return out


def _take_gpus(node: NodeRecord, used: set[int], n: int) -> list[int]:
    free = [i for i in range(node.gpu) if i not in used][:n]
    used.update(free)
    return free


def with_releasing(
    snapshot: Snapshot, jobs: dict[str, JobRecord], nominations: dict[str, Any]
) -> Snapshot:
    """The snapshot with running jobs that are already on their way out (preempted, or
    stopping) marked ``releasing`` and the previous Decision's nominations, so that the core
    neither preempts them again nor lets a job ahead in the queue take what was freed for
    another (scheduler/core/README.md, "Preemption")."""
    running = snapshot.running
    if any(_ending(jobs.get(rj.name)) for rj in running):
        running = tuple(
            replace(rj, releasing=True) if _ending(jobs.get(rj.name)) else rj for rj in running
        )
    if running is snapshot.running and not nominations:
        return snapshot
    return replace(snapshot, running=running, nominations=nominations)


def _ending(rec: JobRecord | None) -> bool:
    return rec is not None and (
        rec.state == JobState.PREEMPTED or bool(rec.ending) or bool(rec.stop_requested)
    )
