"""The agent's recorder of log times (scheduler/logtimes.py, run by the agent's log-times
thread): a record per growth with times that never go back, bytes there before it watched
recorded as of unknown time, a torn record repaired, and an index a task planted as a link
never written through (the agent may run as root; tasks write beneath the share)."""

from __future__ import annotations

import os

import pytest

from scheduler.logtimes import RECORD, LogTimeRecorder, LogTimes, times_path


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def records(log) -> list[tuple[int, float]]:
    with times_path(log).open("rb") as f:
        times = LogTimes(f)
        return times.records(0, times.count)


def test_growth_is_recorded_once_per_look_and_times_never_go_back(tmp_path):
    log = tmp_path / "main-0.log"
    log.write_bytes(b"from an agent without times\n")
    clock = Clock(1000.0)
    rec = LogTimeRecorder(clock)
    rec.observe(log)  # first look: what is there has no known time
    with log.open("ab") as f:
        f.write(b"a\n")
    clock.t = 1001.0
    rec.observe(log)
    rec.observe(log)  # no growth: no record
    with log.open("ab") as f:
        f.write(b"b\n")
    clock.t = 999.0  # the clock stepped back: the record keeps the last time
    rec.observe(log)
    assert records(log) == [(28, -1000.0), (30, 1001.0), (32, 1001.0)]

    # a new recorder (the agent restarted) reads where the index ends
    with log.open("ab") as f:
        f.write(b"while the agent was down\n")
    clock.t = 1010.0
    again = LogTimeRecorder(clock)
    again.observe(log)
    assert records(log)[-1] == (57, -1010.0)


def test_a_torn_record_is_overwritten(tmp_path):
    log = tmp_path / "main-0.log"
    log.write_bytes(b"x\n")
    times_path(log).write_bytes(RECORD.pack(2, 5.0) + b"\x01\x02\x03")  # died mid-write
    rec = LogTimeRecorder(Clock(6.0))
    rec.observe(log)
    with log.open("ab") as f:
        f.write(b"y\n")
    rec.observe(log)
    assert records(log) == [(2, 5.0), (4, 6.0)]


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_an_index_planted_as_a_link_is_never_written_through(tmp_path, kind):
    victim = tmp_path / "secret"
    victim.write_bytes(b"keep me")
    log = tmp_path / "main-0.log"
    log.write_bytes(b"x\n")
    if kind == "symlink":
        times_path(log).symlink_to(victim)
    else:
        os.link(victim, times_path(log))
    rec = LogTimeRecorder(Clock(1.0))
    with pytest.raises(OSError):
        rec.observe(log)
    assert victim.read_bytes() == b"keep me"
