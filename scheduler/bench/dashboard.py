"""Dashboard page render times with a filled store (1,000 jobs, 200 nodes by default).

Setup: a private redis-server; ``--nodes`` registered nodes (8 GPUs each) with an hour of
usage history each (720 samples, what the heartbeat keeps); three VCs; ``--jobs`` jobs
submitted through the job service and placed by a few in-process loop cycles (so the
ledger, tasks, events and pending reasons are real); the API as its own process
(``python -m scheduler.api``). A client logs in through the login form and fetches each
page ``--repeat`` times; the figures are wall-clock seconds per request as the client sees
them (p50 / p99 per page), and the API process' CPU seconds per request
(``<page>_server_cpu_mean_s``, from its CPU clock,
:func:`~scheduler.bench.e2e.process_cpu_s`; it does not grow when other work shares the
machine's cores). Target: under 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import yaml

from scheduler.bench.e2e import process_cpu_s, simulated_nodes
from scheduler.devproc import api_server, free_port, redis_server

if TYPE_CHECKING:
    from scheduler.settings import SchedulerSettings
    from scheduler.store.store import Store

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in the store")
    parser.add_argument("--nodes", type=int, default=200, help="registered nodes")
    parser.add_argument("--repeat", type=int, default=30, help="requests per page")
    parser.add_argument("--seed", type=int, default=1)


def _fill(
    store: Store, settings: SchedulerSettings, n_nodes: int, n_jobs: int, rng: random.Random
) -> None:
    from scheduler.loop import Loop
    from scheduler.services.jobs import JobService
    from scheduler.store.store import USAGE_SAMPLE_S, USAGE_SAMPLES
    from scheduler.store.tokens import TokenInfo, TokenRole

    store.apply_vcs(settings.virtual_clusters)
    nodes = simulated_nodes(n_nodes, cpu=64, memory_gib=512, gpu=8)
    for node in nodes:
        node.gpu_model = "A100"
        store.register_node(node)
    now = store.now()
    pipe = store.r.pipeline(transaction=False)
    sums: dict[int, dict[str, float]] = {}
    for node in nodes:  # an hour of history, as the heartbeat would have kept it
        samples = []
        for i in range(USAGE_SAMPLES):
            sample = {
                "t": now - 3600 + i * USAGE_SAMPLE_S,
                "cpu": rng.uniform(0, 100),
                "mem": rng.uniform(0, 100),
                "gpu": rng.uniform(0, 100),
            }
            samples.append(json.dumps(sample))
            minute = sums.setdefault(int(sample["t"] // 60) * 60, {})
            for f in ("cpu", "mem", "gpu"):
                minute[f"{f}_sum"] = minute.get(f"{f}_sum", 0.0) + sample[f]
                minute[f"{f}_n"] = minute.get(f"{f}_n", 0) + 1
        pipe.rpush(store.k("node", node.name, "usage"), *samples)
    for t, fields in sums.items():  # and the cluster's per-minute sums
        pipe.hset(store.k("usage", "cluster", str(t)), mapping=fields)
    pipe.execute()
    jobs = JobService(store)
    admin = TokenInfo("bench", TokenRole.ADMIN)
    vcs = [vc.name for vc in settings.virtual_clusters]
    for i in range(n_jobs):
        gpus = rng.choice([0, 1, 2, 4, 8])
        jobs.submit(
            admin,
            {
                "name": f"job-{i:05d}",
                "vc": vcs[i % len(vcs)],
                "roles": {
                    "worker": {
                        "replicas": rng.randint(1, 4),
                        "resources": {"cpu": 2, "memory": "8Gi", "gpu": gpus},
                        "command": "python train.py",
                    }
                },
            },
        )
    loop = Loop(store, settings)
    for _ in range(4):
        loop.cycle()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; returns ``{page_p50_s, page_p99_s, ...}`` (seconds) per page."""
    import httpx
    import numpy as np

    from scheduler.settings import SchedulerSettings
    from scheduler.store import Store
    from scheduler.store.tokens import TokenStore

    if args.jobs < 1 or args.nodes < 1 or args.repeat < 1:
        raise SystemExit("--jobs, --nodes and --repeat must be at least 1")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="pasture-bench-dashboard-") as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "share").mkdir()
        with redis_server(tmp_path) as redis_url:
            port = free_port()
            config = {
                "cluster_name": "bench",
                "redis": {"url": redis_url},
                "share_dir": str(tmp_path / "share"),
                "api": {"host": "127.0.0.1", "port": port},
                "loop": {"interval_s": 1.0, "heartbeat_timeout_s": 3600},
                "virtual_clusters": [
                    {"name": n, "guarantee": {"cpu": 2000, "memory": "8Ti", "gpu": 400}}
                    for n in ("default", "research", "prod")
                ],
            }
            cfg = tmp_path / "scheduler.yaml"
            cfg.write_text(yaml.safe_dump(config))
            settings = SchedulerSettings.model_validate(config)
            store = Store(settings.redis.client())
            t0 = time.perf_counter()
            _fill(store, settings, args.nodes, args.jobs, rng)
            fill_s = time.perf_counter() - t0
            token = TokenStore(store.r).create("bench-admin", "admin")
            if token is None:
                raise RuntimeError("token bench-admin exists in a fresh Redis")
            with api_server(cfg, port, tmp_path) as api:
                url = f"http://127.0.0.1:{port}"
                figures = _measure(url, token, store, args.repeat, httpx, np, api.pid)
    figures["fill_s"] = round(fill_s, 2)
    figures["jobs"] = args.jobs
    figures["nodes"] = args.nodes
    figures["target_s"] = 0.2
    return figures


def _measure(
    url: str,
    token: str,
    store: Store,
    repeat: int,
    httpx: ModuleType,
    np: ModuleType,
    pid: int,
) -> dict[str, Any]:
    client = httpx.Client(base_url=url, timeout=60)
    page = client.get("/dashboard/login")
    found = CSRF.search(page.text)
    if found is None:
        raise RuntimeError(f"the login page has no CSRF token: {page.text[:200]}")
    login_csrf = found.group(1)
    cookies = {"pasture_login_csrf": page.cookies.get("pasture_login_csrf") or ""}
    # httpx does not send Secure cookies over http: pass them by hand
    r = client.post(
        "/dashboard/login",
        data={"token": token, "csrf_token": login_csrf},
        headers={"Cookie": f"pasture_login_csrf={cookies['pasture_login_csrf']}"},
    )
    if r.status_code != 303:
        raise RuntimeError(f"login failed: {r.status_code} {r.text[:200]}")
    sid = r.cookies.get("pasture_session")
    headers = {"Cookie": f"pasture_session={sid}"}
    running = store.list_jobs(state="running", limit=1)[0] or store.list_jobs(limit=1)[0]
    one = running[0].name
    pages = {
        "overview": "/dashboard/",
        "nodes": "/dashboard/nodes",
        "jobs": "/dashboard/jobs",
        "jobs_queued": "/dashboard/jobs?state=queued",
        "jobs_by_user": "/dashboard/jobs?user=bench",
        "job": f"/dashboard/jobs/{one}",
        "node": "/dashboard/nodes/sim-0001",
        "vcs": "/dashboard/vcs",
    }
    out: dict[str, Any] = {}
    for name, path in pages.items():
        times = []
        cpu0 = 0.0  # (set at i == 2)
        for i in range(repeat + 2):
            if i == 2:
                cpu0 = process_cpu_s(pid)
            t = time.perf_counter()
            r = client.get(path, headers=headers)
            times.append(time.perf_counter() - t)
            if r.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {r.status_code} {r.text[:200]}")
        out[f"{name}_server_cpu_mean_s"] = round((process_cpu_s(pid) - cpu0) / repeat, 4)
        times = np.array(times[2:])  # the first two warm caches (templates, scripts)
        out[f"{name}_p50_s"] = round(float(np.percentile(times, 50)), 4)
        out[f"{name}_p99_s"] = round(float(np.percentile(times, 99)), 4)
    out["worst_p99_s"] = max(v for k, v in out.items() if k.endswith("_p99_s"))
    client.close()
    return out
