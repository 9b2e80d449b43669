"""``pasture schedule`` against a live API (issue 37): submit Volcano's CronJob example
with its warnings, list, suspend, resume, show and delete; an invalid file's refusal
names the CronJob's field."""

from __future__ import annotations

import json
from pathlib import Path

CRON = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "volcano" / "cronjob.yaml"
NAME = "volcano-cronjob-example"


def test_schedule_commands_round_trip(cli, logged_in, tmp_path):
    r = cli("schedule", "submit", str(CRON))
    assert r.exit_code == 0, r.output
    assert f"schedule {NAME} (*/5 * * * *, Forbid, active) in vc default" in r.output
    assert "warning: Volcano field spec.jobTemplate.spec.schedulerName" in r.output
    listed = cli("schedule", "list", "--json")
    assert [i["name"] for i in json.loads(listed.output)] == [NAME]
    assert "suspended" in cli("schedule", "suspend", NAME).output
    assert "active" in cli("schedule", "resume", NAME).output
    shown = json.loads(cli("schedule", "show", NAME, "--json").output)
    assert shown["starting_deadline_s"] == 60 and shown["runs"] == []
    assert cli("schedule", "delete", NAME).exit_code == 0
    assert json.loads(cli("schedule", "list", "--json").output) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CRON.read_text().replace("startingDeadlineSeconds: 60", "startingDeadlineSeconds: soon")
    )
    r = cli("schedule", "submit", str(bad))
    assert r.exit_code != 0 and "spec.startingDeadlineSeconds" in r.output
