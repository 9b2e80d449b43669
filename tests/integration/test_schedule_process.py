"""Issue 37, eighth point: Volcano's CronJob example (volcano-sh/volcano
example/cronjob/cronjob.yaml), on a one-minute schedule, runs on a real process-mode
cluster (redis-server, loop, API, an agent): ``POST /api/v1/schedules`` stores it, the
loop starts a run at the next minute, the run's task prints the example's line, and a
job submit of the same file is refused pointing at the schedules. About 1-2 minutes."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from scheduler import dev

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FILE = Path(__file__).resolve().parents[1] / "compat" / "corpus" / "volcano" / "cronjob.yaml"


@pytest.fixture()
def cluster(tmp_path):
    c = dev.up(
        nodes=1,
        api=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=10,
        loop_interval_s=0.3,
        stop_grace_s=1,
        directory=tmp_path / "dev",
    )
    yield c
    dev.down(tmp_path / "dev")


def test_the_volcano_cronjob_runs_every_minute_on_the_process_cluster(cluster):
    body = FILE.read_text().replace('"*/5 * * * *"', '"*/1 * * * *"')
    headers = {"Authorization": f"Bearer {cluster.token}", "content-type": "application/yaml"}
    with httpx.Client(base_url=cluster.endpoint, headers=headers, timeout=30) as api:
        refused = api.post("/api/v1/jobs", content=body.encode())
        assert refused.status_code == 422
        assert "pasture schedule submit" in refused.json()["detail"][0]["msg"]
        r = api.post("/api/v1/schedules", content=body.encode())
        assert r.status_code == 201, r.text
        assert r.json()["schedule"] == "*/1 * * * *"
        assert r.json()["concurrency_policy"] == "Forbid"
        assert api.post("/api/v1/schedules", content=body.encode()).status_code == 409
        deadline = time.monotonic() + 150
        run, state = None, None
        while time.monotonic() < deadline:
            runs = api.get("/api/v1/schedules/volcano-cronjob-example").json()["runs"]
            if runs:
                run = runs[0]
                state = api.get(f"/api/v1/jobs/{run}").json()["state"]
                if state in ("succeeded", "failed"):
                    break
            time.sleep(1)
        assert run is not None and run.startswith("volcano-cronjob-example-"), run
        assert state == "succeeded", api.get(f"/api/v1/jobs/{run}/events").text
        minute = int(run.rsplit("-", 1)[1])
        assert abs(minute * 60 - time.time()) < 200  # the run of a minute just past
        log = api.get(f"/api/v1/jobs/{run}/logs", params={"role": "task-1", "index": 0})
        assert "Hello from Volcano CronJob" in log.text, log.text
        assert api.delete("/api/v1/schedules/volcano-cronjob-example").status_code == 200
        assert api.get("/api/v1/schedules").json()["items"] == []
