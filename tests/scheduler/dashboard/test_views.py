"""What the pages show, from records: durations, pending reasons, bars, the usage chart."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduler.api.dashboard import views


def test_duration_and_units():
    assert views.duration(None) == "-"
    assert views.duration(5.9) == "5s"
    assert views.duration(245) == "4m5s"  # scheduler.units, as the CLI prints
    assert views.duration(7380) == "2h3m"
    assert views.duration(3 * 86400 + 4 * 3600) == "3d4h"
    assert views.cpu(1500) == "1.5"
    assert views.memory(512 << 20) == "512Mi"
    assert views.memory(16 << 30) == "16Gi"


def test_job_row_delay_and_reason():
    waiting = {
        "name": "j",
        "state": "queued",
        "created": 100.0,
        "pending_reason": {"kind": "gang-incomplete", "message": "2 of 4 workers fit"},
    }
    row = views.job_row(waiting, [], now=160.0)
    assert row["delay"] == "1m" and row["placement"] == "-"
    assert row["reason"] == "Waiting until the whole gang fits at once: 2 of 4 workers fit"
    placed = {"name": "j", "state": "running", "created": 100.0, "scheduled_time": 103.0}
    tasks = [{"node": "b"}, {"node": "a"}, {"node": "b"}]
    row = views.job_row(placed, tasks, now=500.0)
    assert row["delay"] == "3s" and row["placement"] == "a, b" and row["reason"] == ""
    assert views.pending_words({"state": "submitted"}).startswith("Waiting for the scheduler")


def test_gpu_totals_and_vc_bars():
    nodes = [
        {"name": "a", "gpu": 8, "state": "ready"},
        {"name": "b", "gpu": 4, "state": "cordoned"},
        {"name": "c", "gpu": 4, "state": "lost"},
    ]
    ledger = [SimpleNamespace(node="a", gpu=3), SimpleNamespace(node="b", gpu=1)]
    assert views.gpu_totals(nodes, ledger) == {"total": 12, "allocated": 4, "idle": 5}
    vcs = [
        {"name": "x", "guarantee": {"gpu": 4}, "used": {"gpu": 6}, "borrowed": {"gpu": 2}},
        {"name": "y", "guarantee": {"gpu": 2}, "used": {"gpu": 1}, "borrowed": {"gpu": 0}},
    ]
    x, y = views.vc_bars(vcs, "gpu")
    assert (x["within"], x["borrowed"], x["free"]) == (
        pytest.approx(400 / 6),
        pytest.approx(200 / 6),
        0,
    )
    assert x["label"] == "used 6 of 4 guaranteed, 2 borrowed"
    assert (y["within"], y["free"]) == (pytest.approx(100 / 6), pytest.approx(100 / 6))


def test_usage_chart_steps_per_minute():
    now = 10_000.0
    minutes = [
        {"t": 3000.0, "cpu": 99.0, "mem": 99.0, "gpu": 99.0},  # older than an hour
        {"t": 9960.0, "cpu": 40.0, "mem": 50.0, "gpu": None},
    ]
    chart = views.usage_chart(minutes, now, width=600, height=100)
    assert chart["samples"] == 1
    assert chart["last"] == {"cpu": 40.0, "mem": 50.0}
    cpu = next(s for s in chart["series"] if s["key"] == "cpu")
    assert cpu["points"] == "590.0,59.6 600.0,59.6"  # last minute, 40 % -> y = 2 + 96 * 0.6
    assert next(s for s in chart["series"] if s["key"] == "gpu")["points"] == ""


def test_per_minute_means():
    samples = [
        {"t": 120.0, "cpu": 10, "mem": 1, "gpu": None},
        {"t": 150.0, "cpu": 30, "mem": 3, "gpu": None},
        {"t": 185.0, "cpu": 50, "mem": 5, "gpu": 80},
    ]
    assert views.per_minute(samples) == [
        {"t": 120.0, "cpu": 20.0, "mem": 2.0, "gpu": None},
        {"t": 180.0, "cpu": 50.0, "mem": 5.0, "gpu": 80.0},
    ]
