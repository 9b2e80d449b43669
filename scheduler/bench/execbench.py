"""``pasture job exec`` latency to first output against a real dev cluster (target: 1 s).

Setup: ``scheduler.dev.up`` (redis-server, the API, the loop and one agent as local
processes, the task's own OpenSSH sshd) and one job with ``ssh: true``. Then
``--repeat`` times, as a fresh process (``python -m scheduler.cli job exec JOB main-0
-- echo ready``, what the ``pasture`` script runs): the wall seconds until the first byte
of the command's output arrives (``first_output``) and until the process exits
(``total``), median and max, and the CPU seconds of the CLI process (``cli_cpu``; the
waits on the API and the task's sshd come on top). Beside them, in one more child process,
where the time goes: the import of ``scheduler.cli``, the API client's set-up, the API
round trip that hands out the way in (``POST .../exec``), then either the whole OpenSSH
client run (``ssh_command_s``: connection, login and command; scheduler/cli/jobexec.py
``run_openssh``) or, on a checkout or machine without it, what is left of paramiko's import
after the round trip, the SSH connection (TCP, key exchange, login with the job's key) and
the command on the open connection. ``load_average_1m``: how busy the
machine was (wall times on a loaded machine are several times its CPU times).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

JOB = """\
name: bench-exec
ssh: true
roles:
  main:
    replicas: 1
    resources: {cpu: 100m, memory: 64Mi}
    command: sleep 600
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=7, help="runs of job exec")


def _first_output(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(seconds to the first stdout byte, seconds to exit, CPU seconds of the CLI process:
    user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    got = time.perf_counter() - start
    out, err = proc.communicate(timeout=60)
    total = time.perf_counter() - start
    if proc.returncode != 0 or not first:
        raise RuntimeError(f"{argv}: exit {proc.returncode}: {err.decode(errors='replace')}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return got, total, cpu


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster, time the runs, stop it; the figures (module docstring)."""
    import httpx

    from scheduler import dev

    with tempfile.TemporaryDirectory(prefix="pasture-bench-exec-") as tmp:
        c = dev.up(nodes=1, cpu_per_node=2, memory_per_node="2Gi", directory=Path(tmp))
        try:
            headers = {"Authorization": f"Bearer {c.token}"}
            r = httpx.post(f"{c.endpoint}/api/v1/jobs", content=JOB, headers=headers)
            r.raise_for_status()
            env = {k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")}
            env.update(PASTURE_DEV_DIR=tmp, PASTURE_CONFIG_HOME=f"{tmp}/cfg")
            argv = [sys.executable, "-m", "scheduler.cli", "job", "exec", "bench-exec"]
            argv += ["main-0", "--", "echo", "ready"]
            deadline = time.monotonic() + 90
            while True:  # until the task's sshd answers
                try:
                    _first_output(argv, env)
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            firsts, totals, cpus = [], [], []
            for _ in range(args.repeat):
                f, t, cpu = _first_output(argv, env)
                firsts.append(f)
                totals.append(t)
                cpus.append(cpu)
            parts = _parts(env)
        finally:
            dev.down(Path(tmp))
    return {
        "first_output_median_s": round(statistics.median(firsts), 3),
        "first_output_max_s": round(max(firsts), 3),
        "total_median_s": round(statistics.median(totals), 3),
        "cli_cpu_median_s": round(statistics.median(cpus), 3),
        **parts,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def _parts(env: dict[str, str]) -> dict[str, float]:
    """Where one exec's time goes, measured step by step in a fresh child process."""
    code = """
import time, json, io
t0 = time.perf_counter()
import scheduler.cli
from scheduler.cli import jobexec
t1 = time.perf_counter()
if hasattr(jobexec, "fetch_access"):  # one stdlib round trip, then OpenSSH's client
    from scheduler.cli.config import load
    config = load()
    t2 = time.perf_counter()
    access = jobexec.fetch_access(config, "bench-exec", "main", 0)
    t3 = time.perf_counter()
    t4 = t5 = t3
    code = jobexec.run_openssh(access, ["true"], None)
    t6 = time.perf_counter()
    if code is None:  # no ssh client here or login unknown: paramiko
        loading = jobexec.preload(); loading.join()
        t4 = time.perf_counter()
        conn = jobexec.connect(access, None)
        t5 = time.perf_counter()
        jobexec.run_on(conn, access, ["true"])
        t6 = time.perf_counter()
else:
    loading = jobexec.preload()
    from scheduler.cli.client import ApiClient
    from scheduler.cli.config import load
    client = ApiClient(load())
    t2 = time.perf_counter()
    access = client.exec_access("bench-exec", "main", 0)
    t3 = time.perf_counter()
    loading.join()
    t4 = time.perf_counter()
    conn = jobexec.connect(access, None)
    t5 = time.perf_counter()
    code = jobexec.run_on(conn, access, ["true"])
    t6 = time.perf_counter()
print(json.dumps({"import_cli_s": t1 - t0, "client_setup_s": t2 - t1,
  "api_exec_access_s": t3 - t2, "paramiko_import_wait_s": t4 - t3,
  "ssh_connect_login_s": t5 - t4, "ssh_command_s": t6 - t5}))
"""
    import json

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    if out.returncode != 0:  # a checkout without jobexec.preload/connect/run_on: no breakdown
        return {}
    return {k: round(v, 3) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
