"""The Ansible repository files: one licence, pinned collections that the roles use and
the venv has, a sample inventory that Ansible and the preflight play accept, and an
ansible-lint config that keeps the Pulumi files out of a lint run at the root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.stacks.inventory_checks import run_preflight

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SAMPLE = REPO / "inventories" / "sample"
# Where the roles and plays name modules by FQCN.
ANSIBLE_CONTENT = [REPO / "site.yml", REPO / "playbooks", REPO / "roles", REPO / "molecule"]
# A module as a task key (`- community.crypto.x509_certificate:`), or a lookup by FQCN.
FQCN = re.compile(
    r"^\s*(?:-\s+)?([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*:"
    r"|(?:lookup|query)\(\s*['\"]([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.",
    re.M,
)


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def test_one_licence_file_and_one_licence_everywhere():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "Apache-2.0"
    metas = sorted((REPO / "roles").glob("*/meta/main.yml"))
    assert len(metas) >= 10
    licences = {
        m.parent.parent.name: yaml.safe_load(m.read_text())["galaxy_info"]["license"] for m in metas
    }
    assert {role: lic for role, lic in licences.items() if lic != declared} == {}


def _used_collections() -> set[str]:
    used: set[str] = set()
    for root in ANSIBLE_CONTENT:
        files = [root] if root.is_file() else list(root.rglob("*.yml"))
        for f in files:
            for m in FQCN.finditer(f.read_text()):
                ns, name = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                used.add(f"{ns}.{name}")
    return used - {"ansible.builtin"}  # ansible.builtin ships with ansible-core


def _pins() -> dict[str, str]:
    doc = yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())
    return {c["name"]: str(c["version"]) for c in doc["collections"]}


def test_every_collection_the_roles_use_is_pinned_exactly():
    pins = _pins()
    used = _used_collections()
    assert {"community.crypto", "ansible.posix", "containers.podman"} <= used
    assert sorted(used - set(pins)) == [], "collections used but not pinned"
    assert sorted(set(pins) - used) == [], "collections pinned but not used"
    for name, version in pins.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: pin {version!r} is not exact"


def test_pins_are_the_versions_the_venv_has():
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    # {path: {name: {"version": ...}}}; the first path that has a collection wins.
    installed: dict[str, str] = {}
    for collections in json.loads(proc.stdout).values():
        for name, info in collections.items():
            installed.setdefault(name, info["version"])
    assert {n: installed.get(n) for n in _pins()} == _pins()


def test_sample_inventory_lists_with_the_contract_and_passes_preflight(tmp_path):
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(SAMPLE / "hosts.yml"), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"},
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    listed = json.loads(proc.stdout)
    assert listed["master"]["hosts"] == ["master-1"]
    assert listed["nodes"]["hosts"] == ["gpu-1", "cpu-1"]
    hv = listed["_meta"]["hostvars"]
    assert hv["gpu-1"]["pasture_node_gpu_count"] == 4
    assert hv["gpu-1"]["pasture_node_labels"] == {"pool": "gpu"}
    assert hv["cpu-1"]["ansible_port"] == 2222
    assert hv["master-1"]["pasture_master_virtual_clusters"][1]["name"] == "research"
    assert hv["gpu-1"]["pasture_node_executor"] == "container"
    assert "pasture_master_virtual_clusters" not in hv["gpu-1"]  # group_vars/master only
    # secrets.yml.example documents the secrets but is never loaded
    assert "pasture_redis_password" not in hv["gpu-1"]
    example = yaml.safe_load((SAMPLE / "group_vars/all/secrets.yml.example").read_text())
    required = yaml.safe_load((REPO / "playbooks/group_vars/all/pasture.yml").read_text())[
        "pasture_required_secrets"
    ]
    assert sorted(example) == sorted(required)

    preflight = run_preflight(SAMPLE / "hosts.yml", tmp_path)
    assert preflight.returncode == 0, preflight.stdout[-3000:]


def _lint_copy(tmp_path: Path, ansible_lint_config: str) -> subprocess.CompletedProcess[str]:
    """ansible-lint at the root of a copy of the repository's top-level files (no roles:
    a full run takes minutes; scripts/test-ansible.sh does it)."""
    root = tmp_path / "repo"
    root.mkdir(parents=True)
    for name in ("Pulumi.yaml", ".yamllint"):
        shutil.copy(REPO / name, root / name)
    for stack in REPO.glob("Pulumi.*.yaml"):
        shutil.copy(stack, root / stack.name)
    for d in ("collections", "inventories/sample", ".config"):
        shutil.copytree(REPO / d, root / d)
    (root / ".ansible-lint").write_text(ansible_lint_config)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    return subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "-f", "pep8", "--nocolor"],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(),
        cwd=root,
    )


@pytest.mark.slow
def test_ansible_lint_at_the_root_skips_the_pulumi_files(tmp_path):
    config = (REPO / ".ansible-lint").read_text()
    assert "Pulumi.yaml" in config
    # Pulumi's files break the yaml rule (no document start), so only the exclusion lets
    # the run pass.
    assert not (REPO / "Pulumi.yaml").read_text().startswith("---")
    passed = _lint_copy(tmp_path, config)
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
