"""The CLI names a job within its VC (issue 32 item 3): ``--vc`` (or ``NAME.VC``) picks
one of several jobs of the same name; a bare name the API cannot pick says to give it."""

from __future__ import annotations

import json

from live import job_yaml


def test_vc_picks_one_of_two_jobs_of_the_same_name(logged_in, cli, tmp_path):
    _, env = logged_in  # an admin: it sees both VCs
    for vc in ("default", "research"):
        path = tmp_path / f"{vc}.yaml"
        path.write_text(job_yaml("train", vc=vc))
        assert cli("job", "submit", str(path)).exit_code == 0
    r = cli("job", "show", "train")
    assert r.exit_code != 0
    assert "?vc=" in r.output and "research" in r.output, r.output
    for args, vc in (
        (("--vc", "research"), "research"),
        (("--vc", "default"), "default"),
    ):
        r = cli("job", "show", "train", *args, "-o", "json")
        assert r.exit_code == 0, r.output
        job = json.loads(r.output)["job"]
        assert (job["name"], job["vc"]) == ("train", vc)
    r = cli("job", "show", "train.research", "-o", "json")
    assert json.loads(r.output)["job"]["key"] == "train.research"
    r = cli("job", "stop", "train.research")
    assert r.exit_code == 0, r.output
    assert env.store.get_job("train.research").stop_requested
    assert env.store.get_job("train").stop_requested == ""
