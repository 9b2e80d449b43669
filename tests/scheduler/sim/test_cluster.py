"""Cluster shapes, window load, sizing and VC guarantees."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.cluster import (
    JOB_CPU_M_PER_GPU,
    NODE_CPU_M_PER_GPU,
    check_fits,
    gang_shape,
    homogeneous,
    read_machine_list,
    read_openb_nodes,
    size_cluster,
    synthesise_requests,
    synthesised_node,
    vc_guarantees,
    window_load_gpus,
)
from scheduler.sim.trace import TraceError, TraceJob


def test_gang_shape() -> None:
    assert gang_shape(1, 8) == (1, 1)
    assert gang_shape(8, 8) == (1, 8)
    assert gang_shape(128, 8) == (16, 8)
    assert gang_shape(12, 8) == (2, 6)
    assert gang_shape(24, 8) == (3, 8)
    assert gang_shape(4, 2) == (2, 2)
    assert gang_shape(7, 4) == (7, 1)


def test_window_load_cuts_work_at_last_submit() -> None:
    jobs = [
        TraceJob("a", 0.0, 1000.0, 2),  # outlives the window: counts 2 x 100
        TraceJob("b", 50.0, 10.0, 1),  # inside: 10
        TraceJob("c", 100.0, 500.0, 8),  # submitted at the end: 0
    ]
    assert window_load_gpus(jobs) == pytest.approx((200 + 10) / 100)
    with pytest.raises(TraceError, match="two different times"):
        window_load_gpus([TraceJob("a", 5.0, 1.0, 1)])


def test_synthesis_keeps_gpus_binding() -> None:
    assert synthesise_requests(TraceJob("a", 0, 1, 4)) == (4 * JOB_CPU_M_PER_GPU, 4 * 32 * 1024**3)
    assert synthesise_requests(TraceJob("a", 0, 1, 4, cpu_m=7, memory=9)) == (7, 9)
    assert JOB_CPU_M_PER_GPU <= NODE_CPU_M_PER_GPU
    assert synthesised_node("n", 8).cpu_m == 8 * NODE_CPU_M_PER_GPU


def test_size_cluster_keeps_mix_and_fits_widest() -> None:
    shapes = [synthesised_node(f"s{i}", 2) for i in range(30)] + [
        synthesised_node(f"b{i}", 8) for i in range(10)
    ]  # 60 GPUs on 2-GPU machines, 80 on 8-GPU machines
    jobs = [TraceJob("a", 0, 10, 1), TraceJob("w", 1, 10, 32)]
    out = size_cluster(shapes, 70, jobs)
    two = sum(s.gpus for s in out if s.gpus == 2)
    eight = sum(s.gpus for s in out if s.gpus == 8)
    assert two + eight == pytest.approx(70, abs=4)
    assert two == pytest.approx(30, abs=2) and eight == pytest.approx(40, abs=4)
    assert len({s.name for s in out}) == len(out)
    # too small for the 32-GPU job: 4 eight-GPU nodes are added whatever the target
    small = size_cluster(shapes, 10, jobs)
    assert sum(1 for s in small if s.gpus == 8) >= 4
    check_fits(small, jobs)
    # bigger than the list: machines repeat under new names
    big = size_cluster(shapes, 280, jobs)
    assert sum(s.gpus for s in big) == pytest.approx(280, abs=4)
    assert len({s.name for s in big}) == len(big)


def test_check_fits_names_the_job() -> None:
    with pytest.raises(TraceError, match="job w needs 4 nodes with 8 GPUs"):
        check_fits(homogeneous(2, 8), [TraceJob("w", 0, 1, 32)])


def test_vc_guarantees_sum_to_cluster() -> None:
    jobs = [
        TraceJob("a", 0, 100, 3, vc="x"),
        TraceJob("b", 0, 100, 1, vc="y"),
        TraceJob("c", 100, 1, 1, vc="y"),
    ]
    vcs = {v.name: v for v in vc_guarantees(jobs, homogeneous(2, 8))}
    assert sum(v.guarantee.gpu for v in vcs.values()) == 16
    assert vcs["x"].guarantee.gpu == 12 and vcs["y"].guarantee.gpu == 4


def test_machine_and_node_lists(tmp_path: Path) -> None:
    m = tmp_path / "m.csv"
    m.write_text("machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,8, 24GB\n")
    shapes = read_machine_list(m)
    assert [(s.name, s.gpus, s.gpu_model) for s in shapes] == [("m0", 2, "12GB"), ("m1", 8, "24GB")]
    bad = tmp_path / "bad.csv"
    bad.write_text("machineId, number of GPUs\nm0,two\n")
    with pytest.raises(TraceError, match="'number of GPUs' must be an integer, got 'two'"):
        read_machine_list(bad)
    n = tmp_path / "n.csv"
    n.write_text("sn,cpu_milli,memory_mib,gpu,model\nx,64000,1024,2,P100\n")
    (node,) = read_openb_nodes(n)
    assert (node.cpu_m, node.memory, node.gpus, node.gpu_model) == (64000, 1024**3, 2, "P100")


def test_size_cluster_adds_a_node_that_fits_a_big_cpu_task() -> None:
    from scheduler.sim.cluster import NodeShape

    shapes = [NodeShape(f"s{i}", 2, 16_000, 64 * 1024**3) for i in range(20)]
    shapes.append(NodeShape("fat", 2, 128_000, 512 * 1024**3))
    jobs = [TraceJob("a", 0, 10, 1, cpu_m=1000, memory=1), TraceJob("b", 5, 10, 1, cpu_m=100_000)]
    out = size_cluster(shapes, 8, jobs)
    assert "fat" in {s.name for s in out}
    assert sum(s.gpus for s in out) == 8  # the forced node counts towards the target
    check_fits(out, jobs)
    with pytest.raises(TraceError, match="fits no node"):
        check_fits(shapes[:3], jobs)
