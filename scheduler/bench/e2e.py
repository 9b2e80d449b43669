"""End-to-end scheduling through Redis: submit-to-running latency and placement rate.

```
submitter (JobService: validate + store.create_job, --rate jobs/s)
     |                                   real redis-server (temp dir, free port)
     v                                          ^        ^
  Redis  <-- snapshot / atomic commit --  loop process (python -m scheduler.loop)
     |
     +-- node notifications --> simulated agents (one thread, --nodes nodes): register,
                                heartbeat, report tasks running, then succeeded after --run-s
```

Latency of a job = time of its ``running`` event - its ``created`` time, both read from
Redis' clock, so it covers queueing, the loop's cycle, the commit and the agent's report.
Placement rate = jobs that reached ``running`` / (last running time - first submit time).

``python -m scheduler.bench e2e --nodes 200 --jobs 2000 --json``
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from scheduler.dev import redis_server

ExitCode = Callable[[str, Any], int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to submit")
    parser.add_argument("--rate", type=float, default=100.0, help="submissions per second")
    parser.add_argument("--run-s", type=float, default=3.0, help="seconds each task runs")
    parser.add_argument("--node-cpu", type=int, default=32, help="cores per node")
    parser.add_argument("--max-replicas", type=int, default=4, help="tasks per job: 1..N")
    parser.add_argument("--policy", default="pasture", help="loop policy (core preset)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=600.0, help="give up after")


class SimulatedAgents:
    """Agents of many simulated nodes in one thread, talking to the store like real ones.

    Registers ``nodes`` nodes, heartbeats them every ``heartbeat_s``, and on each node
    notification reports newly bound tasks ``running``; after ``run_s`` seconds it reports
    them finished with ``exit_code(job, task)`` (0 = succeeded, else failed). Tasks whose
    desired state becomes ``stop`` are reported ``stopped``.

    Args:
        store: a :class:`scheduler.store.Store` (its own client: this runs in a thread).
        nodes: list of :class:`scheduler.store.NodeRecord` to register.
        run_s: seconds between running and finished.
        exit_code: callable(job name, TaskRecord) -> exit code; default always 0.
        heartbeat_s: seconds between heartbeats.
    """

    def __init__(
        self,
        store: Any,
        nodes: list[Any],
        run_s: float = 1.0,
        exit_code: ExitCode | None = None,
        heartbeat_s: float = 5.0,
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.run_s = run_s
        self.exit_code = exit_code or (lambda job, task: 0)
        self.heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due: dict[tuple[str, str, int], tuple[float, str, int]] = {}
        self.error: BaseException | None = None

    def start(self) -> SimulatedAgents:
        for n in self.nodes:
            self.store.register_node(n)
        self._thread = threading.Thread(target=self._run, name="simulated-agents", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> SimulatedAgents:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # surfaced by the caller through .error
            self.error = exc
            raise

    def _loop(self) -> None:
        store = self.store
        pubsub = store.r.pubsub(ignore_subscribe_messages=True)
        prefix = store.node_channel("")
        pubsub.psubscribe(prefix + "*")
        names = [n.name for n in self.nodes]
        mine = set(names)
        next_beat = time.monotonic() + self.heartbeat_s
        dirty: set[str] = set(names)
        try:
            while not self._stop.is_set():
                msg = pubsub.get_message(timeout=0.02)
                while msg is not None:
                    node = str(msg["channel"])[len(prefix) :]
                    if node in mine:
                        dirty.add(node)
                    msg = pubsub.get_message(timeout=0)
                for node in sorted(dirty):
                    self._sync(node)
                dirty.clear()
                self._finish_due()
                if time.monotonic() >= next_beat:
                    for n in names:
                        store.heartbeat(n, {"simulated": True})
                    next_beat = time.monotonic() + self.heartbeat_s
        finally:
            pubsub.close()

    def _sync(self, node: str) -> None:
        for job, key in self.store.node_bindings(node):
            task = self.store.task(job, key)
            if task is None or task.node != node or task.done:
                continue
            ident = (job, key, task.attempt)
            if task.desired == "stop":
                self.store.report_task(
                    job, key, task.attempt, node, "stopped", exit_code=143, message="stopped"
                )
                self._due.pop(ident, None)
            elif task.state == "scheduled" and task.desired == "run" and ident not in self._due:
                self.store.report_task(
                    job, key, task.attempt, node, "running", handle=f"sim-{job}-{key}"
                )
                code = self.exit_code(job, task)
                self._due[ident] = (time.monotonic() + self.run_s, node, code)

    def _finish_due(self) -> None:
        now = time.monotonic()
        for ident, (due, node, code) in list(self._due.items()):
            if due <= now:
                job, key, attempt = ident
                state = "succeeded" if code == 0 else "failed"
                self.store.report_task(
                    job, key, attempt, node, state, exit_code=code, message=f"exited {code}"
                )
                del self._due[ident]


def simulated_nodes(n: int, cpu: int = 32, memory_gib: int = 128, gpu: int = 0) -> list[Any]:
    """``n`` NodeRecords named sim-0001... with the given capacity (cores, GiB, GPUs)."""
    from scheduler.store import NodeRecord

    return [
        NodeRecord(
            name=f"sim-{i:04d}",
            address=f"10.99.{i // 250}.{i % 250 + 1}",
            cpu_m=cpu * 1000,
            memory=memory_gib << 30,
            gpu=gpu,
            executor="simulated",
        )
        for i in range(1, n + 1)
    ]


def _job_document(i: int, rng: random.Random, max_replicas: int) -> dict:
    return {
        "name": f"bench-{i:05d}",
        "vc": "default",
        "roles": {
            "worker": {
                "replicas": rng.randint(1, max_replicas),
                "resources": {"cpu": 1, "memory": "1Gi", "gpu": 0},
                "command": "true",
            }
        },
    }


def run(args: argparse.Namespace) -> dict:
    """Run the benchmark; returns the figures (latencies in seconds)."""
    from scheduler.services.jobs import JobService
    from scheduler.settings import SchedulerSettings
    from scheduler.store import Store
    from scheduler.store.tokens import TokenInfo, TokenRole

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="pasture-bench-e2e-") as tmp:
        tmp_path = Path(tmp)
        with redis_server(tmp_path) as url:
            total_cpu = args.nodes * args.node_cpu
            config = {
                "cluster_name": "bench",
                "redis": {"url": url},
                "share_dir": str(tmp_path / "share"),
                "loop": {"interval_s": 1.0, "heartbeat_timeout_s": 60, "policy": args.policy},
                "virtual_clusters": [
                    {"name": "default", "guarantee": {"cpu": total_cpu, "memory": "1Ti"}}
                ],
            }
            cfg = tmp_path / "scheduler.yaml"
            cfg.write_text(yaml.safe_dump(config))
            settings = SchedulerSettings.model_validate(config)
            store = Store(settings.redis.client())
            store.apply_vcs(settings.virtual_clusters)
            agents = SimulatedAgents(
                Store(settings.redis.client()),
                simulated_nodes(args.nodes, cpu=args.node_cpu),
                run_s=args.run_s,
            ).start()
            loop_log = (tmp_path / "loop.log").open("wb")
            loop = subprocess.Popen(
                [sys.executable, "-m", "scheduler.loop", "--config", str(cfg)],
                stdout=loop_log,
                stderr=subprocess.STDOUT,
            )
            loop.log_path = tmp_path / "loop.log"
            try:
                figures = _drive(
                    args,
                    rng,
                    store,
                    JobService(store),
                    TokenInfo("bench", TokenRole.ADMIN),
                    agents,
                    loop,
                )
            finally:
                loop.terminate()
                try:
                    loop.wait(15)
                except subprocess.TimeoutExpired:
                    loop.kill()
                    loop.wait()
                loop_log.close()
                agents.stop()
    return figures


def _wait_for_loop(loop, timeout_s: float = 60.0) -> None:
    """Wait until the loop process logged its start (imports done, subscribed)."""
    deadline = time.monotonic() + timeout_s
    while "loop started" not in loop.log_path.read_text(errors="replace"):
        if loop.poll() is not None or time.monotonic() > deadline:
            tail = loop.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"loop did not start: {tail}")
        time.sleep(0.1)


def _drive(args, rng, store, jobs, admin, agents, loop) -> dict:
    _wait_for_loop(loop)
    names = []
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    start = time.monotonic()
    first_submit = store.now()
    for i in range(args.jobs):
        due = start + i * interval
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        names.append(jobs.submit(admin, _job_document(i, rng, args.max_replicas))["name"])
    submit_s = time.monotonic() - start
    deadline = time.monotonic() + args.timeout_s
    started: dict[str, float] = {}
    phases: dict[str, dict[str, float]] = {}
    while len(started) < len(names) and time.monotonic() < deadline:
        if loop.poll() is not None:
            tail = loop.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"loop exited with {loop.returncode}: {tail}")
        if agents.error is not None:
            raise RuntimeError(f"simulated agents failed: {agents.error!r}")
        for name in names:
            if name in started:
                continue
            seen: dict[str, float] = {}
            for event in store.events(name):
                seen.setdefault(str(event.get("state")), float(event["time"]))
            if "running" in seen:
                started[name] = seen["running"]
                phases[name] = seen
        time.sleep(0.5)
    created = {j.name: j.created for j in store.get_jobs(names)}
    latencies = np.array([started[n] - created[n] for n in started])

    def phase_p50(a: str, b: str) -> float | None:
        d = [p[b] - p[a] for p in phases.values() if a in p and b in p]
        return round(float(np.percentile(d, 50)), 3) if d else None

    span = (max(started.values()) - first_submit) if started else float("nan")
    status = store.cluster_status()
    return {
        "nodes": args.nodes,
        "jobs": args.jobs,
        "jobs_running_reached": len(started),
        "submit_rate_target_per_s": args.rate,
        "submit_rate_achieved_per_s": round(args.jobs / submit_s, 1) if submit_s else None,
        "submit_to_running_p50_s": round(float(np.percentile(latencies, 50)), 3)
        if len(latencies)
        else None,
        "submit_to_running_p99_s": round(float(np.percentile(latencies, 99)), 3)
        if len(latencies)
        else None,
        "submit_to_running_max_s": round(float(latencies.max()), 3) if len(latencies) else None,
        "jobs_placed_per_s": round(len(started) / span, 1) if started and span > 0 else None,
        # where the time goes (p50 of each lifecycle step, seconds)
        "p50_submitted_to_queued_s": phase_p50("submitted", "queued"),
        "p50_queued_to_scheduled_s": phase_p50("queued", "scheduled"),
        "p50_scheduled_to_running_s": phase_p50("scheduled", "running"),
        "target_p50_under_1s": bool(len(latencies) and np.percentile(latencies, 50) < 1.0),
        "jobs_by_state": status["jobs"],
    }
