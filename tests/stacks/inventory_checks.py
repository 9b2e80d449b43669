"""Shared check: a platform's ClusterOutputs renders an inventory that the real
``ansible-inventory`` reads with the contract variables and that passes the preflight play."""

from __future__ import annotations

import json
import os
import secrets as secrets_mod
import subprocess
import sys
from pathlib import Path

import yaml

from scheduler.inventory import ClusterOutputs, write_inventory

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PREFLIGHT = REPO / "playbooks" / "preflight.yml"


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def check_inventory(outputs: ClusterOutputs, tmp_path: Path) -> dict:
    """Render, list with ansible-inventory, run playbooks/preflight.yml; returns the listing."""
    path = write_inventory(outputs, tmp_path / "inventory.yml")
    listed = check_inventory_listing(outputs, path)

    # The preflight play belongs to the Ansible layer; it must exist (a missing play fails
    # this check instead of skipping it).
    assert PREFLIGHT.is_file(), f"{PREFLIGHT} is missing: the preflight play cannot be run"
    proc = run_preflight(path, tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return listed


def check_inventory_listing(outputs: ClusterOutputs, path: Path) -> dict:
    """`ansible-inventory --list` reads the file with the contract's groups and variables."""
    proc = _run([str(BIN / "ansible-inventory"), "-i", str(path), "--list"], REPO)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert listed["master"]["hosts"] == [outputs.master.name]
    assert sorted(listed.get("nodes", {}).get("hosts", [])) == sorted(n.name for n in outputs.nodes)
    hostvars = listed["_meta"]["hostvars"]
    for node in outputs.nodes:
        hv = hostvars[node.name]
        assert hv["pasture_address"] == node.address
        assert hv["pasture_node_cpu"] == node.cpu
        assert hv["pasture_node_memory_mib"] == node.memory_mib
        assert hv["pasture_node_gpu_count"] == node.gpu_count
        assert hv["pasture_node_gpu_model"] == node.gpu_model
        assert hv["pasture_node_labels"] == node.labels
    assert hostvars[outputs.master.name]["pasture_cluster_name"] == outputs.cluster_name
    assert hostvars[outputs.master.name]["pasture_address"] == outputs.master.address
    return listed


def run_preflight(inventory: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run playbooks/preflight.yml on an inventory with random values for the secrets the
    play requires (the names come from playbooks/group_vars/all/pasture.yml)."""
    group_vars = yaml.safe_load((REPO / "playbooks/group_vars/all/pasture.yml").read_text())
    secrets = {
        name: secrets_mod.token_urlsafe(24) for name in group_vars["pasture_required_secrets"]
    }
    extra = tmp_path / "secrets.json"
    extra.write_text(json.dumps(secrets))
    return _run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PREFLIGHT), "-e", f"@{extra}"],
        REPO,
    )
