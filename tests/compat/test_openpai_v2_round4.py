"""Issue 37, fifth point: OpenPAI v2's ``cmd`` runtime plugin (microsoft/openpai-runtime
src/plugins/cmd/init.py: preCommands / postCommands, or callbacks containerStarts /
containerEnds), several v2 jobs in one file, and HiveD's affinity groups, pinned cells
and reservation ids accepted with a warning saying what changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scheduler.spec import SpecError, load_document, load_job, parse_job

V2 = Path(__file__).parent / "corpus" / "openpai-v2"


def _hello(extra_plugin: dict) -> dict:
    doc = load_document((V2 / "hello-world-job.yaml").read_text())
    doc["extras"]["com.microsoft.pai.runtimeplugin"].append(extra_plugin)
    return doc


def test_the_cmd_plugin_runs_pre_commands_before_and_post_commands_after(tmp_path):
    """The plugin's README schema (preCommands / postCommands) on OpenPAI's hello-world
    job; the role's command is then run by a real shell with stand-ins for the job's own
    commands (its git clone and python need the network)."""
    doc = _hello(
        {
            "plugin": "cmd",
            "parameters": {
                "preCommands": [f"echo pre >> {tmp_path}/order"],
                "postCommands": [f"echo post >> {tmp_path}/order"],
            },
        }
    )
    doc["taskRoles"]["taskrole"]["commands"] = [f"echo main >> {tmp_path}/order"]
    (spec,) = parse_job(doc).specs
    out = subprocess.run(["/bin/sh", "-c", spec.roles["taskrole"].command], env=os.environ)
    assert out.returncode == 0
    assert (tmp_path / "order").read_text().split() == ["pre", "main", "post"]


def test_the_cmd_plugin_callbacks_form_and_its_role_filter():
    doc = load_document((V2 / "protocol-example.yaml").read_text())
    doc.setdefault("extras", {}).setdefault("com.microsoft.pai.runtimeplugin", []).append(
        {
            "plugin": "cmd",
            "taskroles": ["worker"],
            "parameters": {
                "callbacks": [
                    {"event": "containerStarts", "commands": ["echo starts"]},
                    {"event": "containerEnds", "commands": ["echo ends"]},
                ]
            },
        }
    )
    (spec,) = parse_job(doc).specs
    command = spec.roles["worker"].command  # after the deployment's preCommands
    assert "echo starts\n" in command and command.endswith("\necho ends")
    assert "echo starts" not in spec.roles["ps_server"].command
    bad = doc["extras"]["com.microsoft.pai.runtimeplugin"][-1]["parameters"]
    bad["preCommands"] = ["x"]
    with pytest.raises(SpecError) as info:
        parse_job(doc)
    assert info.value.errors[0]["loc"].endswith("parameters.callbacks")


def test_several_v2_jobs_in_one_file_are_several_jobs_named_by_document():
    a = (V2 / "hello-world-job.yaml").read_text()
    b = (V2 / "cifar10_vgg16_tf_cpu.yaml").read_text()
    parsed = load_job(a + "\n---\n" + b)
    assert parsed.format == "openpai-v2"
    assert len(parsed.specs) == 2 and parsed.specs[0].name != parsed.specs[1].name
    assert all(w.startswith("OpenPAI v2 field items[") for w in parsed.warnings)
    with pytest.raises(SpecError) as info:
        load_job(a + "\n---\n" + a)
    assert info.value.errors[0]["loc"] == "items"
    bad = b.replace("taskRoles:", "taskRoles:\n  x: {instances: 1, commands: []}", 1)
    with pytest.raises(SpecError) as info:
        load_job(a + "\n---\n" + bad)
    assert info.value.errors[0]["loc"].startswith("items[1].taskRoles")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("affinityGroupName", "PCN-ABC", "not inside one HiveD cell"),
        ("reservationId", "VC1-YQW-IB-DGX2", "older name of a pinned cell"),
    ],
)
def test_hived_affinity_groups_and_reservations_are_accepted_with_what_changes(field, value, says):
    doc = load_document((V2 / "hived-itc-gang.yaml").read_text())
    role = next(iter(doc["taskRoles"]))
    hived = doc.setdefault("extras", {}).setdefault("hivedScheduler", {})
    hived.setdefault("taskRoles", {}).setdefault(role, {})[field] = value
    parsed = parse_job(doc)
    assert any(field in w and value in w and says in w for w in parsed.warnings)
