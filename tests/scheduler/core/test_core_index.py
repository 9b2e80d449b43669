"""The free-capacity index: best-fit / spread candidate order, journaled rollback."""

from __future__ import annotations

from scheduler.core.index import NodeIndex
from tests.factories import GiB, node, res


def _index(nodes):
    return NodeIndex(nodes, lambda n: (n.state, n.gpu_model))


def test_best_fit_order_is_smallest_sufficient_free_gpu_then_cpu():
    idx = _index(
        [
            node("empty", gpu=8),
            node("half", gpu=8, used=res(16, 0, 4)),
            node("tight", gpu=8, used=res(2, 0, 6)),
            node("tight-less-cpu", gpu=8, used=res(20, 0, 6)),
        ]
    )
    got = [idx.names[i] for i in idx.candidates([0], 1000, GiB, 2, 10, False, ())]
    assert got == ["tight-less-cpu", "tight", "half", "empty"]


def test_spread_order_is_emptiest_first():
    idx = _index(
        [node("a", gpu=8, used=res(0, 0, 7)), node("b", gpu=8), node("c", gpu=8, used=res(0, 0, 4))]
    )
    got = [idx.names[i] for i in idx.candidates([0], 0, 0, 1, 10, True, ())]
    assert got == ["b", "c", "a"]


def test_candidates_respect_memory_skip_and_limit():
    idx = _index(
        [
            node("low-mem", gpu=8, mem_gib=8),
            node("skip-me", gpu=8),
            node("ok1", gpu=8),
            node("ok2", gpu=8),
        ]
    )
    skip = {idx.id_of["skip-me"]}
    got = [idx.names[i] for i in idx.candidates([0], 0, 16 * GiB, 1, 1, False, skip)]
    assert got == ["ok1"]


def test_no_candidate_when_request_exceeds_every_bucket():
    idx = _index([node("a", gpu=4), node("b", gpu=8, used=res(0, 0, 6))])
    assert idx.candidates([0], 0, 0, 5, 10, False, ()) == []


def test_rollback_restores_free_capacity_and_buckets():
    idx = _index([node("a", gpu=8), node("b", gpu=8)])
    before = (list(idx.free_cpu), list(idx.free_mem), list(idx.free_gpu), list(idx.ready_free))
    m = idx.mark()
    idx.allocate(0, 1000, GiB, 8)
    idx.allocate(1, 500, GiB, 3)
    assert idx.candidates([0], 0, 0, 6, 10, False, ()) == []
    idx.rollback(m)
    assert (idx.free_cpu, idx.free_mem, idx.free_gpu, idx.ready_free) == before
    assert sorted(idx.candidates([0], 0, 0, 8, 10, False, ())) == [0, 1]


def test_largest_free_reports_biggest_gpu_block():
    idx = _index([node("a", gpu=8, used=res(0, 0, 6)), node("b", gpu=8, used=res(0, 0, 3))])
    assert idx.names[idx.largest_free([0])] == "b"


def test_duplicate_node_names_are_rejected():
    import pytest

    with pytest.raises(ValueError, match="node name 'a'"):
        _index([node("a"), node("a")])


def test_node_classes_only_split_on_labels_that_pending_selectors_ask_about():
    from scheduler.core import Policy
    from scheduler.core.scheduler import _Cycle
    from tests.factories import job, snapshot

    nodes = [
        node(f"n{i}", labels={"hostname": f"n{i}", "pool": "a" if i % 2 else "b"})
        for i in range(100)
    ]
    plain = _Cycle(snapshot(nodes, [job("j")]), Policy(), 0.0)
    assert len(plain.index.classes) == 1  # unique hostnames do not defeat the index
    picky = _Cycle(snapshot(nodes, [job("j", selector={"pool": "a"})]), Policy(), 0.0)
    assert len(picky.index.classes) == 2
