"""Settings of issue 25: lease and lost-node defaults (a 2-minute store outage restarts
nothing), Redis Sentinel addresses (checked, named in errors)."""

from __future__ import annotations

import pytest
from redis.sentinel import SentinelConnectionPool

from scheduler.settings import (
    AgentSettings,
    RedisSettings,
    SchedulerSettings,
    SettingsError,
    _validate,
)
from scheduler.store.lease import fence_s, lost_after_s


def test_defaults_tolerate_a_two_minute_store_outage():
    agent = AgentSettings(node_name="n")
    loop = SchedulerSettings().loop
    assert agent.lease == 180.0
    # the outage tolerated: the last renewal up to one interval before, the next within one
    assert agent.lease - 2 * agent.heartbeat_interval_s >= 120.0
    process_fence = fence_s(agent.lease, 5.25 + 0.25)
    assert lost_after_s(loop.heartbeat_timeout_s, process_fence) == 300.0 > process_fence
    assert loop.peer_loss_grace_s == 600.0


def test_free_requeues_are_capped_by_default_and_the_cap_is_checked():
    """Issue 35's risk: ten infrastructure endings in a row are requeued free, the next one
    fails the job; a negative cap is refused naming the field; null lifts the cap."""
    assert SchedulerSettings().loop.max_free_requeues == 10
    assert (
        SchedulerSettings.model_validate(
            {"loop": {"max_free_requeues": None}}
        ).loop.max_free_requeues
        is None
    )
    with pytest.raises(ValueError, match="max_free_requeues"):
        SchedulerSettings.model_validate({"loop": {"max_free_requeues": -1}})


def test_a_lease_is_never_shorter_than_three_heartbeats():
    assert AgentSettings(node_name="n", heartbeat_interval_s=100).lease == 300.0
    assert AgentSettings(node_name="n", heartbeat_interval_s=0.5, lease_s=1.5).lease == 1.5


@pytest.mark.parametrize("bad", ["redis-0", "host:", ":26379", "host:0", "host:70000", "h:x"])
def test_a_bad_sentinel_address_is_refused_naming_the_field(bad):
    with pytest.raises(SettingsError) as err:
        _validate(SchedulerSettings, {"redis": {"sentinels": [bad]}}, "scheduler.yaml")
    assert "redis.sentinels" in str(err.value) and "host:port" in str(err.value)


def test_with_sentinels_the_client_asks_them_for_the_primary(tmp_path):
    settings = RedisSettings(
        url="redis://ignored:6379/3",
        password="pw",
        sentinels=["10.0.0.1:26379", "[::1]:26380"],
        sentinel_master="pasture",
    )
    assert settings.sentinel_addresses() == [("10.0.0.1", 26379), ("::1", 26380)]
    client = settings.client(socket_timeout=2)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "pasture"
    assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["password"] == "pw"


def test_an_unreadable_sentinel_password_file_is_named(tmp_path):
    settings = RedisSettings(sentinels=["h:26379"], sentinel_password_file=tmp_path / "none")
    with pytest.raises(SettingsError, match="redis.sentinel_password_file"):
        settings.client()
