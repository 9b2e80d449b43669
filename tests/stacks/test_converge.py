"""converge: the limit computed from host changes, the ansible-runner command line, a
real ansible-runner run of a playbook limited to the changed hosts, and the dynamic
resource the program registers when `converge: true`."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from ansible_runner.config.runner import RunnerConfig
from test_onprem import SECRETS, onprem_config

from scheduler.inventory import ClusterOutputs, parse_stack_output, render_inventory
from stacks.converge import (
    CLUSTER_KEY,
    ConvergeError,
    ConvergeProvider,
    changed_hosts,
    host_fingerprints,
    runner_kwargs,
)
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks


def cluster(nodes: dict[str, str], master_address: str = "10.0.0.10", **kw) -> ClusterOutputs:
    doc = {
        "platform": "onprem",
        "cluster_name": "lab",
        "master": {"name": "master", "address": master_address, "connection": "local"},
        "nodes": [
            {"name": n, "address": a, "cpu": 4, "memory_mib": 4096, "connection": "local"}
            for n, a in nodes.items()
        ],
        "share_name": "pasture",
        "api_endpoint": f"https://{master_address}:8443",
    }
    doc.update(kw)
    return parse_stack_output(doc)


BASE = {"gpu-1": "10.0.0.11", "gpu-2": "10.0.0.12"}


def test_first_run_converges_every_host():
    assert changed_hosts(None, host_fingerprints(cluster(BASE))) is None


def test_added_and_changed_hosts_only():
    old = host_fingerprints(cluster(BASE))
    grown = host_fingerprints(cluster({**BASE, "gpu-3": "10.0.0.13", "gpu-4": "10.0.0.14"}))
    assert changed_hosts(old, grown) == ["gpu-3", "gpu-4"]
    moved = host_fingerprints(cluster({**BASE, "gpu-2": "10.0.0.22"}))
    assert changed_hosts(old, moved) == ["gpu-2"]
    assert changed_hosts(old, dict(old)) == []


def test_removed_hosts_need_no_run():
    old = host_fingerprints(cluster(BASE))
    shrunk = host_fingerprints(cluster({"gpu-1": "10.0.0.11"}))
    assert changed_hosts(old, shrunk) == []


def test_master_or_cluster_wide_change_converges_everything():
    old = host_fingerprints(cluster(BASE))
    assert changed_hosts(old, host_fingerprints(cluster(BASE, master_address="10.0.0.9"))) is None
    assert changed_hosts(old, host_fingerprints(cluster(BASE, share_name="data"))) is None
    assert CLUSTER_KEY in old


def test_runner_command_line_limits_to_the_changed_hosts(tmp_path):
    kwargs = runner_kwargs(
        project_dir="/srv/pasture",
        playbook="playbooks/site.yml",
        inventory_path="/srv/pasture/inventories/lab/inventory.yml",
        limit=["gpu-3", "gpu-4"],
        private_data_dir=str(tmp_path),
    )
    kwargs.pop("quiet")
    rc = RunnerConfig(**kwargs)
    rc.prepare()
    assert rc.command == [
        "ansible-playbook",
        "-i",
        "/srv/pasture/inventories/lab/inventory.yml",
        "--limit",
        "gpu-3,gpu-4",
        "/srv/pasture/playbooks/site.yml",
    ]
    every = runner_kwargs(
        project_dir="/p",
        playbook="site.yml",
        inventory_path="/i",
        limit=None,
        private_data_dir=str(tmp_path),
    )
    assert "limit" not in every


@pytest.fixture
def project(tmp_path):
    """A project dir whose playbook records which hosts it ran on."""
    out = tmp_path / "ran"
    out.mkdir()
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text(
        textwrap.dedent(
            f"""\
            - name: Record the hosts converged
              hosts: all
              gather_facts: false
              tasks:
                - name: Marker per host
                  ansible.builtin.copy:
                    content: "{{{{ pasture_address }}}}"
                    dest: "{out}/{{{{ inventory_hostname }}}}"
                    mode: "0644"
                - name: Fail where asked
                  ansible.builtin.fail:
                    msg: asked to fail
                  when: inventory_hostname == 'broken'
            """
        )
    )
    return tmp_path, out


def props_for(outputs: ClusterOutputs, project_dir) -> dict:
    return {
        "hosts": host_fingerprints(outputs),
        "inventory": render_inventory(outputs),
        "inventory_path": str(project_dir / "inventories" / "lab" / "inventory.yml"),
        "playbook": "playbooks/site.yml",
        "project_dir": str(project_dir),
    }


def test_provider_update_runs_the_playbook_on_the_changed_hosts_only(project):
    """A real ansible-runner run: an update that adds gpu-3 and a host whose play fails
    runs on exactly those two hosts (--limit), and the failure fails the update. (The
    first run, without --limit, differs only by the missing option: see the command line
    test above.)"""
    project_dir, out = project
    provider = ConvergeProvider()
    first = props_for(cluster(BASE), project_dir)
    grown = props_for(cluster({**BASE, "gpu-3": "10.0.0.13", "broken": "10.0.0.99"}), project_dir)
    assert provider.diff("converge", first, grown).changes
    assert not provider.diff("converge", first, dict(first)).changes
    with pytest.raises(ConvergeError, match=r"failed \(status failed.*on broken,gpu-3"):
        provider.update("converge", first, grown)
    assert sorted(p.name for p in out.iterdir()) == ["broken", "gpu-3"]  # --limit only
    assert (out / "gpu-3").read_text() == "10.0.0.13"
    written = yaml.safe_load((project_dir / "inventories/lab/inventory.yml").read_text())
    assert sorted(written["all"]["children"]["nodes"]["hosts"]) == [
        "broken",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]

    # only removals: the inventory is rewritten, nothing runs
    shrunk = props_for(cluster({"gpu-1": "10.0.0.11"}), project_dir)
    assert provider.update("converge", first, shrunk).outs["last_run"] == {
        "ran": False,
        "limit": [],
    }
    inventory = yaml.safe_load((project_dir / "inventories/lab/inventory.yml").read_text())
    assert list(inventory["all"]["children"]["nodes"]["hosts"]) == ["gpu-1"]


def test_program_registers_converge_with_the_stack_outputs():
    built = build_stack(onprem_config(["gpu-1", "cpu-1"], converge="true"), SECRETS)
    (conv,) = [
        r for r in built.of_type("pulumi-python:dynamic:Resource") if r.name == "lab-converge"
    ]
    assert set(conv.inputs["hosts"]) == {"master", "gpu-1", "cpu-1", CLUSTER_KEY}
    inventory = yaml.safe_load(conv.inputs["inventory"])
    assert sorted(inventory["all"]["children"]["nodes"]["hosts"]) == ["cpu-1", "gpu-1"]
    assert conv.inputs["inventory_path"].endswith("inventories/test/inventory.yml")
    assert conv.inputs["playbook"] == "playbooks/site.yml"
