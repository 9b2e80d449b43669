"""/metrics carries the scheduler metrics, computed from the store at scrape time."""

from __future__ import annotations

import time

import httpx
from live import job_yaml
from prometheus_client.parser import text_string_to_metric_families

from scheduler.loop import Loop
from scheduler.store import NodeRecord


def scrape(base: str, token: str) -> dict[tuple[str, tuple], float]:
    r = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scheduler_metrics(base, env):
    env.store.register_node(
        NodeRecord(name="gpu-1", address="127.0.0.3", cpu_m=8000, memory=16 << 30, gpu=4)
    )
    for name in ("m1", "m2"):
        r = httpx.post(
            f"{base}/api/v1/jobs",
            content=job_yaml(name),
            headers={"Authorization": f"Bearer {env.admin}"},
        )
        assert r.status_code == 201
    m = scrape(base, env.admin)
    assert m[("pasture_queue_length", (("vc", "default"),))] == 2
    assert m[("pasture_queue_length", (("vc", "research"),))] == 0
    assert m[("pasture_placements_total", ())] == 0
    assert m[("pasture_node_gpus", (("kind", "idle"), ("node", "gpu-1")))] == 4
    assert m[("pasture_node_heartbeat_age_seconds", (("node", "node-1"),))] >= 0

    loop = Loop(env.store, env.settings)
    for _ in range(3):
        result = loop.cycle()
        env.store.record_cycle(sum(result.seconds.values()))
    m = scrape(base, env.admin)
    assert m[("pasture_placements_total", ())] == 2
    assert m[("pasture_queue_length", (("vc", "default"),))] == 0
    assert m[("pasture_jobs", (("state", "scheduled"),))] == 2
    assert m[("pasture_scheduling_cycle_seconds_count", ())] == 3
    assert m[("pasture_scheduling_cycle_seconds_bucket", (("le", "+Inf"),))] == 3
    assert m[("pasture_vc_gpus", (("kind", "allocated"), ("vc", "default")))] == 0


def test_pending_reason_kinds(base, env):
    r = httpx.post(
        f"{base}/api/v1/jobs",
        content=job_yaml("p1"),
        headers={"Authorization": f"Bearer {env.admin}"},
    )
    assert r.status_code == 201
    env.store.set_job_fields(
        "p1", state="queued", pending_reason={"kind": "vc-quota", "message": "over"}
    )
    m = scrape(base, env.admin)
    assert m[("pasture_pending_jobs", (("kind", "vc-quota"),))] == 1


def test_running_loop_records_cycle_latency(env):
    import threading

    stop = threading.Event()
    loop = Loop(env.store, env.settings)
    thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while env.store.cycle_histogram()[1] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(10)
    buckets, count, total = env.store.cycle_histogram()
    assert count >= 2 and total > 0
    assert buckets[-1][1] <= count  # cumulative counts never exceed the total
