"""The dashboard's per-GPU table, uPlot charts, confirmation dialog, refreshing lists and
phone-width layout in Chromium, against a real process-mode cluster whose agents announce
one fake GPU each (no NVML: shown as unknown) plus one node whose heartbeat carries the
agent's own GPU samples taken from a replayed NVML recording.

Screenshots go to artifacts/screenshots/ (docs/images/ holds copies used by the docs).
"""

from __future__ import annotations

import re
import shutil
import threading
import time

import pytest
from playwright.sync_api import expect

from scheduler import dev
from scheduler.agent.gpu_health import RecordedBackend
from scheduler.agent.resources import gpu_samples, usage
from scheduler.store.records import NodeRecord
from tests.browser.conftest import Cluster
from tests.browser.test_dashboard_browser import login, screenshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GIB = 1 << 30
# NVML answers of a two-GPU node (format: tests/fixtures/nvml/README.md): one busy GPU,
# one whose utilisation call is refused (NOT_SUPPORTED: the key is missing)
RECORDING = {
    "devices": [
        {
            "nvmlDeviceGetUtilizationRates": {"gpu": 87, "memory": 40},
            "nvmlDeviceGetMemoryInfo": {"total": 80 * GIB, "free": 60 * GIB, "used": 20 * GIB},
        },
        {"nvmlDeviceGetMemoryInfo": {"total": 80 * GIB, "free": 79 * GIB, "used": GIB}},
    ]
}
GPU_JOB = """\
name: {name}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi, gpu: 1}}
    command: python3 -c "import time; time.sleep(600)"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two agents with one fake GPU each, and node ``gpu-rec`` heartbeated from here with
    the agent's usage report over the recording (the agent's own sampling code)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not on PATH")
    directory = tmp_path_factory.mktemp("dev")
    c = dev.up(
        nodes=2,
        gpus_per_node=1,
        cpu_per_node=2,
        memory_per_node="4Gi",
        heartbeat_interval_s=0.5,
        loop_interval_s=0.3,
        stop_grace_s=2,
        directory=directory,
    )
    stop = threading.Event()
    try:
        store = c.store()
        store.register_node(
            NodeRecord(
                name="gpu-rec",
                address="127.0.0.9",
                cpu_m=8000,
                memory=32 * GIB,
                gpu=2,
                gpu_model="NVIDIA H100 80GB HBM3 (recording)",
            )
        )
        backend = RecordedBackend(RECORDING)

        def beat():
            while not stop.is_set():
                store.heartbeat("gpu-rec", usage(backend))
                stop.wait(0.5)

        threading.Thread(target=beat, daemon=True).start()
        yield Cluster(c)
    finally:
        stop.set()
        dev.down(directory)


def submit_gpu_job(cluster, name: str) -> None:
    import httpx

    r = httpx.post(
        f"{cluster.endpoint}/api/v1/jobs",
        content=GPU_JOB.format(name=name),
        headers={"Authorization": f"Bearer {cluster.admin}", "Content-Type": "application/yaml"},
        timeout=30,
    )
    assert r.status_code == 201, r.text


def test_per_gpu_table_measured_and_unknown(page, cluster):
    assert gpu_samples(RecordedBackend(RECORDING))[0]["util_percent"] == 87
    login(page, cluster, cluster.admin)
    page.goto(f"{cluster.endpoint}/dashboard/nodes/gpu-rec")
    rows = page.locator("#gpus tbody tr")
    expect(rows).to_have_count(2)
    gpu0, gpu1 = rows.nth(0), rows.nth(1)
    expect(gpu0.locator("td.util")).to_have_text("87%")
    expect(gpu0.locator("td.mem")).to_have_text("20Gi / 80Gi")
    expect(gpu1.locator("td.util")).to_have_text("unknown")  # NVML refused: no number
    expect(gpu1.locator("td.mem")).to_have_text("1Gi / 80Gi")
    assert gpu0.locator("meter").count() == 2 and gpu1.locator("meter").count() == 1
    screenshot(page, "node-gpus.png")
    # an agent's fake GPU (dev cluster, no NVML) is unknown, in the table and the list
    page.goto(f"{cluster.endpoint}/dashboard/nodes/{cluster.dev.nodes[0]}")
    expect(page.locator("#gpus tbody tr td.util")).to_have_text("unknown")
    page.goto(f"{cluster.endpoint}/dashboard/nodes")
    expect(page.locator('#nodes tr[data-node="gpu-rec"] td.gpu-use')).to_have_text("87% unknown")


def test_charts_have_time_and_percent_axes(page, cluster):
    login(page, cluster, cluster.admin)
    for path, chart in (
        ("/dashboard/", "#usage-chart"),
        ("/dashboard/nodes/gpu-rec", "#node-chart"),
    ):
        page.goto(f"{cluster.endpoint}{path}")
        expect(page.locator(f"{chart} .uplot canvas")).to_have_count(1)
        assert page.locator(f"{chart} .u-axis").count() == 2
        legend = page.locator(f"{chart} .u-legend").text_content()
        assert "CPU" in legend and "memory" in legend and "GPU (mean)" in legend
    # the node chart: samples from the recorded node's heartbeats, GPU mean 87 %
    # (wait_for_function evaluates a string: the page's CSP forbids that; poll instead)
    deadline = time.monotonic() + 15
    while page.evaluate("window.pastureCharts[0].data[0].length") < 1:
        assert time.monotonic() < deadline, "the node chart got no samples"
        page.wait_for_timeout(500)
        page.reload()
        expect(page.locator("#node-chart .uplot canvas")).to_have_count(1)
    axes = page.evaluate(
        "(() => { const u = window.pastureCharts[0];"
        " return {x: u.axes[0]._values, y: u.axes[1]._values, gpu: u.data[3]}; })()"
    )
    assert any(re.search(r"\d{1,2}:\d{2}", str(v)) for v in axes["x"]), axes["x"]
    assert "100%" in axes["y"] and "0%" in axes["y"]
    assert 87 in axes["gpu"]
    screenshot(page, "node-chart.png")


def test_stop_asks_first_and_cancel_keeps_the_job(page, cluster):
    submit_gpu_job(cluster, "confirm-me")
    cluster.wait_state("confirm-me", "running")
    login(page, cluster, cluster.admin)
    page.goto(f"{cluster.endpoint}/dashboard/jobs/confirm-me")
    expect(page.locator("#job-gpus")).to_have_text("1")
    page.click("#stop-job")
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-text")).to_contain_text("Stop job confirm-me?")
    screenshot(page, "confirm-stop.png")
    page.click("#confirm-cancel")
    expect(dialog).to_be_hidden()
    assert cluster.job("confirm-me")["state"] == "running"
    assert not cluster.job("confirm-me").get("stop_requested")
    page.click("#stop-job")
    page.click("#confirm-ok")
    expect(page.locator("#job-state")).to_have_text("stopped", timeout=30000)
    # the finished job shows its duration and end time; the jobs list too
    assert page.text_content("#job-ended") != "-"
    page.goto(f"{cluster.endpoint}/dashboard/jobs")
    row = page.locator('#jobs tr[data-job="confirm-me"]')
    assert row.locator("td.gpus").text_content() == "1"
    assert re.fullmatch(r"\d+s|\d+m\d*s?", row.locator("td.duration").text_content())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row.locator("td.ended").text_content())


def test_drain_asks_first(page, cluster):
    login(page, cluster, cluster.admin)
    page.goto(f"{cluster.endpoint}/dashboard/nodes")
    node = cluster.dev.nodes[1]
    page.locator(f'#nodes tr[data-node="{node}"] button.drain').click()
    expect(page.locator("#confirm-text")).to_contain_text(f"Drain node {node}?")
    page.click("#confirm-cancel")
    assert cluster.dev.store().get_node(node).state == "ready"


def test_jobs_list_refreshes_without_reload(page, cluster):
    login(page, cluster, cluster.alice)
    page.goto(f"{cluster.endpoint}/dashboard/jobs")
    page.evaluate("window.marker = 1")  # gone if the page reloads
    cluster.submit(cluster.alice, "appears-later")
    page.evaluate("window.pastureRefresh()")  # what the 10 s timer calls
    expect(page.locator('#jobs tr[data-job="appears-later"]')).to_have_count(1)
    assert page.evaluate("window.marker") == 1
    expect(page.locator("[data-refresh-stamp]")).to_contain_text("updated")


def test_phone_width(chromium, cluster):
    context = chromium.new_context(viewport={"width": 375, "height": 780}, is_mobile=True)
    context.set_default_timeout(15000)
    page = context.new_page()
    try:
        login(page, cluster, cluster.admin)
        expect(page.locator("#usage-chart .uplot canvas")).to_have_count(1)
        bars = page.locator(".vcbars svg.bar")
        assert bars.count() >= 2
        for i in range(bars.count()):  # VC bars keep most of the screen's width
            assert bars.nth(i).bounding_box()["width"] > 250
        chart = page.locator("#usage-chart .uplot").bounding_box()
        assert 250 < chart["width"] <= 375
        no_overflow = "document.documentElement.scrollWidth <= window.innerWidth + 1"
        assert page.evaluate(no_overflow)  # nothing sticks out sideways
        screenshot(page, "phone-overview.png")
        page.goto(f"{cluster.endpoint}/dashboard/jobs")
        assert page.evaluate(no_overflow)  # the wide table scrolls inside its box
        screenshot(page, "phone-jobs.png")
        page.goto(f"{cluster.endpoint}/dashboard/nodes")
        page.locator("#nodes button.drain").first.click()
        box = page.locator("#confirm-dialog").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375  # the question fits
        screenshot(page, "phone-confirm.png")
        page.click("#confirm-cancel")
    finally:
        context.close()
