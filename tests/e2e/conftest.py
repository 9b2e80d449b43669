"""A fresh local podman cluster ("e2e": network pasture-e2e, 10.77.2.0/24, 1 master + 2
nodes) created by playbooks/local-cluster.yml and converged by site.yml, exactly as
`make demo` does with the "local" cluster, once per session for all e2e modules, and removed
at the end even when a test fails.
PASTURE_E2E_CLUSTER / PASTURE_E2E_SUBNET (a DNS label, a /24 in 10.77.0.0/16) give the
cluster another name and subnet, so that two checkouts on one machine do not remove each
other's cluster.

The CLI runs as a user would, with its own login file (PASTURE_CONFIG_HOME in a temp dir,
so that a developer's own login is untouched).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
CLUSTER = os.environ.get("PASTURE_E2E_CLUSTER", "e2e")
SUBNET = os.environ.get("PASTURE_E2E_SUBNET", "10.77.2.0/24")
CLUSTER_VARS = {"local_cluster_name": CLUSTER, "local_cluster_subnet": SUBNET}
# The node-loss test waits for a node to be declared lost: with the production defaults
# (lease 180 s, lost after 300 s, which ride out a 2-minute store outage; docs/faults.md
# "Bounds") that alone would take over 5 minutes, so the e2e cluster is converged with
# short timings, as `pasture dev up` does. Every site.yml run passes the same values, so
# the idempotence check sees no change.
# A second VC besides `default`, so that tenancy is tried with two tenants' Unix users
# (tasks run as their VC's user: playbooks/templates/local-group-vars.yml.j2).
SITE_VARS = {
    "pasture_master_loop_heartbeat_timeout_s": 30,
    "pasture_node_lease_s": 20,
    "pasture_master_virtual_clusters": [
        {
            "name": "default",
            "guarantee": {"cpu": 8, "memory": "16Gi", "gpu": 0},
            "max": None,
            "can_borrow": True,
        },
        {
            "name": "research",
            "guarantee": {"cpu": 1, "memory": "1Gi", "gpu": 0},
            "max": None,
            "can_borrow": True,
        },
    ],
}
INVENTORY_DIR = REPO / "inventories" / CLUSTER


def run_playbook(
    playbook: str, tmp: Path, inventory: Path | None = None, extravars: dict[str, Any] | None = None
) -> ansible_runner.Runner:
    """Run a playbook of the repo with ansible-runner; fail with the output's tail.

    Returns:
        The runner (``.stats``: ``{"changed": {host: n}, "failures": ..., ...}``).
    """
    data_dir = tmp / f"runner-{playbook.replace('/', '_')}-{len(list(tmp.glob('runner-*')))}"
    data_dir.mkdir(parents=True)
    env = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
    }
    runner = ansible_runner.run(
        private_data_dir=str(data_dir),
        project_dir=str(REPO),
        playbook=playbook,
        inventory=str(inventory) if inventory else None,
        extravars=extravars or {},
        envvars=env,
        quiet=True,
    )
    if runner.rc != 0:
        out = runner.stdout.read()
        pytest.fail(f"ansible-playbook {playbook} failed (rc {runner.rc}):\n{out[-6000:]}")
    return runner


@dataclass
class Cli:
    """The ``pasture`` CLI of the venv with a private login file."""

    config_home: Path
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {
            **os.environ,
            "PASTURE_CONFIG_HOME": str(self.config_home),
            "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        }
        for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN", "PASTURE_CA_CERT", "PASTURE_DEV_DIR"):
            self.env.pop(var, None)
        self.env["PASTURE_DEV_DIR"] = str(self.config_home / "no-dev-cluster")

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(VENV_BIN / "pasture"), *args],
            cwd=REPO,
            text=True,
            capture_output=True,
            timeout=timeout,
            env={**self.env, **(extra_env or {})},
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"pasture {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)


@dataclass
class Cluster:
    inventory: Path
    endpoint: str
    cli: Cli
    tmp: Path
    name: str = CLUSTER  # local_cluster_name: inventories/<name>/, containers pasture-<name>-*
    subnet: str = SUBNET

    def converge(self) -> ansible_runner.Runner:
        """Run site.yml against the cluster once more."""
        return run_playbook("site.yml", self.tmp, inventory=self.inventory, extravars=SITE_VARS)

    def container(self, host: str) -> str:
        """Podman container name of an inventory host (``master``, ``node-1``, ...)."""
        return f"pasture-{self.name}-{host}"


def _teardown(tmp: Path) -> None:
    run_playbook("playbooks/local-cluster.yml", tmp, extravars={**CLUSTER_VARS, "state": "absent"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests marked ``e2e_last`` (they stop a node of the shared cluster) after all
    the others, in their collected order: the cluster is built once for the whole e2e run."""
    items.sort(key=lambda item: item.get_closest_marker("e2e_last") is not None)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Create, converge and log in to the e2e cluster once for the whole session (every e2e
    module shares it; tests that break a node are marked ``e2e_last``); remove it
    afterwards."""
    for tool in ("podman", "ansible-playbook"):
        if not (shutil.which(tool) or (VENV_BIN / tool).exists()):
            pytest.fail(f"{tool} is missing: run `make deps venv` first")
    tmp = tmp_path_factory.mktemp("e2e")
    _teardown(tmp)  # a cluster left by an interrupted run is not fresh
    try:
        subprocess.run(["bash", "scripts/build-base-image.sh"], cwd=REPO, check=True)
        run_playbook("playbooks/local-cluster.yml", tmp, extravars=CLUSTER_VARS)
        inventory = INVENTORY_DIR / "hosts.yml"
        run_playbook("site.yml", tmp, inventory=inventory, extravars=SITE_VARS)
        subprocess.run(["bash", "scripts/build-task-image.sh"], cwd=REPO, check=True)
        endpoint = yaml.safe_load(inventory.read_text())["all"]["vars"]["pasture_api_endpoint"]
        cli = Cli(tmp / "pasture-config")
        cli.run(
            "login",
            endpoint,
            "--ca-cert",
            str(INVENTORY_DIR / "ca.crt"),
            extra_env={"PASTURE_TOKEN": (INVENTORY_DIR / "admin.token").read_text().strip()},
        )
        yield Cluster(inventory, endpoint, cli, tmp)
    finally:
        _teardown(tmp)
