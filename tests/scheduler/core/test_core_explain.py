"""explain(): every node's verdict for one pending job, next to schedule()'s outcome."""

from __future__ import annotations

import pytest

from scheduler.core import Bind, NodeState, Policy, ReasonKind, explain
from tests.factories import job, node, res, snapshot


def test_explain_names_the_first_rejecting_filter_per_node_and_scores_the_rest():
    nodes = [
        node("cordoned", state=NodeState.CORDONED),
        node("wrong-pool", labels={"pool": "b"}),
        node("full", labels={"pool": "a"}, used=res(0, 0, 8)),
        node("fits", labels={"pool": "a"}),
    ]
    s = snapshot(nodes, [job("j", gpu=4, selector={"pool": "a"})])
    e = explain(s, Policy(), "j", 0.0)
    assert isinstance(e.outcome, Bind) and e.outcome.placements[0].node == "fits"
    by_node = {v.node: v for v in e.nodes}
    assert by_node["cordoned"].rejected_by == "schedulable"
    assert by_node["wrong-pool"].rejected_by == "node-selector"
    assert by_node["full"].rejected_by == "resource-fit"
    assert by_node["fits"].rejected_by is None
    assert set(by_node["fits"].scores) == {"best-fit", "gang-locality"}
    assert by_node["fits"].total == pytest.approx(sum(by_node["fits"].scores.values()))
    assert e.rejected_count("worker") == {
        "schedulable": 1,
        "node-selector": 1,
        "resource-fit": 1,
    }


def test_explain_carries_the_pending_reason_and_rejects_unknown_jobs():
    s = snapshot([node("a", gpu=4)], [job("j", gpu=8)])
    e = explain(s, Policy(), "j", 0.0)
    assert e.outcome.kind is ReasonKind.NO_FIT_EVER
    with pytest.raises(KeyError, match="ghost"):
        explain(s, Policy(), "ghost", 0.0)
