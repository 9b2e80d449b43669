"""The lease watchdog of process-executor tasks, as a real process (scheduler/agent/watchdog.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from scheduler.agent import cgroup, watchdog


def run_watchdog(tmp_path, deadline_in_s, *cmd, extra=()):
    lease = tmp_path / "lease"
    lease.write_text(json.dumps({"deadline": time.monotonic() + deadline_in_s}))
    fenced = tmp_path / "fenced"
    argv = [sys.executable, "-S", watchdog.__file__, str(lease), str(fenced), *extra, "--", *cmd]
    # its own session: the watchdog SIGKILLs its whole process group when it fences
    return subprocess.Popen(argv, start_new_session=True), lease, fenced


def test_the_task_s_exit_status_passes_through_while_the_lease_holds(tmp_path):
    proc, _, fenced = run_watchdog(tmp_path, 60, "/bin/sh", "-c", "exit 3")
    assert proc.wait(20) == 3
    assert not fenced.exists()


def test_an_expired_lease_kills_the_whole_group_and_says_so(tmp_path):
    proc, _, fenced = run_watchdog(tmp_path, 1.0, "/bin/sh", "-c", "sleep 60 & sleep 60; wait")
    time.sleep(0.5)
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == proc.pid]
    assert len(group) >= 3  # watchdog, sh, two sleeps
    assert proc.wait(20) == -9  # SIGKILLed with its group
    assert fenced.exists() and "expired" in fenced.read_text()
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group[1:]):
        assert time.monotonic() < deadline, "the task's processes outlived the lease"
        time.sleep(0.1)


def test_a_missing_lease_file_counts_as_expired(tmp_path):
    proc, lease, fenced = run_watchdog(tmp_path, 60, "sleep", "60")
    lease.unlink()  # e.g. the agent's work dir removed
    assert proc.wait(20) == -9 and fenced.exists()


def test_a_renewed_lease_keeps_the_task_alive(tmp_path):
    proc, lease, fenced = run_watchdog(tmp_path, 1.0, "sleep", "3")
    for _ in range(8):  # the agent renews every 0.5 s
        time.sleep(0.5)
        lease.write_text(json.dumps({"deadline": time.monotonic() + 1.0}))
    assert proc.wait(20) == 0 and not fenced.exists()


def test_an_expired_lease_kills_the_task_s_whole_cgroup_setsid_children_included(tmp_path):
    """``--cgroup DIR``: the task's shell joined DIR; the fence kills everything in it,
    also a child in a session of its own, and leaves the watchdog's own group last."""
    support = cgroup.detect()
    if support.kill != "cgroup":
        pytest.skip(f"no writable cgroup for tasks on this machine: {support.reason}")
    dirs = cgroup.create(support, "wd", 2**30)
    pid_file = tmp_path / "pid"
    script = f"{cgroup.join_script(dirs)}\nsetsid sleep 60 & echo $! > {pid_file}; sleep 60"
    extra = [a for d in dirs for a in ("--cgroup", d)]
    proc, _, fenced = run_watchdog(tmp_path, 1.5, "/bin/sh", "-c", script, extra=extra)
    try:
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
        escapee = int(pid_file.read_text())
        assert escapee in watchdog.cgroup_pids(dirs)
        assert proc.wait(20) == -9 and fenced.exists()
        assert not watchdog.live(watchdog.cgroup_pids(dirs))
        assert watchdog._proc_stat(escapee) is None or watchdog._proc_stat(escapee)[0] in "ZX"
    finally:
        cgroup.remove(dirs)


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# ---- watch mode (container executor): supervise a process the watchdog did not start ----


def watch(tmp_path, deadline_in_s, pid, kill=("true",), lock="lock"):
    lease = tmp_path / "lease"
    if deadline_in_s is not None:
        lease.write_text(json.dumps({"deadline": time.monotonic() + deadline_in_s}))
    fenced = tmp_path / "fenced"
    start = watchdog.start_time(pid)
    argv = [sys.executable, "-S", watchdog.__file__, str(lease), str(fenced), "--watch"]
    argv += [str(pid), start, str(tmp_path / lock), "--", *kill]
    return subprocess.Popen(argv, start_new_session=True), lease, fenced


def test_watch_mode_kills_the_watched_process_and_runs_the_kill_command(tmp_path):
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    said = tmp_path / "kill-ran"
    proc, _, fenced = watch(tmp_path, 1.0, victim.pid, kill=("touch", str(said)))
    assert proc.wait(20) == 1
    assert victim.wait(5) == -9
    assert fenced.exists() and "expired" in fenced.read_text()
    assert said.exists()  # the runtime's kill command ran too


def test_watch_mode_exits_quietly_when_the_process_ends_first(tmp_path):
    victim = subprocess.Popen(["sleep", "1"], start_new_session=True)
    proc, _, fenced = watch(tmp_path, 60, victim.pid)
    assert victim.wait(10) == 0
    assert proc.wait(10) == 0 and not fenced.exists()


def test_watch_mode_keeps_one_watchdog_per_lock(tmp_path):
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    first, lease, _ = watch(tmp_path, 60, victim.pid)
    deadline = time.monotonic() + 10
    while not watchdog.watched(str(tmp_path / "lock")):
        assert time.monotonic() < deadline, "the first watchdog never took its lock"
        time.sleep(0.05)
    second, _, _ = watch(tmp_path, 60, victim.pid)
    assert second.wait(10) == 0  # another one holds the lock: nothing to do
    assert first.poll() is None
    lease.unlink()  # a missing lease counts as expired
    assert first.wait(20) == 1 and victim.wait(5) == -9
    assert not watchdog.watched(str(tmp_path / "lock"))


def test_watch_mode_never_mistakes_a_reused_pid(tmp_path):
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    argv = [sys.executable, "-S", watchdog.__file__, str(tmp_path / "no-lease"), "f", "--watch"]
    argv += [str(victim.pid), "1", str(tmp_path / "lock"), "--", "true"]  # wrong start time
    assert subprocess.run(argv, timeout=20, check=False).returncode == 0
    assert victim.poll() is None
    victim.kill()
    victim.wait()
