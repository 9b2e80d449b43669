"""Task port ranges for tests whose agents run tasks that bind real ports on 127.0.0.1,
kept apart between pytest-xdist workers (``make test-python`` runs several at once)."""

from __future__ import annotations

import os

WORKER_PORT_STRIDE = 2000
"""Ports between two xdist workers' copies of a fixed task port range (:func:`task_ports`):
more than the span of the fixed ranges the tests use (32000-33199)."""


def task_ports(low: int, high: int) -> list[int]:
    """``[low, high]`` shifted by :data:`WORKER_PORT_STRIDE` per pytest-xdist worker (``gw0``
    unshifted, ``gw1`` +2000, ...; unshifted without xdist): the port range of a test's agent
    whose tasks bind real ports on 127.0.0.1, so that two workers running such tests at the
    same time never hand out the same port.

    Raises:
        ValueError: the shifted range leaves 1..65535.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    shift = WORKER_PORT_STRIDE * int(worker.removeprefix("gw") or 0)
    if not 0 < low + shift <= high + shift <= 65535:
        raise ValueError(f"task ports {low}-{high} + {shift} for worker {worker} leave 1..65535")
    return [low + shift, high + shift]
