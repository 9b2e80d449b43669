"""A task's cgroup with the process executor (scheduler/agent/cgroup.py): a resident-memory
limit that CUDA-sized address-space reservations survive, OOM kills diagnosed, GPU
isolation, and stop and fencing that kill every process a task started (a ``setsid``
child, a process started over the job's own ssh). Real redis-server, a real agent (its
reconcile pass called by the test, the loop not running), real processes and the machine's
OpenSSH sshd."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from scheduler.agent import cgroup, watchdog
from scheduler.agent.process import KILL_WAIT_S, ProcessExecutor
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent, until
from tests.scheduler.agent.test_process_executor import launch, wait_exit
from tests.scheduler.agent.test_startup import place_all, run_to_end
from tests.sshd import SSHD

SUPPORT = cgroup.detect()
needs_memory_cgroup = pytest.mark.skipif(
    SUPPORT.memory == "none" or os.path.isdir("/run/systemd/system"),
    reason=f"no writable memory cgroup for tasks on this machine: {SUPPORT.reason}"
    if SUPPORT.memory == "none"
    else "systemd is PID 1: the process executor uses systemd-run scopes here",
)
needs_sshd = pytest.mark.skipif(not os.path.exists(SSHD), reason="needs openssh-server (sshd)")

MAP_64G = (
    f"{sys.executable} -c 'import mmap; m = mmap.mmap(-1, 64 << 30, "
    'flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0); print("mapped", len(m) >> 30, "GiB")\''
)
"""What CUDA and NCCL do at start: reserve far more address space than they touch."""


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def free_port_range(n: int = 8) -> list[int]:
    """``[low, high]`` of ``n`` ports free now, chosen at random (others run servers too)."""
    for _ in range(200):
        low = random.randrange(20000, 60000)
        try:
            for port in range(low, low + n):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", port))
        except OSError:
            continue
        return [low, low + n - 1]
    raise RuntimeError("no free port range")


@pytest.fixture()
def agents(store, tmp_path, redis_url):
    """make_agent with a free port range; the tasks they leave are killed at the end."""
    made = []

    def make(**extra):
        agent = make_agent(store, tmp_path, redis_url, port_range=free_port_range(), **extra)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        for t in list(agent.local.values()):
            agent.executor.stop(t.handle, 0)
            agent.executor.cleanup(t.handle)


def one_task_job(name: str, command: str, memory: str = "1Gi", gpu: int = 0, **extra):
    return parse_job_spec(
        {
            "name": name,
            "roles": {
                "w": {
                    "command": command,
                    "resources": {"cpu": 1, "memory": memory, "gpu": gpu},
                }
            },
            **extra,
        }
    )


def alive(pid: int) -> bool:
    st = watchdog._proc_stat(pid)
    return st is not None and st[0] not in "ZX"


@needs_memory_cgroup
def test_a_1gi_task_maps_64gib_of_address_space_and_succeeds(store, tmp_path, agents):
    """No address-space limit: the same program under ``ulimit -v`` of its request fails."""
    under_rlimit = subprocess.run(
        ["/bin/sh", "-c", f"ulimit -v {2**20}; {MAP_64G}"], capture_output=True, text=True
    )
    assert under_rlimit.returncode != 0 and "Cannot allocate memory" in under_rlimit.stderr
    agent = agents()
    agent.register()
    node = store.get_node("n1")
    assert node.labels["pasture.io/memory-limit"] == SUPPORT.memory
    assert node.labels["pasture.io/task-kill"] == "cgroup"
    place_all(store, one_task_job("map", MAP_64G, memory="1Gi"))
    t = run_to_end(store, agent, "map")["w-0"]
    log = (tmp_path / "share/jobs/map/logs/w-0.log").read_text()
    assert (t.state, t.exit_code) == ("succeeded", 0), log
    assert "mapped 64 GiB" in log


@needs_memory_cgroup
def test_a_task_past_its_memory_limit_is_killed_and_diagnosed_out_of_memory(
    store, tmp_path, agents
):
    agent = agents()
    agent.register()
    hog = f"echo allocating; {sys.executable} -c 'b = bytearray(400 << 20); print(\"alive\")'"
    place_all(store, one_task_job("hog", hog, memory="128Mi"))
    t = run_to_end(store, agent, "hog")["w-0"]
    log = (tmp_path / "share/jobs/hog/logs/w-0.log").read_text()
    assert (t.state, t.exit_code) == ("failed", 137), log
    assert "alive" not in log
    assert t.diagnosis["kind"] == "oom_killed", t.diagnosis
    assert "OOM killer" in t.diagnosis["summary"]
    # the task's cgroup is removed once the task is reported
    assert not list(SUPPORT.memory_parent.glob("w-0-*")) if SUPPORT.memory_parent else True


def test_a_task_without_gpus_sees_none_and_every_task_gets_pci_bus_order(store, tmp_path, agents):
    agent = agents()
    agent.register()
    show = 'echo "cvd=${CUDA_VISIBLE_DEVICES-unset} order=$CUDA_DEVICE_ORDER"'
    place_all(store, one_task_job("nogpu", show, memory="256Mi"))
    place_all(store, one_task_job("onegpu", show, memory="256Mi", gpu=1))
    assert run_to_end(store, agent, "nogpu")["w-0"].state == "succeeded"
    t = run_to_end(store, agent, "onegpu")["w-0"]
    logs = tmp_path / "share/jobs"
    assert (logs / "nogpu/logs/w-0.log").read_text().splitlines()[-1] == ("cvd= order=PCI_BUS_ID")
    assert (logs / "onegpu/logs/w-0.log").read_text().splitlines()[-1] == (
        f"cvd={t.gpus[0]} order=PCI_BUS_ID"
    )


ESCAPES = (
    # a setsid child: a session of its own, outside the task's process group
    'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$PASTURE_JOB_DIR/setsid.pid"\n'
    # a process started over the job's own ssh, as mpirun starts remote ranks: sshd forks a
    # session for it, and it outlives that session
    # (the barrier skips the task itself: wait for its own sshd to listen)
    "for i in $(seq 150); do ssh w-0 true 2>/dev/null && break; sleep 0.2; done\n"
    "ssh w-0 'nohup sleep 300 </dev/null >/dev/null 2>&1 & echo $!'"
    ' > "$PASTURE_JOB_DIR/ssh.pid" || exit 10\n'
    "sleep 300\n"
)


def escapees(tmp_path: Path, job: str, agent) -> list[int]:
    """The PIDs of the task's setsid child and ssh-started process once both run (the
    agent heartbeats meanwhile: its lease holds)."""
    job_dir = tmp_path / "share/jobs" / job
    files = [job_dir / "setsid.pid", job_dir / "ssh.pid"]

    def both():
        agent.heartbeat()
        return all(f.exists() and f.read_text().strip() for f in files)

    until(both, timeout=30)
    pids = [int(f.read_text()) for f in files]
    assert all(alive(p) for p in pids)
    return pids


@needs_sshd
def test_job_stop_kills_a_setsid_child_and_a_process_started_over_ssh(store, tmp_path, agents):
    # a lease longer than the test: the kill must come from the stop, not from fencing
    agent = agents(heartbeat_interval_s=5, lease_s=120)
    agent.register()
    place_all(store, one_task_job("esc", ESCAPES, memory="512Mi", ssh=True))
    agent.reconcile()
    pids = escapees(tmp_path, "esc", agent)
    t0 = time.monotonic()
    t = store.task("esc", "w-0")
    t.desired = "stop"  # what `job stop` becomes once the loop passes it to the tasks
    store.update_tasks("esc", [t])

    def all_gone():
        agent.reconcile()
        return not any(alive(p) for p in pids)

    until(all_gone, timeout=30, step=0.05)
    took = time.monotonic() - t0
    # the stop's grace (stop_grace_s 1 s) plus the kill bound
    assert took <= 1 + agent.executor.kill_bound_s, took
    until(lambda: agent.reconcile() or store.task("esc", "w-0").state == "stopped")


@needs_sshd
def test_fencing_kills_a_setsid_child_and_a_process_started_over_ssh(store, tmp_path, agents):
    """The agent stops heartbeating (its lease runs out): the task's lease watchdog kills
    the whole unit, with nobody calling the agent's fence."""
    agent = agents(heartbeat_interval_s=0.5, lease_s=2.0)
    agent.register()  # heartbeats until the task's processes run, then none (a dead agent)
    place_all(store, one_task_job("fence", ESCAPES, memory="512Mi", ssh=True))
    agent.reconcile()
    pids = escapees(tmp_path, "fence", agent)
    deadline = json.loads((tmp_path / "work-n1/lease").read_text())["deadline"]
    until(lambda: not any(alive(p) for p in pids), timeout=30, step=0.05)
    late = time.monotonic() - deadline
    assert late <= agent.executor.kill_bound_s, late
    until(lambda: agent.reconcile() or store.task("fence", "w-0").done)
    assert store.task("fence", "w-0").cause == "fenced"


def test_without_a_cgroup_stop_still_kills_setsid_and_re_parented_daemons(tmp_path):
    """The fallback kill unit (no cgroup): process group, session, descendants and the
    task's PASTURE_TASK_UID marker, which finds a double-forked daemon re-parented away."""
    ex = ProcessExecutor(limits="none")
    cmd = (
        f"setsid sleep 300 & echo $! > {tmp_path}/a\n"
        f"(setsid sh -c 'sleep 300 & echo $! > {tmp_path}/b' &)\n"
        "sleep 300"
    )
    h = ex.start(launch(tmp_path, cmd))
    files = [tmp_path / "a", tmp_path / "b"]
    until(lambda: all(f.exists() and f.read_text().strip() for f in files))
    pids = [int(f.read_text()) for f in files]
    assert all(alive(p) for p in pids)
    assert json.loads(h)["cgroups"] == []
    t0 = time.monotonic()
    ex.stop(h, 0.5)
    assert time.monotonic() - t0 <= 0.5 + KILL_WAIT_S
    assert not any(alive(p) for p in pids)
    assert wait_exit(ex, h) != 0
    ex.cleanup(h)


def test_what_a_finished_task_left_running_ends_with_it(tmp_path):
    """As a container's processes die with its init: when the command ended, poll kills the
    rest of its cgroup and removes the cgroup (keeping its OOM count for the evidence)."""
    ex = ProcessExecutor()
    h = ex.start(launch(tmp_path, f"setsid sleep 300 & echo $! > {tmp_path}/a; exit 0"))
    dirs = json.loads(h)["cgroups"]
    assert wait_exit(ex, h) == 0
    pid = int((tmp_path / "a").read_text())
    if not dirs:  # no cgroup here: the marker finds it at cleanup
        assert alive(pid)
    ex.cleanup(h)
    until(lambda: not alive(pid), timeout=KILL_WAIT_S)
    assert not any(os.path.exists(d) for d in dirs)
    assert ex.evidence(h)["memory_limit"] == ex.node_labels()["pasture.io/memory-limit"]
