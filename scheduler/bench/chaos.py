"""Chaos, round 1: store outages, killed and partitioned agents, killed and doubled loops;
invariants. The harness (:class:`Chaos`) the other rounds and tests/chaos/ use.

``python -m scheduler.bench chaos --faults N [--json]`` (:mod:`scheduler.bench.chaos_bench`)
starts a process-mode dev cluster
(real redis-server, loop and agents; short heartbeats: 0.5 s interval, 3 s timeout, so a
1.5 s agent lease), runs jobs whose tasks leave marks (:mod:`scheduler.bench.chaos_task`:
tasks that do NOT read the lease file, so a run that outlived its fence shows in the
counts) and injects N faults, cycling through :data:`FAULTS`:

- ``store_outage``: redis-server SIGKILLed and restarted (AOF) 3 heartbeat timeouts later;
- ``agent_kill``: an agent SIGKILLed, restarted 3 heartbeat timeouts later;
- ``partition``: an agent cut from Redis by a TCP proxy (:mod:`scheduler.bench.proxy`)
  for 3 heartbeat timeouts, then healed;
- ``loop_kill``: the loop SIGKILLed and restarted five times in a row;
- ``two_loops``: a second loop runs beside the first for 3 heartbeat timeouts.

Then it waits for every job to end and counts, from the tasks' own marks and the store:
jobs lost (not succeeded in time), tasks that ran in two places at once (intervals of one
task from different runs overlapping), over-committed nodes (the CPU of the runs
overlapping on a node above its capacity), jobs failed, attempts charged to a job for an
infrastructure fault, plus restarts by cause and the outage/partition seconds survived.
A fault that fails (a timeout) is named in ``errors`` and the counts of the others are
kept.

The other rounds, each in a module of its own: the cross-tenant round
(:mod:`scheduler.bench.chaos_tenants`: a tenant's task attacks another's through the
share, links, ssh and ``/proc``, and its token through the API) and round 2
(:mod:`scheduler.bench.chaos_round2`: a gang's node powered off, a frozen node, an
unlaunchable job, a store outage of 2/3 of the lease, a Sentinel failover), unless
``--no-round2``."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from scheduler import dev, devproc
from scheduler.bench import chaos_task
from scheduler.bench.proxy import PartitionProxy
from scheduler.spec import parse_job_spec
from scheduler.states import TERMINAL_JOB_STATES

FAULTS = ("store_outage", "agent_kill", "partition", "loop_kill", "two_loops")
HEARTBEAT_INTERVAL_S = 0.5
HEARTBEAT_TIMEOUT_S = 3.0


def task_command(
    marks: Path, work_s: float, cpu_m: int, peer_timeout_s: float = 0.0, cooperate: bool = False
) -> str:
    """The command of a chaos task (:mod:`scheduler.bench.chaos_task`)."""
    mode = "fence" if cooperate else "nofence"
    return f"python3 -S {chaos_task.__file__} {marks} {work_s:g} {cpu_m} {peer_timeout_s:g} {mode}"


class Chaos:
    """A dev cluster under fault injection. Create with :func:`chaos_cluster`.

    Attributes:
        cluster: the :class:`scheduler.dev.DevCluster`. store: a Store on its Redis.
        marks: the directory the tasks write their marks to (on the share).
        proxy: the proxy between the last agent and Redis (``partition``), or None.
        survived: ``{fault: [seconds]}`` durations of the outages / partitions injected.
    """

    def __init__(self, cluster: dev.DevCluster, proxy: PartitionProxy | None) -> None:
        self.cluster = cluster
        self.store = cluster.store()
        self.marks = Path(cluster.share_dir) / "chaos-marks"
        # the bench's own measuring point, outside every job: tasks of any tenant's Unix
        # user append their marks there (sticky: none removes another's)
        self.marks.mkdir(exist_ok=True)
        self.marks.chmod(0o1777)
        self.proxy = proxy
        self.survived: dict[str, list[float]] = {}
        self.jobs: list[str] = []
        self.sentinels: list[str] = []  # addresses, when the store is behind Sentinel

    # ---- work ---------------------------------------------------------------------
    def submit(
        self,
        n: int,
        work_s: float,
        cpu_m: int = 250,
        prefix: str = "c",
        cooperate: bool = False,
    ) -> list[str]:
        """Submit ``n`` one-task jobs that work ``work_s`` seconds on ``cpu_m`` millicores
        each (default retry policy: one attempt, so any charged attempt fails the job).
        ``cooperate``: the task stops writing once its node's lease ran out (it reads the
        lease file); by default it does not, as most user code does not."""
        names = []
        for i in range(len(self.jobs), len(self.jobs) + n):
            name = f"{prefix}{i}"
            cmd = task_command(self.marks, work_s, cpu_m, cooperate=cooperate)
            spec = {
                "name": name,
                "roles": {
                    "w": {"command": cmd, "resources": {"cpu": f"{cpu_m}m", "memory": "256Mi"}}
                },
            }
            self.store.create_job(parse_job_spec(spec), user="chaos")
            names.append(name)
        self.jobs.extend(names)
        return names

    def running(self, names: list[str] | None = None) -> set[str]:
        """Jobs (of ``names``, default all) with a run that ticked within the last 2 s."""
        now, out = time.time(), set()
        for run in read_runs(self.marks, names):
            if run["ticks"] and now - run["ticks"][-1] < 2.0:
                out.add(run["job"])
        return out

    def running_runs(self, names: list[str]) -> list[dict[str, Any]]:
        """Runs of ``names`` that ticked within the last 2 s (with their ``node``)."""
        now = time.time()
        return [r for r in read_runs(self.marks, names) if r["ticks"] and now - r["ticks"][-1] < 2]

    def wait_running(self, names: list[str], k: int | None = None, timeout: float = 90.0) -> None:
        """Wait until at least ``k`` (default all) of ``names`` run at once (ticking).
        Raises TimeoutError naming the jobs' states."""
        k = len(names) if k is None else k
        deadline = time.monotonic() + timeout
        while len(self.running(names)) < k:
            if time.monotonic() > deadline:
                states = [j.state for j in self.store.get_jobs(names, with_spec=False)]
                raise TimeoutError(
                    f"only {len(self.running(names))} of {k} jobs running; states {states}"
                )
            time.sleep(0.2)

    def wait_done(self, names: list[str] | None = None, timeout: float = 180.0) -> None:
        """Wait until every job of ``names`` (default: all submitted) is terminal (or
        ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                jobs = self.store.get_jobs(names or self.jobs, with_spec=False)
                if all(j.state in TERMINAL_JOB_STATES for j in jobs):
                    return
            time.sleep(0.5)

    # ---- faults -------------------------------------------------------------------
    def store_outage(self, down_s: float = 3 * HEARTBEAT_TIMEOUT_S) -> None:
        """SIGKILL redis-server, keep it down ``down_s`` seconds, start it again."""
        t0 = time.monotonic()
        self.cluster.kill("redis")
        time.sleep(down_s)
        self.cluster.start_redis()
        self._until_redis()
        self.survived.setdefault("store_outage", []).append(time.monotonic() - t0)

    def _until_redis(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.store.r.ping()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def agent_kill(self, i: int = 0, down_s: float = 3 * HEARTBEAT_TIMEOUT_S) -> None:
        """SIGKILL agent ``i``; restart it ``down_s`` seconds later."""
        t0 = time.monotonic()
        self.cluster.kill(f"agent-{i}")
        time.sleep(down_s)
        self.cluster.start_agent(i)
        self.survived.setdefault("agent_kill", []).append(time.monotonic() - t0)

    def partition(self, s: float = 3 * HEARTBEAT_TIMEOUT_S) -> None:
        """Cut the last agent from Redis for ``s`` seconds (needs the proxy)."""
        if self.proxy is None:
            raise RuntimeError("this cluster was started without a partition proxy")
        t0 = time.monotonic()
        self.proxy.partition()
        time.sleep(s)
        self.proxy.heal()
        self.survived.setdefault("partition", []).append(time.monotonic() - t0)

    def loop_kill(self, times: int = 5, every_s: float = 1.5) -> None:
        """SIGKILL the loop and start it again, ``times`` times, ``every_s`` apart."""
        for _ in range(times):
            time.sleep(every_s)
            self.cluster.kill("loop")
            self.cluster.start_loop()
        self.survived.setdefault("loop_kill", []).append(float(times))

    def two_loops(self, s: float = 3 * HEARTBEAT_TIMEOUT_S) -> None:
        """Run a second loop beside the first for ``s`` seconds."""
        argv = self.cluster._procs["loop"].argv
        second = devproc.spawn("loop-2", argv, Path(self.cluster.base_dir))
        try:
            time.sleep(s)
        finally:
            second.stop()
        self.survived.setdefault("two_loops", []).append(s)

    def inject(self, fault: str) -> None:
        """Inject one fault of :data:`FAULTS` by name."""
        getattr(self, fault)()

    # ---- invariants ---------------------------------------------------------------
    def check(self, names: list[str] | None = None) -> dict[str, Any]:
        """The counts (see the module docstring) over the jobs ``names`` (default: every
        submitted job) and their runs; over-commitment is checked over all runs."""
        names = self.jobs if names is None else names
        everything = read_runs(self.marks)
        runs = [r for r in everything if r["job"] in set(names)]
        capacity = {n.name: n.cpu_m for n in self.store.list_nodes(with_usage=False)}
        jobs = self.store.get_jobs(names, with_spec=False)
        causes: dict[str, int] = {}
        charged = 0
        for j in jobs:
            for a in j.attempts:
                if a["state"] == "queued":  # a requeue (the last entry is how it ended)
                    causes[a["cause"] or "own"] = causes.get(a["cause"] or "own", 0) + 1
                charged += bool(a["charged"])
            charged += j.failures
        return {
            "jobs": len(names),
            "jobs_lost": sum(1 for j in jobs if j.state != "succeeded" and j.state != "failed")
            + len(names)
            - len(jobs),
            "jobs_failed": sum(1 for j in jobs if j.state == "failed"),
            "charged_attempts": charged,
            "two_places_at_once": overlaps(runs),
            "overcommitted_nodes": overcommitted(everything, capacity),
            "runs": len(runs),
            "runs_killed": sum(1 for r in runs if not r["ended"]),
            "requeues_by_cause": causes,
            "survived_s": {k: [round(x, 1) for x in v] for k, v in self.survived.items()},
        }


def read_runs(marks: Path, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Every run's header plus ``ticks`` (wall-clock s) and ``ended`` from ``marks`` (of
    the jobs ``names`` only, when given)."""
    runs = []
    paths = sorted(marks.glob("*.p*")) if marks.is_dir() else []
    if names is not None:
        wanted = set(names)
        paths = [p for p in paths if p.name.split(".", 1)[0] in wanted]
    for path in paths:
        lines = path.read_text().splitlines()
        if not lines:
            continue
        try:
            head = json.loads(lines[0])
        except ValueError:
            continue
        ticks = []
        for line in lines[1:]:
            with contextlib.suppress(ValueError):
                ticks.append(float(line))
        runs.append({**head, "ticks": ticks, "ended": lines[-1] == "end"})
    return runs


def overlaps(runs: list[dict[str, Any]]) -> int:
    """Pairs of runs of the same task (job, key) whose [first, last tick] intervals
    overlap: a task running in two places (or twice) at once."""
    by_task: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in runs:
        if r["ticks"]:
            by_task.setdefault((r["job"], r["key"]), []).append((r["ticks"][0], r["ticks"][-1]))
    n = 0
    for spans in by_task.values():
        spans.sort()
        for i, (_, end) in enumerate(spans):
            n += sum(1 for start, _ in spans[i + 1 :] if start <= end)
    return n


def overcommitted(runs: list[dict[str, Any]], capacity: dict[str, int]) -> int:
    """Nodes where the CPU of the runs ticking at the same time ever exceeded capacity."""
    events: dict[str, list[tuple[float, int]]] = {}
    for r in runs:
        if r["ticks"]:
            ev = events.setdefault(r["node"], [])
            ev += [(r["ticks"][0], r["cpu_m"]), (r["ticks"][-1], -r["cpu_m"])]
    bad = 0
    for node, ev in events.items():
        ev.sort(key=lambda e: (e[0], e[1]))  # at equal times, ends before starts
        used = peak = 0
        for _, d in ev:
            used += d
            peak = max(peak, used)
        bad += peak > capacity.get(node, 0)
    return bad


@contextlib.contextmanager
def chaos_cluster(
    directory: Path, nodes: int = 3, cpu_per_node: int = 2, partitionable: bool = True
) -> Iterator[Chaos]:
    """A dev cluster for chaos (short heartbeats; the last agent behind a partition proxy
    when ``partitionable``); everything it started is stopped on exit."""
    cluster = dev.up(
        nodes=nodes,
        cpu_per_node=cpu_per_node,
        memory_per_node="4Gi",
        api=False,
        heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        loop_interval_s=0.3,
        stop_grace_s=1,
        directory=directory,
    )
    proxy = None
    try:
        if partitionable:
            port = int(cluster.redis_url.rsplit(":", 1)[1].split("/")[0])
            proxy = PartitionProxy("127.0.0.1", port).start()
            last = nodes - 1
            cfg = Path(cluster.agent_configs[last])
            doc = yaml.safe_load(cfg.read_text())
            doc["redis"]["url"] = f"redis://127.0.0.1:{proxy.port}/0"
            cfg.write_text(yaml.safe_dump(doc))
            cluster.kill(f"agent-{last}")
            cluster.start_agent(last)
        yield Chaos(cluster, proxy)
    finally:
        with contextlib.suppress(KeyError):
            cluster._procs["loop"].signal(signal.SIGKILL)  # no new binds while stopping
        dev.down(directory)
        if proxy is not None:
            proxy.close()
