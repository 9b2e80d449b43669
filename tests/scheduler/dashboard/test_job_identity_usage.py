"""A job is itself, not its name; each user sees their own job's usage (issue 27, items 1-3).

Real redis-server, the real API under uvicorn, the loop's cycle, an agent with the process
executor running real task processes, fake GPUs answering recorded NVML utilisation
(tests/fixtures/nvml/a100x4_utilisation.json). The CLI runs in-process against the API.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.agent.agent import Agent
from scheduler.loop import Loop
from scheduler.settings import AgentSettings
from scheduler.store.agent_store import NodeStore
from scheduler.store.records import TERMINAL_JOB_STATES
from tests.ports import task_ports

NVML = Path(__file__).parents[2] / "fixtures" / "nvml" / "a100x4_utilisation.json"
GIB = 1 << 30
# what the recording answers per GPU index: (utilisation %, memory used bytes)
RECORDED = {0: (91, 30 * GIB), 1: (87, 28 * GIB), 2: (5, 1 * GIB), 3: (0, 0)}

OLD = """\
name: torch-ddp
vc: default
roles:
  worker:
    replicas: 2
    resources: {cpu: 1, memory: 256Mi, gpu: 1}
    command: echo "old run of worker $PAI_TASK_INDEX"; echo "this task image has no torch"; exit 3
retry: {max_attempts: 2}
"""

NEW = """\
name: torch-ddp
vc: default
roles:
  worker:
    replicas: 1
    resources: {cpu: 1, memory: 256Mi, gpu: 2}
    command: |
      echo "new run"
      python3 -c 'import time
      t = time.time()
      while time.time() - t < 4: pass'
"""


class Cluster:
    """The loop and one GPU agent driven by the test, step by step."""

    def __init__(self, env, tmp_path: Path) -> None:
        self.env = env
        settings = AgentSettings.model_validate(
            {
                "node_name": "gpu-1",
                "address": "127.0.0.1",
                "redis": {"url": env.settings.redis.url},
                "share_dir": str(env.share),
                "executor": "process",
                "work_dir": str(tmp_path / "work-gpu-1"),
                "port_range": task_ports(33000, 33099),
                "resources": {"cpu": 4, "memory": "8Gi", "gpu": 4, "gpu_model": "A100"},
                "stop_grace_s": 1,
                "nvml_recording": str(NVML),
            }
        )
        # the agent's own narrow store: its reports go through the node's stream, which
        # the loop applies (and so looks at the job at once, as in a real cluster)
        self.agent = Agent(settings, store=NodeStore(env.store.r, "gpu-1"))
        self.agent.register()
        self.loop = Loop(env.store, env.settings)

    def step(self, sample: bool = False) -> None:
        if sample:  # let this heartbeat write a history sample (at most one per 5 s)
            self.env.store.r.hdel(self.env.store.k("node", "gpu-1"), "usage_sampled")
        self.agent.heartbeat()
        self.loop.cycle()
        self.agent.reconcile()

    def until(self, name: str, states, timeout: float = 30.0, sample: bool = False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(sample)
            job = self.env.store.get_job(name)
            if job is not None and job.state in states:
                return job
            time.sleep(0.1)
        raise AssertionError(f"{name}: {self.env.store.get_job(name)}")

    def close(self) -> None:
        for t in list(self.agent.local.values()):
            self.agent.executor.stop(t.handle, 0)


@pytest.fixture()
def cluster(env, tmp_path):
    c = Cluster(env, tmp_path)
    yield c
    c.close()


def submit(base: str, token: str, text: str) -> dict:
    r = httpx.post(
        f"{base}/api/v1/jobs", content=text, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 201, r.text
    return r.json()


def scrape(base: str, token: str) -> dict[tuple[str, tuple], float]:
    r = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(r.text)
        for s in f.samples
    }


def run_old_job(base, env, cluster, pasture) -> dict:
    old = submit(base, env.alice, OLD)
    job = cluster.until("torch-ddp", TERMINAL_JOB_STATES)
    assert job.state == "failed" and job.attempt == 2, env.store.events("torch-ddp")
    before = pasture("job", "logs", "torch-ddp").output
    assert before.count("old run of worker") == 4  # 2 tasks x 2 attempts
    return old


def check_only_new(base, env, browser, pasture, new: dict, old: dict) -> None:
    """Logs, --attempt, events, usage and the dashboard show the new job only."""
    assert new["uid"] != old["uid"] and len(new["uid"]) == 32
    out = pasture("job", "logs", "torch-ddp").output
    assert "new run" in out
    assert "old run" not in out and "no torch" not in out and "worker-1" not in out
    assert out.count("=== attempt") == 1
    first = pasture("job", "logs", "torch-ddp", "--attempt", "1").output
    assert "new run" in first and "old run" not in first
    assert pasture("job", "logs", "torch-ddp", "--attempt", "2").output == ""
    files = httpx.get(
        f"{base}/api/v1/jobs/torch-ddp/logs/files",
        headers={"Authorization": f"Bearer {env.alice}"},
    ).json()
    assert [(f["role"], f["index"]) for f in files] == [("worker", 0)]
    shown = json.loads(pasture("job", "show", "torch-ddp", "-o", "json").output)
    assert shown["job"]["uid"] == new["uid"]
    assert [a["attempt"] for a in shown["job"]["attempts"]] == [1]
    reasons = [e["reason"] for e in shown["events"]]
    assert reasons[0].startswith("submitted") and len(reasons) == len(set(map(str, reasons)))
    assert not any("exited with code 3" in r for r in reasons), reasons
    assert [e["attempt"] for e in shown["events"]] == [1] * len(reasons)
    # the old uid is gone from every read that names it
    r = httpx.get(
        f"{base}/api/v1/jobs/torch-ddp/logs/files",
        params={"uid": old["uid"]},
        headers={"Authorization": f"Bearer {env.alice}"},
    )
    assert r.status_code == 404 and "deleted or replaced" in r.json()["detail"]
    usage = json.loads(pasture("job", "top", "torch-ddp", "-o", "json").output)
    assert [t["task"] for t in usage["tasks"]] in ([], ["worker-0"])
    # the dashboard: log tail and page
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/torch-ddp").text
    assert f'data-uid="{new["uid"]}"' in page and 'data-task="worker-1"' not in page
    tail = b.get("/dashboard/jobs/torch-ddp/log", params={"role": "worker", "index": 0}).json()
    assert "new run" in tail["text"] and "old run" not in tail["text"]
    stale = b.get(
        "/dashboard/jobs/torch-ddp/log", params={"role": "worker", "index": 0, "uid": old["uid"]}
    )
    assert stale.status_code == 404


def test_a_new_job_under_a_deleted_jobs_name_shows_only_its_own_data(
    base, env, cluster, browser, pasture
):
    old = run_old_job(base, env, cluster, pasture)
    assert pasture("job", "delete", "torch-ddp").exit_code == 0
    new = submit(base, env.alice, NEW)
    cluster.until("torch-ddp", ("running",))
    for _ in range(3):  # two samples while it runs: the second has a CPU rate
        cluster.step(sample=True)
        time.sleep(0.3)
    # metrics while it runs: its own GPUs, its own figures, under its own name
    (task,) = env.store.tasks("torch-ddp")
    assert len(task.gpus) == 2
    m = scrape(base, env.admin)
    labels = {"job_name": "torch-ddp", "task": "worker-0", "vc": "default", "node": "gpu-1"}
    for g in task.gpus:
        key = tuple(sorted({**labels, "gpu": str(g)}.items()))
        assert m[("pasture_gpu_utilisation_ratio", key)] == RECORDED[g][0] / 100
        assert m[("pasture_task_gpu_utilisation_ratio", key)] == RECORDED[g][0] / 100
        assert m[("pasture_task_gpu_memory_used_bytes", key)] == RECORDED[g][1]
    free = [g for g in RECORDED if g not in task.gpus]
    for g in free:
        key = (("gpu", str(g)), ("job_name", ""), ("node", "gpu-1"), ("task", ""), ("vc", ""))
        assert ("pasture_gpu_utilisation_ratio", key) in m
    task_series = {k for k in m if k[0].startswith("pasture_task_")}
    assert all(("task", "worker-0") in k[1] for k in task_series)
    cpu = m[("pasture_task_cpu_cores", tuple(sorted(labels.items())))]
    assert 0.0 < cpu <= 1.1  # one busy single-threaded process (2 shared cores here)
    # another tenant sees the GPU's figures but not whose job holds it
    bob = scrape(base, env.bob)
    assert not [k for k in bob if k[0].startswith("pasture_task_")]
    assert not [k for k in bob if ("job_name", "torch-ddp") in k[1]]
    # job top: this job's GPUs and figures only
    top = json.loads(pasture("job", "top", "torch-ddp", "-o", "json").output)
    (row,) = top["tasks"]
    assert row["task"] == "worker-0" and sorted(g["index"] for g in row["gpus"]) == task.gpus
    assert {g["index"]: g["util_percent"] for g in row["gpus"]} == {
        g: RECORDED[g][0] for g in task.gpus
    }
    assert row["latest"]["gpu_memory_used"] == sum(RECORDED[g][1] for g in task.gpus)
    assert row["latest"]["memory_rss"] > 1 << 20
    table = pasture("job", "top", "torch-ddp").output
    assert "worker-0" in table and "worker-1" not in table
    assert pasture("job", "top", "torch-ddp", token=env.bob).exit_code != 0  # not visible
    # the job page: the usage table and the chart's series
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/torch-ddp").text
    assert 'id="task-usage"' in page and 'data-task="worker-0"' in page
    series = b.get(
        "/dashboard/jobs/torch-ddp/usage", params={"task": "worker-0", "uid": new["uid"]}
    ).json()
    mean = sum(RECORDED[g][0] for g in task.gpus) / 2
    assert series["t"] and set(series["gpu"]) == {mean}

    job = cluster.until("torch-ddp", TERMINAL_JOB_STATES)
    assert job.state == "succeeded", env.store.events("torch-ddp")
    check_only_new(base, env, browser, pasture, new, old)


def test_resubmit_replace_starts_a_new_identity(base, env, cluster, browser, pasture):
    old = run_old_job(base, env, cluster, pasture)
    # --replace deletes the failed job and submits its spec again under the same name
    r = pasture("job", "resubmit", "torch-ddp", "--replace", "--set", "roles.worker.replicas=1")
    assert r.exit_code == 0, r.output
    replaced = env.store.get_job("torch-ddp")
    assert replaced.uid != old["uid"]
    waiting = pasture("job", "logs", "torch-ddp").output  # nothing of the old job
    assert "waiting to start" in waiting and "old run" not in waiting
    # the loop sees the new job at once, though it held the old one's record under the
    # name (it used to wait for its 15 s full pass)
    cluster.until("torch-ddp", ("scheduled", "running", "failed"), timeout=3)
    job = cluster.until("torch-ddp", TERMINAL_JOB_STATES)
    assert job.state == "failed"
    out = pasture("job", "logs", "torch-ddp").output
    assert out.count("old run of worker 0") == 2 and "worker 1" not in out  # its own 2 attempts
    assert "worker-1" not in out
    # and a replace by a job that succeeds
    r = pasture("job", "delete", "torch-ddp")
    new = submit(base, env.alice, NEW)
    job = cluster.until("torch-ddp", TERMINAL_JOB_STATES)
    check_only_new(base, env, browser, pasture, new, {"uid": replaced.uid})


def test_gpu_hours_sum_to_run_times_times_gpus(base, env, cluster, pasture):
    t0 = time.time()
    submit(base, env.alice, NEW)
    cluster.until("torch-ddp", TERMINAL_JOB_STATES)
    other = NEW.replace("torch-ddp", "tiny").replace("gpu: 2", "gpu: 1").replace("< 4", "< 1")
    submit(base, env.admin, other)
    cluster.until("tiny", TERMINAL_JOB_STATES)
    elapsed = time.time() - t0
    expected = {}
    for name in ("torch-ddp", "tiny"):
        j = env.store.get_job(name)
        (a,) = j.attempts
        gpus = 2 if name == "torch-ddp" else 1
        expected[j.user] = (a["ended"] - a["started"]) * gpus / 3600
    report = json.loads(pasture("usage", "--since", "1h", "-o", "json", token=env.admin).output)
    got = {r["key"]: r["gpu_hours"] for r in report["rows"]}
    assert got == pytest.approx(expected)
    assert report["total"] == pytest.approx(sum(expected.values()))
    assert expected["alice"] > 4 * 2 / 3600 * 0.9  # the job ran its 4 s on 2 GPUs
    assert report["total"] <= elapsed * 3 / 3600  # never more than wall time x GPUs held
    by_vc = json.loads(
        pasture("usage", "--since", "1h", "--by", "vc", "-o", "json", token=env.admin).output
    )
    assert [r["key"] for r in by_vc["rows"]] == ["default"]
    # a user sees its own VCs' jobs only; a range before the jobs holds nothing
    mine = json.loads(pasture("usage", "--since", "1h", "-o", "json", token=env.bob).output)
    assert mine["rows"] == [] and mine["total"] == 0
    early = json.loads(
        pasture("usage", "--since", "2h", "--until", "1h", "-o", "json", token=env.admin).output
    )
    assert early["total"] == 0
    bad = pasture("usage", "--since", "yesterday", token=env.admin)
    assert bad.exit_code != 0 and "--since" in bad.output
    assert "GPU-hours by user" in pasture("usage", "--since", "1h", token=env.admin).output


def test_operator_actions_leave_events_and_drain_lists_the_jobs(base, env, cluster, pasture):
    submit(base, env.alice, NEW.replace("< 4", "< 30"))
    cluster.until("torch-ddp", ("running",))
    r = pasture("node", "drain", "gpu-1", "--reason", "swap a PSU", token=env.admin)
    assert r.exit_code == 0, r.output
    assert "requeued: torch-ddp" in r.output
    cluster.until("torch-ddp", ("queued",))
    assert pasture("node", "uncordon", "gpu-1", token=env.admin).exit_code == 0
    assert pasture("node", "cordon", "gpu-1", token=env.admin).exit_code == 0
    events = env.store.node_events("gpu-1")
    assert [(e["action"], e["by"], e["why"]) for e in events] == [
        ("drain", "root", "swap a PSU"),
        ("uncordon", "root", ""),
        ("cordon", "root", ""),
    ]
    assert [j["name"] for j in events[0]["jobs"]] == ["torch-ddp"]
    assert all(isinstance(e["time"], float) for e in events)
    # what another tenant reads of the node: no name of alice's job
    view = httpx.get(
        f"{base}/api/v1/nodes/gpu-1", headers={"Authorization": f"Bearer {env.bob}"}
    ).json()
    assert view["events"][0]["jobs"] == [] and view["events"][0]["other_jobs"] == 1
    mine = httpx.get(
        f"{base}/api/v1/nodes/gpu-1", headers={"Authorization": f"Bearer {env.alice}"}
    ).json()
    assert mine["events"][0]["jobs"] == ["torch-ddp"]
    shown = pasture("node", "show", "gpu-1", token=env.admin).output
    assert "drain by root: swap a PSU" in shown
    # node delete (an admin's, forced while its agent still beats): an event as well
    r = pasture("node", "delete", "gpu-1", "--force", token=env.admin)
    assert r.exit_code == 0, r.output
    last = env.store.node_events("gpu-1")[-1]
    # forced while it beats: its lease is revoked, lost once fenced (issue 32 item 7)
    assert (last["action"], last["by"], last["state"]) == ("delete", "root", "cordoned")
    assert env.store.get_node("gpu-1").revoked
