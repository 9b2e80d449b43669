"""converge: the limit computed from host changes, the ansible-runner command line, the
pulumi-command resource the program registers when `converge: true`, and its command run
for real (`python -m stacks.converge`, ansible-runner, a playbook limited to the changed
hosts) the way pulumi-command runs it on create and on update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from ansible_runner.config.runner import RunnerConfig
from test_onprem import SECRETS, onprem_config, plain

from scheduler.inventory import ClusterOutputs, parse_stack_output, render_inventory
from stacks.converge import (
    CLUSTER_KEY,
    changed_hosts,
    converge_command,
    host_fingerprints,
    previous_fingerprints,
    runner_kwargs,
)
from tests.stacks.mocks import build_stack

pytestmark = [
    pytest.mark.stacks,
    pytest.mark.filterwarnings("ignore:This resource is deprecated:DeprecationWarning"),
]

REPO = Path(__file__).resolve().parents[2]


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


def run_command(command: str, outputs: ClusterOutputs, project_dir, previous_stdout=None):
    """Run the Converge command as pulumi-command does: /bin/sh -c in the project dir, the
    inventory on stdin, the environment the program gives it, and on an update the
    previous stdout as PULUMI_COMMAND_STDOUT."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PULUMI_COMMAND_STDOUT")}
    env.update(
        {
            "PASTURE_CONVERGE_HOSTS": json.dumps(host_fingerprints(outputs), sort_keys=True),
            "PASTURE_CONVERGE_PLAYBOOK": "playbooks/site.yml",
            "PASTURE_CONVERGE_INVENTORY_PATH": str(project_dir / "inventories/lab/inventory.yml"),
            "PASTURE_CONVERGE_PROJECT_DIR": str(project_dir),
        }
    )
    if previous_stdout is not None:
        env["PULUMI_COMMAND_STDOUT"] = previous_stdout
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=render_inventory(outputs),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_command_converges_everything_then_only_the_changed_hosts(project):
    """Real ansible-runner runs: create runs on every host; an update that adds gpu-3 and
    a host whose play fails runs on exactly those two (--limit) and fails; an update with
    only removals rewrites the inventory and runs nothing."""
    project_dir, out = project
    command = converge_command()
    first = run_command(command, cluster(BASE), project_dir)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["ran"] is True and summary["limit"] == ["all"]
    assert sorted(p.name for p in out.iterdir()) == ["gpu-1", "gpu-2", "master"]
    assert previous_fingerprints(first.stdout) == host_fingerprints(cluster(BASE))
    for p in out.iterdir():
        p.unlink()

    grown = cluster({**BASE, "gpu-3": "10.0.0.13", "broken": "10.0.0.99"})
    failed = run_command(command, grown, project_dir, previous_stdout=first.stdout)
    assert failed.returncode == 1
    assert "failed (status failed" in failed.stderr and "on broken,gpu-3" in failed.stderr
    assert sorted(p.name for p in out.iterdir()) == ["broken", "gpu-3"]  # --limit only
    assert (out / "gpu-3").read_text() == "10.0.0.13"
    written = yaml.safe_load((project_dir / "inventories/lab/inventory.yml").read_text())
    assert sorted(written["all"]["children"]["nodes"]["hosts"]) == [
        "broken",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]

    # only removals (compared with the last successful run): nothing runs
    shrunk = run_command(command, cluster({"gpu-1": "10.0.0.11"}), project_dir, first.stdout)
    assert shrunk.returncode == 0, shrunk.stderr
    assert json.loads(shrunk.stdout.strip().splitlines()[-1])["ran"] is False
    inventory = yaml.safe_load((project_dir / "inventories/lab/inventory.yml").read_text())
    assert list(inventory["all"]["children"]["nodes"]["hosts"]) == ["gpu-1"]


def test_unreadable_previous_output_converges_everything():
    assert previous_fingerprints(None) is None
    assert previous_fingerprints("PLAY RECAP\nnot json") is None
    assert previous_fingerprints('{"hosts": {"a": "1"}}') == {"a": "1"}


def test_program_registers_converge_as_a_local_command(known_hosts):
    built = build_stack(onprem_config(["gpu-1", "cpu-1"], known_hosts[0], converge="true"), SECRETS)
    (conv,) = [r for r in built.of_type("command:local:Command") if r.name == "lab-converge-site"]
    assert conv.inputs["create"] == conv.inputs["update"] == converge_command()
    assert conv.inputs["create"] == f"{sys.executable} -m stacks.converge"
    assert "delete" not in conv.inputs  # removing converge runs nothing
    env = plain(conv.inputs["environment"])
    hosts = json.loads(env["PASTURE_CONVERGE_HOSTS"])
    assert set(hosts) == {"master", "gpu-1", "cpu-1", CLUSTER_KEY}
    inventory = yaml.safe_load(conv.inputs["stdin"])
    assert sorted(inventory["all"]["children"]["nodes"]["hosts"]) == ["cpu-1", "gpu-1"]
    assert env["PASTURE_CONVERGE_INVENTORY_PATH"].endswith("inventories/test/inventory.yml")
    assert env["PASTURE_CONVERGE_PLAYBOOK"] == "playbooks/site.yml"
    assert env["PASTURE_CONVERGE_PROJECT_DIR"] == conv.inputs["dir"] == str(REPO)
    # after the hosts: it depends on the cluster component, i.e. on every host's commands
    opts = built.monitor.options
    assert opts["lab-converge"]["type"] == "pasture:converge:Converge"
    for host in ("master", "gpu-1", "cpu-1"):
        assert opts[f"lab-{host}-facts"]["urn"] in opts["lab-converge"]["dependencies"]
    assert opts["lab-converge-site"]["parent"] == opts["lab-converge"]["urn"]
