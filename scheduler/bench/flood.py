"""Another tenant's request time under one tenant's flood (issue 32 item 5).

Setup: a private redis-server, two VCs (``default``, ``research``), ``--jobs`` jobs, and
the API as its own process (``python -m scheduler.api``) with its default limits. Tenant
*bob* (VC research, address 127.0.0.1) sends ``GET /api/v1/jobs`` one after another and
its wall-clock times are recorded: first alone (the baseline), then during each flood
that tenant *alice* (VC default, address 127.0.0.2) sends from ``--clients`` processes
for ``--seconds``:

- ``dashboard_pages``: alice's dashboard session loads the jobs page over and over;
- ``dashboard_submits``: alice's session posts the submit form (each a new job);
- ``wrong_tokens``: requests with distinct wrong bearer tokens (never the same twice).

Figures: ``baseline_p50_s``, and per flood ``<flood>_p50_s`` (bob's median during it),
``<flood>_ratio`` (that over the baseline; the goal is at most 2), ``<flood>_sent`` and
``<flood>_refused`` (alice's requests and those answered 429), and
``<flood>_stored_jobs`` for the submit flood (what the submit limit let through).
The flood processes run beside the API on the same machine: on a machine with few cores
the ratio also measures CPU contention between the flood's clients and the API.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from scheduler.devproc import api_server, free_port, redis_server

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
FLOODS = ("dashboard_pages", "dashboard_submits", "wrong_tokens")
FLOOD_ADDRESS = "127.0.0.2"
VICTIM_ADDRESS = "127.0.0.1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=200, help="jobs in the store")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=4, help="flooding processes")


def _login(client: Any, token: str) -> tuple[str, str]:
    """Log ``client`` in to the dashboard; returns (session cookie header, form CSRF)."""
    page = client.get("/dashboard/login")
    found = CSRF.search(page.text)
    if found is None:
        raise RuntimeError(f"the login page has no CSRF token: {page.text[:200]}")
    csrf = found.group(1)
    r = client.post(
        "/dashboard/login",
        data={"token": token, "csrf_token": csrf},
        headers={"Cookie": f"pasture_login_csrf={csrf}"},
    )
    if r.status_code != 303:
        raise RuntimeError(f"dashboard login failed: {r.status_code} {r.text[:200]}")
    cookie = f"pasture_session={r.cookies.get('pasture_session')}"
    form = client.get("/dashboard/submit", headers={"Cookie": cookie})
    found = CSRF.search(form.text)
    return cookie, found.group(1) if found else ""


def _flood(
    url: str, token: str, kind: str, seconds: float, worker: int, out: Any
) -> None:  # pragma: no cover - runs in a child process
    """One flooding process: send ``kind`` requests for ``seconds``; puts (sent, 429s)."""
    import httpx

    transport = httpx.HTTPTransport(local_address=FLOOD_ADDRESS)
    sent = refused = 0
    with httpx.Client(base_url=url, timeout=60, transport=transport) as c:
        cookie, csrf = _login(c, token) if kind.startswith("dashboard") else ("", "")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if kind == "dashboard_pages":
                r = c.get("/dashboard/jobs", headers={"Cookie": cookie})
            elif kind == "dashboard_submits":
                spec = f"name: f{worker}-{sent}\nroles:\n  w:\n    command: 'true'\n"
                r = c.post(
                    "/dashboard/submit",
                    data={"csrf_token": csrf, "spec": spec, "action": "submit"},
                    headers={"Cookie": cookie},
                )
            else:
                wrong = f"wrong-{worker}-{sent}-{time.monotonic_ns()}"
                r = c.get("/api/v1/jobs", headers={"Authorization": f"Bearer {wrong}"})
            sent += 1
            refused += r.status_code == 429
    out.put((sent, refused))


def _victim(url: str, token: str, seconds: float) -> list[float]:
    """Bob's request times (s) over ``seconds``, one request after another."""
    import httpx

    transport = httpx.HTTPTransport(local_address=VICTIM_ADDRESS)
    times = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=60, transport=transport, headers=headers) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            r = c.get("/api/v1/jobs", params={"limit": 20})
            times.append(time.perf_counter() - t)
            if r.status_code != 200:
                raise RuntimeError(f"bob's request answered {r.status_code}: {r.text[:200]}")
            time.sleep(0.02)  # well under bob's own request limit
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; returns the figures of the module docstring."""
    import numpy as np

    from scheduler.services.jobs import JobService
    from scheduler.settings import SchedulerSettings
    from scheduler.store import Store
    from scheduler.store.tokens import TokenInfo, TokenRole, TokenStore

    if args.jobs < 0 or args.seconds <= 0 or args.clients < 1:
        raise SystemExit("--jobs >= 0, --seconds > 0 and --clients >= 1 are required")
    out: dict[str, Any] = {}
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="pasture-bench-flood-") as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "share").mkdir()
        with redis_server(tmp_path) as redis_url:
            port = free_port()
            config = {
                "cluster_name": "bench",
                "redis": {"url": redis_url},
                "share_dir": str(tmp_path / "share"),
                "api": {"host": "127.0.0.1", "port": port},
                "virtual_clusters": [
                    {"name": n, "guarantee": {"cpu": 64, "memory": "256Gi"}}
                    for n in ("default", "research")
                ],
            }
            cfg = tmp_path / "scheduler.yaml"
            cfg.write_text(yaml.safe_dump(config))
            settings = SchedulerSettings.model_validate(config)
            store = Store(settings.redis.client())
            store.apply_vcs(settings.virtual_clusters)
            jobs = JobService(store)
            admin = TokenInfo("bench", TokenRole.ADMIN)
            for i in range(args.jobs):
                vc = ("default", "research")[i % 2]
                spec = {"name": f"job-{i:05d}", "vc": vc, "roles": {"w": {"command": "x"}}}
                jobs.submit(admin, spec)
            tokens = TokenStore(store.r)
            alice = tokens.create("alice", "user", ["default"])
            bob = tokens.create("bob", "user", ["research"])
            if alice is None or bob is None:
                raise RuntimeError("tokens exist in a fresh Redis")
            url = f"http://127.0.0.1:{port}"
            with api_server(cfg, port, tmp_path):
                base = np.array(_victim(url, bob, args.seconds))
                out["baseline_p50_s"] = round(float(np.percentile(base, 50)), 4)
                for kind in FLOODS:
                    time.sleep(10.5)  # the limits' 10 s windows start afresh
                    before = store.r.zcard(store.k("jobs"))
                    queue = ctx.Queue()
                    procs = [
                        ctx.Process(target=_flood, args=(url, alice, kind, args.seconds, w, queue))
                        for w in range(args.clients)
                    ]
                    for p in procs:
                        p.start()
                    time.sleep(1.0)  # the clients have logged in and are flooding
                    during = np.array(_victim(url, bob, max(1.0, args.seconds - 2.0)))
                    sent = refused = 0
                    for _ in procs:
                        s, r = queue.get(timeout=args.seconds + 120)
                        sent, refused = sent + s, refused + r
                    for p in procs:
                        p.join(30)
                    p50 = float(np.percentile(during, 50))
                    out[f"{kind}_p50_s"] = round(p50, 4)
                    out[f"{kind}_ratio"] = round(p50 / out["baseline_p50_s"], 2)
                    out[f"{kind}_sent"] = sent
                    out[f"{kind}_refused"] = refused
                    if kind == "dashboard_submits":
                        after = store.r.zcard(store.k("jobs"))
                        out[f"{kind}_stored_jobs"] = after - before
    out["worst_ratio"] = max(out[f"{k}_ratio"] for k in FLOODS)
    out["goal_ratio"] = 2.0
    out["clients"] = args.clients
    out["seconds"] = args.seconds
    return out
