"""The dev cluster's task ports never fall in the kernel's ephemeral range, where any
client connection of the machine could hold one (a task then fails to bind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.dev import _task_port_base


@pytest.mark.parametrize("nodes", [1, 2, 8, 50])
def test_task_port_ranges_lie_below_the_ephemeral_range(nodes):
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        first = _task_port_base(nodes)
        assert first >= 10000
        assert first + 200 * nodes - 1 < low, (first, nodes, low)
