"""Policies of the onprem stack under mocks: one host resource per configured host,
secrets stay secret, facts become the node resources, outputs match the contract."""

from __future__ import annotations

import pytest
from inventory_checks import check_inventory

from scheduler.inventory import parse_stack_output
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks

DYNAMIC = "pulumi-python:dynamic:Resource"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
)


ADDRESSES = {"gpu-1": "192.168.10.11", "gpu-2": "192.168.10.12", "cpu-1": "192.168.10.13"}


def onprem_config(names: list[str], **extra) -> dict:
    return {
        "platform": "onprem",
        "clusterName": "lab",
        "master": {"name": "master", "address": "192.168.10.10", "ssh_user": "admin"},
        "hosts": [
            {
                "name": n,
                "address": ADDRESSES[n],
                "ssh_port": 2222,
                "labels": {"pool": n.split("-")[0]},
            }
            for n in names
        ],
        "sshKnownHosts": "/etc/pasture-test/known_hosts",
        **extra,
    }


SECRETS = {"sshPrivateKey": PRIVATE_KEY, "apiToken": "admin-token-0123456789abcdef"}


@pytest.fixture(scope="module")
def three():
    return build_stack(onprem_config(["gpu-1", "gpu-2", "cpu-1"]), SECRETS)


@pytest.fixture(scope="module")
def two():
    return build_stack(onprem_config(["gpu-1", "cpu-1"]), SECRETS)


def hosts(built) -> dict[str, dict]:
    return {r.inputs["name"]: r.inputs for r in built.of_type(DYNAMIC)}


def test_one_host_resource_per_configured_host(three, two):
    assert sorted(hosts(three)) == ["cpu-1", "gpu-1", "gpu-2", "master"]
    assert hosts(three)["master"]["role"] == "master"
    assert {hosts(three)[n]["role"] for n in ("gpu-1", "gpu-2", "cpu-1")} == {"node"}
    # removing gpu-2 leaves the other resources as they were (only gpu-2 is deleted/drained)
    assert sorted(hosts(two)) == ["cpu-1", "gpu-1", "master"]
    for name in ("gpu-1", "cpu-1", "master"):
        res = [r for r in two.of_type(DYNAMIC) if r.inputs["name"] == name][0]
        assert three.named(res.name).inputs == res.inputs


def test_host_inputs_say_how_to_reach_and_drain(three):
    gpu = hosts(three)["gpu-1"]
    assert gpu["address"] == "192.168.10.11"
    assert gpu["ssh_port"] == 2222
    assert gpu["ssh_user"] == "root"
    assert gpu["known_hosts"] == "/etc/pasture-test/known_hosts"
    assert gpu["api_endpoint"] == "https://192.168.10.10:8443"
    assert gpu["drain_on_delete"] is True
    assert "password" not in " ".join(gpu)
    assert "api_token" not in hosts(three)["master"]  # the master is never drained


def test_private_key_and_token_are_secret_inputs(three):
    for inputs in hosts(three).values():
        key = inputs["private_key"]
        assert isinstance(key, dict) and key["value"] == PRIVATE_KEY  # secret-wrapped
    token = hosts(three)["gpu-1"]["api_token"]
    assert isinstance(token, dict) and token["value"] == SECRETS["apiToken"]


def test_outputs_match_the_contract_with_recorded_facts(three):
    outputs = parse_stack_output(three.outputs)
    assert outputs.platform == "onprem"
    assert outputs.master.name == "master" and outputs.master.ssh_user == "admin"
    by_name = {n.name: n for n in outputs.nodes}
    assert list(by_name) == ["gpu-1", "gpu-2", "cpu-1"]
    assert by_name["gpu-1"].gpu_count == 4 and by_name["gpu-1"].gpu_model == "A100"
    assert by_name["gpu-1"].cpu == 32 and by_name["gpu-1"].memory_mib == 257024
    assert by_name["cpu-1"].gpu_count == 0 and by_name["cpu-1"].gpu_model is None
    assert by_name["cpu-1"].labels == {"pool": "cpu"}
    assert by_name["gpu-2"].ssh_port == 2222
    assert outputs.api_endpoint == "https://192.168.10.10:8443"
    assert not three.secret_outputs


def test_rendered_inventory_passes_ansible_inventory_and_preflight(three, tmp_path):
    check_inventory(parse_stack_output(three.outputs), tmp_path)


def test_private_key_is_required():
    with pytest.raises(Exception, match="sshPrivateKey"):
        build_stack(onprem_config(["gpu-1"]), {})


def test_stacks_directory_runs_as_the_pulumi_program():
    """`main: stacks/`: Pulumi executes the directory; its __main__ must find the
    `stacks` and `scheduler` packages and export the contract."""
    built = build_stack(onprem_config(["gpu-1"]), SECRETS, as_pulumi=True)
    assert parse_stack_output(built.outputs).nodes[0].name == "gpu-1"
