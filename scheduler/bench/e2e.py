"""End-to-end scheduling through the real API, store, loop and agents: latency, rate, CPU.

```
 submitter (this process: httpx, --rate jobs/s, POST /api/v1/jobs:batch
            with the jobs due each --tick-s, at most --batch per request;
            --batch 1: POST /api/v1/jobs, one request per job)
      |
      v
 API process (uvicorn: pasture's app)  --> real redis-server (temp dir, free port)
                                                ^        ^
 loop process (python -m scheduler.loop) -------+        |
 agents process (scheduler.bench.simagents: --nodes simulated nodes; read their
                 bindings, report running, then succeeded after --run-s) --+
```

Latency of a job = time of its ``running`` event - its ``created`` time, both read from
Redis' clock, so it covers queueing, the loop's cycles, the commit and the agent's report
(which the loop applies). Stages: submitted -> queued -> scheduled -> running (p50 and
p99 of each). Placement rate = jobs that reached ``running`` / (last running time - first
submit time). CPU seconds per job: each process' user + system CPU time over the run
divided by the jobs: the kernel's per-process CPU clock (nanoseconds, all threads, see
:func:`process_cpu_s`; clock ticks of 10 ms would read one or two ticks per process at a
few jobs), Redis' own ``INFO cpu`` (microseconds).

``python -m scheduler.bench e2e --nodes 1000 --jobs 5000 --rate 500 --json``
(``--profile DIR`` runs the loop, the API and the agents under cProfile: DIR/*.prof)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from scheduler.bench.simagents import SimulatedAgents, simulated_nodes
from scheduler.devproc import free_port, redis_server
from scheduler.states import TERMINAL_JOB_STATES, JobState

if TYPE_CHECKING:
    import httpx

    from scheduler.store.store import Store

__all__ = ["SimulatedAgents", "add_arguments", "run", "simulated_nodes"]

STAGES = (("submitted", "queued"), ("queued", "scheduled"), ("scheduled", "running"))


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
    parser.add_argument(
        "--batch", type=int, default=100, help="most jobs per request (1: one POST per job)"
    )
    parser.add_argument(
        "--tick-s", type=float, default=0.05, help="seconds between two batch requests"
    )
    parser.add_argument(
        "--profile", default=None, help="directory: run the processes under cProfile (*.prof)"
    )


def _job_document(i: int, rng: random.Random, max_replicas: int) -> dict[str, Any]:
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


class _Procs:
    """The benchmark's child processes, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, tmp: Path, profile: str | None) -> None:
        self.tmp = tmp
        self.profile = Path(profile) if profile else None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        prof = []
        if self.profile is not None:
            self.profile.mkdir(parents=True, exist_ok=True)
            prof = ["-m", "cProfile", "-o", str(self.profile / f"{name}.prof")]
        log = (self.tmp / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, *prof, *args], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.procs[name] = proc
        return proc

    def log_path(self, name: str) -> Path:
        """The log file of the child ``name`` (stdout and stderr)."""
        return self.tmp / f"{name}.log"

    def wait_for(self, name: str, text: str, timeout_s: float = 60.0) -> None:
        proc = self.procs[name]
        deadline = time.monotonic() + timeout_s
        while text not in self.log_path(name).read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start: {self.tail(name)}")
            time.sleep(0.1)

    def tail(self, name: str) -> str:
        return self.log_path(name).read_text(errors="replace")[-2000:]

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.tail(name)}")

    def cpu_s(self) -> dict[str, float]:
        out = {}
        for name, proc in self.procs.items():
            with contextlib.suppress(OSError):
                out[name] = process_cpu_s(proc.pid)
        return out

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used, all its threads (exited ones
    too), at the scheduler clock's nanosecond resolution.

    Reads the process' CPU-time clock, the clock id glibc's ``clock_getcpuclockid(3)``
    builds (``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`` in Linux'
    ``include/linux/posix-timers.h``); Linux lets any process read it. ``/proc/PID/stat``
    (what psutil reads) counts in clock ticks of 10 ms.

    Raises:
        OSError: no such process, or not Linux.
    """
    cpuclock_sched = 2
    return time.clock_gettime(((~pid) << 3) | cpuclock_sched)


def _redis_cpu_s(store: Any) -> float:
    info = store.r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; returns the figures (latencies in seconds)."""
    from scheduler.settings import SchedulerSettings
    from scheduler.store import Store
    from scheduler.store.tokens import TokenStore

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="pasture-bench-e2e-") as tmp:
        tmp_path = Path(tmp)
        with redis_server(tmp_path / "redis") as url:
            total_cpu = args.nodes * args.node_cpu
            port = free_port()
            config = {
                "cluster_name": "bench",
                "redis": {"url": url},
                "share_dir": str(tmp_path / "share"),
                # no per-token limits: one token submits at --rate, which is what is measured
                "api": {
                    "host": "127.0.0.1",
                    "port": port,
                    "max_body_bytes": 4 << 20,
                    "request_limit": "",
                    "submit_limit": "",
                },
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
            token = TokenStore(store.r).create("bench", "admin")
            if token is None:
                raise RuntimeError("token bench exists in a fresh Redis")
            procs = _Procs(tmp_path, args.profile)
            try:
                procs.start(
                    "agents",
                    [
                        "-m",
                        "scheduler.bench.simagents",
                        "--url",
                        url,
                        "--nodes",
                        str(args.nodes),
                        "--node-cpu",
                        str(args.node_cpu),
                        "--run-s",
                        str(args.run_s),
                    ],
                )
                procs.wait_for("agents", "ready")
                procs.start("loop", ["-m", "scheduler.loop", "--config", str(cfg)])
                procs.start(
                    "api",
                    ["-m", "scheduler.cli", "serve", "api", "--config", str(cfg)],
                )
                procs.wait_for("loop", "loop started")
                procs.wait_for("api", "Uvicorn running")
                return _drive(args, rng, store, procs, f"http://127.0.0.1:{port}", token)
            finally:
                procs.stop()


def _submit(
    args: argparse.Namespace, rng: random.Random, client: httpx.Client, names: list[str]
) -> float:
    """Submit ``args.jobs`` jobs at ``args.rate``; returns the seconds it took."""
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    start = time.monotonic()
    i = 0
    while i < args.jobs:
        now = time.monotonic()
        due = args.jobs if interval == 0 else min(args.jobs, int((now - start) / interval) + 1)
        if due <= i:
            time.sleep(min(args.tick_s, start + i * interval - now))
            continue
        docs = [_job_document(j, rng, args.max_replicas) for j in range(i, due)]
        for k in range(0, len(docs), max(1, args.batch)):
            chunk = docs[k : k + max(1, args.batch)]
            if args.batch <= 1:
                r = client.post("/api/v1/jobs", json=chunk[0])
                if r.status_code != 201:
                    raise RuntimeError(f"submit answered {r.status_code}: {r.text[:500]}")
            else:
                r = client.post("/api/v1/jobs:batch", json={"jobs": chunk})
                if r.status_code != 200 or r.json()["failed"]:
                    raise RuntimeError(f"batch answered {r.status_code}: {r.text[:500]}")
            names.extend(d["name"] for d in chunk)
        i = due
        if args.batch > 1:
            time.sleep(max(0.0, args.tick_s - (time.monotonic() - now)))
    return time.monotonic() - start


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def _drive(
    args: argparse.Namespace,
    rng: random.Random,
    store: Store,
    procs: _Procs,
    base_url: str,
    token: str,
) -> dict[str, Any]:
    import httpx

    names: list[str] = []
    cpu0, redis0 = procs.cpu_s(), _redis_cpu_s(store)
    own0 = time.process_time()  # this process' CPU clock, ns
    first_submit = store.now()
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        submit_s = _submit(args, rng, client, names)
    deadline = time.monotonic() + args.timeout_s
    waiting = set(names)
    while waiting and time.monotonic() < deadline:  # one pipelined HGET per waiting job
        procs.check()
        pipe = store.r.pipeline(transaction=False)
        order = sorted(waiting)
        for n in order:
            pipe.hget(store.k("job", n), "state")
        for n, st in zip(order, pipe.execute(), strict=True):
            if st == JobState.RUNNING or st in TERMINAL_JOB_STATES:  # reached running
                waiting.discard(n)
        time.sleep(0.2)
    cpu1, redis1 = procs.cpu_s(), _redis_cpu_s(store)
    own1 = time.process_time()
    phases: dict[str, dict[str, float]] = {}
    pipe = store.r.pipeline(transaction=False)
    for n in names:
        pipe.lrange(store.k("job", n) + ":events", 0, -1)
    import json

    for n, events in zip(names, pipe.execute(), strict=True):
        seen: dict[str, float] = {}
        for raw in events:
            e = json.loads(raw)
            seen.setdefault(str(e.get("state")), float(e["time"]))
        if "running" in seen:
            phases[n] = seen
    created = {j.name: j.created for j in store.get_jobs(names, with_spec=False)}
    latencies = [p["running"] - created[n] for n, p in phases.items()]
    span = (max(p["running"] for p in phases.values()) - first_submit) if phases else 0.0
    jobs = max(1, len(names))
    cpu = {name: round((cpu1.get(name, 0) - cpu0.get(name, 0)) / jobs * 1000, 3) for name in cpu1}
    cpu["redis"] = round((redis1 - redis0) / jobs * 1000, 3)
    cpu["submitter"] = round((own1 - own0) / jobs * 1000, 3)
    out: dict[str, Any] = {
        "nodes": args.nodes,
        "jobs": args.jobs,
        "batch": args.batch,
        "jobs_running_reached": len(phases),
        "submit_rate_target_per_s": args.rate,
        "submit_rate_achieved_per_s": round(len(names) / submit_s, 1) if submit_s else None,
        "jobs_placed_per_s": round(len(phases) / span, 1) if span > 0 else None,
        "submit_to_running_p50_s": _pct(latencies, 50),
        "submit_to_running_p99_s": _pct(latencies, 99),
        "submit_to_running_max_s": round(max(latencies), 3) if latencies else None,
    }
    for a, b in STAGES:
        d = [p[b] - p[a] for p in phases.values() if a in p and b in p]
        out[f"{a}_to_{b}_p50_s"] = _pct(d, 50)
        out[f"{a}_to_{b}_p99_s"] = _pct(d, 99)
    log = procs.log_path("loop").read_text(errors="replace")
    out["loop_failed_cycles"] = log.count("scheduling cycle failed")
    out["loop_refused_commits"] = log.count("commit refused")
    if out["loop_failed_cycles"]:
        first = log.index("scheduling cycle failed")
        print(log[first : first + 3000], file=sys.stderr)
    out["cpu_ms_per_job"] = cpu  # CPU milliseconds per job, per process
    out["cpu_ms_per_job_total"] = round(sum(cpu.values()), 3)
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    out["target_met"] = bool(
        out["jobs_placed_per_s"]
        and out["jobs_placed_per_s"] >= 0.9 * args.rate
        and latencies
        and out["submit_to_running_p99_s"] < 1.0
    )
    return out
