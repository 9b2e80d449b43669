"""Chaos against a process-mode cluster (real redis-server, loop, agents, task processes):
the store down for 3x the heartbeat timeout with 20 jobs running, an agent SIGKILLed, an
agent partitioned from Redis through a TCP proxy, the loop SIGKILLed in a loop, two loops
at once. The invariants are read from the marks the tasks write themselves
(scheduler/bench/chaos_task.py) and from the store: 0 jobs lost, 0 tasks running in two
places at once, 0 over-committed nodes, 0 jobs failed or charged an attempt.

One cluster serves the whole module (3 nodes x 2 CPUs, 0.5 s heartbeats, 3 s heartbeat
timeout, 1.5 s agent lease); each test submits its own jobs, waits until they all run,
injects its fault and waits for them to end. Robust to a loaded machine: nothing asserts
how fast anything happened, only what did and did not happen.
"""

from __future__ import annotations

import shutil

import pytest

from scheduler.bench.chaos import HEARTBEAT_TIMEOUT_S, Chaos, chaos_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

WORK_S = 12.0  # long enough that every job of a test runs when the fault hits


@pytest.fixture(scope="module")
def chaos(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    with chaos_cluster(tmp_path_factory.mktemp("chaos") / "dev", nodes=3) as c:
        yield c


def assert_invariants(c: Chaos, names: list[str]) -> dict:
    c.wait_done(names)
    counts = c.check(names)
    bad = {
        k: counts[k]
        for k in (
            "jobs_lost",
            "jobs_failed",
            "charged_attempts",
            "two_places_at_once",
            "overcommitted_nodes",
        )
        if counts[k]
    }
    assert not bad, f"invariants broken: {bad}; all counts: {counts}"
    return counts


def infra_requeues(counts: dict) -> int:
    """Requeues the infrastructure caused: node lost, or fenced (when the agent came back
    before the loop declared its node lost, it reports its fenced tasks itself)."""
    by = counts["requeues_by_cause"]
    return by.get("node_lost", 0) + by.get("fenced", 0)


def test_store_down_for_three_heartbeat_timeouts_with_20_jobs_running(chaos):
    names = chaos.submit(20, WORK_S, cpu_m=250, prefix="outage")
    chaos.wait_running(names)
    chaos.store_outage(down_s=3 * HEARTBEAT_TIMEOUT_S)
    # no node was declared lost for the outage: silence restarts when the store answers
    assert {n.state for n in chaos.store.list_nodes()} == {"ready"}
    counts = assert_invariants(chaos, names)
    assert counts["survived_s"]["store_outage"][0] >= 3 * HEARTBEAT_TIMEOUT_S
    # (the agents fenced their tasks when their leases ran out: requeued, not charged; on
    # a starved machine an agent may also miss heartbeats after the outage and be lost,
    # which the invariants above cover too)


def test_agent_sigkill_its_tasks_die_and_run_elsewhere_uncharged(chaos):
    names = chaos.submit(12, WORK_S, cpu_m=500, prefix="akill")  # fills all 3 nodes
    chaos.wait_running(names)
    on_0 = {r["job"] for r in chaos.running_runs(names) if r["node"] == "dev-node-0"}
    assert on_0, "no job ran on dev-node-0"
    chaos.agent_kill(0)
    counts = assert_invariants(chaos, names)
    assert infra_requeues(counts) >= len(on_0)


def test_agent_partitioned_from_the_store_fences_itself(chaos):
    names = chaos.submit(12, WORK_S, cpu_m=500, prefix="part")
    chaos.wait_running(names)
    cut = chaos.cluster.nodes[-1]  # the agent behind the proxy
    on_cut = {r["job"] for r in chaos.running_runs(names) if r["node"] == cut}
    assert on_cut, f"no job ran on {cut}"
    chaos.partition()
    counts = assert_invariants(chaos, names)
    assert infra_requeues(counts) >= len(on_cut)


def test_loop_sigkilled_five_times_in_a_row(chaos):
    names = chaos.submit(12, WORK_S / 2, cpu_m=500, prefix="lkill")
    chaos.wait_running(names, k=1)
    chaos.loop_kill(times=5, every_s=1.5)
    more = chaos.submit(12, WORK_S / 2, cpu_m=500, prefix="lkill2")  # placed by the last
    assert_invariants(chaos, names + more)


def test_two_loops_at_once(chaos):
    names = chaos.submit(24, WORK_S / 4, cpu_m=500, prefix="two")  # 2 waves over 12 slots
    chaos.two_loops(s=3 * HEARTBEAT_TIMEOUT_S)
    assert_invariants(chaos, names)
