"""`pasture data push|pull` against a `pasture dev up` cluster copy into its local share
(issue 26: they tried ssh on port 22). The dev state file is the one `dev up` writes."""

from __future__ import annotations

import json


def _dev_state(tmp_path, monkeypatch):
    share = tmp_path / "share"
    share.mkdir()
    state_dir = tmp_path / "dev"
    state_dir.mkdir()
    state = {"endpoint": "http://127.0.0.1:9", "token": "t", "share_dir": str(share)}
    (state_dir / "state.json").write_text(json.dumps(state))
    monkeypatch.setenv("PASTURE_DEV_DIR", str(state_dir))
    return share


def test_push_and_pull_copy_into_the_dev_share(cli, tmp_path, monkeypatch):
    share = _dev_state(tmp_path, monkeypatch)
    src = tmp_path / "mnist"
    (src / "sub").mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (src / "sub" / "d.bin").write_bytes(b"\0" * 1000)
    r = cli("data", "push", str(src), "code/mnist")
    assert r.exit_code == 0, r.output
    assert "copied 2 file(s), 1009B to" in r.output  # a unit (issue 34, item 8)
    assert (share / "code/mnist/train.py").read_text() == "print(1)\n"
    assert (share / "code/mnist/sub/d.bin").stat().st_size == 1000
    r = cli("data", "push", str(src / "train.py"), "code/mnist/sub")
    assert r.exit_code == 0 and (share / "code/mnist/sub/train.py").is_file()
    out = tmp_path / "back"
    r = cli("data", "pull", str(out), "code/mnist")
    assert r.exit_code == 0, r.output
    assert (out / "sub" / "d.bin").stat().st_size == 1000


def test_a_path_out_of_the_dev_share_is_refused(cli, tmp_path, monkeypatch):
    share = _dev_state(tmp_path, monkeypatch)
    src = tmp_path / "f.txt"
    src.write_text("x")
    r = cli("data", "push", str(src), "../outside")
    assert r.exit_code == 2 and not (share.parent / "outside").exists()


def test_push_after_a_login_to_the_dev_cluster_still_copies_locally(cli, tmp_path, monkeypatch):
    """Issue 34, item 3: after `pasture login` to the dev cluster's endpoint the context
    wins, and data push went over ssh to port 22 (exit 7)."""
    share = _dev_state(tmp_path, monkeypatch)
    assert cli("login", "http://127.0.0.1:9", "--token", "t", "--no-check").exit_code == 0
    src = tmp_path / "train.py"
    src.write_text("print(1)\n")
    r = cli("data", "push", str(src), "code/x")
    assert r.exit_code == 0, r.output
    assert (share / "code/x").read_text() == "print(1)\n"


def test_an_ssh_failure_says_why_ssh_and_how_to_change_it(cli, tmp_path, monkeypatch):
    _dev_state(tmp_path, monkeypatch)
    # logged in to another cluster: ssh to its host; nothing listens on port 1
    assert cli("login", "http://127.0.0.1:8", "--token", "t", "--no-check").exit_code == 0
    src = tmp_path / "f.txt"
    src.write_text("x")
    r = cli("data", "push", str(src), "code/x", "--port", "1")
    assert r.exit_code == 7, r.output
    assert "copy over SSH to the API endpoint's host port 1 as root" in r.output
    assert "is not a running `pasture dev up` cluster" in r.output
    assert "--host/--port/--user/--key" in r.output
