"""`GET /jobs/NAME/logs?since=&timestamps=` over a log and the time index beside it, as the
agent's recorder writes it (scheduler/logtimes.py), served by a real uvicorn on a real
redis-server: lines prefixed with their times, lines of unknown time said to be unknown,
lines not yet timed held back while the log is written, `since` by the index, and a bad
`since` refused with 422 naming the field, the forms expected and the text given."""

from __future__ import annotations

import os
import time

import pytest
from live import job_yaml

from scheduler.logpaths import job_log_dir
from scheduler.logtimes import UNKNOWN, LogTimeRecorder, rfc3339, times_path

pytestmark = pytest.mark.integration

T0 = 1_790_000_000.0  # Unix seconds of the first lines (2026-09-21)


def _log(env, job: str):
    d = job_log_dir(env.share, job, env.store.get_job(job).uid)
    d.mkdir(parents=True, exist_ok=True)
    return d / "ps-0.log"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _written(path, recorder, clock, t, text: bytes) -> None:
    """``text`` appended to the log at Unix time ``t``, seen by the recorder then."""
    with path.open("ab") as f:
        f.write(text)
    clock.t = t
    recorder.observe(path)


def _get(client, job: str, **params):
    return client.get(f"/api/v1/jobs/{job}/logs", params={"role": "ps", "index": 0, **params})


def test_timestamps_prefix_each_line_with_the_time_the_agent_recorded(api, http):
    _, env = api
    alice = http(env.alice)
    alice.post("/api/v1/jobs", content=job_yaml("timed")).raise_for_status()
    path = _log(env, "timed")
    clock = Clock(T0)
    rec = LogTimeRecorder(clock)
    rec.observe(path)  # the agent looks before its header: nothing there yet
    _written(path, rec, clock, T0, b"=== attempt 1 on node-1 ===\n")
    _written(path, rec, clock, T0 + 1.5, b"[red]one[/red]\nt")  # a line and half of one
    _written(path, rec, clock, T0 + 60, b"wo\nthree\n")
    os.utime(path, (T0 + 60, T0 + 60))

    r = _get(alice, "timed", timestamps="true")
    assert r.status_code == 200, r.text
    assert r.text.splitlines() == [
        f"{rfc3339(T0)} === attempt 1 on node-1 ===",
        f"{rfc3339(T0 + 1.5)} [red]one[/red]",
        f"{rfc3339(T0 + 60)} two",  # complete when the agent saw its newline
        f"{rfc3339(T0 + 60)} three",
    ]
    assert rfc3339(T0 + 1.5) == "2026-09-21T14:13:21.500Z"
    assert int(r.headers["X-Log-Next-Offset"]) == path.stat().st_size
    # the file itself is what the task wrote, nothing added
    assert path.read_bytes() == b"=== attempt 1 on node-1 ===\n[red]one[/red]\ntwo\nthree\n"

    # since: an RFC 3339 time between the lines, or Unix seconds
    r = _get(alice, "timed", since=rfc3339(T0 + 30), timestamps="true")
    assert [line.split(" ", 1)[1] for line in r.text.splitlines()] == ["two", "three"]
    r = _get(alice, "timed", since=rfc3339(T0 + 1))
    assert r.text == "[red]one[/red]\ntwo\nthree\n"
    assert int(r.headers["X-Log-Next-Offset"]) == path.stat().st_size
    # a duration ago: every line is older than 10 minutes
    r = _get(alice, "timed", since="10m")
    assert r.status_code == 200 and r.text == ""


def test_untimed_lines_are_held_back_while_written_then_shown_as_unknown(api, http):
    _, env = api
    alice = http(env.alice)
    alice.post("/api/v1/jobs", content=job_yaml("old")).raise_for_status()
    path = _log(env, "old")
    path.write_bytes(b"written before times\nsecond\n")  # a log with no index at all

    # being written right now (mtime: now) and not timed yet: held back for the agent
    r = _get(alice, "old", timestamps="true")
    assert r.status_code == 200 and r.text == ""
    assert r.headers["X-Log-Next-Offset"] == "0"

    # quiet for a while: shown, and said to be of unknown time, not given one
    old = time.time() - 3600
    os.utime(path, (old, old))
    r = _get(alice, "old", timestamps="true")
    assert r.text.splitlines() == [
        f"{UNKNOWN} written before times",
        f"{UNKNOWN} second",
    ]
    # since: a log last written an hour ago has no line of the last 10 minutes; of the
    # last 2 hours it may have any, so all are shown
    assert _get(alice, "old", since="10m").text == ""
    assert _get(alice, "old", since="2h").text == "written before times\nsecond\n"

    # the agent starts watching it (an adopted task): the old lines stay unknown, and
    # what comes after gets its time
    clock = Clock(time.time() - 5)
    rec = LogTimeRecorder(clock)
    rec.observe(path)
    _written(path, rec, clock, clock.t + 1, b"new\n")
    assert times_path(path).stat().st_size == 32
    r = _get(alice, "old", timestamps="true")
    assert r.text.splitlines()[-1] == f"{rfc3339(clock.t)} new"
    assert r.text.splitlines()[0] == f"{UNKNOWN} written before times"
    # the unknown lines were on the share when the agent first looked (5 s ago): older
    # than a minute ago? not known, so kept; older than now+: no
    assert _get(alice, "old", since="1m").text == "written before times\nsecond\nnew\n"


@pytest.mark.parametrize("since", ["yesterday", "10 minutes", "-5m", "2026-13-01T00:00:00Z"])
def test_a_bad_since_is_422_naming_the_field_the_forms_and_the_text(api, http, since):
    _, env = api
    alice = http(env.alice)
    alice.post("/api/v1/jobs", content=job_yaml("bad")).raise_for_status()
    _log(env, "bad").write_bytes(b"x\n")
    r = _get(alice, "bad", since=since)
    assert r.status_code == 422, r.text
    text = r.text
    assert "since" in text and "duration" in text and repr(since) in text.replace('\\"', '"')


def test_follow_with_timestamps_streams_timed_lines(api, http):
    _, env = api
    alice = http(env.alice)
    alice.post("/api/v1/jobs", content=job_yaml("followed")).raise_for_status()
    path = _log(env, "followed")
    clock = Clock(time.time())
    rec = LogTimeRecorder(clock)
    rec.observe(path)
    _written(path, rec, clock, clock.t, b"one\ntwo\n")
    # the job never ends here (no loop): limit ends the stream after the first answer
    r = _get(alice, "followed", follow="true", timestamps="true", limit=1)
    assert r.status_code == 200
    assert r.text.splitlines() == [f"{rfc3339(clock.t)} one", f"{rfc3339(clock.t)} two"]
