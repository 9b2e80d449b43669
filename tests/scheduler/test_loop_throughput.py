"""Live sizing from measured throughput (issue 36; scheduler/loop/throughput.py): a real
process writes ``$PASTURE_JOB_DIR/.pasture/throughput.json``, the loop (real redis-server,
real core) hands the core the speedup table of what the job measured."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from scheduler.loop.throughput import ThroughputError, parse_report
from scheduler.spec import parse_job_spec
from scheduler.spec.model import speedup_table
from scheduler.store import TaskState
from tests.factories import loop_on_two_nodes

WRITER = """\
import json, os, sys
d = os.path.join(os.environ["PASTURE_JOB_DIR"], ".pasture")
os.makedirs(d, exist_ok=True)
tmp = os.path.join(d, "throughput.json.tmp")
with open(tmp, "w") as f:
    json.dump({"replicas": int(sys.argv[1]), sys.argv[2]: float(sys.argv[3])}, f)
os.replace(tmp, os.path.join(d, "throughput.json"))
"""


@pytest.fixture()
def env(redis_url, tmp_path):
    store, loop = loop_on_two_nodes(redis_url, share_dir=str(tmp_path))
    loop.throughput.read_every_s = 0.0  # every cycle reads (the default is 5 s)
    seen = []
    real = loop.schedule

    def spy(snapshot, policy, now):
        seen.append(snapshot)
        return real(snapshot, policy, now)

    loop.schedule = spy
    return store, loop, seen, tmp_path


def write(share, job, replicas, unit, rate):
    """The job's own process writes its measurement (as a task would, atomically)."""
    subprocess.run(
        [sys.executable, "-c", WRITER, str(replicas), unit, str(rate)],
        env={**os.environ, "PASTURE_JOB_DIR": str(share / "jobs" / job)},
        check=True,
    )


def scaling_of(snapshot, job):
    return next(rj.job.scaling for rj in snapshot.running if rj.job.name == job)


def test_the_core_sizes_a_running_job_by_the_rates_it_measures(env):
    store, loop, seen, share = env
    roles = {"w": {"replicas": {"min": 1, "max": 16}, "command": "x", "resources": {"cpu": 1}}}
    store.create_job(parse_job_spec({"name": "el", "roles": roles}), user="ann")
    loop.cycle()
    for t in store.tasks("el"):
        store.report_task("el", t.key, t.attempt, t.node, TaskState.RUNNING)
    loop.cycle()
    assert scaling_of(seen[-1], "el") == ()  # nothing measured, nothing declared: linear
    write(share, "el", 1, "steps_per_s", 10.0)
    write(share, "other", 1, "steps_per_s", 99.0)  # another job's file is not el's
    loop.cycle()
    assert scaling_of(seen[-1], "el") == speedup_table({1: 10.0}) == (1.0,)
    write(share, "el", 3, "steps_per_s", 15.0)  # the job ran on 3 and measured again
    loop.cycle()
    assert scaling_of(seen[-1], "el") == pytest.approx((1.0, 1.25, 1.5))
    assert loop.throughput.rates("el") == {1: 10.0, 3: 15.0}


def test_a_measurement_replaces_the_declared_rates(env):
    store, loop, seen, share = env
    roles = {
        "w": {
            "replicas": {"min": 1, "max": 16},
            "command": "x",
            "resources": {"cpu": 1},
            "throughput": {1: 10.0, 2: 20.0},
        }
    }
    store.create_job(parse_job_spec({"name": "dec", "roles": roles}), user="ann")
    loop.cycle()
    for t in store.tasks("dec"):
        store.report_task("dec", t.key, t.attempt, t.node, TaskState.RUNNING)
    loop.cycle()
    assert scaling_of(seen[-1], "dec") == (1.0, 2.0)  # declared
    write(share, "dec", 4, "samples_per_s", 400.0)
    loop.cycle()
    assert scaling_of(seen[-1], "dec") == pytest.approx((1.0, 2.0, 3.0, 4.0))  # one point
    write(share, "dec", 2, "samples_per_s", 300.0)
    loop.cycle()
    # measured at 4 and at 2: rate(1) = min(rate(n) / n) = 100, linear in between
    assert scaling_of(seen[-1], "dec") == pytest.approx((1.0, 3.0, 3.5, 4.0))


def test_a_bad_or_planted_file_is_ignored_with_a_warning_naming_the_field(env, caplog):
    store, loop, seen, share = env
    roles = {"w": {"replicas": {"min": 1, "max": 16}, "command": "x", "resources": {"cpu": 1}}}
    store.create_job(parse_job_spec({"name": "bad", "roles": roles}), user="ann")
    loop.cycle()
    for t in store.tasks("bad"):
        store.report_task("bad", t.key, t.attempt, t.node, TaskState.RUNNING)
    write(share, "bad", 99, "steps_per_s", 1.0)
    with caplog.at_level(logging.WARNING, logger="scheduler.loop.throughput"):
        loop.cycle()
    assert scaling_of(seen[-1], "bad") == ()
    assert "replicas: expected an integer in 1..16, got '99'" in caplog.text
    # a link planted by the task to another file is refused (never followed)
    secret = share / "secret.json"
    secret.write_text(json.dumps({"replicas": 2, "steps_per_s": 5.0}))
    target = share / "jobs" / "bad" / ".pasture" / "throughput.json"
    target.unlink()
    target.symlink_to(secret)
    loop.cycle()
    assert scaling_of(seen[-1], "bad") == ()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"[1]", "expected a JSON object, got list"),
        (b'{"replicas": 1}', "expected the keys replicas and one of"),
        (b'{"replicas": 1, "steps_per_s": 1, "samples_per_s": 2}', "one of"),
        (b'{"replicas": true, "steps_per_s": 1}', "replicas: expected an integer"),
        (b'{"replicas": 1, "steps_per_s": -1}', "steps_per_s: expected a finite number > 0"),
        (b'{"replicas": 1, "steps_per_s": NaN}', "steps_per_s: expected a finite number > 0"),
        (b"\xff", "expected a JSON object"),
        (b" " * 5000, "at most 4096 bytes"),
    ],
)
def test_reports_are_validated(raw, field):
    with pytest.raises(ThroughputError, match="throughput.json") as exc:
        parse_report(raw, 4)
    assert field in str(exc.value)
    assert parse_report(b'{"replicas": 2, "samples_per_s": 3}', 4) == ("samples_per_s", 2, 3.0)
