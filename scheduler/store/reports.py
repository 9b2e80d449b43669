"""The loop's side of node reports: apply what agents queued in their report streams.

Agents write only their own keys (:mod:`scheduler.store.acl`); a change to a task record
arrives as an entry of ``node:<node>:reports`` (:class:`scheduler.store.agent_store.
NodeStore`). :func:`apply_node_reports`, called by the loop at the start of each cycle::

    nodes set -> XRANGE each node's stream (at most MAX_PER_NODE entries)
       kind task      ledger[<job>/<key>] on this node at this attempt?
                         yes -> Store.report_task (the REPORT_TASK script: current
                                attempt, unfinished task) -> jobs:dirty, as before
                         no  -> dropped: warning log + stats field reports_dropped
       kind register  -> version bump when the node's capacity/labels/state changed
       kind node      -> version bump (a lost node came back ready)
    -> XDEL the entries read

A loop killed between applying and XDEL applies those entries again next cycle: task
reports are idempotent in REPORT_TASK (a finished task ignores later reports) and a
version bump only makes one commit retry.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from scheduler.store.records import Allocation, TaskState
from scheduler.store.store import Store

log = logging.getLogger("pasture.store.reports")

MAX_PER_NODE = 1000  # entries read per node per cycle (bounds one cycle's work)
# states an agent may report, and the longest message / handle kept (characters)
REPORTABLE = frozenset(
    {TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED}
)
MAX_MESSAGE = 4096
MAX_HANDLE = 512


@dataclass
class ReportsApplied:
    """What one :func:`apply_node_reports` call did (counts of stream entries)."""

    applied: int = 0  # task reports that changed a task record
    stale: int = 0  # task reports about a bound task that REPORT_TASK ignored
    dropped: int = 0  # task reports about a task the ledger does not bind to that node
    nodes: int = 0  # register / node reports (each bumps the version when it says so)


def apply_node_reports(store: Store) -> ReportsApplied:
    """Apply every node's queued reports (see the module docstring). One pipelined read of
    the streams, one of the ledger entries they name, one script call per task report.

    Returns the counts; raises redis errors (the loop's cycle logs them and retries)."""
    out = ReportsApplied()
    nodes = sorted(store.r.smembers(store.k("nodes")))
    if not nodes:
        return out
    pipe = store.r.pipeline(transaction=False)
    for n in nodes:
        pipe.xrange(store.k("node", n, "reports"), count=MAX_PER_NODE)
    streams = {n: entries for n, entries in zip(nodes, pipe.execute(), strict=True) if entries}
    if not streams:
        return out
    wanted = sorted(
        {
            f"{f.get('job', '')}/{f.get('key', '')}"
            for entries in streams.values()
            for _, f in entries
            if f.get("kind") == "task"
        }
    )
    ledger: dict[str, str | None] = {}
    if wanted:
        ledger = dict(zip(wanted, store.r.hmget(store.k("ledger"), wanted), strict=True))
    bump = False
    for node, entries in streams.items():
        for _, f in entries:
            kind = f.get("kind")
            if kind == "task":
                _apply_task(store, node, f, ledger, out)
            elif kind in ("register", "node"):
                out.nodes += 1
                bump = bump or kind == "node" or f.get("changed") == "1"
            else:
                log.warning("node %s: unknown report kind %r dropped", node, kind)
    pipe = store.r.pipeline(transaction=False)
    for node, entries in streams.items():
        pipe.xdel(store.k("node", node, "reports"), *[eid for eid, _ in entries])
    if out.dropped:
        pipe.hincrby(store.k("stats"), "reports_dropped", out.dropped)
    if bump:
        pipe.incr(store.k("version"))
    pipe.execute()
    return out


def _apply_task(
    store: Store, node: str, f: dict[str, str], ledger: dict[str, str | None], out: ReportsApplied
) -> None:
    job, key = f.get("job", ""), f.get("key", "")
    try:
        attempt = int(f.get("attempt", ""))
        code = int(f["exit_code"]) if f.get("exit_code") else None
    except ValueError:
        attempt, code = -1, None
    if f.get("state") not in REPORTABLE or attempt < 0:
        out.dropped += 1
        log.warning("dropped a malformed report of node %s: %s", node, f)
        return
    raw = ledger.get(f"{job}/{key}")
    alloc = Allocation.from_dict(json.loads(raw)) if raw else None
    if alloc is None or alloc.node != node or alloc.attempt != attempt:
        out.dropped += 1
        log.warning(
            "dropped a report of node %s on task %s/%s attempt %s: the ledger binds it to %s",
            node,
            job,
            key,
            f.get("attempt"),
            f"{alloc.node} (attempt {alloc.attempt})" if alloc else "no node",
        )
        return
    if store.report_task(
        job,
        key,
        attempt,
        node,
        f.get("state", ""),
        code,
        f.get("message", "")[:MAX_MESSAGE],
        f.get("handle", "")[:MAX_HANDLE],
    ):
        out.applied += 1
    else:
        out.stale += 1


__all__ = ["MAX_PER_NODE", "ReportsApplied", "apply_node_reports"]
