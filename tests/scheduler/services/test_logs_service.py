"""LogService on a real directory: path safety, defaults, follow until finished."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.services.errors import NotFoundError
from scheduler.services.logs import LogService


@pytest.fixture()
def logs(tmp_path):
    d = tmp_path / "jobs" / "j1" / "logs"
    d.mkdir(parents=True)
    (d / "ps-0.log").write_text("ps\n")
    (d / "worker-0.log").write_text("w0\n")
    (d / "worker-1.log").write_text("w1\n")
    return LogService(tmp_path, poll_s=0.01)


def test_defaults_and_selection(logs):
    assert logs.read("j1", None, None) == b"ps\n"
    assert logs.read("j1", None, 1) == b"w1\n"
    assert logs.read("j1", "worker", None) == b"w0\n"
    assert [(f["role"], f["index"]) for f in logs.files("j1")] == [
        ("ps", 0),
        ("worker", 0),
        ("worker", 1),
    ]


@pytest.mark.parametrize(
    ("job", "role"), [("..", "ps"), ("j1", "../ps"), ("j1/..", "ps"), ("j1", "ps/../../x")]
)
def test_paths_cannot_leave_the_share(logs, job, role):
    with pytest.raises(NotFoundError):
        logs.read(job, role, 0)


def test_follow_reads_until_finished(logs, tmp_path):
    path = tmp_path / "jobs" / "j1" / "logs" / "ps-0.log"
    calls = []

    def finished() -> bool:
        calls.append(1)
        if len(calls) == 2:
            with path.open("a") as f:
                f.write("late line\n")
        return len(calls) >= 3

    async def collect():
        return b"".join([c async for c in logs.follow("j1", "ps", 0, finished)])

    assert asyncio.run(collect()) == b"ps\nlate line\n"
