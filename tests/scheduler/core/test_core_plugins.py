"""Each filter and scorer, directly and through schedule()."""

from __future__ import annotations

import pytest

from scheduler.core import FILTERS, SCORERS, NodeState, Policy, ReasonKind, schedule
from tests.factories import job, node, res, role, snapshot

FREE = (32_000, 256 * 1024**3, 8)


def _bound_nodes(decision, name):
    b = next(b for b in decision.binds if b.job == name)
    return [p.node for p in b.placements]


# -- filters ----------------------------------------------------------------------------
def test_schedulable_filter_accepts_only_ready_nodes():
    check = FILTERS["schedulable"].check
    r = role()
    assert check(node("a"), FREE, r)
    for state in (NodeState.CORDONED, NodeState.DRAINING, NodeState.LOST):
        assert not check(node("a", state=state), FREE, r)


def test_schedulable_filter_in_schedule_skips_cordoned_and_explains():
    s = snapshot([node("c", state=NodeState.CORDONED), node("r", gpu=2)], [job("j", gpu=4)])
    d = schedule(s, Policy(), 0.0)
    assert d.binds == ()
    assert d.pending["j"].kind is ReasonKind.INSUFFICIENT_RESOURCES
    assert "cordoned, draining or lost" in d.pending["j"].message


def test_gpu_model_filter():
    check = FILTERS["gpu-model"].check
    assert check(node("a", gpu_model="A100"), FREE, role(gpu_model="A100"))
    assert not check(node("a", gpu_model="V100"), FREE, role(gpu_model="A100"))
    assert check(node("a", gpu_model="V100"), FREE, role())
    s = snapshot(
        [node("v", gpu_model="V100"), node("a", gpu_model="A100")],
        [job("j", gpu=8, gpu_model="A100")],
    )
    assert _bound_nodes(schedule(s, Policy(), 0.0), "j") == ["a"]


def test_gpu_model_filter_reason_when_no_node_has_the_model():
    s = snapshot([node("v", gpu_model="V100")], [job("j", gpu=1, gpu_model="H100")])
    why = schedule(s, Policy(), 0.0).pending["j"]
    assert why.kind is ReasonKind.NO_FIT_EVER
    assert "GPU model H100" in why.message


def test_node_selector_filter():
    check = FILTERS["node-selector"].check
    assert check(node("a", labels={"pool": "x", "zone": "1"}), FREE, role(selector={"pool": "x"}))
    assert not check(node("a", labels={"pool": "y"}), FREE, role(selector={"pool": "x"}))
    assert not check(node("a"), FREE, role(selector={"pool": "x"}))
    s = snapshot(
        [node("y", labels={"pool": "y"}), node("x", labels={"pool": "x"})],
        [job("j", gpu=1, selector={"pool": "x"}), job("k", gpu=1, selector={"pool": "z"})],
    )
    d = schedule(s, Policy(), 0.0)
    assert _bound_nodes(d, "j") == ["x"]
    assert d.pending["k"].kind is ReasonKind.NO_FIT_EVER
    assert "selector {pool=z}" in d.pending["k"].message


def test_resource_fit_filter():
    check = FILTERS["resource-fit"].check
    r = role(gpu=4, cpu=8, mem_gib=64)
    assert check(node("a"), (8000, 64 * 1024**3, 4), r)
    assert not check(node("a"), (7999, 64 * 1024**3, 4), r)
    assert not check(node("a"), (8000, 64 * 1024**3 - 1, 4), r)
    assert not check(node("a"), (8000, 64 * 1024**3, 3), r)


def test_policy_without_resource_fit_is_rejected():
    s = snapshot([node("a")], [job("j")])
    with pytest.raises(ValueError, match="resource-fit"):
        schedule(s, Policy(filters=("schedulable",)), 0.0)


def test_unknown_plugin_names_are_rejected_with_the_name():
    s = snapshot([node("a")], [job("j")])
    with pytest.raises(ValueError, match="nope"):
        schedule(s, Policy(scorers=(("nope", 1.0),)), 0.0)
    with pytest.raises(ValueError, match="queue_order"):
        schedule(s, Policy(queue_order="nope"), 0.0)


# -- scorers ----------------------------------------------------------------------------
CAP = (32_000, 256 * 1024**3, 8)


def test_best_fit_prefers_the_fuller_node():
    score = SCORERS["best-fit"].score
    req = (1000, 1024**3, 2)
    tight = score(CAP, (32_000, 256 * 1024**3, 2), req, 0)
    loose = score(CAP, CAP, req, 0)
    assert tight > loose
    assert 0.0 <= loose <= tight <= 1.0


def test_best_fit_packs_and_keeps_whole_nodes_free():
    s = snapshot(
        [node("empty"), node("half", used=res(0, 0, 4))],
        [job("small", gpu=2)],
    )
    assert _bound_nodes(schedule(s, Policy(), 0.0), "small") == ["half"]


def test_spread_prefers_the_emptier_node():
    score = SCORERS["spread"].score
    req = (1000, 1024**3, 2)
    assert score(CAP, CAP, req, 0) > score(CAP, (32_000, 256 * 1024**3, 2), req, 0)
    s = snapshot([node("half", used=res(0, 0, 4)), node("empty")], [job("small", gpu=2)])
    policy = Policy(scorers=(("spread", 1.0),))
    assert _bound_nodes(schedule(s, policy, 0.0), "small") == ["empty"]


def test_cpu_tasks_avoid_nodes_with_idle_gpus():
    score = SCORERS["best-fit"].score
    req = (4000, 1024**3, 0)
    cpu_node = (32_000, 256 * 1024**3, 0)
    assert score(cpu_node, cpu_node, req, 0) > score(CAP, CAP, req, 0)
    s = snapshot([node("gpu", gpu=8), node("cpu", gpu=0)], [job("c", gpu=0, cpu=4)])
    assert _bound_nodes(schedule(s, Policy(), 0.0), "c") == ["cpu"]


def test_gang_locality_scores_nodes_holding_the_gang():
    score = SCORERS["gang-locality"].score
    assert score(CAP, CAP, (0, 0, 1), 1) == 1.0
    assert score(CAP, CAP, (0, 0, 1), 0) == 0.0


def test_gang_locality_keeps_a_job_on_few_nodes_even_with_spread():
    # Spread alone scatters 4 one-GPU tasks over 4 nodes; locality weighted higher packs them.
    nodes = [node(f"n{i}", gpu=8) for i in range(4)]
    s = snapshot(nodes, [job("j", gpu=1, replicas=4)])
    scattered = _bound_nodes(schedule(s, Policy(scorers=(("spread", 1.0),)), 0.0), "j")
    assert len(set(scattered)) == 4
    local = Policy(scorers=(("spread", 1.0), ("gang-locality", 2.0)))
    assert len(set(_bound_nodes(schedule(s, local, 0.0), "j"))) == 1


def test_each_stage_score_is_kept_in_the_bind():
    s = snapshot([node("a")], [job("j", gpu=8)])
    b = schedule(s, Policy(), 0.0).binds[0]
    assert set(b.scores) == {"a"}
    assert set(b.scores["a"]) == {"best-fit", "gang-locality"}
    assert b.scores["a"]["best-fit"] > 0.8


def test_a_task_never_splits_its_gpus_across_nodes():
    s = snapshot([node("a", gpu=4), node("b", gpu=4)], [job("j", gpu=8)])
    d = schedule(s, Policy(), 0.0)
    assert d.binds == ()
    why = d.pending["j"]
    assert why.kind is ReasonKind.NO_FIT_EVER
    assert "largest node has 4 GPUs" in why.message
