"""Issue 37, third point: a Volcano policy ``timeout`` (volcano-sh/volcano
docs/user-guide/how_to_use_job_policy.md, example 3: ``PodEvicted -> RestartJob`` after
``10m``) is honoured: the action happens once the event has lasted that long, the job held
meanwhile with the time it acts at."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.rules.lifecycle import decide
from scheduler.spec import SpecError, load_job
from scheduler.states import JobState
from scheduler.store.records import TaskRecord

FILE = Path(__file__).parent / "corpus" / "volcano" / "job-policy-guide-timeout.yaml"
T0 = 1_800_000_000.0


def _tasks(ps_state: str) -> list[TaskRecord]:
    ps = TaskRecord("ps", 0, 1, "n1", "10.0.0.1", {}, state=ps_state, finished=T0)
    if ps_state == "stopped":
        ps.desired = "run"  # stopped without the loop asking: evicted
    workers = [TaskRecord("worker", i, 1, "n2", "10.0.0.2", {}, state="running") for i in (0, 1)]
    return [ps, *workers]


def test_an_evicted_ps_restarts_the_job_only_after_the_ten_minutes_of_the_file():
    (spec,) = load_job(FILE.read_bytes()).specs
    held = decide(spec, _tasks("stopped"), now=T0 + 599)
    assert held.ending is None and held.restart == ()
    assert "acts after 600 s" in held.held and "2027-01-15 08:10:00 UTC" in held.held
    step = decide(spec, _tasks("stopped"), now=T0 + 600)
    assert step.ending is not None and step.ending.state == JobState.QUEUED
    assert not step.held


def test_a_rule_without_timeout_still_acts_at_once():
    (spec,) = load_job(FILE.read_bytes()).specs
    step = decide(spec, _tasks("failed"), now=T0 + 1)  # PodFailed -> RestartPod, no timeout
    assert not step.held and [r.key for r in step.restart] == ["ps-0"]


@pytest.mark.parametrize("timeout", ["10 minutes", "0s", "-5m", "800h"])
def test_a_timeout_that_is_not_a_duration_is_refused_by_name(timeout):
    text = FILE.read_text().replace("timeout: 10m", f"timeout: {timeout!r}")
    with pytest.raises(SpecError) as info:
        load_job(text.encode())
    (error,) = info.value.errors
    assert error["loc"] == "spec.tasks[0].policies[1].timeout"
    assert "duration" in error["msg"]
