"""Capped usage history written by the store's heartbeat (real redis-server)."""

from __future__ import annotations

from scheduler.store import NodeRecord, Store
from scheduler.store import nodes as store_module
from scheduler.store.store import usage_sample

USAGE = {
    "cpu_percent": 12.5,
    "memory_used": 1 << 30,
    "memory_total": 4 << 30,
    "gpus": [{"util_percent": 80}, {"util_percent": 40}],
}


def make_store(redis_url: str) -> Store:
    import redis

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.register_node(NodeRecord(name="n1", address="127.0.0.1", cpu_m=1000, memory=1 << 30))
    return store


def test_sample_shape():
    assert usage_sample(USAGE) == {"cpu": 12.5, "mem": 25.0, "gpu": 60.0}
    assert usage_sample({"cpu_percent": 3, "memory_total": 0, "gpus": []})["gpu"] is None
    assert usage_sample({}) is None


def test_one_sample_per_interval(redis_url):
    store = make_store(redis_url)
    for _ in range(5):
        assert store.heartbeat("n1", USAGE) == "ready"
    history = store.usage_history("n1")
    assert len(history) == 1  # heartbeats within USAGE_SAMPLE_S add no sample
    assert history[0]["cpu"] == 12.5 and history[0]["gpu"] == 60.0
    assert abs(history[0]["t"] - store.now()) < 5
    assert store.usage_history("n1", since=store.now() + 10) == []


def test_history_is_capped_and_expires(redis_url, monkeypatch):
    store = make_store(redis_url)
    monkeypatch.setattr(store_module, "USAGE_SAMPLE_S", 0)
    monkeypatch.setattr(store_module, "USAGE_SAMPLES", 3)
    for i in range(10):
        store.heartbeat("n1", {**USAGE, "cpu_percent": float(i)})
    history = store.usage_history("n1")
    assert [s["cpu"] for s in history] == [7.0, 8.0, 9.0]  # newest 3 kept, oldest first
    assert store.r.ttl("pasture:node:n1:usage") > 0


def test_unregistered_node_gets_no_history(redis_url):
    store = make_store(redis_url)
    assert store.heartbeat("ghost", USAGE) == ""
    assert store.usage_histories(["ghost"]) == {"ghost": []}


def test_cluster_usage_is_the_mean_over_nodes_per_minute(redis_url, monkeypatch):
    store = make_store(redis_url)
    store.register_node(NodeRecord(name="n2", address="127.0.0.2", cpu_m=1000, memory=1 << 30))
    store.heartbeat("n1", {**USAGE, "cpu_percent": 10.0})
    store.heartbeat("n2", {**USAGE, "cpu_percent": 30.0, "gpus": []})
    now = store.now()
    rows = store.cluster_usage(now - 120, now)
    if len(rows) == 2:  # the two heartbeats fell on both sides of a minute boundary
        rows = [{"cpu": (rows[0]["cpu"] + rows[1]["cpu"]) / 2, "gpu": 60.0, "mem": 25.0}]
    assert rows[0]["cpu"] == 20.0
    assert rows[0]["mem"] == 25.0
    assert rows[0]["gpu"] == 60.0  # only n1 reported GPUs
    assert store.r.ttl(f"pasture:usage:cluster:{int(now // 60) * 60}") > 3600
