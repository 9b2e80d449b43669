"""Node lifecycle in the loop (scheduler/rules/health.py) over a real redis-server and the real
core, with the loop's monotonic clock played forward by the test: the disruption guard
over a window, nodes gone for good lost in bounded time at a limited rate, nodes whose
Kubernetes Node object is gone, and nodes an operator deleted. Agents are played by the
test through ``store.heartbeat`` / ``store.report_task``."""

from __future__ import annotations

import pytest
import redis

from scheduler.loop import Loop
from scheduler.rules.health import NodeHealth
from scheduler.settings import SchedulerSettings
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, Store, TaskState
from scheduler.store.lease import lost_after_s
from tests.factories import Clock

TIMEOUT = 5.0  # loop.heartbeat_timeout_s of these tests
LEASE = 1.5  # each agent's lease (s): three heartbeats of 0.5 s
FENCE = 2.0  # lease + the executor's kill bound


@pytest.fixture()
def cluster(redis_url):
    """A store with nodes n1..n4 (4 cores each) and a loop on a test clock."""
    settings = SchedulerSettings.model_validate(
        {
            "redis": {"url": redis_url},
            "loop": {"interval_s": 0.1, "heartbeat_timeout_s": TIMEOUT},
            "virtual_clusters": [{"name": "default", "guarantee": {"cpu": 16, "memory": "64Gi"}}],
        }
    )
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.apply_vcs(settings.virtual_clusters)
    clock = Clock()
    return store, Loop(store, settings, clock=clock), clock


def register(store: Store, names, executor: str = "process") -> None:
    for n in names:
        store.register_node(
            NodeRecord(
                name=n,
                address=f"addr-{n}",
                cpu_m=4000,
                memory=8 * 2**30,
                port_range=(31000, 31099),
                executor=executor,
                lease_s=LEASE,
                fence_s=FENCE,
            )
        )


def one_job_per_node(store: Store, loop: Loop, n: int) -> dict[str, str]:
    """Submit n one-task jobs of 3 cores (one fits a node) and start them; job -> node."""
    for i in range(n):
        spec = {"name": f"j{i}", "roles": {"w": {"command": "x", "resources": {"cpu": 3}}}}
        store.create_job(parse_job_spec(spec), user="ann")
    loop.cycle()
    placed = {}
    for i in range(n):
        (t,) = store.tasks(f"j{i}")
        store.report_task(f"j{i}", t.key, t.attempt, t.node, TaskState.RUNNING, None)
        placed[f"j{i}"] = t.node
    loop.cycle()
    return placed


def play(store, loop, clock, alive, seconds, step=0.5, stagger=None):
    """Advance the clock by ``seconds`` in ``step``s, running a cycle each step; the
    ``alive`` nodes heartbeat every step. Returns {node: clock when first seen lost}."""
    lost_at: dict[str, float] = {}
    for _ in range(int(round(seconds / step))):
        for n in alive:
            store.heartbeat(n, {})
        clock.t += step
        loop.cycle()
        for node in store.list_nodes(with_usage=False):
            if node.state == "lost":
                lost_at.setdefault(node.name, clock.t)
    return lost_at


def test_three_of_three_silent_with_staggered_heartbeats_raise_the_disruption(cluster):
    """The agents stop one heartbeat apart: each node crosses its limit alone, yet all
    three missed their lease within the same window, so the condition is raised and no
    node is declared lost at the ordinary limit."""
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3"])
    loop.cycle()
    # staggered: n1 stops first, n2 0.5 s later, n3 1 s later
    play(store, loop, clock, ["n2", "n3"], 0.5)
    play(store, loop, clock, ["n3"], 0.5)
    limit = lost_after_s(TIMEOUT, FENCE)
    lost = play(store, loop, clock, [], limit + 2.0)  # every node past its limit
    assert lost == {}, "a node was declared lost one cycle at a time"
    cond = store.cluster_status()["condition"]
    assert cond["kind"] == "disruption"
    assert cond["nodes"] == ["n1", "n2", "n3"]
    assert "3 of 3 nodes silent within a lease period" in cond["message"]


def test_the_old_cycle_by_cycle_count_would_have_lost_them_one_apart(cluster):
    """Control for the test above: each node alone past its limit is a minority of the
    watched nodes (1 of 3, then 1 of 2, ...), which is what the cycle-by-cycle guard
    counted; the window counts the three."""
    from scheduler.store.lease import is_disruption

    assert not is_disruption(1, 3) and not is_disruption(1, 2) and is_disruption(3, 3)


def test_three_of_four_gone_for_good_are_lost_within_the_bound_and_requeued_free(cluster):
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3", "n4"])
    placed = one_job_per_node(store, loop, 4)
    survivor = "n4"
    gone = sorted(n for n in placed.values() if n != survivor)
    health: NodeHealth = loop._health
    hold, interval = health.disruption_lost_after_s, health.disruption_interval_s
    assert (hold, interval) == (4 * TIMEOUT, TIMEOUT / 2)  # the documented defaults
    # the three stop 0.5 s apart (staggered heartbeats)
    play(store, loop, clock, [survivor, gone[1], gone[2]], 0.5)
    play(store, loop, clock, [survivor, gone[2]], 0.5)
    went_silent = clock.t
    lost_at = play(store, loop, clock, [survivor], hold + 3 * interval + 2.0)
    assert sorted(lost_at) == gone
    # documented bound: hold + (k - 1) * interval after the last went silent, plus the
    # two readings of staggering and one reading step
    bound = hold + (len(gone) - 1) * interval + 1.0 + 0.5
    assert max(lost_at.values()) - went_silent <= bound
    assert min(lost_at.values()) - (went_silent - 1.0) > hold  # not before the hold
    times = sorted(lost_at.values())
    assert all(b - a >= interval for a, b in zip(times, times[1:], strict=False))  # the rate
    assert store.get_node(survivor).state == "ready"
    # the condition was raised while they were held, and cleared once they were lost
    assert store.cluster_status()["condition"] is None
    for n in gone:
        events = store.node_events(n)
        assert any("during a disruption" in e["reason"] for e in events)
    for job, node in placed.items():
        rec = store.get_job(job)
        if node == survivor:
            assert rec.attempt == 1 and rec.state == "running"
            continue
        assert rec.failures == 0 and rec.attempt == 2, (job, rec.state)
        (first,) = rec.attempts
        assert first["cause"] == "node_lost" and first["charged"] is False
        assert any(f"node(s) {node} (no heartbeat" in e["reason"] for e in store.events(job))


def test_a_disruption_holds_the_nodes_until_the_hold_runs_out(cluster):
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3", "n4"])
    loop.cycle()
    hold = loop._health.disruption_lost_after_s
    lost = play(store, loop, clock, ["n4"], hold - 1.0)
    assert lost == {}
    assert store.cluster_status()["condition"]["nodes"] == ["n1", "n2", "n3"]
    # they come back: the condition clears and nobody was lost
    lost = play(store, loop, clock, ["n1", "n2", "n3", "n4"], 1.0)
    assert lost == {} and store.cluster_status()["condition"] is None


def test_a_node_whose_kubernetes_node_object_is_gone_is_lost_at_once(cluster):
    """Disruption or not, a node the cloud removed is lost once its fence surely ran out,
    long before the heartbeat timeout."""
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3"], executor="kubernetes")
    asked: list[list[str]] = []

    def node_gone(names):
        asked.append(sorted(names))
        return {"n1", "n2", "n3"} & set(names) - {"n3"}  # n3's Node object still exists

    loop._health.node_gone = node_gone
    placed = one_job_per_node(store, loop, 3)
    lost = play(store, loop, clock, [], 3.0)  # 3 s > fence 2 s, < timeout 5 s
    assert sorted(lost) == ["n1", "n2"]
    assert all(t <= clock.t - 0.5 for t in lost.values())  # within a reading of the fence
    assert ["n1", "n2", "n3"] in asked
    # checked every 0.5 s once past its fence, n3 is asked about once per 10 s
    assert sum("n3" in names for names in asked) == 1
    assert store.get_node("n3").state == "ready"
    assert store.cluster_status()["condition"] is None  # removed machines: no disruption
    for n in ("n1", "n2"):
        assert "Kubernetes Node object is gone" in store.get_node(n).state_reason
        assert any("Node object is gone" in e["reason"] for e in store.node_events(n))
    for job, node in placed.items():
        if node in ("n1", "n2"):
            loop.cycle()
            rec = store.get_job(job)
            assert rec.failures == 0 and rec.attempts[0]["cause"] == "node_lost"


def test_a_failing_kubernetes_probe_changes_nothing(cluster):
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3", "n4"], executor="kubernetes")

    def node_gone(names):
        raise RuntimeError("API server unreachable")

    loop._health.node_gone = node_gone
    loop.cycle()
    assert play(store, loop, clock, ["n2", "n3", "n4"], 3.0) == {}


def test_an_operator_deletes_a_silent_node(cluster):
    store, loop, clock = cluster
    register(store, ["n1", "n2"])
    placed = one_job_per_node(store, loop, 2)
    victim = placed["j0"]
    store.delete_node(victim, "deleted by admin")
    clock.t += 0.5
    loop.cycle()  # the lifecycle pass requeues its task; the record is still there
    rec = store.get_job("j0")
    assert rec.failures == 0 and rec.attempts[0]["cause"] == "node_lost"
    assert any("(deleted by admin)" in e["reason"] for e in store.events("j0"))
    assert store.get_node(victim).deleted
    clock.t += 0.5
    loop.cycle()  # the next check removes the record
    assert store.get_node(victim) is None
    assert victim not in {n.name for n in store.list_nodes()}
    loop.cycle()
    assert store.get_job("j1").state == "running"


def test_a_deleted_node_whose_agent_comes_back_is_a_node_again(cluster):
    store, loop, clock = cluster
    register(store, ["n1"])
    loop.cycle()
    store.delete_node("n1", "deleted by admin")
    assert store.heartbeat("n1", {}) == "ready"
    node = store.get_node("n1")
    assert node.state == "ready" and not node.deleted


# -- issue 32 items 6 and 7: charge only what the job did ---------------------------------
def gang_on_two_nodes(store: Store, loop: Loop, clock: Clock) -> dict[str, str]:
    """A 2-task gang of 3 cores per task (one task per node) started on n1 and n2;
    returns task key -> node."""
    spec = {
        "name": "g",
        "roles": {"w": {"replicas": 2, "command": "x", "resources": {"cpu": 3}}},
        "retry": {"max_attempts": 3},
    }
    store.create_job(parse_job_spec(spec), user="ann")
    loop.cycle()
    out = {}
    for t in store.tasks("g"):
        store.report_task("g", t.key, t.attempt, t.node, TaskState.RUNNING, None)
        out[t.key] = t.node
    clock.t += 1.0
    loop.cycle()
    assert store.get_job("g").state == "running"
    return out


def stop_peer(store: Store, loop: Loop, clock: Clock, key: str) -> None:
    """Play the peer's agent: its task was asked to stop and stopped; one more cycle."""
    t = next(t for t in store.tasks("g") if t.key == key)
    assert t.desired == "stop"
    store.report_task("g", key, t.attempt, t.node, TaskState.STOPPED, 137)
    clock.t += 0.5
    loop.cycle()


def register_fast(store: Store, names, interval: float = 0.2) -> None:
    """Nodes whose agents heartbeat every ``interval`` s (a gap: more than two)."""
    for n in names:
        store.register_node(
            NodeRecord(
                name=n,
                address=f"addr-{n}",
                cpu_m=4000,
                memory=8 * 2**30,
                port_range=(31000, 31099),
                executor="process",
                lease_s=LEASE,
                fence_s=FENCE,
                heartbeat_interval_s=interval,
            )
        )


def test_a_gang_failure_during_a_peers_short_stall_is_requeued_free(cluster):
    """The peer's node freezes for 0.8 s (four intervals; far below the lease and the
    lost-node timeout) and the survivor's collective breaks meanwhile: once the peer
    heartbeats again the job is requeued free (today: charged as the task's own)."""
    import time

    store, loop, clock = cluster
    register_fast(store, ["n1", "n2"])
    placed = gang_on_two_nodes(store, loop, clock)
    survivor, peer = sorted(placed)
    store.heartbeat(placed[peer], {})
    store.heartbeat(placed[survivor], {})
    time.sleep(0.4)  # the peer's node is frozen (no heartbeat)
    t = next(t for t in store.tasks("g") if t.key == survivor)
    store.report_task("g", survivor, t.attempt, t.node, TaskState.FAILED, 1)
    clock.t += 1.5
    loop.cycle()  # held: the peer's node has not heartbeated since the failure
    assert store.get_job("g").state == "running"
    time.sleep(0.4)
    store.heartbeat(placed[peer], {})  # it thaws: 0.8 s gap > 2 x 0.2 s
    node = store.get_node(placed[peer])
    assert node.gap_to - node.gap_from > 0.4
    clock.t += 1.5
    loop.cycle()  # the attempt ends: the peer's task is asked to stop
    stop_peer(store, loop, clock, peer)
    rec = store.get_job("g")
    assert rec.failures == 0 and rec.attempt == 2, (rec.state, rec.failures)
    (first,) = rec.attempts
    assert first["cause"] == "node_silent" and first["charged"] is False
    assert any("was silent" in e["reason"] for e in store.events("g"))


def test_a_gang_failure_while_the_peer_heartbeats_on_is_charged(cluster):
    """Control: the peer's node heartbeats every interval, so the failure is the job's."""
    import time

    store, loop, clock = cluster
    register_fast(store, ["n1", "n2"])
    placed = gang_on_two_nodes(store, loop, clock)
    survivor, peer = sorted(placed)
    store.heartbeat(placed[peer], {})
    t = next(t for t in store.tasks("g") if t.key == survivor)
    time.sleep(0.1)
    store.report_task("g", survivor, t.attempt, t.node, TaskState.FAILED, 1)
    time.sleep(0.1)
    store.heartbeat(placed[peer], {})
    assert store.get_node(placed[peer]).gap_to == 0.0
    clock.t += 1.5
    loop.cycle()
    stop_peer(store, loop, clock, peer)
    rec = store.get_job("g")
    assert rec.failures == 1, (rec.state, rec.failures)


def test_the_disruption_holds_until_every_silent_node_returned_or_ran_out(cluster):
    """Three of four nodes go silent (disruption); one comes back before the hold ran
    out: the other two stay held (today: lost in that cycle, at the ordinary limit) and
    are lost only past the disruption limit."""
    store, loop, clock = cluster
    register(store, ["n1", "n2", "n3", "n4"])
    loop.cycle()
    hold = loop._health.disruption_lost_after_s
    limit = lost_after_s(TIMEOUT, FENCE)
    lost = play(store, loop, clock, ["n4"], limit + 1.0)
    assert lost == {} and store.cluster_status()["condition"]["kind"] == "disruption"
    lost = play(store, loop, clock, ["n1", "n4"], 2.0)  # n1 returns alone
    assert lost == {}, "the guard dropped when one node returned"
    assert store.cluster_status()["condition"] is not None
    lost = play(store, loop, clock, ["n1", "n4"], hold)
    assert sorted(lost) == ["n2", "n3"]
    assert all(t - clock.t >= -hold for t in lost.values())
    first_silent = clock.t - hold - 2.0 - (limit + 1.0)
    assert min(lost.values()) - first_silent > hold  # not before the disruption limit
    assert store.cluster_status()["condition"] is None


def test_a_forced_delete_fences_before_the_retry_starts(cluster):
    """``node delete --force`` of a node that just heartbeated revokes its lease: its
    agent's heartbeats renew nothing (answered ``revoked``), and the loop requeues its
    task only after the node's fence time (today: at once, beside the running task)."""
    import time

    from scheduler.services.nodes import NodeService
    from scheduler.services.principal import Principal
    from scheduler.store.tokens import TokenRole

    store, loop, clock = cluster
    register(store, ["n1", "n2"])
    placed = one_job_per_node(store, loop, 2)
    victim = placed["j0"]
    store.heartbeat(victim, {})
    admin = Principal(name="root", role=TokenRole.ADMIN)
    out = NodeService(store).delete(admin, victim, force=True)
    assert out["state"] == "cordoned" and out["revoked"] is True
    fence_until = store.get_node(victim).fence_until
    assert fence_until - store.now() > FENCE - 0.5
    assert store.heartbeat(victim, {}) == "revoked"  # no renewal for its agent
    clock.t += 0.5
    loop.cycle()
    rec = store.get_job("j0")
    assert rec.attempt == 1 and rec.state == "running", "retried before the fence ran out"
    time.sleep(max(0.0, fence_until - store.now()) + 0.1)
    clock.t += 0.5
    loop.cycle()
    rec = store.get_job("j0")
    assert rec.attempt == 2 and rec.failures == 0
    assert rec.attempts[0]["cause"] == "node_lost"
    assert any("lease was revoked" in e["reason"] for e in store.node_events(victim))
