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
    assert m[("pasture_node_gpus_idle", (("node", "gpu-1"),))] == 4
    assert m[("pasture_node_gpu_capacity", (("node", "gpu-1"),))] == 4
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
    assert m[("pasture_vc_gpus_allocated", (("vc", "default"),))] == 0


def test_gpu_totals_and_parts_are_sum_safe_and_per_gpu_series(base, env):
    """A total and its parts are separate metrics (no sum() adds them up), ratios are 0-1,
    and per-GPU series exist only for GPUs NVML measured."""
    env.store.register_node(
        NodeRecord(name="gpu-1", address="127.0.0.3", cpu_m=8000, memory=16 << 30, gpu=2)
    )
    env.store.register_node(
        NodeRecord(name="fake-1", address="127.0.0.4", cpu_m=8000, memory=16 << 30, gpu=4)
    )
    env.store.heartbeat(
        "gpu-1",
        {
            "cpu_percent": 50.0,
            "memory_used": 4 << 30,
            "memory_total": 16 << 30,
            "gpus": [
                {"index": 0, "util_percent": 30, "memory_used": 1 << 30, "memory_total": 8 << 30},
                {"index": 1, "util_percent": None, "memory_used": None, "memory_total": None},
            ],
        },
    )
    env.store.heartbeat("fake-1", {"cpu_percent": 1.0, "memory_used": 1, "memory_total": 2})
    m = scrape(base, env.admin)
    node = (("node", "gpu-1"),)
    assert m[("pasture_node_cpu_utilisation_ratio", node)] == 0.5
    assert m[("pasture_node_memory_utilisation_ratio", node)] == 0.25
    # the mean of the measured GPUs only (GPU 1 reported no figure)
    assert m[("pasture_node_gpu_utilisation_ratio", node)] == 0.3
    free = (("job_name", ""), ("node", "gpu-1"), ("task", ""), ("vc", ""))
    gpu0 = (("gpu", "0"), *free)
    assert m[("pasture_gpu_utilisation_ratio", gpu0)] == 0.3
    assert m[("pasture_gpu_memory_used_bytes", gpu0)] == 1 << 30
    assert m[("pasture_gpu_memory_capacity_bytes", gpu0)] == 8 << 30
    gpu1 = (("gpu", "1"), *free)
    assert ("pasture_gpu_utilisation_ratio", gpu1) not in m
    # fake GPUs: counted as capacity, no made-up per-GPU figures
    assert m[("pasture_node_gpu_capacity", (("node", "fake-1"),))] == 4
    assert not [k for k in m if k[0].startswith("pasture_gpu_") and ("node", "fake-1") in k[1]]
    assert ("pasture_node_gpu_utilisation_ratio", (("node", "fake-1"),)) not in m
    # sum() over every label of a family is a meaningful figure
    cap = sum(v for k, v in m.items() if k[0] == "pasture_node_gpu_capacity")
    assert cap == 6
    parts = sum(
        v for k, v in m.items() if k[0] in ("pasture_node_gpus_allocated", "pasture_node_gpus_idle")
    )
    assert parts == cap  # every node is ready and nothing is allocated
    assert all(0 <= v <= 1 for k, v in m.items() if k[0].endswith("_ratio"))
    assert not [k for k in m if k[0] in ("pasture_node_gpus", "pasture_vc_gpus")]


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
