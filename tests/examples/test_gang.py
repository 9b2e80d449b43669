"""Parsing the discovery environment (scheduler.examples.gang)."""

import pytest

from scheduler.examples.gang import DiscoveryError, TaskEnv, local_gang_env, parse_hosts, role_key


def test_role_key_follows_the_convention():
    assert role_key("ps") == "PS"
    assert role_key("data-loader.v2") == "DATA_LOADER_V2"


def test_task_env_reads_roles_hosts_and_identity():
    envs = local_gang_env({"ps": [2000], "worker": [2001, 2002]}, job_name="j", job_dir="/d")
    env = TaskEnv.from_environ(envs["worker-1"])
    assert (env.job_name, env.role, env.index, env.roles) == ("j", "worker", 1, ("ps", "worker"))
    assert env.address("ps") == ("127.0.0.1", 2000)
    assert env.replicas("worker") == 2 and env.replicas("absent") == 0
    assert (env.task_port, env.job_dir) == (2002, "/d")


def test_missing_variable_is_named():
    envs = local_gang_env({"ps": [2000]})
    del envs["ps-0"]["PASTURE_ROLE_PS_HOSTS"]
    with pytest.raises(DiscoveryError, match="PASTURE_ROLE_PS_HOSTS is not set"):
        TaskEnv.from_environ(envs["ps-0"])


def test_replica_count_must_match_host_list():
    envs = local_gang_env({"ps": [2000], "worker": [2001]})
    envs["ps-0"]["PASTURE_ROLE_WORKER_REPLICAS"] = "3"
    with pytest.raises(DiscoveryError, match="PASTURE_ROLE_WORKER_REPLICAS=3 but"):
        TaskEnv.from_environ(envs["ps-0"])


def test_bad_host_entry_and_index_are_reported():
    with pytest.raises(DiscoveryError, match="expected host:port entries, got 'nohost'"):
        parse_hosts("X", "10.0.0.1:5,nohost")
    envs = local_gang_env({"ps": [2000]})
    env = TaskEnv.from_environ(envs["ps-0"])
    with pytest.raises(DiscoveryError, match="has 1 tasks, no index 4"):
        env.address("ps", 4)
    envs["ps-0"]["PASTURE_TASK_INDEX"] = "zero"
    with pytest.raises(DiscoveryError, match="PASTURE_TASK_INDEX must be an integer"):
        TaskEnv.from_environ(envs["ps-0"])
