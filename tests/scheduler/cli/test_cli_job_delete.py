"""``pasture job delete`` against a real API and redis-server."""

from __future__ import annotations

import pytest
from live import job_yaml

from scheduler.cli.output import NOT_FOUND, REJECTED


@pytest.mark.integration
def test_cli_job_delete(logged_in, cli, tmp_path):
    _, env = logged_in
    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml("old"))
    assert cli("job", "submit", str(spec)).exit_code == 0
    r = cli("job", "delete", "old")
    assert r.exit_code == REJECTED, r.output
    assert "force" in r.output
    env.store.transition("old", "stopped", "test ends it")
    r = cli("job", "delete", "old")
    assert r.exit_code == 0, r.output
    assert "deleted" in r.output and env.store.get_job("old") is None
    assert cli("job", "delete", "old").exit_code == NOT_FOUND
