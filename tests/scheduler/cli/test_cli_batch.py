"""``pasture job submit FILE FILE...``: one batch request, one line per file."""

from __future__ import annotations

import json

from live import job_yaml


def test_submit_many_files_in_one_batch(logged_in, cli, tmp_path):
    _, env = logged_in
    files = []
    for name in ("sweep-1", "sweep-2"):
        f = tmp_path / f"{name}.yaml"
        f.write_text(job_yaml(name))
        files.append(str(f))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "sweep-3", "roles": {"w": {"replicas": "x"}}}))
    r = cli("job", "submit", *files, str(bad))
    assert r.exit_code == 1, r.output
    assert "submitted job sweep-1" in r.output and "submitted job sweep-2" in r.output
    assert "refused (422)" in r.output and "bad.json" in r.output
    assert env.store.get_job("sweep-1").state == "submitted"
    assert env.store.get_job("sweep-3") is None
    r = cli("job", "submit", files[0], files[1], "--json")
    assert r.exit_code == 1  # both names are taken now
    assert [i["status"] for i in json.loads(r.output)["items"]] == [409, 409]
    r = cli("job", "submit", files[0], files[1], "--wait")
    assert r.exit_code != 0 and "take one file" in r.output
