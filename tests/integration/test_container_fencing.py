"""A dead agent's containers stop by themselves (docs/faults.md, fencing): a real agent
process with the container executor (real podman, the base image) and a real
redis-server. The task ticks into the share every 0.1 s, so its own marks say when it ran.

1. agent A starts the task; its container gets exactly one lease watchdog (a detached
   process, not A's child process group);
2. A is SIGKILLed and B started at once, within A's lease: B adopts the container, still
   one watchdog (no duplicate), the task keeps ticking;
3. B is SIGKILLed and nothing restarts it: the watchdog kills the container within the
   node's ``fence_s`` of the kill, the ticks stop, ``fenced`` says why, the watchdog exits;
4. agent C starts: it reports the task ``lost`` (cause ``fenced``) and removes the
   container; no watchdog is left.

Bounded: 20-35 s (three agent starts, one lease of 10 s).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import redis
import yaml

from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.reports import apply_node_reports
from scheduler.store.snapshot import commit_payload, take_snapshot
from tests.ports import task_ports

IMAGE = "localhost/pasture-base:bookworm"
NODE = "fence-c1"
LEASE_S = 10.0  # long enough for a second agent to start on a loaded machine

pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("podman"),
    pytest.mark.skipif(
        shutil.which("podman") is None
        or subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0,
        reason=f"podman or {IMAGE} missing (scripts build the base image)",
    ),
]


def _until(what: str, cond, timeout: float, store: Store | None = None):
    deadline = time.monotonic() + timeout
    while True:
        if store is not None:
            apply_node_reports(store)  # what the loop does each cycle
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _state(name: str) -> str:
    res = subprocess.run(
        ["podman", "inspect", "--format", "{{.State.Status}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.stdout.strip() if res.returncode == 0 else "gone"


def _watchdogs(work: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        alive = p.info["status"] != psutil.STATUS_ZOMBIE
        if alive and "--watch" in cmd and any(str(work) in a for a in cmd):
            out.append(p)
    return out


def _ticks(marks: Path) -> list[float]:
    try:
        return [float(x) for x in marks.read_text().split() if x[0].isdigit()]
    except OSError:
        return []


def test_a_dead_agents_container_stops_by_itself_and_a_restart_adopts_or_reports_it(
    redis_url, tmp_path
):
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    job = f"fence-{uuid.uuid4().hex[:6]}"
    work = tmp_path / "work"
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "node_name": NODE,
                "address": "127.0.0.1",
                "redis": {"url": redis_url},
                "share_dir": str(tmp_path / "share"),
                "executor": "container",
                "work_dir": str(work),
                "heartbeat_interval_s": 0.5,
                "lease_s": LEASE_S,
                "port_range": task_ports(33100, 33199),
                "resources": {"cpu": 2, "memory": "2Gi"},
                "stop_grace_s": 1,
            }
        )
    )
    agents: list[subprocess.Popen] = []

    def start_agent(tag: str) -> subprocess.Popen:
        log = open(tmp_path / f"agent-{tag}.log", "w")  # noqa: SIM115 - closed with the test
        p = subprocess.Popen(
            [sys.executable, "-m", "scheduler.agent", "--config", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        agents.append(p)
        return p

    def agent_log(tag: str) -> str:
        return (tmp_path / f"agent-{tag}.log").read_text()

    marks = tmp_path / "share" / "jobs" / job / "marks"
    container = f"task-{job}-w-0-a1"
    try:
        a = start_agent("a")
        node = _until(
            "the node",
            lambda: next((n for n in store.list_nodes() if n.name == NODE), None),
            60,
            store,
        )
        store.create_job(
            parse_job_spec(
                {
                    "name": job,
                    "image": IMAGE,
                    "roles": {
                        "w": {
                            "resources": {"cpu": "500m", "memory": "128Mi"},
                            "command": 'while :; do date +%s.%N >> "$PASTURE_JOB_DIR/marks";'
                            " sleep 0.1; done",
                        }
                    },
                }
            )
        )
        store.transition(job, "queued", "queued")
        snap, ctx = take_snapshot(store)
        role = snap.pending[0].roles[0]
        bind = Bind(job, (TaskPlacement("w", 0, NODE, role.resources),))
        assert store.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))[0]
        _until("the task's ticks", lambda: len(_ticks(marks)) >= 5, 60, store)
        assert _state(container) == "running"
        assert len(_until("one watchdog", lambda: _watchdogs(work), 10)) == 1

        # 2. a restart within the lease adopts: no duplicate watchdog, the task runs on
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        start_agent("b")
        _until("agent b", lambda: "started (executor container" in agent_log("b"), 60)
        n = len(_ticks(marks))
        time.sleep(2.0)  # several of b's passes, each polling the adopted container
        assert "adopting 1 task(s)" in agent_log("b")
        assert _state(container) == "running" and len(_ticks(marks)) > n
        assert len(_watchdogs(work)) == 1

        # 3. nobody restarts the agent: the container stops within the node's fence_s
        b = agents[-1]
        killed_wall, killed = time.time(), time.monotonic()
        b.send_signal(signal.SIGKILL)
        b.wait(10)
        _until("the container to stop", lambda: _state(container) != "running", 60)
        stopped_after = time.monotonic() - killed
        assert stopped_after <= node.fence_s, (stopped_after, node.fence_s)
        last_tick = _ticks(marks)[-1]
        assert last_tick <= killed_wall + node.fence_s
        time.sleep(0.5)
        assert _ticks(marks)[-1] == last_tick  # the task's own marks: it stopped
        fenced = work / "tasks" / f"{job}-w-0-a1" / "fenced"
        assert "expired" in fenced.read_text()
        _until("the watchdog to exit", lambda: not _watchdogs(work), 10)

        # 4. a later agent reports it fenced (uncharged) and removes the container
        start_agent("c")
        _until("the container removed", lambda: _state(container) == "gone", 60, store)
        rec = _until(
            "the report",
            lambda: next((t for t in store.tasks(job) if t.attempt == 1 and t.cause), None),
            30,
            store,
        )
        assert rec.cause == "fenced", rec
        assert not _watchdogs(work)
    finally:
        for p in agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        subprocess.run(["podman", "rm", "-f", container], capture_output=True, check=False)
        for p in _watchdogs(work):
            p.kill()
