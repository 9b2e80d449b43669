"""A task that never started says why once (issue 34, item 2): the job's reason is
"task K on NODE could not start: <cause>", not "exited with code None"; the diagnosis of
a missing ``code_dir`` says a retry will not help and names ``pasture data push``; other
start failures name "could not start" once in their diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.agent.startup import StartupError, code_dir_of
from scheduler.rules.diagnosis import diagnose, diagnosis_text
from scheduler.rules.lifecycle import decide
from scheduler.spec import parse_job_spec
from scheduler.store.records import TaskRecord


def _startup_message(tmp_path: Path) -> str:
    spec = parse_job_spec(
        {"name": "j", "code_dir": "code/mine", "roles": {"main": {"command": "true"}}}
    )
    with pytest.raises(StartupError) as info:
        code_dir_of(spec, tmp_path)
    return f"could not start: {info.value}"  # as the agent reports it


def test_a_missing_code_dir_is_diagnosed_once_and_not_retryable(tmp_path):
    message = _startup_message(tmp_path)
    assert "pasture data push ./mine code/mine" in message
    d = diagnose(None, message=message)
    assert d is not None and d.kind == "code_dir_missing" and not d.retry
    assert "could not start" not in d.summary
    task = TaskRecord(
        role="main", index=0, attempt=1, node="dev-node-0", state="failed", message=message
    )
    text = diagnosis_text(task)
    assert text.endswith("(retry will not help)") and "retry can help" not in text
    ending = decide(
        parse_job_spec({"name": "j", "roles": {"main": {"command": "true"}}}), [task]
    ).ending
    assert ending is not None
    assert ending.reason.startswith("task main-0 on dev-node-0 could not start: code_dir")
    assert ending.reason.count("could not start") == 1
    assert "exited with code None" not in ending.reason


def test_other_start_failures_say_could_not_start_once():
    d = diagnose(None, message="could not start (launch_error): podman: image not found")
    assert d is not None and d.kind == "start_failed"
    assert d.summary == "the task could not start: podman: image not found"
    d = diagnose(None, message="cannot write to the cluster share /s: permission denied")
    assert d is not None and d.kind == "start_failed"
    assert d.summary.count("cannot write") == 1
