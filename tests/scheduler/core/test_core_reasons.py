"""Pending reasons a person can read, and determinism of whole decisions."""

from __future__ import annotations

from scheduler.core import Policy, ReasonKind, schedule
from scheduler.core.reasons import fmt_cpu, fmt_mem, fmt_request
from tests.factories import GiB, job, node, res, running, snapshot, vc


def test_largest_free_block_message():
    nodes = [node("node-1", used=res(0, 0, 6)), node("node-7", used=res(0, 0, 4))]
    s = snapshot(nodes, [job("j", gpu=8)])
    why = schedule(s, Policy(), 0.0).pending["j"]
    assert why.kind is ReasonKind.INSUFFICIENT_RESOURCES
    assert why.message == "needs 8 GPUs on one node; largest free block is 4 (node-7)"
    assert why.details["largest_free_gpu"] == 4 and why.details["node"] == "node-7"


def test_gpu_free_but_cpu_short_names_the_resource():
    held = [running(job("r", gpu=0, cpu=4), ["a"])]
    s = snapshot([node("a", cpu=8)], [job("j", gpu=1, cpu=8)], held)
    why = schedule(s, Policy(), 0.0).pending["j"]
    assert why.kind is ReasonKind.INSUFFICIENT_RESOURCES
    assert "lack the cpu or memory" in why.message and "4 cpu" in why.message


def test_cpu_only_task_reason():
    s = snapshot(
        [node("a", gpu=0, cpu=4)],
        [job("j", gpu=0, cpu=2)],
        [running(job("r", gpu=0, cpu=3), ["a"])],
    )
    why = schedule(s, Policy(), 0.0).pending["j"]
    assert why.message.startswith("role worker needs 2 cpu and 1Gi on one node")
    assert "the most free cpu is 1 cpu" in why.message


def test_no_fit_ever_names_the_largest_node():
    s = snapshot([node("small", gpu=4), node("big", gpu=8)], [job("j", gpu=16)])
    why = schedule(s, Policy(), 0.0).pending["j"]
    assert why.kind is ReasonKind.NO_FIT_EVER
    assert "largest node has 8 GPUs" in why.message and "(big)" in why.message


def test_every_pending_job_gets_exactly_one_reason_or_a_bind():
    nodes = [node("a", gpu=8)]
    pending = [
        job("fits", gpu=4, submit=0),
        job("vc-ghost", vc="ghost", submit=1),
        job("too-big", gpu=16, submit=2),
        job("waits", gpu=8, submit=3),
    ]
    d = schedule(snapshot(nodes, pending, vcs=[vc("default")]), Policy(), 0.0)
    bound = {b.job for b in d.binds}
    assert bound == {"fits"}
    assert set(d.pending) == {"vc-ghost", "too-big", "waits"}
    assert all(r.message for r in d.pending.values())


def test_formatting_helpers():
    assert fmt_cpu(500) == "500m cpu" and fmt_cpu(1000) == "1 cpu"
    assert fmt_mem(512 * 1024**2) == "512Mi" and fmt_mem(64 * GiB) == "64Gi"
    assert fmt_request(2000, 4 * GiB, 1) == "1 GPU, 2 cpu and 4Gi"


def test_decisions_are_deterministic():
    nodes = [node(f"n{i}", gpu=8, used=res(0, 0, i % 5)) for i in range(20)]
    held = [running(job(f"r{i}", gpu=1, priority=25), [f"n{i}"], start=float(i)) for i in range(5)]
    pending = [
        job(
            f"j{i}",
            gpu=1 + i % 8,
            replicas=1 + i % 3,
            priority=(25, 50, 75)[i % 3],
            submit=float(i),
            estimate=100.0 * i if i % 2 else None,
        )
        for i in range(30)
    ]
    s = snapshot(nodes, pending, held)
    a = schedule(s, Policy(), 1000.0)
    b = schedule(s, Policy(), 1000.0)
    assert a == b
    assert a.binds  # the scenario does exercise placement


def test_an_invalid_job_gets_a_reason_instead_of_stopping_the_cycle():
    bad = job("bad", replicas=2, min_available=3)
    d = schedule(snapshot([node("a")], [bad, job("good")]), Policy(), 0.0)
    assert [b.job for b in d.binds] == ["good"]
    assert d.pending["bad"].kind is ReasonKind.NO_FIT_EVER
    assert d.pending["bad"].message == (
        "invalid job: role worker has min_available 3 (expected 0..2, its replicas)"
    )
