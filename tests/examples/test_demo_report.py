"""scripts/demo_report.py: the demo's summary of a job record, events and ps log, as the
typed API client returns them (scheduler.api.schemas JobOut, EventOut)."""

import importlib.util
from pathlib import Path

from scheduler.api.schemas import EventOut, JobOut

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_report.py"
spec = importlib.util.spec_from_file_location("demo_report", SCRIPT)
demo_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo_report)


def test_timings_placement_and_last_accuracy_of_a_retried_job():
    job = {
        "name": "digits-x",
        "vc": "default",
        "user": "admin",
        "priority": 0,
        "state": "succeeded",
        "attempt": 2,
        "created": 100.0,
        "end_time": 190.5,
        "tasks": [
            {"role": "ps", "index": 0, "attempt": 2, "node": "node-2", "state": "succeeded"},
            {"role": "worker", "index": 0, "attempt": 2, "node": "node-2", "state": "succeeded"},
            {"role": "worker", "index": 1, "attempt": 2, "node": "node-1", "state": "succeeded"},
        ],
    }
    events = [
        {"time": 100.0, "state": "submitted"},
        {"time": 101.5, "state": "scheduled"},
        {"time": 103.0, "state": "running"},
        {"time": 140.0, "state": "queued", "reason": "node node-1 lost"},
        {"time": 141.0, "state": "scheduled"},
        {"time": 142.0, "state": "running"},
        {"time": 190.5, "state": "succeeded"},
    ]
    log = (
        "=== attempt 1 on node-1 ===\ntest accuracy: 0.412\n"
        "=== attempt 2 on node-2 ===\ntest accuracy: 0.978\n"
    )
    report = demo_report.summarise(
        JobOut.model_validate(job), [EventOut.model_validate(e) for e in events], log
    )
    assert report["queueing_delay_s"] == 1.5  # first placement, not the retry's
    assert report["run_time_s"] == 87.5 and report["jct_s"] == 90.5
    assert report["nodes"] == ["node-1", "node-2"]
    assert report["test_accuracy"] == 0.978  # the last attempt's
    assert [t["task"] for t in report["tasks"]] == ["ps-0", "worker-0", "worker-1"]


def test_a_job_without_accuracy_or_end_reports_none():
    job = {"name": "j", "vc": "default", "user": "u", "priority": 0, "state": "running"}
    report = demo_report.summarise(JobOut.model_validate(job), [], "")
    assert report["test_accuracy"] is None
    assert report["run_time_s"] is None and report["queueing_delay_s"] is None
