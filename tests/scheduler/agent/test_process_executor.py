import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scheduler.agent import cgroup
from scheduler.agent.executor import TaskLaunch
from scheduler.agent.process import ProcessExecutor, _group_alive, detect_limits


def launch(tmp_path: Path, command: str, memory: int = 2**30, name: str = "t") -> TaskLaunch:
    return TaskLaunch(
        task_id=name,
        job="j",
        role="w",
        index=0,
        attempt=1,
        node="n",
        command=command,
        image=None,
        env={"PASTURE_JOB_DIR": str(tmp_path / "job"), "GREETING": "hi"},
        cpu_m=1000,
        memory=memory,
        gpus=[1, 3],
        log_path=tmp_path / f"{name}.log",
        share_dir=tmp_path,
        state_dir=tmp_path / "state" / name,
    )


def wait_exit(ex, handle, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = ex.poll(handle)
        if code is not None:
            return code
        time.sleep(0.05)
    raise AssertionError("task did not finish")


def test_exit_codes_env_log_and_path(tmp_path):
    ex = ProcessExecutor()
    h = ex.start(
        launch(
            tmp_path, 'echo "$GREETING $CUDA_VISIBLE_DEVICES $(pwd)"; command -v python3; exit 3'
        )
    )
    assert wait_exit(ex, h) == 3
    out = (tmp_path / "t.log").read_text().splitlines()
    assert out[0] == f"hi 1,3 {tmp_path / 'job'}"  # the node's indices of its GPUs
    # the agent's interpreter directory comes first on PATH
    assert out[1] == str(Path(sys.executable).parent / "python3")
    ok = ex.start(launch(tmp_path, "true", name="ok"))
    assert wait_exit(ex, ok) == 0


def test_secrets_of_the_agent_are_not_passed_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PASTURE_REDIS_PASSWORD", "secret")
    ex = ProcessExecutor()
    h = ex.start(launch(tmp_path, 'echo "pw=${PASTURE_REDIS_PASSWORD:-none}"'))
    assert wait_exit(ex, h) == 0
    assert (tmp_path / "t.log").read_text().strip() == "pw=none"


def test_stop_sends_sigterm_then_sigkill_after_grace(tmp_path):
    ex = ProcessExecutor()
    polite = ex.start(
        launch(
            tmp_path,
            "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.1; done",
            name="polite",
        )
    )
    stubborn = ex.start(launch(tmp_path, "trap '' TERM; sleep 60", name="stubborn"))
    time.sleep(0.5)
    t0 = time.monotonic()
    ex.stop(polite, grace_s=5)
    assert time.monotonic() - t0 < 4
    assert "got TERM" in (tmp_path / "polite.log").read_text()
    t0 = time.monotonic()
    ex.stop(stubborn, grace_s=1)
    took = time.monotonic() - t0
    assert 0.9 <= took < 6
    # the wrapper shell died of SIGTERM, the TERM-ignoring command needed SIGKILL
    assert wait_exit(ex, stubborn) in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
    assert not _group_alive(json.loads(stubborn)["pid"])


def test_a_new_executor_adopts_running_and_finished_tasks(tmp_path):
    """What an agent restart looks like: the handle survives, the Popen object does not."""
    first = ProcessExecutor()
    running = first.start(launch(tmp_path, "sleep 1; exit 7", name="r"))
    # the first executor is gone (agent crashed); a new one polls the same handles
    second = ProcessExecutor()
    assert second.poll(running) is None
    assert wait_exit(second, running) == 7  # from the exit file, not from wait()
    first._children.clear()  # reaped by nobody in a real crash; keep the test tidy


def test_limits_detection_matches_the_machine():
    """systemd scopes where systemd is PID 1, else a cgroup per task where a memory cgroup
    can be made, else none (and the node says so)."""
    support = cgroup.detect()
    if os.path.isdir("/run/systemd/system"):
        expected = "systemd"
    else:
        expected = "cgroup" if support.memory != "none" else "none"
    assert detect_limits() == expected
    labels = ProcessExecutor().node_labels()
    assert labels["pasture.io/memory-limit"] == (
        "systemd" if expected == "systemd" else support.memory
    )
    assert ProcessExecutor(limits="none").node_labels() == {
        "pasture.io/memory-limit": "none",
        "pasture.io/task-kill": "process-tree",
    }


def test_no_address_space_limit_binds_a_task(tmp_path):
    """RLIMIT_AS is never set: CUDA and NCCL reserve far more than they use."""
    ex = ProcessExecutor()
    h = ex.start(launch(tmp_path, "ulimit -v; ulimit -Hv", memory=2**30))
    assert wait_exit(ex, h) == 0
    assert (tmp_path / "t.log").read_text().split() == ["unlimited", "unlimited"]
    ex.cleanup(h)


def test_task_log_is_opened_read_write_and_appended(tmp_path):
    """stdout is O_RDWR|O_APPEND, not write-only: smbnetfs shares fail write-only appends
    (see scheduler.agent.executor.log_redirect)."""
    (tmp_path / "t.log").write_text("=== attempt 1 on n ===\n")
    ex = ProcessExecutor()
    h = ex.start(launch(tmp_path, "grep '^flags' /proc/self/fdinfo/1"))
    assert wait_exit(ex, h) == 0
    header, flags_line = (tmp_path / "t.log").read_text().splitlines()
    assert header == "=== attempt 1 on n ==="
    flags = int(flags_line.split()[1], 8)
    assert flags & os.O_ACCMODE == os.O_RDWR
    assert flags & os.O_APPEND


@pytest.mark.skipif(os.geteuid() != 0, reason="tasks run as a tenant's uid only under root")
def test_declared_data_is_read_only_for_a_tenants_task_unless_declared_writable(tmp_path, request):
    """Issue 32, "the data its job declares (read-only unless declared otherwise)", process
    mode: the job's mount sources appear in the task's mount namespace, the read-only one
    refusing every write with EROFS (the tenant owns the files, so only the mount refuses),
    the one declared ``read_only: false`` and the job directory writable."""
    from scheduler import tenants

    user = tenants.planned("default")
    # pytest's tmp_path lies under a 0700 directory the tenant cannot pass through
    base = Path(tempfile.mkdtemp(prefix="pasture-ro-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    share = base / "share"
    data, out, job_dir = share / "data" / "ro", share / "data" / "rw", share / "jobs" / "j"
    for d in (data, out, job_dir):
        d.mkdir(parents=True)
    (data / "in.txt").write_text("input\n")
    for p in (base, share, share / "data", share / "jobs"):
        os.chmod(p, 0o755)
    for p in (data, data / "in.txt", out, job_dir):
        os.chown(p, user.uid, user.gid)
    spec = launch(
        tmp_path,
        'cat "$D/in.txt"; echo x 2>&1 > "$D/new" || echo "write to data: $?";'
        ' rm "$D/in.txt" 2>&1 || echo "rm in data: $?";'
        ' echo y > "$O/new" && echo rw ok; echo z > "$PASTURE_JOB_DIR/own" && echo job ok',
    )
    spec = dataclasses.replace(
        spec,
        share_dir=share,
        env={**spec.env, "D": str(data), "O": str(out), "PASTURE_JOB_DIR": str(job_dir)},
        user=user,
        visible=[str(job_dir), str(data), str(out)],
        read_only=[str(data)],
    )
    spec.log_path.touch()
    os.chown(spec.log_path, user.uid, user.gid)
    ex = ProcessExecutor(limits="none")
    h = ex.start(spec)
    assert wait_exit(ex, h) == 0, spec.log_path.read_text()
    log = spec.log_path.read_text()
    assert log.startswith("input\n"), log
    assert log.count("Read-only file system") == 2, log
    assert "write to data: " in log and "rm in data: " in log, log
    assert "rw ok" in log and "job ok" in log, log
    assert not (data / "new").exists() and (data / "in.txt").exists()
    assert (out / "new").read_text() == "y\n"
