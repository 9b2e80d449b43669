"""Chaos, second round (issue 25): a gang that loses a node, a frozen node, a task no
executor can launch, a store outage of two thirds of the lease, a Sentinel failover.

Real redis-server (and redis-server --sentinel), loop, agents and task processes; the
invariants come from the marks the tasks write (scheduler/bench/chaos_task.py) and the
store. The first three share one cluster (3 nodes x 2 CPUs, 0.5 s heartbeats, 1.5 s lease,
a node lost after about 7 s); the outage and the failover each get a cluster whose timings
are the production defaults scaled by 1/15 (lease 12 s, lost after 20 s, heartbeat 1/3 s),
so a 8 s outage here is the 2-minute outage of the default claim (same outage / lease
ratio, docs/faults.md "Bounds").
"""

from __future__ import annotations

import shutil
import time

import pytest

from scheduler.bench.chaos import (
    SCALED_LEASE_S,
    SCALED_OUTAGE_S,
    Chaos,
    chaos_cluster,
    failover,
    late_writes,
    node_freeze,
    node_power_off,
    node_thaw,
    scaled_cluster,
    submit_broken,
    submit_gang,
    successor_started,
)
from scheduler.states import TERMINAL_JOB_STATES

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def needs_redis() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")


@pytest.fixture(scope="module")
def chaos(tmp_path_factory):
    needs_redis()
    with chaos_cluster(
        tmp_path_factory.mktemp("faults2") / "dev", nodes=3, partitionable=False
    ) as c:
        yield c


def job(c: Chaos, name: str):
    return c.store.get_job(name)


def wait_job(c: Chaos, name: str, timeout: float = 120.0):
    c.wait_done([name], timeout=timeout)
    j = job(c, name)
    assert j.state in TERMINAL_JOB_STATES, f"{name} still {j.state}: {j.reason}"
    return j


def gang_nodes(c: Chaos, name: str, timeout: float = 60.0) -> dict[str, str]:
    """{task key: node} once both tasks of the gang tick."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = c.running_runs([name])
        if len(runs) == 2:
            return {r["key"]: r["node"] for r in runs}
        time.sleep(0.2)
    raise TimeoutError(f"gang {name} did not start: {job(c, name).state}")


def test_gang_loses_a_node_and_succeeds_on_retry_with_nothing_charged(chaos):
    name = submit_gang(chaos, "gang", work_s=14.0, peer_timeout_s=1.0)
    nodes = gang_nodes(chaos, name)
    lost = nodes["w-0"]
    i = chaos.cluster.nodes.index(lost)
    node_power_off(chaos, i)  # the agent and its task die at once: w-1 exits 1 within ~1 s
    try:
        j = wait_job(chaos, name)
    finally:
        chaos.cluster.start_agent(i)
    assert j.state == "succeeded", j.reason
    assert j.failures == 0
    first = j.attempts[0]
    assert first["state"] == "queued" and not first["charged"], first
    assert first["cause"] == "node_lost", first
    # the survivor did exit 1 on its own (what used to fail the job), before the verdict
    tasks = {t.key: t for t in chaos.store.tasks(name)}
    assert all(t.attempt == j.attempt for t in tasks.values())
    assert chaos.check([name])["two_places_at_once"] == 0


def test_frozen_node_writes_nothing_after_its_successor_starts(chaos):
    names = chaos.submit(1, 20.0, cpu_m=2000, prefix="frozen")
    chaos.wait_running(names)
    run = chaos.running_runs(names)[0]
    i = chaos.cluster.nodes.index(run["node"])
    procs = node_freeze(chaos, i)
    try:
        deadline = time.monotonic() + 60
        while successor_started(chaos, names[0], run["attempt"]) is None:
            assert time.monotonic() < deadline, "no successor started on another node"
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        node_thaw(procs)  # tasks first: they run before their agent and watchdog
    time.sleep(2.0)  # the thawed task had every chance to write
    assert late_writes(chaos, names[0]) == 0
    j = wait_job(chaos, names[0])
    assert j.state == "succeeded" and j.failures == 0, j.reason
    assert chaos.check(names)["two_places_at_once"] == 0


def test_a_task_no_executor_can_launch_blocks_nothing_and_stop_ends_its_job(chaos):
    broken = submit_broken(chaos, "broken-1")
    others = chaos.submit(6, 3.0, cpu_m=500, prefix="beside")  # share the broken task's node
    stoppable = submit_broken(chaos, "broken-stop", max_attempts=100)
    j = wait_job(chaos, broken, timeout=60)
    assert j.state == "failed"
    (t,) = chaos.store.tasks(broken)
    assert "launch_error" in t.message and t.diagnosis["kind"] == "start_failed", t
    chaos.store.request_stop(stoppable, "stopped by the chaos test")
    s = wait_job(chaos, stoppable, timeout=60)
    assert s.state in ("stopped", "failed"), s.reason
    chaos.wait_done(others, timeout=60)
    assert {job(chaos, n).state for n in others} == {"succeeded"}


@pytest.fixture()
def scaled(tmp_path):
    needs_redis()
    with scaled_cluster(tmp_path / "dev", nodes=2) as c:
        yield c


def test_store_outage_of_two_thirds_of_the_lease_restarts_no_task(scaled):
    names = scaled.submit(4, SCALED_OUTAGE_S + 10.0, cpu_m=500, prefix="outage")
    scaled.wait_running(names)
    scaled.store_outage(down_s=SCALED_OUTAGE_S)
    scaled.wait_done(names, timeout=120)
    assert_first_attempt(scaled, names)
    assert scaled.survived["store_outage"][0] >= SCALED_OUTAGE_S


@pytest.fixture()
def sentinel(tmp_path):
    needs_redis()
    with scaled_cluster(tmp_path / "dev", nodes=2, sentinel=True) as c:
        yield c


def test_sentinel_failover_restarts_no_task(sentinel):
    names = sentinel.submit(4, 16.0, cpu_m=500, prefix="failover")
    sentinel.wait_running(names)
    took = failover(sentinel)
    assert took < SCALED_LEASE_S  # else the agents would have fenced
    more = sentinel.submit(2, 2.0, cpu_m=500, prefix="after")  # the new primary schedules
    sentinel.wait_done(names + more, timeout=120)
    assert_first_attempt(sentinel, names + more)


def assert_first_attempt(c: Chaos, names: list[str]) -> None:
    """Every job succeeded on its first attempt with one run per task: nothing
    restarted, requeued or charged."""
    jobs = c.store.get_jobs(names, with_spec=False)
    assert [j.state for j in jobs] == ["succeeded"] * len(names), [
        (j.name, j.state, j.reason) for j in jobs
    ]
    assert all(not j.attempts[:-1] and j.failures == 0 for j in jobs), [j.attempts for j in jobs]
    counts = c.check(names)
    assert counts["runs"] == len(names) and counts["runs_killed"] == 0, counts
