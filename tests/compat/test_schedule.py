"""Issue 37, eighth point: Volcano's CronJob example (volcano-sh/volcano
example/cronjob/cronjob.yaml) read as a scheduled job, and the pure decision of what a
schedule does at a time (Kubernetes CronJob semantics, which Volcano's controller follows).
A job submit of it is refused naming ``kind`` and pointing at ``pasture schedule submit``;
tests/integration/test_schedule_process.py runs it on a process-mode cluster."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from scheduler.spec import SpecError, load_document, load_job
from scheduler.spec.formats.common import TranslateError
from scheduler.spec.formats.volcano_cronjob import parse_volcano_cronjob
from scheduler.spec.schedule import Run, decide, due_time

FILE = Path(__file__).parent / "corpus" / "volcano" / "cronjob.yaml"


def _t(hh: int, mm: int, ss: int = 0) -> float:
    return dt.datetime(2026, 11, 27, hh, mm, ss, tzinfo=dt.UTC).timestamp()


def test_the_volcano_example_reads_as_a_schedule_of_its_job():
    spec, warnings = parse_volcano_cronjob(load_document(FILE.read_text()))
    assert (spec.name, spec.schedule, spec.concurrency_policy) == (
        "volcano-cronjob-example",
        "*/5 * * * *",
        "Forbid",
    )
    assert (spec.starting_deadline_s, spec.successful_jobs_history_limit) == (60, 5)
    assert spec.failed_jobs_history_limit == 3 and spec.suspend is False
    assert spec.job.roles["task-1"].command == "date; echo Hello from Volcano CronJob"
    assert spec.job.policies.on_events[0].action == "restart_job"
    assert spec.run_name(_t(10, 5)) == f"volcano-cronjob-example-{int(_t(10, 5) // 60)}"
    assert any(w.startswith("Volcano field spec.jobTemplate.spec.") for w in warnings)


def test_a_job_submit_points_at_the_schedules():
    with pytest.raises(SpecError) as info:
        load_job(FILE.read_bytes())
    (error,) = info.value.errors
    assert error["loc"] == "kind" and "`pasture schedule submit FILE`" in error["msg"]
    bad = FILE.read_text().replace('"*/5 * * * *"', '"every five minutes"')
    with pytest.raises(SpecError) as info:
        load_job(bad.encode())
    assert info.value.errors[0]["loc"] == "spec.schedule"


def test_due_time_is_the_latest_schedule_time_not_a_backlog():
    assert due_time("*/5 * * * *", _t(10, 0), _t(10, 12)) == _t(10, 10)
    assert due_time("*/5 * * * *", _t(10, 10), _t(10, 12)) is None
    assert due_time("*/5 * * * *", _t(10, 9), _t(10, 10)) == _t(10, 10)


def test_forbid_deadline_suspend_replace_and_history():
    spec, _ = parse_volcano_cronjob(load_document(FILE.read_text()))
    now = _t(10, 10, 30)
    assert decide(spec, _t(10, 5), [], now).start == _t(10, 10)
    late = decide(spec, _t(10, 5), [], _t(10, 11, 30))  # 90 s late, deadline 60 s
    assert late.start is None and late.why.startswith("missed")
    active = [Run("volcano-cronjob-example-1", "running", _t(10, 5))]
    forbid = decide(spec, _t(10, 5), active, now)
    assert forbid.start is None and "Forbid" in forbid.why
    replace = decide(
        spec.model_copy(update={"concurrency_policy": "Replace"}), _t(10, 5), active, now
    )
    assert replace.start == _t(10, 10) and replace.stop == ("volcano-cronjob-example-1",)
    allow = decide(spec.model_copy(update={"concurrency_policy": "Allow"}), _t(10, 5), active, now)
    assert allow.start == _t(10, 10) and allow.stop == ()
    assert decide(spec.model_copy(update={"suspend": True}), _t(10, 5), [], now).why == "suspended"
    done = [Run(f"r{i}", "succeeded", _t(9, i)) for i in range(7)]
    done += [Run(f"f{i}", "failed", _t(9, 30 + i)) for i in range(4)]
    history = decide(spec, _t(10, 10), done, now)
    assert history.delete == ("r0", "r1", "f0")  # keep 5 succeeded, 3 failed


def test_a_cronjob_name_too_long_for_its_runs_is_refused_with_its_length():
    doc = load_document(FILE.read_text())
    doc["metadata"]["name"] = "n" * 60
    doc["metadata"]["labels"] = {"team": "a"}
    with pytest.raises(TranslateError) as refused:
        parse_volcano_cronjob(doc)
    assert "metadata.name" in str(refused.value) and "got 60" in str(refused.value)
