"""The onprem stack under mocks: per host a pulumi-command facts command (SSH with the
known_hosts key), per node a drain command whose delete drains the node (run here for
real against an HTTP server), secrets kept secret, outputs that match the contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inventory_checks import check_inventory

from scheduler.inventory import parse_stack_output
from stacks import hostops
from stacks.config import ConfigError
from stacks.onprem_host import drain_command
from tests.stacks.conftest import ONPREM_HOSTS, TOKEN
from tests.stacks.mocks import build_stack

pytestmark = [
    pytest.mark.stacks,
    # pulumi_command.remote's deprecated CopyFile warns whenever the package's types load.
    pytest.mark.filterwarnings("ignore:This resource is deprecated:DeprecationWarning"),
]

REMOTE = "command:remote:Command"
LOCAL = "command:local:Command"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
)


def onprem_config(names: list[str], known_hosts: str, **extra) -> dict:
    return {
        "platform": "onprem",
        "clusterName": "lab",
        "master": {"name": "master", "address": "192.168.10.10", "ssh_user": "admin"},
        "hosts": [
            {
                "name": n,
                "address": ONPREM_HOSTS[n][0],
                "ssh_port": ONPREM_HOSTS[n][1],
                "labels": {"pool": n.split("-")[0]},
            }
            for n in names
        ],
        "sshKnownHosts": known_hosts,
        **extra,
    }


SECRETS = {"sshPrivateKey": PRIVATE_KEY, "apiToken": "admin-token-0123456789abcdef"}


def plain(value: Any) -> Any:
    """Inputs with Pulumi's secret wrappers removed (``{"value": v, ...}`` -> v)."""
    if isinstance(value, dict):
        if "4dabf18193072939515e22adb298388d" in value:  # the secret signature key
            return plain(value["value"])
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and "4dabf18193072939515e22adb298388d" in value


@pytest.fixture(scope="module")
def three(known_hosts):
    return build_stack(onprem_config(["gpu-1", "gpu-2", "cpu-1"], known_hosts[0]), SECRETS)


@pytest.fixture(scope="module")
def two(known_hosts):
    return build_stack(onprem_config(["gpu-1", "cpu-1"], known_hosts[0]), SECRETS)


def facts_commands(built) -> dict[str, dict]:
    return {r.inputs["triggers"][0]: r.inputs for r in built.of_type(REMOTE)}


def drain_commands(built) -> dict[str, dict]:
    return {r.name: r.inputs for r in built.of_type(LOCAL)}


def test_one_facts_command_per_host_and_one_drain_per_node(three, two):
    assert sorted(facts_commands(three)) == ["cpu-1", "gpu-1", "gpu-2", "master"]
    assert sorted(drain_commands(three)) == [
        "lab-cpu-1-drain",
        "lab-gpu-1-drain",
        "lab-gpu-2-drain",
    ]
    assert not three.of_type("pulumi-python:dynamic:Resource")  # no dynamic provider left
    # removing gpu-2 leaves the other resources as they were (only gpu-2's are deleted)
    assert sorted(facts_commands(two)) == ["cpu-1", "gpu-1", "master"]
    assert sorted(drain_commands(two)) == ["lab-cpu-1-drain", "lab-gpu-1-drain"]
    for res in two.of_type(REMOTE) + two.of_type(LOCAL):
        assert plain(three.named(res.name).inputs) == plain(res.inputs)


def test_facts_command_runs_the_script_over_ssh_with_the_known_host_key(three, known_hosts):
    gpu = facts_commands(three)["gpu-1"]
    assert gpu["create"] == hostops.FACTS_SCRIPT
    assert "update" not in gpu and "delete" not in gpu  # reruns create; deleting does nothing
    assert gpu["triggers"] == ["gpu-1", "192.168.10.11"]  # another name or address: replace
    conn = plain(gpu["connection"])
    assert conn["host"] == "192.168.10.11" and conn["port"] == 2222 and conn["user"] == "root"
    assert conn["hostKey"] == known_hosts[1]["gpu-1"]  # verified, never ignored
    assert conn["privateKey"] == PRIVATE_KEY
    assert "password" not in conn
    master = plain(facts_commands(three)["master"]["connection"])
    # the master has an Ed25519 and an ECDSA key: the ECDSA one, which the Go client prefers
    assert master["user"] == "admin" and master["hostKey"] == known_hosts[1]["master"]


def test_drain_command_deletes_by_draining_after_nothing_else(three):
    drain = drain_commands(three)["lab-gpu-1-drain"]
    assert drain["delete"] == drain_command() == f"{sys.executable} -m stacks.drain"
    assert "create" not in drain and "update" not in drain  # adopting a host drains nothing
    assert drain["triggers"] == ["gpu-1", "192.168.10.11"]
    env = plain(drain["environment"])
    assert env == {
        "PASTURE_DRAIN_NODE": "gpu-1",
        "PASTURE_DRAIN_ON_DELETE": "true",
        "PASTURE_API_ENDPOINT": "https://192.168.10.10:8443",
        "PASTURE_API_TOKEN": SECRETS["apiToken"],
        "PASTURE_API_CA_FILE": "",
        "PASTURE_DRAIN_TIMEOUT_S": "600.0",
    }


def test_drain_is_ordered_before_the_hosts_deletion(three):
    """Pulumi deletes dependents first: the drain depends on the facts command, so a
    removed host is drained before its facts resource goes; a replaced one is drained
    before its successor is created."""
    opts = three.monitor.options
    facts, drain = opts["lab-gpu-1-facts"], opts["lab-gpu-1-drain"]
    assert facts["urn"] in drain["dependencies"]
    assert drain["delete_before_replace"] is True
    host = opts["lab-gpu-1"]
    assert host["type"] == "pasture:onprem:Host"
    assert facts["parent"] == drain["parent"] == host["urn"]
    assert "lab-master-drain" not in opts  # the master is not a node


def test_private_key_and_token_are_secret_inputs(three):
    for inputs in facts_commands(three).values():
        conn = inputs["connection"]
        assert is_secret(conn) or is_secret(conn.get("privateKey"))
    env = drain_commands(three)["lab-gpu-1-drain"]["environment"]
    assert is_secret(env) or is_secret(env.get("PASTURE_API_TOKEN"))
    # the facts commands' stdout is secret (the mocks do what the provider does); the
    # facts taken from it are not, so the exported contract is readable without
    # --show-secrets
    assert not three.secret_outputs


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


def run_delete(inputs: dict, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a drain resource's delete command the way pulumi-command does: /bin/sh -c in
    its dir, with its stored environment (and no PYTHONPATH)."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        ["/bin/sh", "-c", inputs["delete"]],
        cwd=inputs["dir"],
        env={**base, **plain(inputs["environment"]), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_removing_a_node_drains_it_through_the_api(three, api):
    endpoint, calls = api
    inputs = drain_commands(three)["lab-gpu-2-drain"]
    before = len(calls)
    done = run_delete(inputs, PASTURE_API_ENDPOINT=endpoint, PASTURE_API_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gpu-2: draining"
    assert calls[before:] == [("gpu-2", "drain")]


def test_a_refused_or_missing_token_fails_the_delete_and_keeps_the_host(three, api):
    endpoint, calls = api
    inputs = drain_commands(three)["lab-gpu-1-drain"]
    refused = run_delete(inputs, PASTURE_API_ENDPOINT=endpoint)  # the stack's token: refused
    assert refused.returncode == 1
    assert "refused the token (403)" in refused.stderr
    before = len(calls)
    missing = run_delete(inputs, PASTURE_API_ENDPOINT=endpoint, PASTURE_API_TOKEN="")
    assert missing.returncode == 1 and "pasture:apiToken" in missing.stderr
    assert len(calls) == before


def test_drain_off_is_stored_in_the_command_and_drains_nothing(known_hosts, api):
    endpoint, calls = api
    built = build_stack(
        onprem_config(["gpu-1"], known_hosts[0], drainOnDelete="false"),
        {"sshPrivateKey": PRIVATE_KEY},
    )
    inputs = drain_commands(built)["lab-gpu-1-drain"]  # still there: switching it off is
    assert plain(inputs["environment"])["PASTURE_API_TOKEN"] == ""  # an update, not a delete
    before = len(calls)
    done = run_delete(inputs, PASTURE_API_ENDPOINT=endpoint)
    assert done.returncode == 0 and "not drained" in done.stdout
    assert len(calls) == before


def test_host_missing_from_known_hosts_is_refused_before_anything_runs(known_hosts, tmp_path):
    path = tmp_path / "known_hosts"
    lines = Path(known_hosts[0]).read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")  # the master's and gpu-1's keys, no gpu-2's
    with pytest.raises(
        ConfigError,
        match=r"host gpu-2: no key for \[192.168.10.12\]:2222.*"
        r"pasture:sshKnownHosts",
    ):
        build_stack(onprem_config(["gpu-1", "gpu-2"], str(path)), SECRETS)


def test_rendered_inventory_passes_ansible_inventory_and_preflight(three, tmp_path):
    check_inventory(parse_stack_output(three.outputs), tmp_path)


def test_private_key_is_required(known_hosts):
    with pytest.raises(Exception, match="sshPrivateKey"):
        build_stack(onprem_config(["gpu-1"], known_hosts[0]), {})


def test_stacks_directory_runs_as_the_pulumi_program(known_hosts):
    """`main: stacks/`: Pulumi executes the directory; its __main__ must find the
    `stacks` and `scheduler` packages and export the contract."""
    built = build_stack(onprem_config(["gpu-1"], known_hosts[0]), SECRETS, as_pulumi=True)
    assert parse_stack_output(built.outputs).nodes[0].name == "gpu-1"
