"""The habits of kubectl and Slurm users (issue 27, item 4 and 5) against a real API
(uvicorn + redis-server): --watch, --user, stop/delete of several jobs or by selector,
queue position, name completion, -o on status/context list/job submit/admin token list,
node show -o yaml with enum states, VC limits, the condition line, --force in hints, the
context that wins over a running dev cluster, and the reason column at 80 columns."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from live import job_yaml
from test_cli_output import ANSI, _pasture, _pasture_in_pty, _submit_and_place

from scheduler.cli.output import JOB_NOT_SUCCEEDED, REJECTED, USAGE, fmt_limit, watch
from scheduler.loop import Loop
from scheduler.store import NodeRecord

GPU_JOB = """\
name: gpu-job
roles:
  trainer:
    replicas: 2
    resources: {cpu: 1, memory: 1Gi, gpu: 2}
    command: "true"
"""


def _pty_answer(*args: str, answer: bytes) -> str:
    """The real command on a pseudo-terminal (stdin and stdout), ``answer`` typed once it
    asks (a line ending in '?'); its output without colours."""
    return _pty_run(*args, answer=answer)[0]


def _pty_run(*args: str, answer: bytes) -> tuple[str, int]:
    """:func:`_pty_answer` with the command's exit code: ``(output, exit code)``."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "COLUMNS": "100", "TERM": "dumb"},
    )
    os.close(follower)
    chunks: list[bytes] = []
    answered = False
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
        if not answered and b"[y/N]" in b"".join(chunks):
            os.write(leader, answer)
            answered = True
    proc.wait(timeout=60)
    os.close(leader)
    return ANSI.sub("", b"".join(chunks).decode(errors="replace")), proc.returncode


def _submit(cli, tmp_path, name: str, **fields: object) -> None:
    doc = yaml.safe_load(job_yaml(name))
    doc.update(fields)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = cli("job", "submit", str(path))
    assert r.exit_code == 0, r.output


def test_node_show_yaml_has_task_states_as_words(logged_in, cli, tmp_path):
    _, env = logged_in
    env.store.register_node(
        NodeRecord(name="gpu-node", address="10.0.0.7", cpu_m=16000, memory=64 << 30, gpu=4)
    )
    _submit_and_place(env, cli, tmp_path, "gpu-job", GPU_JOB)
    r = cli("node", "show", "gpu-node", "-o", "yaml")
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(r.output)
    assert {t["state"] for t in data["tasks"]} == {"scheduled"}
    assert len(data["tasks"]) == 2


def test_job_list_user_filter_and_mine(api, cli, tmp_path, monkeypatch):
    url, env = api
    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", env.alice)
    _submit(cli, tmp_path, "alices")
    monkeypatch.setenv("PASTURE_TOKEN", env.admin)
    _submit(cli, tmp_path, "roots")
    names = lambda r: set(r.output.split())  # noqa: E731
    assert names(cli("job", "list", "-o", "name")) == {"alices", "roots"}
    assert names(cli("job", "list", "--user", "alice", "-o", "name")) == {"alices"}
    assert names(cli("job", "list", "-u", "root", "-o", "name")) == {"roots"}
    assert names(cli("job", "list", "--mine", "-o", "name")) == {"roots"}
    assert cli("job", "list", "--user", "nobody", "-o", "name").output == ""


def test_stop_and_delete_several_and_by_selector(logged_in, cli, tmp_path):
    _, env = logged_in
    for name in ("a1", "a2", "a3", "keep"):
        _submit(cli, tmp_path, name)
    r = cli("job", "stop", "a1", "a2", "a3")
    assert r.exit_code == 0, r.output
    assert all(f"job {n}: stop requested" in r.output for n in ("a1", "a2", "a3"))
    Loop(env.store, env.settings).cycle()  # unplaced jobs stop at once
    assert {j.name for j in env.store.list_jobs(state="stopped")[0]} == {"a1", "a2", "a3"}
    # a selection is confirmed first: no terminal to ask and no --yes -> nothing deleted
    r = cli("job", "delete", "--state", "stopped")
    assert r.exit_code == JOB_NOT_SUCCEEDED
    assert "delete 3 job(s)" in r.output and "--yes" in r.output
    assert len(env.store.list_jobs(state="stopped")[0]) == 3
    # names and a selector together, or nothing at all, are usage errors
    assert cli("job", "delete", "a1", "--state", "stopped").exit_code == USAGE
    assert cli("job", "stop").exit_code == USAGE
    # a running job is refused without --force, and the hint names the CLI flag
    r = cli("job", "delete", "keep")
    assert r.exit_code == REJECTED
    assert "--force" in r.output and "force=true" not in r.output
    r = cli("job", "delete", "--state", "stopped", "--yes")
    assert r.exit_code == 0, r.output
    assert env.store.list_jobs(state="stopped")[0] == []
    assert [j.name for j in env.store.list_jobs()[0]] == ["keep"]
    # one unknown name among known ones: the others are acted on, the exit code says 404
    _submit(cli, tmp_path, "b1")
    r = cli("job", "stop", "ghost", "b1")
    assert r.exit_code == 5 and "job b1: stop requested" in r.output


def test_stop_by_selector_after_an_interactive_yes(logged_in, tmp_path):
    url, env = logged_in
    for name in ("s1", "s2"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(job_yaml(name))
        assert _pasture("job", "submit", str(path)).returncode == 0
    out = _pty_answer("job", "stop", "--user", "root", answer=b"y\n")
    assert "stop 2 job(s)" in out
    assert "job s1: stop requested" in out and "job s2: stop requested" in out


def test_queue_position_by_priority_then_submit_time(logged_in, cli, tmp_path):
    _submit(cli, tmp_path, "first")
    _submit(cli, tmp_path, "second")
    _submit(cli, tmp_path, "urgent", priority="high")
    _submit(cli, tmp_path, "other-vc", vc="research")
    queue = lambda n: json.loads(cli("job", "show", n, "-o", "json").output)["queue"]  # noqa: E731
    assert queue("urgent") == {"position": 1, "length": 3, "estimated_start": None}
    assert queue("first")["position"] == 2
    assert queue("second")["position"] == 3
    assert queue("other-vc") == {"position": 1, "length": 1, "estimated_start": None}
    out = cli("job", "show", "second").output
    assert "queue: 3 of 3 waiting in vc default" in out and "estimated start: unknown" in out
    wide = _pasture("job", "list", "-o", "wide").stdout
    assert [line for line in wide.splitlines() if line.startswith("│ urgent")][0].count("1/3")


@pytest.mark.serial  # a 30 s subprocess deadline: timed out once beside the parallel suite
def test_watch_redraws_until_interrupted(logged_in, tmp_path):
    _submit_path = tmp_path / "w.yaml"
    _submit_path.write_text(job_yaml("watched"))
    assert _pasture("job", "submit", str(_submit_path)).returncode == 0
    for args in (["job", "list"], ["node", "list"], ["job", "top", "watched"]):
        out_path = tmp_path / f"{args[0]}.out"
        with out_path.open("w") as out_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler.cli", *args, "--watch", "--interval", "0.2"],
                stdout=out_file,
                stderr=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
            deadline = time.monotonic() + 60
            while out_path.read_text().count("--- ") < 3 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err  # Ctrl-C ends a watch, as with kubectl
        out = out_path.read_text()
        frames = out.count("--- ")
        assert frames >= 3, out
        word = "watched" if args[0] == "job" else "node-1"
        assert out.count(word) in (frames, frames - 1)  # the last frame may be cut short


def test_ctrl_c_during_a_draw_ends_the_watch_once_the_draw_is_done():
    """Ctrl-C never raises inside a draw (the HTTP client, Rich, logging: an exception
    there can leave a lock held and the process hanging at exit); the draw finishes and
    the watch ends. A second Ctrl-C in the same draw ends it at once."""
    before = signal.getsignal(signal.SIGINT)
    done: list[str] = []

    def draw_interrupted_once() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler has run by now
        done.append("drawn")

    watch(draw_interrupted_once, True, 30.0)  # returns: no 30-s sleep, no exception
    assert done == ["drawn"]
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back

    def draw_interrupted_twice() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        done.append("not reached")

    watch(draw_interrupted_twice, True, 30.0)
    assert done == ["drawn"] and signal.getsignal(signal.SIGINT) is before


def test_output_formats_of_status_context_submit_and_tokens(logged_in, cli, tmp_path, env):
    url, _ = logged_in
    status = json.loads(cli("status", "-o", "json").output)
    assert status["cluster"] == "test" and "nodes" in status
    assert yaml.safe_load(cli("status", "-o", "yaml").output)["cluster"] == "test"
    out = cli("status").output
    assert "None" not in out and "condition" not in out
    path = tmp_path / "s.yaml"
    path.write_text(job_yaml("submitted-yaml"))
    job = yaml.safe_load(cli("job", "submit", str(path), "-o", "yaml").output)
    assert (job["name"], job["state"]) == ("submitted-yaml", "submitted")
    path.write_text(job_yaml("submitted-json"))
    assert json.loads(cli("job", "submit", str(path), "-o", "json").output)["vc"] == "default"
    ctx = json.loads(cli("context", "list", "-o", "json").output)
    assert ctx["in_use"] == {"endpoint": url, "source": "environment"}
    assert ctx["contexts"] == []
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({"redis": {"url": env.settings.redis.url}}))
    tokens = {
        t["name"]: t
        for t in json.loads(cli("admin", "token", "list", "-c", str(cfg), "-o", "json").output)
    }
    assert tokens["alice"]["role"] == "user" and tokens["alice"]["vcs"] == ["default"]
    assert tokens["alice"]["expired"] is False and "token" not in tokens["alice"]
    assert yaml.safe_load(cli("admin", "token", "list", "-c", str(cfg), "-o", "yaml").output)


def test_vc_limits_show_only_capped_parts():
    assert fmt_limit({"cpu_m": 0, "memory": 0, "gpu": 4}) == "4 gpu"
    assert fmt_limit({"cpu_m": 2000, "memory": 0, "gpu": 0}) == "2 cpu"
    assert fmt_limit(None) == "no cap"
    assert fmt_limit({"cpu_m": 0, "memory": 0, "gpu": 0}) == "no cap"


def test_context_use_wins_over_an_older_dev_cluster(api, cli, tmp_path, monkeypatch):
    url, env = api
    dev_dir = tmp_path / "dev"
    dev_dir.mkdir()
    monkeypatch.setenv("PASTURE_DEV_DIR", str(dev_dir))
    assert cli("login", url, "--token", env.alice, "--context", "prod").exit_code == 0
    time.sleep(0.05)
    state = dev_dir / "state.json"
    state.write_text(json.dumps({"endpoint": "http://127.0.0.1:9", "token": env.admin}))
    ctx = json.loads(cli("context", "list", "-o", "json").output)
    # the dev cluster started after the context was chosen: it is used, and said so
    assert ctx["in_use"]["endpoint"] == "http://127.0.0.1:9"
    assert "started after context prod was chosen" in ctx["in_use"]["source"]
    assert cli("context", "use", "prod").exit_code == 0
    ctx = json.loads(cli("context", "list", "-o", "json").output)
    assert ctx["in_use"]["endpoint"] == url
    assert ctx["in_use"]["source"].startswith("context prod (chosen after pasture dev up")
    assert cli("job", "list").exit_code == 0  # talks to the context's API, not port 9
    out = cli("context", "list").output
    assert f"in use: {url} (context prod" in out


def test_completion_of_job_node_and_vc_names(logged_in, cli, tmp_path, monkeypatch):
    from scheduler.cli.complete import complete_jobs, complete_nodes, complete_vcs

    _submit(cli, tmp_path, "hello-one")
    _submit(cli, tmp_path, "hello-two")
    _submit(cli, tmp_path, "other")
    assert complete_jobs("hello") == ["hello-one", "hello-two"]
    assert complete_nodes("node-") == ["node-1", "node-2"]
    assert complete_vcs("res") == ["research"]
    # the shell's own protocol (what <TAB> runs)
    r = subprocess.run(
        [str(Path(sys.executable).parent / "pasture")],
        env={
            **os.environ,
            "_PASTURE_COMPLETE": "complete_bash",
            "COMP_WORDS": "pasture job show hel",
            "COMP_CWORD": "3",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "hello-one" in r.stdout and "other" not in r.stdout
    # no API: no candidates, no message, quickly
    monkeypatch.setenv("PASTURE_ENDPOINT", "http://127.0.0.1:9")
    start = time.monotonic()
    assert complete_jobs("") == []
    assert time.monotonic() - start < 3


def test_reason_column_keeps_its_width_at_80_columns(logged_in, cli, tmp_path):
    _, env = logged_in
    for i in range(10):  # 2 cpu each on 16 cpu: the later ones wait
        _submit(cli, tmp_path, f"quota-{i}")
    Loop(env.store, env.settings).cycle()
    waiting = env.store.list_jobs(state="queued")[0]
    assert waiting
    job = json.loads(cli("job", "show", waiting[0].name, "-o", "json").output)["job"]
    reason = job["pending_reason"]["message"]
    assert len(reason) > 40
    out = _pasture_in_pty("job", "list", columns=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    header = next(line for line in lines if "reason" in line)
    column = header.index("reason")
    assert 80 - column >= 24, out  # a third of the width, not a 7-character stub
    # the reason wraps inside its column: read back, it is whole
    first = next(i for i, line in enumerate(lines) if line.strip().startswith(waiting[0].name))
    parts = [lines[first][column:].strip()]
    for line in lines[first + 1 :]:
        if line[:column].strip():
            break
        parts.append(line[column:].strip())
    assert " ".join(p for p in parts if p) == reason, out


def test_empty_results_print_a_sentence_not_an_empty_table(logged_in, cli):
    """Issue 34, item 8: `job list` with no jobs printed an empty box."""
    r = cli("job", "list")
    assert r.exit_code == 0 and r.output == "no jobs\n"
    r = cli("job", "list", "--state", "running")
    assert r.output == "no jobs\n"


def test_an_unknown_state_is_a_usage_error_naming_what_was_given(logged_in, cli):
    """Issue 34, item 8: `--state pending` got the API's 422 with an empty `given`."""
    for args in (["job", "list"], ["job", "stop", "--yes"], ["job", "delete", "--yes"]):
        r = cli(*args, "--state", "pending")
        assert r.exit_code == USAGE, r.output
        assert "'pending'" in r.output and "queued" in r.output and "--state" in r.output


def test_a_taken_name_says_what_to_do(logged_in, cli, tmp_path):
    """Issue 34, item 8: a 409 on a reused name gave no hint."""
    _submit(cli, tmp_path, "taken")
    r = cli("job", "submit", str(tmp_path / "taken.yaml"))
    assert r.exit_code == REJECTED
    assert "a job named 'taken' already exists in VC 'default': give another name" in r.output
    assert "(--name NEW)" in r.output
    assert "pasture job resubmit NAME --replace" in r.output
    r = cli("job", "submit", str(tmp_path / "taken.yaml"), "--vc", "default")  # overrides path
    assert r.exit_code == REJECTED and "--name NEW" in r.output
