"""The job page's per-task usage table and charts, and the GPU-hours page, in Chromium,
against a real process-mode cluster (``scheduler.dev``) whose one agent answers NVML from
a recording (two A100s busy at 91 % and 87 %, tests/fixtures/nvml/a100x4_utilisation.json
cut to two GPUs) and runs a real task on both GPUs.

Screenshots go to artifacts/screenshots/ (job-usage.png, gpu-hours.png).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
import yaml
from playwright.sync_api import expect

from scheduler import dev
from tests.browser.conftest import Cluster
from tests.browser.test_dashboard_browser import login, screenshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NVML = Path(__file__).parents[1] / "fixtures" / "nvml" / "a100x4_utilisation.json"
JOB = """\
name: trainer
roles:
  worker:
    replicas: 1
    resources: {cpu: 1, memory: 256Mi, gpu: 2}
    command: |
      python3 -c 'import time
      t = time.time()
      while time.time() - t < 120: pass'
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One agent with two GPUs answering the recorded NVML utilisation."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    directory = tmp_path_factory.mktemp("dev")
    recording = json.loads(NVML.read_text())
    recording["devices"] = recording["devices"][:2]
    rec_file = directory / "nvml.json"
    rec_file.write_text(json.dumps(recording))
    c = dev.up(
        nodes=1,
        gpus_per_node=2,
        cpu_per_node=2,
        memory_per_node="4Gi",
        heartbeat_interval_s=0.5,
        loop_interval_s=0.3,
        stop_grace_s=2,
        directory=directory,
    )
    try:
        c.kill("agent-0")
        path = Path(c.agent_configs[0])
        settings = yaml.safe_load(path.read_text())
        settings["nvml_recording"] = str(rec_file)
        path.write_text(yaml.safe_dump(settings))
        c.start_agent(0)
        c.save(directory)  # so that dev.down stops the new agent
        yield Cluster(c)
    finally:
        dev.down(directory)


def test_job_page_charts_each_tasks_usage(page, cluster):
    r = httpx.post(
        f"{cluster.endpoint}/api/v1/jobs",
        content=JOB,
        headers={"Authorization": f"Bearer {cluster.alice}", "Content-Type": "application/yaml"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    uid = r.json()["uid"]
    cluster.wait_state("trainer", "running")
    headers = {"Authorization": f"Bearer {cluster.alice}"}
    deadline = time.monotonic() + 30
    while True:  # two samples (one per 5 s): a line, and a CPU rate
        got = httpx.get(f"{cluster.endpoint}/api/v1/jobs/trainer/usage", headers=headers).json()
        if got["tasks"] and len(got["tasks"][0]["samples"]) >= 2:
            break
        assert time.monotonic() < deadline, got
        time.sleep(1)
    login(page, cluster, cluster.alice)
    page.goto(f"{cluster.endpoint}/dashboard/jobs/trainer")
    row = page.locator('#task-usage tr[data-task="worker-0"]')
    expect(row.locator("td.gpu-util")).to_have_text("91 % 87 %")
    expect(row.locator("td.gpu-mem")).to_have_text("58Gi")
    chart = "#usage-worker-0"
    expect(page.locator(f"{chart} .uplot canvas")).to_have_count(1)
    legend = page.locator(f"{chart} .u-legend").text_content()
    assert "CPU" in legend and "memory" in legend and "GPU (mean)" in legend
    data = page.evaluate(
        "(() => { const u = window.pastureCharts.find(c => c.pasture.src.includes('worker-0'));"
        " return {src: u.pasture.src, t: u.data[0], cpu: u.data[1], gpu: u.data[3],"
        " y: u.axes[1]._values, where: u.pasture.where}; })()"
    )
    # every point says where it was taken (issue 34 item 5): the node and the attempt
    node = got["tasks"][0]["node"]
    assert set(data["where"]) == {f"{node} (attempt 1)"} and len(data["where"]) == len(data["t"])
    expect(row.locator("td.where")).to_have_text(f"{node} (1)")
    assert f"uid={uid}" in data["src"]
    assert len(data["t"]) >= 2 and set(data["gpu"]) == {89}  # mean of 91 and 87
    assert any(v is not None and v > 0 for v in data["cpu"])  # % of its 1-core request
    assert "100%" in data["y"] and "0%" in data["y"]
    screenshot(page, "job-usage.png")
    # the GPU-hours page counts the running job's 2 GPUs
    page.goto(f"{cluster.endpoint}/dashboard/gpu-hours?since=1h")
    hours = float(page.locator('#gpu-hours tr[data-key="alice"] td.hours').text_content())
    assert 0 < hours < 2 * 120 / 3600 + 0.01
    screenshot(page, "gpu-hours.png")
