"""ClusterOutputs -> Ansible inventory: schema errors, rendering checked by the real
``ansible-inventory``, the CLI command, and the template lookup of an installed package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scheduler import inventory
from scheduler.inventory import (
    ClusterOutputError,
    ClusterOutputs,
    parse_stack_output,
    render_inventory,
)

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = Path(sys.executable).with_name("ansible-inventory")


def stack_output(**overrides) -> dict:
    """A `pulumi stack output --json` document of a two-node azure cluster."""
    doc = {
        "platform": "azure",
        "cluster_name": "dev",
        "master": {
            "name": "master",
            "address": "10.0.1.4",
            "ssh_host": "20.1.2.3",
            "ssh_user": "azureuser",
        },
        "nodes": [
            {
                "name": "cpu-0",
                "address": "10.0.1.5",
                "ssh_user": "azureuser",
                "cpu": 4,
                "memory_mib": 16384,
                "labels": {"pool": "cpu"},
            },
            {
                "name": "gpu-0",
                "address": "10.0.1.6",
                "ssh_user": "azureuser",
                "ssh_port": 2222,
                "cpu": 24,
                "memory_mib": 225280,
                "gpu_count": 1,
                "gpu_model": "A100",
                "labels": {"pool": "gpu", "note": 'quote " colon: {brace} # hash ünï'},
            },
        ],
        "share_name": "pasture",
        "api_endpoint": "https://10.0.1.4:8443",
        "resource_group": "rg-ignored",
        "kubeconfig": "[secret]",
    }
    doc.update(overrides)
    return doc


def ansible_list(path: Path) -> dict:
    """Run the real `ansible-inventory --list` on an inventory file."""
    proc = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_rendered_inventory_is_read_by_ansible_with_contract_variables(tmp_path):
    outputs = parse_stack_output(json.dumps(stack_output()))
    path = tmp_path / "inventory.yml"
    inventory.write_inventory(outputs, path)

    listed = ansible_list(path)
    assert listed["master"]["hosts"] == ["master"]
    assert sorted(listed["nodes"]["hosts"]) == ["cpu-0", "gpu-0"]
    hostvars = listed["_meta"]["hostvars"]
    master = hostvars["master"]
    assert master["ansible_host"] == "20.1.2.3"  # public address for SSH
    assert master["pasture_address"] == "10.0.1.4"  # cluster-internal address
    assert master["ansible_user"] == "azureuser"
    assert master["pasture_cluster_name"] == "dev"
    assert master["pasture_api_endpoint"] == "https://10.0.1.4:8443"
    assert master["pasture_share_name"] == "pasture"
    gpu = hostvars["gpu-0"]
    assert gpu["ansible_host"] == "10.0.1.6"
    assert gpu["ansible_port"] == 2222
    assert gpu["pasture_node_cpu"] == 24
    assert gpu["pasture_node_memory_mib"] == 225280
    assert gpu["pasture_node_gpu_count"] == 1
    assert gpu["pasture_node_gpu_model"] == "A100"
    assert gpu["pasture_node_labels"] == stack_output()["nodes"][1]["labels"]
    cpu = hostvars["cpu-0"]
    assert cpu["pasture_node_gpu_count"] == 0
    assert cpu["pasture_node_gpu_model"] is None
    assert "ansible_port" not in cpu
    assert "ansible_connection" not in cpu


def test_cluster_without_nodes_and_local_master_renders(tmp_path):
    doc = stack_output(platform="aks", nodes=[])
    doc["master"] = {"name": "master", "address": "10.0.9.9", "connection": "local"}
    path = tmp_path / "inv.yml"
    path.write_text(render_inventory(parse_stack_output(doc)))
    listed = ansible_list(path)
    assert listed["master"]["hosts"] == ["master"]
    assert "hosts" not in listed.get("nodes", {})
    assert listed["_meta"]["hostvars"]["master"]["ansible_connection"] == "local"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("cluster_name"), "cluster_name"),
        (lambda d: d.update(platform="gcp"), "platform"),
        (lambda d: d["nodes"][0].update(cpu=-1), "nodes.0.cpu"),
        (lambda d: d["nodes"][1].pop("memory_mib"), "nodes.1.memory_mib"),
        (lambda d: d["nodes"][0].update(name="Node_1"), "nodes.0.name"),
        (lambda d: d["master"].update(ssh_port=70000), "master.ssh_port"),
        (lambda d: d.update(api_endpoint="10.0.1.4:8443"), "api_endpoint"),
        (lambda d: d["nodes"][0].update(password="x"), "nodes.0.password"),
    ],
)
def test_bad_outputs_name_the_field(mutate, field):
    doc = stack_output()
    mutate(doc)
    with pytest.raises(ClusterOutputError) as err:
        parse_stack_output(doc)
    assert field in str(err.value)


def test_duplicate_host_names_are_rejected():
    doc = stack_output()
    doc["nodes"][1]["name"] = "cpu-0"
    with pytest.raises(ClusterOutputError, match="cpu-0"):
        parse_stack_output(doc)


def test_not_json_and_not_an_object_and_hidden_secrets():
    with pytest.raises(ClusterOutputError, match="not JSON"):
        parse_stack_output("{nope")
    with pytest.raises(ClusterOutputError, match="JSON object"):
        parse_stack_output("[1, 2]")
    with pytest.raises(ClusterOutputError, match="--show-secrets"):
        parse_stack_output(stack_output(nodes="[secret]"))


def test_outputs_are_frozen_and_round_trip():
    outputs = parse_stack_output(stack_output())
    with pytest.raises(ValueError):
        outputs.cluster_name = "other"
    assert ClusterOutputs.model_validate(outputs.to_stack_outputs()) == outputs


def _cli() -> typer.Typer:
    """The command mounted the way the CLI mounts it: `pasture inventory ...`."""
    root = typer.Typer()

    @root.command("version")
    def _version() -> None:  # a second command so that `inventory` is a real subcommand
        typer.echo("0")

    root.add_typer(inventory.app, name="inventory")
    return root


def test_cli_writes_inventory_from_stack_output_file(tmp_path):
    src = tmp_path / "out.json"
    src.write_text(json.dumps(stack_output()))
    dest = tmp_path / "sub" / "inventory.yml"
    result = CliRunner().invoke(
        _cli(), ["inventory", "--from-stack-output", str(src), "--output", str(dest)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(ansible_list(dest)["nodes"]["hosts"]) == ["cpu-0", "gpu-0"]

    # without --output the inventory goes to stdout
    result = CliRunner().invoke(_cli(), ["inventory", "--from-stack-output", str(src)])
    assert result.exit_code == 0
    assert result.stdout == render_inventory(parse_stack_output(stack_output()))


def test_cli_rejects_bad_stack_output_with_field_and_exit_2(tmp_path):
    src = tmp_path / "out.json"
    doc = stack_output()
    doc["nodes"][0]["cpu"] = "many"
    src.write_text(json.dumps(doc))
    dest = tmp_path / "inventory.yml"
    result = CliRunner().invoke(
        _cli(), ["inventory", "--from-stack-output", str(src), "--output", str(dest)]
    )
    assert result.exit_code == 2
    assert "nodes.0.cpu" in result.output
    assert not dest.exists()

    result = CliRunner().invoke(
        _cli(), ["inventory", "--from-stack-output", str(tmp_path / "missing.json")]
    )
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_installed_layout_finds_packaged_template(tmp_path):
    """In the wheel the template is scheduler/_templates/inventory.yml.j2 and there is no
    top-level templates/ directory; the module must find it there."""
    pkg = tmp_path / "site" / "scheduler"
    (pkg / "_templates").mkdir(parents=True)
    shutil.copy(REPO / "scheduler" / "__init__.py", pkg / "__init__.py")
    shutil.copy(REPO / "scheduler" / "inventory.py", pkg / "inventory.py")
    template = (REPO / "templates" / "inventory.yml.j2").read_text()
    (pkg / "_templates" / "inventory.yml.j2").write_text(template + "# packaged copy\n")
    code = (
        "import json,sys; from scheduler import inventory as i;"
        "print(i.__file__); sys.stdout.write(i.render_inventory("
        "i.parse_stack_output(json.loads(sys.stdin.read()))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(stack_output()),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    first, rest = proc.stdout.split("\n", 1)
    assert first.startswith(str(pkg))
    assert rest.endswith("# packaged copy\n")


def test_cli_reads_stack_output_from_stdin():
    result = CliRunner().invoke(
        _cli(), ["inventory", "--from-stack-output", "-"], input=json.dumps(stack_output())
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == render_inventory(parse_stack_output(stack_output()))
