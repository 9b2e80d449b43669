"""What the pages show, from the API's models: durations, pending reasons, bars, the usage
chart."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dashboard import views
from scheduler.api.schemas import JobOut, NodeOut, TaskOut, VcOut
from scheduler.services.usage import UsageSample


def job(**fields: Any) -> JobOut:
    """A JobOut as ``GET /api/v1/jobs/{name}`` would answer it, with ``fields`` set."""
    base = {"name": "j", "vc": "default", "user": "u", "priority": 0}
    return JobOut.model_validate(base | fields)


def task(node: str) -> TaskOut:
    return TaskOut.model_validate(
        {"role": "w", "index": 0, "attempt": 1, "node": node, "state": "running"}
    )


def node(**fields: Any) -> NodeOut:
    return NodeOut.model_validate(
        {"name": "n", "address": "10.0.0.1", "cpu_m": 1000, "memory": 1 << 30, "state": "ready"}
        | fields
    )


def test_duration_and_units():
    assert views.duration(None) == "-"
    assert views.duration(5.9) == "5s"
    assert views.duration(245) == "4m5s"  # scheduler.units, as the CLI prints
    assert views.duration(7380) == "2h3m"
    assert views.duration(3 * 86400 + 4 * 3600) == "3d4h"
    assert views.cpu(1500) == "1.5"
    assert views.cpu(500) == "500m"
    assert views.memory(512 << 20) == "512Mi"
    assert views.memory(24684084 << 10) == "23.5Gi"  # the CLI's formatter, one for both
    assert views.clock(None) == "-"
    assert views.clock(86400 * 365) == "1971-01-01 00:00:00"


def test_job_row_delay_and_reason():
    waiting = job(
        state="queued",
        created=100.0,
        pending_reason={"kind": "gang-incomplete", "message": "2 of 4 workers fit"},
    )
    row = views.job_row(waiting, [], now=160.0)
    assert row["delay"] == "1m" and row["placement"] == "-"
    assert row["reason"] == "Waiting until the whole gang fits at once: 2 of 4 workers fit"
    placed = job(state="running", created=100.0, scheduled_time=103.0)
    tasks = [task("b"), task("a"), task("b")]
    row = views.job_row(placed, tasks, now=500.0)
    assert row["delay"] == "3s" and row["placement"] == "a, b" and row["reason"] == ""
    assert views.pending_words(job(state="submitted")).startswith("Waiting for the scheduler")


def test_vc_bars():
    def vc(name: str, guarantee: int, used: int, borrowed: int) -> VcOut:
        zero = {"cpu_m": 0, "memory": 0}
        return VcOut.model_validate(
            {
                "name": name,
                "can_borrow": True,
                "guarantee": {**zero, "gpu": guarantee},
                "used": {**zero, "gpu": used},
                "borrowed": {**zero, "gpu": borrowed},
            }
        )

    vcs = [vc("x", 4, 6, 2), vc("y", 2, 1, 0)]
    x, y = views.vc_bars(vcs, "gpu")
    assert (x["within"], x["borrowed"], x["free"]) == (
        pytest.approx(400 / 6),
        pytest.approx(200 / 6),
        0,
    )
    assert x["label"] == "used 6 of 4 guaranteed, 2 borrowed"
    assert (y["within"], y["free"]) == (pytest.approx(100 / 6), pytest.approx(100 / 6))


def test_job_row_gpus_duration_and_end_time():
    fields = {
        "state": "succeeded",
        "created": 100.0,
        "scheduled_time": 110.0,
        "start_time": 120.0,
        "end_time": 120.0 + 90000.0,
        "spec": {
            "roles": {
                "ps": {"replicas": 2, "resources": {"cpu": "1"}},
                "worker": {"replicas": 4, "resources": {"gpu": 2}},
            }
        },
    }
    row = views.job_row(job(**fields), [], now=200_000.0)
    assert row["gpus"] == 8
    assert row["duration"] == "1d1h"  # start to end, not to now
    assert row["ended"] == "1970-01-02 01:02:00"
    running = job(**{**fields, "state": "running", "end_time": None})
    row = views.job_row(running, [], now=180.0)
    assert (row["duration"], row["ended"]) == ("1m", "-")
    queued = job(**{**fields, "state": "queued", "start_time": None})
    assert views.job_row(queued, [], 500.0)["duration"] == "-"


def test_gpu_rows_measured_and_unknown():
    measured = node(
        gpu=3,
        usage={
            "gpus": [
                {"index": 0, "util_percent": 87, "memory_used": 20 << 30, "memory_total": 80 << 30},
                {"index": 1, "util_percent": None, "memory_used": None, "memory_total": None},
            ],
            "gpu_health": [{"index": 0, "healthy": True, "temperature_c": 61}],
        },
    )
    g0, g1, g2 = views.gpu_rows(measured)
    assert (g0["util_text"], g0["memory_text"], g0["memory_percent"]) == (
        "87%",
        "20Gi / 80Gi",
        25.0,
    )
    assert g0["healthy"] is True and g0["temperature_c"] == 61
    # NVML refused GPU 1's figures, GPU 2 has no sample at all: unknown, never 0
    for g in (g1, g2):
        assert (g["util"], g["util_text"], g["memory_text"]) == (None, "unknown", "unknown")
        assert g["healthy"] is None
    assert views.gpu_summary(measured) == "87% unknown unknown"
    fake = node(gpu=2, usage={"gpus": []})  # the dev cluster's fake GPUs
    assert [g["util_text"] for g in views.gpu_rows(fake)] == ["unknown", "unknown"]
    assert views.gpu_rows(node(gpu=0)) == [] and views.gpu_summary(node(gpu=0)) == "-"


def test_chart_series_columns_with_gaps():
    samples = [
        UsageSample(t=9960.0, cpu=40.04, mem=50.0, gpu=None),
        UsageSample(t=9900.0, cpu=30.0, mem=45.0, gpu=10.0),
    ]
    assert views.chart_series(samples) == {
        "t": [9900.0, 9960.0],
        "cpu": [30.0, 40.0],
        "mem": [45.0, 50.0],
        "gpu": [10.0, None],
    }
