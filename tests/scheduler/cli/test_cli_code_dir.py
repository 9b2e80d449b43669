"""A newcomer's own code (issue 34, item 2): ``job submit --dry-run`` and ``job
validate`` check ``code_dir`` against the share and name the ``pasture data push``
command that fixes it, against a real API and redis-server."""

from __future__ import annotations

import json

import pytest
import yaml
from live import job_yaml

from scheduler.cli.output import REJECTED

pytestmark = pytest.mark.integration


def _spec(tmp_path, code_dir: str):
    doc = yaml.safe_load(job_yaml("mine"))
    doc["code_dir"] = code_dir
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_dry_run_refuses_a_code_dir_missing_on_the_share(logged_in, cli, tmp_path):
    _, env = logged_in
    spec = _spec(tmp_path, "code/mine")
    r = cli("job", "submit", "--dry-run", str(spec))
    assert r.exit_code == REJECTED, r.output
    assert "code_dir 'code/mine': no such directory on the cluster share" in r.output
    assert "pasture data push ./DIR code/mine" in r.output
    (env.share / "code" / "mine").mkdir(parents=True)
    r = cli("job", "submit", "--dry-run", str(spec))
    assert r.exit_code == 0, r.output
    # jobs' own directories (per VC) are never looked at: no answer tells whether
    # another tenant's job directory exists
    (env.share / "jobs" / "theirs").mkdir(parents=True)
    for code_dir in ("jobs/theirs", "jobs/nobody"):
        r = cli("job", "submit", "--dry-run", "--json", str(_spec(tmp_path, code_dir)))
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["jobs"][0]["name"] == "mine"


def test_validate_checks_code_dir_on_a_running_dev_clusters_share(cli, tmp_path, monkeypatch):
    share = tmp_path / "dev-share"
    share.mkdir()
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setenv("PASTURE_DEV_DIR", str(dev))
    spec = _spec(tmp_path, "code/mine")
    # no cluster in use: offline as before
    assert cli("job", "validate", str(spec)).exit_code == 0
    state = {"endpoint": "http://127.0.0.1:9", "token": "t", "share_dir": str(share)}
    (dev / "state.json").write_text(json.dumps(state))
    r = cli("job", "validate", str(spec))
    assert r.exit_code == REJECTED, r.output
    assert "code_dir" in r.output and "pasture data push ./DIR code/mine" in r.output
    (share / "code" / "mine").mkdir(parents=True)
    r = cli("job", "validate", str(spec))
    assert r.exit_code == 0, r.output
