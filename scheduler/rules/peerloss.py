"""The peer-loss rule of the job lifecycle (:func:`scheduler.rules.lifecycle.decide`): a
gang's own failure right after a peer's node went silent is the infrastructure's.

The ranks of a gang (NCCL, Gloo, MPI) exit non-zero when a peer vanishes, before the loop
can declare the peer's node lost; :class:`PeerWatch` tells such a failure apart from the
task's own (docs/faults.md "A gang's peer lost"). Pure: the heartbeats and ``now`` are
arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.states import TaskState
from scheduler.store.records import Cause, TaskRecord

NODE_SILENT = "node_silent"
"""The cause of an attempt ended by a task's failure during a peer node's heartbeat gap
(:class:`PeerWatch`)."""


@dataclass(frozen=True, slots=True)
class PeerLost:
    """A task's failure that followed the loss (or a long silence) of a peer's node: the
    job is requeued, not charged.

    Attributes:
        cause: what ended the attempt (a ``records.Cause`` value: node_lost, fenced, ...;
            or :data:`NODE_SILENT`).
        because: how, after the failure's own words (``"12 s after its peer w-1's node n2
            went silent (node_lost)"``).
    """

    cause: str
    because: str


def _within(t: float, gap: tuple[float, float]) -> bool:
    """Whether time ``t`` lies in the heartbeat gap ``(gap_from, gap_to)`` (s)."""
    return gap[0] <= t <= gap[1]


@dataclass(frozen=True, slots=True)
class PeerWatch:
    """What the loop knows about the nodes of a job's tasks, for the peer-loss rule.

    A task's own failure (exit non-zero, evicted) is charged to nobody when a peer task
    of the same attempt, on another node, was disrupted (its node lost, or it was fenced
    or unknown to a restarted agent) and the task ended at most ``grace_s`` after that
    peer's node last heartbeated (the ranks of a gang exit when a peer vanishes: NCCL,
    Gloo and MPI abort the collective). While such a peer still counts as running but its
    node has not heartbeated since the task ended, the failure is held: the loop decides
    nothing until the node heartbeats (the failure is then the task's own) or is declared
    lost (then the job is requeued, not charged), or ``grace_s`` passed since the task
    ended (then it is the task's own). A node that heartbeats again after a gap of more
    than two heartbeat intervals (``gaps``) during which the task ended frees the failure
    too (issue 32 item 6): a peer stalled (frozen, partitioned) for less than the lost-node
    timeout still broke the collective, whether or not its node is later lost.

    Attributes:
        heartbeats: ``{node: last heartbeat time}`` (s, store clock), the nodes of the
            job's tasks; a node missing here counts as never heard from.
        now: the store's time (s).
        grace_s: the grace period (s, ``loop.peer_loss_grace_s``).
        gaps: ``{node: (gap_from, gap_to)}`` (s, store clock): the node's last heartbeat
            gap longer than two heartbeat intervals (``NodeRecord.gap_from/gap_to``).
    """

    heartbeats: Mapping[str, float]
    now: float
    grace_s: float
    gaps: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def verdict(self, t: TaskRecord, tasks: Sequence[TaskRecord]) -> PeerLost | str | None:
        """For the own failure of ``t``: :class:`PeerLost` (a peer's node was lost: the
        job is requeued, not charged), a hold reason (str: wait for a silent peer's node),
        or None (charge it as usual)."""
        if t.disrupted or t.finished is None:
            return None
        hold = ""
        for p in tasks:
            if p is t or p.node == t.node:
                continue
            beat = self.heartbeats.get(p.node, 0.0)
            if p.disrupted:
                # a lost node's record keeps its last heartbeat; a fenced peer's node may
                # be back, then its report time bounds when it was fenced
                since = beat if p.state == TaskState.LOST else min(beat, p.finished or beat)
                if t.finished - since <= self.grace_s and (
                    p.state != TaskState.LOST or t.finished >= beat
                ):
                    cause = p.cause or Cause.NODE_LOST.value
                    return PeerLost(
                        cause,
                        f"{max(0.0, t.finished - since):.0f} s after its peer {p.key}'s node "
                        f"{p.node} went silent ({cause})",
                    )
            elif p.node in self.gaps and _within(t.finished, self.gaps[p.node]):
                gap_from, gap_to = self.gaps[p.node]
                return PeerLost(
                    NODE_SILENT,
                    f"while its peer {p.key}'s node {p.node} was silent "
                    f"({gap_to - gap_from:.0f} s without a heartbeat)",
                )
            elif not p.done and beat < t.finished and self.now - t.finished <= self.grace_s:
                hold = hold or (
                    f"task {t.key} ended; waiting for the verdict on node {p.node} (task "
                    f"{p.key}), silent since before it ended"
                )
        return hold or None
