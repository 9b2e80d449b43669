"""`pasture job logs --timestamps` and `--since` against a process-mode dev cluster
(scheduler.dev: real redis-server, API, loop and agent; the task writes its log itself and
the agent records the times beside it): each line's time as the agent saw it, `-f` with
both, the log file left as the task wrote it, a log without times said to be of unknown
time, and a bad `--since` refused before anything is read."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from scheduler import dev
from scheduler.logpaths import job_log_dir
from scheduler.logtimes import UNKNOWN, times_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASK = textwrap.dedent(
    """\
    import time
    print("first [/data] missing", flush=True)
    time.sleep(2.5)
    print("second", flush=True)
    """
)
SPEC = """\
name: timed
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: {py} {script}
"""
STAMPED = re.compile(r"^main-0 \| (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (.*)$")


@pytest.fixture()
def cluster(tmp_path, monkeypatch):
    directory = tmp_path / "dev"
    monkeypatch.setenv("PASTURE_DEV_DIR", str(directory))
    for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    c = dev.up(nodes=1, cpu_per_node=2, memory_per_node="2Gi", directory=directory)
    try:
        yield c
    finally:
        dev.down(directory)


def pasture(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


def stamped(out: str) -> list[tuple[float, str]]:
    """[(Unix seconds, text)] of ``--timestamps`` output; every line must have its task,
    then its time (as ``kubectl logs --prefix --timestamps``)."""
    got = []
    for line in out.splitlines():
        m = STAMPED.match(line)
        assert m, f"no time on {line!r}"
        when = dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
        got.append((when.timestamp(), m.group(2)))
    return got


def test_timestamps_and_since_from_the_agents_capture_with_and_without_follow(cluster, tmp_path):
    script = tmp_path / "task.py"
    script.write_text(TASK)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC.format(py=sys.executable, script=script))
    before = time.time()
    assert pasture("job", "submit", str(spec)).returncode == 0
    follow = subprocess.Popen(  # -f with both, from the start until the job ends
        [sys.executable, "-m", "scheduler.cli", "job", "logs", "timed", "-f", "-t"]
        + ["--since", "1h"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = follow.communicate(timeout=120)
    after = time.time()
    assert follow.returncode == 0, err
    lines = stamped(out)
    assert [text for _, text in lines][1:] == ["first [/data] missing", "second"]
    assert lines[0][1].startswith("=== attempt 1 on ")
    (t_head, _), (t_first, _), (t_second, _) = lines
    assert before - 1 <= t_head <= t_first <= t_second <= after
    assert 2.0 <= t_second - t_first <= 4.0  # the task slept 2.5 s between them

    # the same, read once after the end; the file itself is what the task wrote
    again = pasture("job", "logs", "timed", "--timestamps")
    assert again.returncode == 0, again.stderr
    assert stamped(again.stdout) == lines
    log = next(job_log_dir(cluster.share_dir, "timed", "").glob("*/main-0.log"))  # <uid>/
    assert log.read_text().splitlines()[1:] == ["first [/data] missing", "second"]

    # --since an RFC 3339 time between the two lines: only the second
    mid = dt.datetime.fromtimestamp((t_first + t_second) / 2, dt.UTC).isoformat()
    since = pasture("job", "logs", "timed", "--no-prefix", "--since", mid.replace("+00:00", "Z"))
    assert since.returncode == 0, since.stderr
    assert since.stdout == "second\n"
    assert pasture("job", "logs", "timed", "--no-prefix", "--since", "1h").stdout.endswith(
        "first [/data] missing\nsecond\n"
    )

    # a log without times (written before them): said to be unknown, not invented
    times_path(log).unlink()
    old = time.time() - 7200
    os.utime(log, (old, old))
    unknown = pasture("job", "logs", "timed", "--timestamps")
    assert unknown.returncode == 0, unknown.stderr
    assert unknown.stdout.splitlines()[1:] == [
        f"main-0 | {UNKNOWN} first [/data] missing",
        f"main-0 | {UNKNOWN} second",
    ]
    # last written two hours ago: nothing of the last hour
    assert pasture("job", "logs", "timed", "--since", "1h").stdout == ""

    bad = pasture("job", "logs", "timed", "--since", "last tuesday")
    assert bad.returncode == 2
    assert "--since" in bad.stderr and "last tuesday" in bad.stderr
