"""Bulk ``job stop``/``job delete`` (issue 34, item 6) against a real API and
redis-server: a selection keeps only the jobs that can still take the action, another
user's job needs an admin or the VC's operator (the API refuses it too), and answering
``n`` exits 1."""

from __future__ import annotations

import pytest
from test_cli_habits import _pty_run, _submit

from scheduler.cli.output import AUTH, JOB_NOT_SUCCEEDED
from scheduler.loop import Loop

pytestmark = pytest.mark.integration


def test_a_selection_takes_only_jobs_that_can_still_take_the_action(logged_in, cli, tmp_path):
    _, env = logged_in
    for name in ("done", "live"):
        _submit(cli, tmp_path, name)
    assert cli("job", "stop", "done").exit_code == 0
    Loop(env.store, env.settings).cycle()  # an unplaced job stops at once
    assert env.store.get_job("done").state == "stopped"
    r = cli("job", "stop", "--user", "root", "--yes")
    assert r.exit_code == 0, r.output
    assert "left out: 1 already ended" in r.output
    assert "job live: stop requested" in r.output and "job done" not in r.output
    _submit(cli, tmp_path, "fresh")
    r = cli("job", "delete", "--all", "--yes")
    assert r.exit_code == 0, r.output
    assert "job done: deleted" in r.output and "fresh" not in r.output
    assert "2 not finished (--force stops them first)" in r.output
    assert env.store.get_job("fresh") is not None


def test_another_users_job_needs_an_admin_or_the_vcs_operator(api, cli, tmp_path, monkeypatch):
    url, env = api
    carol = env.tokens.create("carol", "user", ["default"])
    olga = env.tokens.create("olga", "user", ["default"], operates=["default"])
    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", env.alice)
    _submit(cli, tmp_path, "alices")
    _submit(cli, tmp_path, "alices2")
    monkeypatch.setenv("PASTURE_TOKEN", carol)
    # by name: the API refuses (403), naming who may
    r = cli("job", "stop", "alices")
    assert r.exit_code == AUTH
    assert "only its owner, an admin or an operator of vc 'default'" in r.output
    assert cli("job", "delete", "alices", "--force").exit_code == AUTH
    # by selector: left out before asking
    r = cli("job", "stop", "--user", "alice", "--yes")
    assert r.exit_code == 0
    assert "2 of other users (only an admin or the VC's operator may stop them)" in r.output
    assert not env.store.get_job("alices").stop_requested
    # the VC's operator may; whoami says which VCs a token operates
    monkeypatch.setenv("PASTURE_TOKEN", olga)
    assert cli("job", "stop", "alices").exit_code == 0
    assert env.store.get_job("alices").stop_requested == "stopped by olga"
    r = cli("job", "stop", "--vc", "default", "--yes")
    assert r.exit_code == 0 and "job alices2: stop requested" in r.output
    # the owner may
    monkeypatch.setenv("PASTURE_TOKEN", env.alice)
    _submit(cli, tmp_path, "alices3")
    assert cli("job", "stop", "alices3").exit_code == 0
    assert env.store.get_job("alices3").stop_requested == "stopped by alice"


def test_operates_must_be_vcs_of_a_user_token(api):
    _, env = api
    with pytest.raises(ValueError, match="token operates: expected VCs of the token's vcs"):
        env.tokens.create("x", "user", ["default"], operates=["research"])
    with pytest.raises(ValueError, match="only a user token operates VCs"):
        env.tokens.create("y", "admin", operates=["default"])
    env.tokens.create("z", "user", ["default"], operates=["default"])
    assert env.tokens.get("z").operates == ("default",)
    env.tokens.rotate("z")
    assert env.tokens.get("z").operates == ("default",)


def test_answering_no_exits_1_and_stops_nothing(logged_in, cli, tmp_path):
    _, env = logged_in
    _submit(cli, tmp_path, "keep1")
    out, code = _pty_run("job", "stop", "--user", "root", answer=b"n\n")
    assert "stop 1 job(s): keep1" in out
    assert code == JOB_NOT_SUCCEEDED
    assert not env.store.get_job("keep1").stop_requested
