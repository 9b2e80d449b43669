"""Usage over a job's whole life (issue 34 item 5): the samples of every attempt and node,
each labelled with where it was taken; what a task used in all (CPU time, max RSS) kept
after it ends; ``job top`` counting GPUs one way; GPU-hours with CPU core-hours, a chart
and a checked range.

Real redis-server, the real API under uvicorn, the loop's cycle and two agents with the
process executor running real task processes (fake GPUs answering a recorded NVML).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from scheduler.agent.agent import Agent
from scheduler.loop import Loop
from scheduler.settings import AgentSettings
from scheduler.store.agent_store import NodeStore
from scheduler.store.records import TERMINAL_JOB_STATES
from tests.ports import task_ports

NVML = Path(__file__).parents[2] / "fixtures" / "nvml" / "a100x4_utilisation.json"

# a second of CPU time and 64 MiB to count, then wait for the test's go-ahead
JOB = """\
name: moved
vc: default
roles:
  main:
    replicas: 1
    resources: {cpu: 1, memory: 256Mi, gpu: 1}
    command: |
      python3 -c "
      import os, time
      while time.process_time() < 1: pass
      x = b'x' * (64 << 20)
      d, a = os.environ['PASTURE_JOB_DIR'], os.environ['PASTURE_ATTEMPT']
      open(os.path.join(d, 'busy-' + a), 'w').close()
      while not os.path.exists(os.path.join(d, 'go-' + a)): time.sleep(0.1)
      "
"""


class Cluster:
    """The loop and two GPU agents driven by the test, step by step."""

    def __init__(self, env, tmp_path: Path) -> None:
        self.env = env
        self.agents = {}
        for i, name in enumerate(("gpu-1", "gpu-2")):
            settings = AgentSettings.model_validate(
                {
                    "node_name": name,
                    "address": "127.0.0.1",
                    "redis": {"url": env.settings.redis.url},
                    "share_dir": str(env.share),
                    "executor": "process",
                    "work_dir": str(tmp_path / f"work-{name}"),
                    "port_range": task_ports(34000 + 100 * i, 34099 + 100 * i),
                    "resources": {"cpu": 4, "memory": "8Gi", "gpu": 4, "gpu_model": "A100"},
                    "stop_grace_s": 1,
                    "nvml_recording": str(NVML),
                }
            )
            agent = Agent(settings, store=NodeStore(env.store.r, name))
            agent.register()
            self.agents[name] = agent
        self.loop = Loop(env.store, env.settings)

    def step(self, sample: bool = False) -> None:
        for name, agent in self.agents.items():
            if sample:  # let this heartbeat write a history sample (at most one per 5 s)
                self.env.store.r.hdel(self.env.store.k("node", name), "usage_sampled")
            agent.heartbeat()
        self.loop.cycle()
        for agent in self.agents.values():
            agent.reconcile()

    def until(self, name: str, check, timeout: float = 30.0, sample: bool = False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(sample)
            job = self.env.store.get_job(name)
            if job is not None and check(job):
                return job
            time.sleep(0.1)
        raise AssertionError(f"{name}: {self.env.store.get_job(name)}")

    def close(self) -> None:
        for agent in self.agents.values():
            for t in list(agent.local.values()):
                agent.executor.stop(t.handle, 0)


@pytest.fixture()
def cluster(env, tmp_path):
    c = Cluster(env, tmp_path)
    yield c
    c.close()


def _running_on(cluster, name: str):
    def check(job) -> bool:
        tasks = cluster.env.store.tasks(name)
        return job.state == "running" and bool(tasks) and tasks[0].state == "running"

    job = cluster.until(name, check)
    return job, cluster.env.store.tasks(name)[0].node


def _busy_done(env, cluster, attempt: int) -> None:
    """Step until the task has used its CPU second and holds its 64 MiB."""
    deadline = time.monotonic() + 30
    while not (env.share / "jobs" / "moved" / f"busy-{attempt}").exists():
        assert time.monotonic() < deadline
        cluster.step()
        time.sleep(0.2)


def _sample(cluster, n: int = 3) -> None:
    for _ in range(n):  # the second sample of a task has a CPU rate
        cluster.step(sample=True)
        time.sleep(0.3)


def test_usage_covers_every_attempt_and_node_and_outlives_the_history(
    base, env, cluster, browser, pasture
):
    r = httpx.post(
        f"{base}/api/v1/jobs", content=JOB, headers={"Authorization": f"Bearer {env.alice}"}
    )
    assert r.status_code == 201, r.text
    uid = r.json()["uid"]
    _, first = _running_on(cluster, "moved")
    _busy_done(env, cluster, 1)
    _sample(cluster)
    # an operator drains the node: the job is requeued and runs again on the other one
    r = pasture("node", "drain", first, "--reason", "swap a PSU", token=env.admin)
    assert r.exit_code == 0, r.output
    cluster.until("moved", lambda j: j.attempt == 2 and j.state == "running", timeout=40)
    _, second = _running_on(cluster, "moved")
    assert second != first
    _busy_done(env, cluster, 2)
    _sample(cluster)

    # the API: samples of both attempts, each naming the node and attempt it came from
    got = httpx.get(
        f"{base}/api/v1/jobs/moved/usage",
        params={"window": 3600},
        headers={"Authorization": f"Bearer {env.alice}"},
    ).json()
    (task,) = got["tasks"]
    where = {(p["node"], p["attempt"]) for p in task["samples"]}
    assert where == {(first, 1), (second, 2)}, task["samples"]
    assert (task["node"], task["attempt"]) == (second, 2)
    # attempt 1 ended: its totals recorded at its end; attempt 2 so far
    a1, a2 = task["attempts"]
    assert (a1["attempt"], a1["node"], a1["final"]) == (1, first, True)
    assert (a2["attempt"], a2["node"], a2["final"]) == (2, second, False)
    assert a1["cpu_s"] >= 1.0 and a1["max_rss"] > 64 << 20  # its busy second, its 64 MiB
    assert task["cpu_time_s"] == pytest.approx(a1["cpu_s"] + a2["cpu_s"])
    # the job page's chart reads every node the task ran on, each point labelled
    b = browser()
    b.login(env.alice)
    series = b.get("/dashboard/jobs/moved/usage", params={"task": "main-0", "uid": uid}).json()
    assert {f"{first} (attempt 1)", f"{second} (attempt 2)"} == set(series["where"])
    assert len(series["where"]) == len(series["t"]) == len(series["cpu"])
    page = b.get("/dashboard/jobs/moved").text
    assert f"{first} (1), {second} (2)" in page

    # the job ends; its history is gone (an hour later); what it used is still there
    (env.share / "jobs" / "moved" / "go-2").touch()
    job = cluster.until("moved", lambda j: j.state in TERMINAL_JOB_STATES)
    assert job.state == "succeeded", env.store.events("moved")
    for node in (first, second):
        env.store.r.delete(env.store.k("node", node, "usage"))
    top = json.loads(pasture("job", "top", "moved", "-o", "json").output)
    (row,) = top["tasks"]
    assert [a["final"] for a in row["attempts"]] == [True, True]
    assert row["cpu_time_s"] >= 2.0 and row["max_rss"] > 64 << 20
    assert top["totals"]["cpu_time_s"] == row["cpu_time_s"]
    table = pasture("job", "top", "moved").output
    assert "CPU time" in table and "max RSS" in table
    line = next(x for x in table.splitlines() if "main-0" in x)
    assert "64" not in line or "MiB" in line  # the peak, in a unit
    assert line.count("-") < 8, line  # figures, not a row of dashes


def test_job_top_counts_gpus_in_cells_and_total(base, env, cluster, pasture):
    spec = JOB.replace("replicas: 1", "replicas: 2").replace("gpu: 1", "gpu: 2")
    r = httpx.post(
        f"{base}/api/v1/jobs", content=spec, headers={"Authorization": f"Bearer {env.alice}"}
    )
    assert r.status_code == 201, r.text
    cluster.until(
        "moved",
        lambda j: (
            j.state == "running" and all(t.state == "running" for t in env.store.tasks("moved"))
        ),
    )
    _sample(cluster, 2)
    table = pasture("job", "top", "moved").output
    rows = [x for x in table.splitlines() if "main-" in x]
    assert len(rows) == 2
    for t, line in zip(sorted(env.store.tasks("moved"), key=lambda t: t.index), rows, strict=True):
        assert f"2 ({','.join(map(str, sorted(t.gpus)))})" in line, table
    total = next(x for x in table.splitlines() if "total" in x)
    cells = [c.strip() for c in total.replace("│", "|").split("|") if c.strip()]
    assert "4" in cells, total  # the count of the cells above, not an index
    for attempt in (1,):
        (env.share / "jobs" / "moved" / f"go-{attempt}").touch()
    cluster.until("moved", lambda j: j.state in TERMINAL_JOB_STATES)


def test_gpu_hours_count_core_hours_chart_them_and_refuse_bad_ranges(
    base, env, cluster, browser, pasture
):
    r = httpx.post(
        f"{base}/api/v1/jobs", content=JOB, headers={"Authorization": f"Bearer {env.alice}"}
    )
    assert r.status_code == 201, r.text
    _running_on(cluster, "moved")
    time.sleep(0.5)
    (env.share / "jobs" / "moved" / "go-1").touch()
    job = cluster.until("moved", lambda j: j.state in TERMINAL_JOB_STATES)
    (a,) = job.attempts
    seconds = a["ended"] - a["started"]
    report = json.loads(pasture("usage", "-o", "json", token=env.admin).output)
    (row,) = report["rows"]
    assert row["gpu_hours"] == pytest.approx(seconds / 3600)
    assert row["core_hours"] == pytest.approx(seconds / 3600)  # cpu: 1
    assert report["total_core_hours"] == pytest.approx(seconds / 3600)
    # the default window is a week, as the dashboard's
    assert time.time() - report["since"] == pytest.approx(7 * 86400, abs=120)
    assert "core-hours" in pasture("usage", token=env.admin).output
    # refused, naming the field: a range running backwards, one in the future
    auth = {"Authorization": f"Bearer {env.admin}"}
    now = time.time()
    bad = httpx.get(
        f"{base}/api/v1/usage/gpu-hours",
        params={"since": now - 60, "until": now - 120},
        headers=auth,
    )
    assert bad.status_code == 422 and bad.json()["detail"].startswith("until: expected")
    bad = httpx.get(f"{base}/api/v1/usage/gpu-hours", params={"since": now + 3600}, headers=auth)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("since: expected")
    r = pasture("usage", "--since", "1h", "--until", "2h", token=env.admin)
    assert r.exit_code == 2 and "--until" in r.output
    r = pasture("usage", "--since", str(int(now + 86400)), token=env.admin)
    assert r.exit_code == 2 and "--since" in r.output
    # the web page: the same default, a chart per resource, the same refusal
    b = browser()
    b.login(env.admin)
    page = b.get("/dashboard/gpu-hours").text
    assert 'id="gpu-hours-chart"' in page and page.count('class="bar"') == 2
    assert 'id="core-hours-total"' in page
    r = b.get("/dashboard/gpu-hours", params={"since": "1h", "until": "2h"})
    assert r.status_code == 422 and "until: expected" in r.text
