"""Chaos: store outages, killed and partitioned agents, killed and doubled loops; invariants.

``python -m scheduler.bench chaos --faults N [--json]`` starts a process-mode dev cluster
(real redis-server, loop and agents; short heartbeats: 0.5 s interval, 3 s timeout, so a
1.5 s agent lease), runs jobs whose tasks leave marks (:mod:`scheduler.bench.chaos_task`)
and injects N faults, cycling through :data:`FAULTS`:

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
Last, on a one-node cluster of its own with the real API, tasks of one tenant plant links
to another tenant's log and to the cluster's keys in their log directories and that
tenant's token asks for them (:func:`cross_tenant_reads`): ``cross_tenant_reads`` counts
the answers that carried any of it (0 expected). Then (unless ``--no-round2``) the
round-2 faults, each on a cluster of its own (:func:`run_round2`): a gang's node powered
off, a node frozen and thawed after its task's successor started, a stored job no
executor could launch, a store outage of 2/3 of the lease and a Sentinel failover (both
at 1/8 of the production timings): ``round2`` counts jobs lost, attempts charged,
double runs, late writes, blocked launches and restarts (0 expected) and gives the
outage and failover seconds. The same harness (:class:`Chaos`) backs tests/chaos/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import tempfile
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
        self.proxy = proxy
        self.survived: dict[str, list[float]] = {}
        self.jobs: list[str] = []
        self.sentinels: list[str] = []  # addresses, when the store is behind Sentinel

    # ---- work ---------------------------------------------------------------------
    def submit(self, n: int, work_s: float, cpu_m: int = 250, prefix: str = "c") -> list[str]:
        """Submit ``n`` one-task jobs that work ``work_s`` seconds on ``cpu_m`` millicores
        each (default retry policy: one attempt, so any charged attempt fails the job)."""
        names = []
        for i in range(len(self.jobs), len(self.jobs) + n):
            name = f"{prefix}{i}"
            cmd = f"python3 -S {chaos_task.__file__} {self.marks} {work_s:g} {cpu_m}"
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--faults N``, ``--jobs N``, ``--work-s S``."""
    p.add_argument("--faults", type=int, default=len(FAULTS), help="faults to inject")
    p.add_argument("--jobs", type=int, default=20, help="jobs submitted before each fault")
    p.add_argument("--work-s", type=float, default=12.0, help="seconds each task works")
    p.add_argument(
        "--round2",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the round-2 faults (gang node loss, frozen node, unlaunchable task, "
        "store outage of 2/3 of the lease, Sentinel failover; about 3 minutes)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Inject ``args.faults`` faults (cycling through FAULTS) and return the counts, the
    cross-tenant reads, and with ``args.round2`` the round-2 faults' counts (``round2``,
    :func:`run_round2`)."""
    with tempfile.TemporaryDirectory(prefix="pasture-chaos-") as tmp:
        with chaos_cluster(Path(tmp) / "dev", cpu_per_node=2) as chaos:
            for i in range(args.faults):
                names = chaos.submit(args.jobs, args.work_s, cpu_m=250)
                chaos.wait_running(names)
                chaos.inject(FAULTS[i % len(FAULTS)])
                chaos.wait_done(names)
            chaos.wait_done()
            out = chaos.check()
            out.update(cross_tenant_reads(Path(tmp) / "tenant"))
        if getattr(args, "round2", False):
            out["round2"] = run_round2(Path(tmp))
    return {"faults": args.faults, **out}


# ---- cross-tenant reads (issue 25 item 1) -----------------------------------------------
ATTACK = r"""set -u
# the task's own log directory: <job dir>/logs/<uid>/ (scheduler/logpaths.py)
L=$(ls -d "$PASTURE_JOB_DIR"/logs/*/ | head -1); L=${{L%/}}; S="$PASTURE_SHARE_DIR"
i=0
for f in "$S"/jobs/*/logs/*/*.log; do
  case "$f" in "$PASTURE_JOB_DIR"/*) continue;; esac
  ln -s "$f" "$L/v$i-0.log"; ln "$f" "$L/hv$i-0.log" 2>/dev/null; i=$((i+1))
done
ln -s {pw} "$L/pw-0.log"; ln -s {key} "$L/key-0.log"; ln {key} "$L/hkey-0.log"
ln -s ../../../../{key_rel} "$L/rel-0.log"
mkfifo "$L/fifo-0.log"
touch "$PASTURE_JOB_DIR/planted"; sleep 120
"""
SWAP_DIR = r"""set -u
sleep 1; V=$(ls -d "$PASTURE_SHARE_DIR"/jobs/*/logs/*/ | grep -v "^$PASTURE_JOB_DIR/" | head -1)
O=$(ls -d "$PASTURE_JOB_DIR"/logs/*/ | head -1); O=${O%/}
mv "$O" "$O.real" && ln -s "${V%/}" "$O"
touch "$PASTURE_JOB_DIR/planted"; sleep 120
"""


def cross_tenant_reads(directory: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Tasks of one tenant plant links to another tenant's log and to the cluster's keys
    in their own log directories; that tenant's token then asks the API (a real uvicorn
    process) for every planted name, through ``..`` paths and a log directory replaced by
    a link. Returns ``{"cross_tenant_reads": responses that carried another tenant's log
    or a key, "cross_tenant_attempts": requests made, "cross_tenant_5xx": server errors, hung or
    broken answers, "cross_tenant_planted": links, hard links and FIFOs the tasks planted
    where the API reads}``.

    A one-node dev cluster of its own in ``directory`` (two VCs: ``default`` for the
    attacker, ``research`` for the victim), stopped on return.
    """
    import secrets as _secrets

    import httpx

    from scheduler.store.tokens import TokenStore

    vcs = [
        {"name": "default", "guarantee": {"cpu": 1, "memory": "1Gi"}},
        {"name": "research", "guarantee": {"cpu": 1, "memory": "1Gi"}},
    ]
    cluster = dev.up(
        nodes=1, cpu_per_node=4, memory_per_node="4Gi", virtual_clusters=vcs, directory=directory
    )
    try:
        base, share = Path(cluster.base_dir), Path(cluster.share_dir)
        key = base / "secrets.key"
        secrets_seen = {
            "victim": f"VICTIM-{_secrets.token_hex(8)}",
            "key": key.read_text().strip(),
            "redis": Path(cluster.redis_password_file).read_text().strip(),
        }
        store = cluster.store()
        tokens = TokenStore(store.r)
        alice = tokens.create("alice", "user", ["default"])
        bob = tokens.create("bob", "user", ["research"])
        if alice is None or bob is None:
            raise RuntimeError("a fresh dev cluster already had a token named alice or bob")
        api = {
            "alice": httpx.Client(base_url=cluster.endpoint, timeout=30, headers=_bearer(alice)),
            "bob": httpx.Client(base_url=cluster.endpoint, timeout=30, headers=_bearer(bob)),
        }

        def submit(who: str, name: str, vc: str, command: str) -> None:
            doc = {"name": name, "vc": vc, "roles": {"w": {"command": command}}}
            r = api[who].post("/api/v1/jobs", json=doc)
            if r.status_code != 201:
                raise RuntimeError(f"submit {name} answered {r.status_code}: {r.text[:300]}")

        submit("bob", "victim", "research", f"echo {secrets_seen['victim']}; sleep 120")
        _until(lambda: secrets_seen["victim"] in _all_logs(share), timeout_s, "victim's log")
        key_rel = key.relative_to(base)  # from jobs/<job>/logs/<uid>/, ../../../../ is the share
        attack = ATTACK.format(pw=cluster.redis_password_file, key=key, key_rel=key_rel)
        submit("alice", "attack-files", "default", attack)
        submit("alice", "attack-dir", "default", SWAP_DIR)
        _until(lambda: len(list(share.glob("jobs/*/planted"))) >= 2, timeout_s, "links planted")
        # what the attack really planted where the API reads (so 0 reads means refused)
        planted = [
            p
            for p in share.glob("jobs/attack-files/logs/*/*-0.log")
            if p.is_symlink() or not p.is_file() or p.stat().st_nlink > 1
        ] + [p for p in share.glob("jobs/attack-dir/logs/*") if p.is_symlink()]

        asks: list[tuple[str, dict[str, Any]]] = []
        roles = ["w", "pw", "key", "hkey", "rel", "fifo"] + [
            f"{p}{i}" for p in ("v", "hv") for i in range(3)
        ]
        for role in roles:
            asks.append(("/api/v1/jobs/attack-files/logs", {"role": role, "index": 0}))
            asks.append(("/api/v1/jobs/attack-files/logs", {"role": role, "tail": 5}))
        asks += [
            ("/api/v1/jobs/attack-files/logs/files", {}),
            ("/api/v1/jobs/attack-dir/logs", {"role": "w", "index": 0}),
            ("/api/v1/jobs/attack-dir/logs", {}),
            ("/api/v1/jobs/attack-dir/logs/files", {}),
            ("/api/v1/jobs/attack-files/logs", {"role": "../../victim/logs/w", "index": 0}),
            ("/api/v1/jobs/attack-files/logs", {"role": "..", "index": 0}),
            ("/api/v1/jobs/..%2Fvictim/logs", {"role": "w", "index": 0}),
            ("/api/v1/jobs/attack-files%2F..%2F..%2Fvictim/logs", {"role": "w"}),
            ("/api/v1/jobs/victim/logs", {"role": "w", "index": 0}),
        ]
        reads = errors = 0
        for path, params in asks:
            try:
                r = api["alice"].get(path, params=params, timeout=5)
            except httpx.HTTPError:  # a hung or broken answer (a FIFO once blocked a read)
                errors += 1
                continue
            errors += r.status_code >= 500
            reads += any(s and s in r.text for s in secrets_seen.values())
        for c in api.values():
            c.close()
        return {
            "cross_tenant_reads": reads,
            "cross_tenant_attempts": len(asks),
            "cross_tenant_5xx": errors,
            "cross_tenant_planted": len(planted),
        }
    finally:
        with contextlib.suppress(KeyError):
            cluster._procs["loop"].signal(signal.SIGKILL)
        dev.down(directory)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _all_logs(share: Path) -> str:
    out = []
    for p in [*share.glob("jobs/*/logs/*.log"), *share.glob("jobs/*/logs/*/*.log")]:
        with contextlib.suppress(OSError):
            out.append(p.read_text(errors="replace"))
    return "\n".join(out)


def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


# ---- faults of issue 25's second round (gang, frozen node, broken launch, sentinel) ----
def submit_gang(chaos: Chaos, name: str, work_s: float, peer_timeout_s: float = 1.0) -> str:
    """Submit a 2-task gang, one task per node (each takes a whole 2-CPU node), whose
    tasks exit 1 when their peer stops ticking for ``peer_timeout_s`` (a collective's
    ranks when a peer vanishes). Default retry policy: one attempt."""
    cmd = f"python3 -S {chaos_task.__file__} {chaos.marks} {work_s:g} 2000 {peer_timeout_s:g}"
    spec = {
        "name": name,
        "roles": {
            "w": {
                "replicas": 2,
                "command": cmd,
                "resources": {"cpu": "2", "memory": "256Mi"},
            }
        },
    }
    chaos.store.create_job(parse_job_spec(spec), user="chaos")
    chaos.jobs.append(name)
    return name


def node_processes(chaos: Chaos, i: int) -> list[Any]:
    """psutil processes of node ``i``: its agent and everything it started (task
    watchdogs, tasks), found as descendants of the agent and by the agent's work dir in
    their command line (detached watchdogs)."""
    import psutil

    agent = chaos.cluster._procs[f"agent-{i}"].process()
    work = str(yaml.safe_load(Path(chaos.cluster.agent_configs[i]).read_text())["work_dir"])
    found: dict[int, Any] = {}
    roots = [agent] if agent is not None else []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(work in a for a in p.info["cmdline"] or []):
                roots.append(p)
    for root in roots:
        with contextlib.suppress(psutil.Error):
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
    return list(found.values())


def node_power_off(chaos: Chaos, i: int) -> None:
    """SIGKILL node ``i``'s agent and every process it started, at once (a machine lost)."""
    for p in node_processes(chaos, i):
        with contextlib.suppress(Exception):
            p.kill()


def node_freeze(chaos: Chaos, i: int) -> list[Any]:
    """SIGSTOP node ``i``'s agent and every process it started (a frozen machine, ``podman
    pause``); returns them for :func:`node_thaw`."""
    procs = node_processes(chaos, i)
    for p in procs:
        with contextlib.suppress(Exception):
            p.suspend()
    return procs


def node_thaw(procs: list[Any]) -> None:
    """SIGCONT the processes :func:`node_freeze` stopped, tasks first (the worst order:
    a task runs before its watchdog and agent could)."""
    for p in sorted(procs, key=lambda p: -p.pid):
        with contextlib.suppress(Exception):
            p.resume()


def successor_started(chaos: Chaos, job: str, attempt: int) -> float | None:
    """First tick (wall-clock s) of any run of ``job`` with an attempt after ``attempt``."""
    firsts = [
        r["ticks"][0]
        for r in read_runs(chaos.marks, [job])
        if r["attempt"] > attempt and r["ticks"]
    ]
    return min(firsts) if firsts else None


def late_writes(chaos: Chaos, job: str) -> int:
    """Ticks of runs of ``job`` stamped after a later attempt's first tick: an old
    attempt that wrote after its successor started."""
    runs = read_runs(chaos.marks, [job])
    n = 0
    for r in runs:
        later = [x["ticks"][0] for x in runs if x["attempt"] > r["attempt"] and x["ticks"]]
        if later:
            n += sum(1 for t in r["ticks"] if t >= min(later))
    return n


def submit_broken(chaos: Chaos, name: str, max_attempts: int = 1) -> str:
    """Store a one-task job whose environment holds a NUL byte, which no executor can
    launch (``execve`` refuses it) and submit now refuses. It bypasses submit's validation
    on purpose: a record that got into the store some other way (an older release, a
    restored backup), which the loop must fail without jamming its cycle."""
    spec = parse_job_spec(
        {
            "name": name,
            "retry": {"max_attempts": max_attempts},
            "roles": {
                "w": {
                    "command": "sleep 30",
                    "resources": {"cpu": "500m", "memory": "64Mi"},
                    "env": {"BROKEN": "ok"},
                }
            },
        }
    )
    spec.roles["w"].env["BROKEN"] = "a\0b"
    chaos.store.create_job(spec, user="chaos")
    chaos.jobs.append(name)
    return name


# The 2-minute claim of docs/faults.md "Bounds" scaled down for a test: the default lease
# is 180 s and a 120 s outage restarts nothing (outage / lease = 2/3, lost after 300 s,
# heartbeat every 5 s); scaled by 1/8: lease 22.5 s, outage 15 s, lost after 37.5 s,
# heartbeat every 0.625 s. Same ratios, 8 times faster (1/15 left too little margin for a
# Sentinel failover on a loaded 2-core CI machine: tasks restarted there).
SCALE = 8.0
SCALED_LEASE_S = 180.0 / SCALE
SCALED_OUTAGE_S = 120.0 / SCALE
SCALED_LOST_AFTER_S = 300.0 / SCALE
SCALED_HEARTBEAT_S = 5.0 / SCALE


def _rewrite_yaml(path: Path, change: Any) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


@contextlib.contextmanager
def scaled_cluster(directory: Path, nodes: int = 2, sentinel: bool = False) -> Iterator[Chaos]:
    """A dev cluster with the production timings scaled by 1/:data:`SCALE` (agents'
    lease :data:`SCALED_LEASE_S`, loop lost-node timeout :data:`SCALED_LOST_AFTER_S`).
    With ``sentinel``: a replica and three Redis Sentinels (quorum 2, down after 1 s)
    beside the primary, and loop and agents configured to follow them
    (``redis.sentinels``); the Chaos object's ``store`` follows them too and its
    ``sentinels`` lists their addresses."""
    cluster = dev.up(
        nodes=nodes,
        cpu_per_node=2,
        memory_per_node="4Gi",
        api=False,
        heartbeat_interval_s=SCALED_HEARTBEAT_S,
        heartbeat_timeout_s=SCALED_LOST_AFTER_S,
        loop_interval_s=0.3,
        stop_grace_s=1,
        directory=directory,
    )
    try:
        sentinels: list[str] = []
        if sentinel:
            sentinels = _start_sentinels(cluster)

        def redis_conf(doc: dict[str, Any]) -> None:
            if sentinels:
                doc["redis"]["sentinels"] = sentinels

        def agent_conf(doc: dict[str, Any]) -> None:
            doc["lease_s"] = SCALED_LEASE_S
            redis_conf(doc)

        _rewrite_yaml(Path(cluster.scheduler_config), redis_conf)
        cluster.kill("loop")
        cluster.start_loop()
        for i, cfg in enumerate(cluster.agent_configs):
            _rewrite_yaml(Path(cfg), agent_conf)
            cluster.kill(f"agent-{i}")
            cluster.start_agent(i)
        chaos = Chaos(cluster, None)
        if sentinels:
            from scheduler.settings import RedisSettings
            from scheduler.store import Store

            chaos.store = Store(
                RedisSettings(
                    url=cluster.redis_url, password=cluster.redis_password(), sentinels=sentinels
                ).client(socket_timeout=5)
            )
        chaos.sentinels = sentinels
        deadline = time.monotonic() + 30
        while len([n for n in chaos.store.list_nodes() if n.lease_s == SCALED_LEASE_S]) < nodes:
            if time.monotonic() > deadline:
                raise TimeoutError("agents did not register with the scaled lease")
            time.sleep(0.2)
        yield chaos
    finally:
        with contextlib.suppress(KeyError):
            cluster._procs["loop"].signal(signal.SIGKILL)
        dev.down(directory)
        for name in [n for n in cluster._procs if n.startswith(("sentinel-", "replica"))]:
            cluster._procs[name].stop()


def _start_sentinels(cluster: dev.DevCluster) -> list[str]:
    """Start a replica of the dev cluster's Redis and three sentinels monitoring it
    (master name ``pasture``, quorum 2, down after 1 s); returns their addresses."""
    from scheduler.devproc import free_port, spawn

    base = Path(cluster.base_dir)
    master_port = int(cluster.redis_url.rsplit(":", 1)[1].split("/")[0])
    password = cluster.redis_password() or ""
    argv = list(cluster._procs["redis"].argv)
    replica_port = free_port()
    replica_dir = base / "replica"
    replica_dir.mkdir(exist_ok=True)
    # the same settings file (password, the nodes' ACL users), another port and dir
    argv[argv.index("--port") + 1] = str(replica_port)
    argv[argv.index("--dir") + 1] = str(replica_dir)
    argv += ["--replicaof", "127.0.0.1", str(master_port), "--masterauth", password]
    cluster._procs["replica"] = spawn("replica", argv, base)
    # the primary too needs masterauth, for when it rejoins as a replica after a failover
    import redis

    admin = redis.Redis.from_url(cluster.redis_url, password=password)
    admin.config_set("masterauth", password)
    addresses = []
    for i in range(3):
        port = free_port()
        d = base / f"sentinel-{i}"
        d.mkdir(exist_ok=True)
        conf = d / "sentinel.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    "protected-mode no",
                    f"dir {d}",
                    f"sentinel monitor pasture 127.0.0.1 {master_port} 2",
                    f"sentinel auth-pass pasture {password}",
                    "sentinel down-after-milliseconds pasture 1000",
                    "sentinel failover-timeout pasture 5000",
                    "",
                ]
            )
        )
        conf.chmod(0o600)
        redis_exe = argv[0]
        cluster._procs[f"sentinel-{i}"] = spawn(
            f"sentinel-{i}", [redis_exe, str(conf), "--sentinel"], base
        )
        addresses.append(f"127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    replica = redis.Redis(port=replica_port, password=password)
    while True:
        with contextlib.suppress(redis.RedisError):
            if replica.info("replication").get("master_link_status") == "up":
                break
        if time.monotonic() > deadline:
            raise TimeoutError("the replica did not sync with the primary")
        time.sleep(0.1)
    return addresses


def failover(chaos: Chaos, timeout: float = 60.0) -> float:
    """SIGKILL the primary Redis and wait until the sentinels name another one and it
    answers; returns the seconds from the kill until then (the failover time)."""
    from redis.sentinel import Sentinel

    sentinel = Sentinel([(a.split(":")[0], int(a.split(":")[1])) for a in chaos.sentinels])
    old = sentinel.discover_master("pasture")
    t0 = time.monotonic()
    chaos.cluster.kill("redis")
    while True:
        with contextlib.suppress(Exception):
            if sentinel.discover_master("pasture") != old:
                chaos.store.r.ping()
                break
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("no failover within the timeout")
        time.sleep(0.1)
    took = time.monotonic() - t0
    chaos.survived.setdefault("failover", []).append(took)
    return took


# ---- round-2 scenarios: each runs one fault end to end and returns what happened ----------
def gang_node_loss(chaos: Chaos, name: str = "gang", work_s: float = 14.0) -> dict[str, Any]:
    """A 2-task gang (one task per node) whose first task's node is powered off while both
    run; the agent is restarted afterwards. Returns ``{job, lost_node}`` once the job
    ended. Raises TimeoutError when the gang does not start."""
    submit_gang(chaos, name, work_s=work_s, peer_timeout_s=1.0)
    deadline = time.monotonic() + 60
    while len(runs := chaos.running_runs([name])) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"gang {name} did not start")
        time.sleep(0.2)
    lost = next(r["node"] for r in runs if r["key"] == "w-0")
    i = chaos.cluster.nodes.index(lost)
    node_power_off(chaos, i)  # the agent and its task at once: w-1 exits 1 ~1 s later
    try:
        chaos.wait_done([name], timeout=120)
    finally:
        chaos.cluster.start_agent(i)
    return {"job": name, "lost_node": lost}


def frozen_node(chaos: Chaos, prefix: str = "frozen", work_s: float = 20.0) -> dict[str, Any]:
    """A one-task job's node frozen (SIGSTOP of agent, watchdog, task) until the task's
    successor ticks on another node, then thawed tasks first. Returns ``{job,
    late_writes}`` (ticks of the old run stamped after the successor's first, counted 2 s
    after the thaw) once the job ended. Raises TimeoutError when no successor starts."""
    (name,) = chaos.submit(1, work_s, cpu_m=2000, prefix=prefix)
    chaos.wait_running([name])
    run = chaos.running_runs([name])[0]
    procs = node_freeze(chaos, chaos.cluster.nodes.index(run["node"]))
    try:
        deadline = time.monotonic() + 60
        while successor_started(chaos, name, run["attempt"]) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no successor started on another node")
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        node_thaw(procs)
    time.sleep(2.0)  # the thawed task had every chance to write
    late = late_writes(chaos, name)
    chaos.wait_done([name], timeout=120)
    return {"job": name, "late_writes": late}


def broken_launch(chaos: Chaos) -> dict[str, Any]:
    """A stored job no executor could launch (:func:`submit_broken`) beside six ordinary
    ones on the same 3 nodes, and a second such job (100 attempts allowed) stopped by
    ``job stop``. Returns ``{broken, stopped, beside}`` (job names) once all ended."""
    broken = submit_broken(chaos, "broken-1")
    beside = chaos.submit(6, 3.0, cpu_m=500, prefix="beside")
    stopped = submit_broken(chaos, "broken-stop", max_attempts=100)
    chaos.wait_done([broken], timeout=60)
    chaos.store.request_stop(stopped, "stopped by the chaos run")
    chaos.wait_done([stopped, *beside], timeout=60)
    return {"broken": broken, "stopped": stopped, "beside": beside}


def outage_of_two_thirds_lease(chaos: Chaos) -> list[str]:
    """On a :func:`scaled_cluster`: 4 jobs running when the store goes down for
    :data:`SCALED_OUTAGE_S`; returns their names once they ended."""
    names = chaos.submit(4, SCALED_OUTAGE_S + 10.0, cpu_m=500, prefix="outage")
    chaos.wait_running(names)
    chaos.store_outage(down_s=SCALED_OUTAGE_S)
    chaos.wait_done(names, timeout=120)
    return names


def sentinel_failover(chaos: Chaos) -> list[str]:
    """On a :func:`scaled_cluster` with sentinels: 4 jobs running when the primary is
    SIGKILLed, 2 more submitted after the failover; returns the names once all ended."""
    names = chaos.submit(4, 16.0, cpu_m=500, prefix="failover")
    chaos.wait_running(names)
    failover(chaos)
    names += chaos.submit(2, 2.0, cpu_m=500, prefix="after")
    chaos.wait_done(names, timeout=120)
    return names


def first_attempt_only(chaos: Chaos, names: list[str]) -> dict[str, int]:
    """``{lost, charged, restarted}`` over ``names``: jobs not succeeded, attempts
    charged, and jobs that needed more than one run (any requeue or restart)."""
    jobs = chaos.store.get_jobs(names, with_spec=False)
    counts = chaos.check(names)
    return {
        "lost": sum(1 for j in jobs if j.state != "succeeded") + len(names) - len(jobs),
        "charged": counts["charged_attempts"],
        "restarted": sum(1 for j in jobs if j.attempts[:-1]) + max(0, counts["runs"] - len(names)),
        "double_runs": counts["two_places_at_once"],
    }


def run_round2(directory: Path) -> dict[str, Any]:
    """Every round-2 fault once (gang node loss, frozen node, unlaunchable task on the
    chaos cluster; outage of 2/3 of the lease and a Sentinel failover on 1/8-scale
    clusters); returns ``{lost, charged, double_runs, late_writes, launch_blocked,
    restarted, failover_s}``."""
    out: dict[str, Any] = {
        "lost": 0,
        "charged": 0,
        "double_runs": 0,
        "late_writes": 0,
        "launch_blocked": 0,
        "restarted": 0,
    }
    with chaos_cluster(directory / "r2", nodes=3, partitionable=False) as c:
        gang = gang_node_loss(c)
        frozen = frozen_node(c)
        broken = broken_launch(c)
        names = [gang["job"], frozen["job"]]
        counts = c.check(names)
        jobs = c.store.get_jobs(names + broken["beside"], with_spec=False)
        out["lost"] += sum(1 for j in jobs if j.state != "succeeded")
        out["charged"] += counts["charged_attempts"]
        out["double_runs"] += counts["two_places_at_once"]
        out["late_writes"] += frozen["late_writes"]
        ended = c.store.get_jobs([broken["broken"], broken["stopped"]], with_spec=False)
        out["launch_blocked"] = sum(1 for j in ended if j.state not in TERMINAL_JOB_STATES)
    with scaled_cluster(directory / "r2-outage", nodes=2) as c:
        got = first_attempt_only(c, outage_of_two_thirds_lease(c))
        for k in ("lost", "charged", "double_runs", "restarted"):
            out[k] += got[k]
        out["outage_s"] = c.survived["store_outage"]
    with scaled_cluster(directory / "r2-failover", nodes=2, sentinel=True) as c:
        got = first_attempt_only(c, sentinel_failover(c))
        for k in ("lost", "charged", "double_runs", "restarted"):
            out[k] += got[k]
        out["failover_s"] = [round(x, 1) for x in c.survived["failover"]]
    return out
