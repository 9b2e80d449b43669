"""Helpers for the tests on a process-mode dev cluster (:func:`scheduler.dev.up`: the real
API process, loop, agent and redis-server): :func:`wait_for` a condition;
:func:`submit` to the store, :func:`wait_job` for a job's end, :func:`task_pids` and
:func:`gone` for its task processes; and :func:`two_tenants` for the tests that check what
one tenant (VC) sees of another, with per tenant a user token of its own VC and an HTTP
client. :func:`scheduler_yaml` and :func:`agent_yaml` write the settings files of a
master and a process-executor node for the tests that start ``pasture serve`` themselves::

    with two_tenants(tmp_path / "dev", vcs, {"alice": "a", "bob": "b"}) as (cluster, api):
        api["alice"].post("/api/v1/jobs", json=...)
        wait_for("alice's job running", lambda: ...)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from scheduler import dev
from scheduler.spec import load_job_spec, parse_job_spec
from scheduler.store import JobRecord, Store
from scheduler.store.tokens import TokenStore


def scheduler_yaml(
    path: Path, cluster_name: str, redis_url: str, share: Path, port: int, **extra: Any
) -> Path:
    """Write a master's settings file (:class:`scheduler.settings.SchedulerSettings` as
    YAML) at ``path``: the cluster name, the Redis URL, the share directory and the API on
    127.0.0.1:``port``, plus any top-level ``extra`` fields (e.g.
    ``loop={"interval_s": 0.5}``). Returns ``path``."""
    doc = {
        "cluster_name": cluster_name,
        "redis": {"url": redis_url},
        "share_dir": str(share),
        "api": {"host": "127.0.0.1", "port": port},
        **extra,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def agent_yaml(path: Path, node_name: str, redis_url: str, share: Path, work: Path) -> Path:
    """Write a process-executor node agent's settings file
    (:class:`scheduler.settings.AgentSettings` as YAML) at ``path``: 2 cores and 2 GiB,
    a 1 s heartbeat, tasks' working directories under ``work``. Returns ``path``."""
    doc = {
        "node_name": node_name,
        "redis": {"url": redis_url},
        "share_dir": str(share),
        "executor": "process",
        "heartbeat_interval_s": 1,
        "work_dir": str(work),
        "resources": {"cpu": 2, "memory": "2Gi"},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def wait_for(what: str, check: Callable[[], object], timeout: float = 60.0, every: float = 0.2):
    """Call ``check`` every ``every`` seconds until it is true; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


@contextmanager
def two_tenants(
    directory: Path,
    vcs: Sequence[Mapping[str, Any]],
    tenants: Mapping[str, str],
    *,
    gpus_per_node: int = 0,
) -> Iterator[tuple[dev.DevCluster, dict[str, httpx.Client]]]:
    """A one-node dev cluster (4 cores, 4 GiB, ``gpus_per_node`` GPUs; heartbeats every
    0.5 s, a loop cycle every 0.3 s, 1 s stop grace) with virtual clusters ``vcs``, and
    for each tenant ``{user: vc}`` a client of the API carrying a user token of that VC
    only. Yields ``(cluster, {user: client})``; closes the clients and takes the cluster
    down (``dev.down``) on the way out."""
    cluster = dev.up(
        nodes=1,
        gpus_per_node=gpus_per_node,
        cpu_per_node=4,
        memory_per_node="4Gi",
        virtual_clusters=list(vcs),
        directory=directory,
        heartbeat_interval_s=0.5,
        loop_interval_s=0.3,
        stop_grace_s=1,
    )
    api: dict[str, httpx.Client] = {}
    try:
        tokens = TokenStore(cluster.store().r)
        for who, vc in tenants.items():
            api[who] = httpx.Client(
                base_url=cluster.endpoint,
                headers={"Authorization": f"Bearer {tokens.create(who, 'user', [vc])}"},
                timeout=30,
            )
        yield cluster, api
    finally:
        for client in api.values():
            client.close()
        dev.down(directory)


def submit(store: Store, doc_or_text: dict[str, Any] | str, user: str = "test") -> str:
    """Submit a job straight to the store (a spec dict, or YAML/JSON text); its name."""
    spec = (
        load_job_spec(doc_or_text) if isinstance(doc_or_text, str) else parse_job_spec(doc_or_text)
    )
    store.create_job(spec, user=user)
    return spec.name


def wait_job(
    store: Store,
    name: str,
    states: Sequence[str] = ("succeeded", "failed", "stopped"),
    timeout: float = 60.0,
) -> JobRecord:
    """The job's record once its state is one of ``states``; AssertionError with its
    state and events after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = store.get_job(name)
        if job is not None and job.state in states:
            return job
        time.sleep(0.2)
    job = store.get_job(name)
    raise AssertionError(
        f"job {name} is {job.state if job else None}, wanted {states}; events: {store.events(name)}"
    )


def task_pids(store: Store, job: str) -> list[int]:
    """Process ids of the job's started tasks (the process executor's handles)."""
    return [json.loads(t.handle)["pid"] for t in store.tasks(job) if t.handle]


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie not reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
