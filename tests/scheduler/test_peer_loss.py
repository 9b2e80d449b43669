"""The peer-loss rule (scheduler.rules.peerloss.PeerWatch): a gang's own failure after a peer's
node went silent is held, then requeued free when the node is lost, charged when the node
is heard from again (docs/faults.md "Bounds")."""

from __future__ import annotations

from scheduler.rules.lifecycle import Ending, FreeRequeues, decide
from scheduler.rules.peerloss import PeerWatch
from scheduler.spec import parse_job_spec
from scheduler.store.records import JobState, TaskRecord, TaskState

GANG = parse_job_spec(
    {"name": "g", "roles": {"w": {"replicas": 2, "command": "train", "resources": {"cpu": 1}}}}
)


def gang(peer: str, survivor_finished: float = 100.0, peer_cause: str = "") -> list[TaskRecord]:
    """w-0 on n0 in state ``peer``; w-1 on n1 exited 1 at ``survivor_finished``."""
    return [
        TaskRecord(role="w", index=0, attempt=1, node="n0", state=peer, cause=peer_cause),
        TaskRecord(
            role="w",
            index=1,
            attempt=1,
            node="n1",
            state=TaskState.FAILED,
            exit_code=1,
            finished=survivor_finished,
        ),
    ]


def watch(n0_beat: float, now: float = 101.0, grace: float = 600.0) -> PeerWatch:
    return PeerWatch({"n0": n0_beat, "n1": now}, now, grace)


def test_without_the_rule_the_survivors_exit_fails_the_job():
    step = decide(GANG, gang(TaskState.RUNNING))
    assert step.ending is not None and step.ending.state == JobState.FAILED
    assert step.ending.failure


def test_held_while_the_peers_node_has_not_heartbeated_since_the_failure():
    step = decide(GANG, gang(TaskState.RUNNING), peers=watch(n0_beat=98.0))
    assert step.ending is None and "waiting for the verdict on node n0" in step.held
    assert not step.restart


def test_charged_once_the_peers_node_heartbeats_again():
    step = decide(GANG, gang(TaskState.RUNNING), peers=watch(n0_beat=100.5))
    assert step.ending is not None and step.ending.failure and not step.held


def test_requeued_free_once_the_peers_node_is_lost():
    step = decide(GANG, gang(TaskState.LOST, peer_cause="node_lost"), peers=watch(98.0, 400))
    assert step.ending == Ending(
        JobState.QUEUED, step.ending.reason, infrastructure=True, cause="node_lost"
    )
    assert not step.ending.failure


def test_a_survivor_is_processed_first_still_requeued_free():
    # the survivor sorts first (index 0): the rule, not the lost task's order, decides
    tasks = gang(TaskState.LOST, peer_cause="node_lost")
    tasks[0].index, tasks[1].index = 1, 0
    step = decide(GANG, tasks, peers=watch(98.0, 400))
    assert step.ending is not None and step.ending.infrastructure
    assert "peer w-1's node n0 went silent" in step.ending.reason


def test_the_peer_loss_rule_shares_the_cap_on_free_requeues():
    """A gang requeued free by the peer-loss rule counts towards loop.max_free_requeues
    like any infrastructure ending: at the cap the job fails, naming the cause."""
    tasks = gang(TaskState.LOST, peer_cause="node_lost")
    tasks[0].index, tasks[1].index = 1, 0  # the survivor first: the peer-loss rule decides
    capped = FreeRequeues(("node_lost",), 1)
    step = decide(GANG, tasks, peers=watch(98.0, 400), requeues=capped)
    assert step.ending is not None and step.ending.state == JobState.FAILED
    assert "peer w-1's node n0 went silent" in step.ending.reason
    assert "(node_lost x2) and loop.max_free_requeues is 1" in step.ending.reason


def test_a_failure_before_the_peers_last_heartbeat_is_the_tasks_own():
    # the survivor (sorted first) failed at 90 s, while n0 still heartbeated until 98 s
    tasks = gang(TaskState.LOST, survivor_finished=90.0, peer_cause="node_lost")
    tasks[0].index, tasks[1].index = 1, 0
    step = decide(GANG, tasks, peers=watch(n0_beat=98.0, now=400))
    assert step.ending is not None and step.ending.failure
    assert step.ending.state == JobState.FAILED


def test_a_failure_past_the_grace_is_the_tasks_own():
    step = decide(
        GANG, gang(TaskState.RUNNING, survivor_finished=100.0), peers=watch(98.0, 800, 60)
    )
    assert step.ending is not None and step.ending.failure


def test_a_fenced_peer_whose_node_came_back_frees_the_failure():
    tasks = gang(TaskState.LOST, peer_cause="fenced")
    tasks[0].finished = 130.0  # reported after its agent came back
    step = decide(GANG, tasks, peers=watch(n0_beat=131.0, now=132.0))
    assert step.ending is not None and step.ending.cause == "fenced"
    assert not step.ending.failure


def test_peers_on_the_same_node_never_hold():
    tasks = gang(TaskState.RUNNING)
    tasks[0].node = "n1"
    step = decide(GANG, tasks, peers=PeerWatch({"n1": 90.0}, 101.0, 600.0))
    assert step.ending is not None and step.ending.failure
