"""`pasture job submit` of foreign formats prints the jobs and the warnings."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_submit_prints_warnings_and_every_job_of_a_schedule(logged_in, cli, tmp_path):
    pai = tmp_path / "pai.json"
    pai.write_text(
        json.dumps(
            {
                "jobName": "cli_pai",
                "image": "debian:12",
                "taskRoles": [
                    {
                        "name": "main",
                        "taskNumber": 1,
                        "cpuNumber": 1,
                        "memoryMB": 256,
                        "gpuNumber": 0,
                        "command": "true",
                    }
                ],
            }
        )
    )
    r = cli("job", "submit", str(pai))
    assert r.exit_code == 0, r.output
    assert "submitted job cli-pai" in r.output
    assert "warning:" in r.output and "jobName" in r.output
    schedule = tmp_path / "schedule.yml"
    schedule.write_text(
        "mode: process\nname: s\njob_names: [c-one, c-two]\n"
        "components:\n  actor: {num: 1, command: 'true', resources: {memory: 256}}\n"
    )
    r = cli("job", "submit", str(schedule))
    assert r.exit_code == 0, r.output
    assert "submitted job c-one" in r.output and "submitted job c-two" in r.output
