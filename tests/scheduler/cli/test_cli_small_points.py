"""Issue 34, item 8: the small points of daily CLI use, each against the real API
(uvicorn + redis-server) or the real CLI process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from live import job_yaml

from scheduler.cli.output import AUTH, NOT_FOUND, REJECTED
from scheduler.logpaths import job_log_dir
from scheduler.spec import JobSpec
from scheduler.store.tokens import hash_token

pytestmark = pytest.mark.integration


def _running_job(env, name: str, line: bytes = b"first line\n"):
    """A job ``name`` in state running whose worker-0 log holds ``line``."""
    spec = JobSpec.model_validate(yaml.safe_load(job_yaml(name)))
    job = env.store.create_job(spec, user="root")
    env.store.transition(name, "running", "test runs it", attempt=1, start_time=time.time())
    log = job_log_dir(env.share, name, job.uid) / "worker-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(line)
    return job


@pytest.mark.parametrize("again", [False, True], ids=["deleted", "deleted-and-resubmitted"])
def test_logs_follow_across_a_delete_ends_with_deleted_or_replaced(logged_in, again):
    """docs/cli.md promises "deleted or replaced" (exit 5) when the job goes away while
    ``job logs -f`` follows it; a delete without a resubmit ended ``job 'x' not found``."""
    _, env = logged_in
    _running_job(env, "follow-me")
    follow = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", "job", "logs", "follow-me", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert follow.stdout is not None
        assert "first line" in follow.stdout.readline()
        os.kill(follow.pid, signal.SIGSTOP)  # stopped and deleted between two polls
        try:
            env.store.transition("follow-me", "stopped", "test stops it")
            env.store.delete_job("follow-me")
        finally:
            os.kill(follow.pid, signal.SIGCONT)
        if again:
            _running_job(env, "follow-me", b"the new job's line\n")
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == NOT_FOUND, err
    assert "deleted or replaced" in err
    assert "new job's line" not in out


def test_an_expired_token_says_it_expired_and_how_to_log_in_again(api, cli, monkeypatch):
    """It said only "unknown, revoked or expired token"."""
    url, env = api
    token = env.tokens.create("carol", "user", ["default"])
    env.store.r.hset(env.tokens._token_key(hash_token(token)), "expires", repr(time.time() - 60))
    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", token)
    r = cli("job", "list")
    assert r.exit_code == AUTH
    assert "token expired on " in r.output and " UTC" in r.output
    assert "pasture login" in r.output
    monkeypatch.setenv("PASTURE_TOKEN", "not-a-token")  # unknown: no expiry to tell
    r = cli("job", "list")
    assert r.exit_code == AUTH
    assert "unknown, revoked or expired token" in r.output and "pasture login" in r.output


BAD_SPEC = """\
name: Bad_Name!
roles:
  main:
    replicas: 0
    resources: {cpu: 100m, memory: 64Mi}
    command: echo hi
  9lives:
    resources: {cpu: 100m, memory: 64Mi}
    command: echo hi
"""


@pytest.mark.parametrize("how", ["submit", "dry-run", "validate"])
def test_an_invalid_spec_lists_each_problem_once_with_the_name_rule_in_words(
    logged_in, cli, tmp_path, how
):
    """It listed each problem twice (the summary line, then the table) and the name
    rule as the raw regex ``'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'``."""
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)
    args = {
        "submit": ("job", "submit", str(spec)),
        "dry-run": ("job", "submit", str(spec), "--dry-run"),
        "validate": ("job", "validate", str(spec)),
    }[how]
    r = cli(*args)
    assert r.exit_code == REJECTED
    out = r.output
    words = "1 to 63 characters: lowercase letters a-z, digits and '-', starting and ending"
    assert out.count(words) == 1, out
    assert out.count("greater than or equal to 1") == 1, out
    assert "[a-z0-9]" not in out and "pattern" not in out, out


def test_a_role_name_rule_is_in_words(logged_in, cli, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC.replace("Bad_Name!", "good").replace("replicas: 0", "replicas: 1"))
    r = cli("job", "submit", str(spec))
    assert r.exit_code == REJECTED
    assert "role names are 1 to 63 characters: letters, digits, '_' and '-', starting" in r.output
    assert "[A-Za-z]" not in r.output


def test_every_name_pattern_of_the_spec_has_words():
    from scheduler.spec.errors import PATTERN_RULES
    from scheduler.spec.model import NAME_RE, ROLE_RE

    assert NAME_RE in PATTERN_RULES and ROLE_RE in PATTERN_RULES


LONG_REASON = (
    "task main-0 exited with code 3 on dev-node-0 (exit_code: exited with code 3); 2 of 2"
    " attempts failed; could not start: /data/a/long/path/that/does/not/exist/anywhere/at"
    "/all/really/ok-and-then-some-words-without-spaces-aaaaaaaaaaaaaaaaaaaaaaaaaa end"
)


def _column(lines: list[str], first: int, column: int) -> str:
    """The text of one cell of a table without vertical rules: the row starting at line
    ``first``, the cell from ``column`` on, until the next row starts."""
    parts = [lines[first][column:]]
    for line in lines[first + 1 :]:
        if line[:column].strip():
            break
        parts.append(line[column:])
    return "".join(parts)


def _squeezed(text: str) -> str:
    return "".join(text.split())


def test_at_80_columns_a_wrapped_reason_loses_no_character(logged_in):
    """A reason wider than its column was cut: Rich ends a long word with "…", and the
    reason column's minimum width, clamped back after shrinking, made the table wider
    than the terminal, so the console cut every line at column 80."""
    from test_cli_output import _pasture_in_pty

    _, env = logged_in
    name = "a-rather-long-job-name-x"
    spec = JobSpec.model_validate(yaml.safe_load(job_yaml(name)))
    env.store.create_job(spec, user="root")
    env.store.transition(name, "failed", LONG_REASON, attempt=1)
    env.store.set_node_state("node-1", "cordoned", LONG_REASON, event={"by": "root"})

    out = _pasture_in_pty("job", "list", columns=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    column = next(line for line in lines if "reason" in line).index("reason")
    first = next(i for i, line in enumerate(lines) if line.startswith(name))
    assert _squeezed(_column(lines, first, column)) == _squeezed(LONG_REASON), out

    out = _pasture_in_pty("node", "show", "node-1", columns=80)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("reason"))
    column = lines[first].index("task main-0")
    assert _squeezed(_column(lines, first, column)) == _squeezed(LONG_REASON), out

    for args in (("job", "show", name), ("node", "list")):
        out = _pasture_in_pty(*args, columns=80)
        assert "…" not in out, out
        assert all(len(line) <= 80 for line in out.splitlines()), out


def _tab(*words: str) -> list[str]:
    """What <TAB> offers after ``pasture WORDS`` (the last word is the one being typed),
    through the shell's own protocol (bash)."""
    r = subprocess.run(
        [str(Path(sys.executable).parent / "pasture")],
        env={
            **os.environ,
            "_PASTURE_COMPLETE": "complete_bash",
            "COMP_WORDS": " ".join(["pasture", *words]),
            "COMP_CWORD": str(len(words)),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout.split()


def test_completion_honours_context_and_covers_more_commands(api, cli, tmp_path):
    """Completion ignored a command-line ``--context`` (it asked the current context's
    API) and offered nothing for job top, resubmit, node delete, context use, --state
    and --user."""
    url, env = api
    assert cli("login", url, "--token", env.admin, "--context", "prod").exit_code == 0
    r = cli("login", "http://127.0.0.1:9", "--token", "x", "--context", "dead", "--no-check")
    assert r.exit_code == 0  # the current context now: an API that does not answer
    for name in ("hello-one", "hello-two"):
        spec = JobSpec.model_validate(yaml.safe_load(job_yaml(name)))
        env.store.create_job(spec, user="alice" if name == "hello-one" else "root")

    assert _tab("job", "show", "hel") == []  # the current context's API is down
    assert _tab("--context", "prod", "job", "show", "hel") == ["hello-one", "hello-two"]
    for words in (("job", "top"), ("job", "resubmit")):
        assert _tab("--context", "prod", *words, "hello-t") == ["hello-two"], words
    assert _tab("--context", "prod", "node", "delete", "node-") == ["node-1", "node-2"]
    assert _tab("--context", "p") == ["prod"]
    assert _tab("context", "use", "") == ["dead", "prod"]
    assert _tab("job", "list", "--state", "pre") == ["preempted"]
    assert "running" in _tab("job", "stop", "--state", "")
    assert _tab("--context", "prod", "job", "list", "--user", "al") == ["alice"]
    assert _tab("--context", "prod", "job", "delete", "-u", "") == ["alice", "root"]


def _commands(command, path=()):
    """(path, click command) of every command and group under ``command``."""
    yield path, command
    if hasattr(command, "list_commands"):  # lazy groups load a command when it is named
        ctx = type(command).context_class(command)
        for name in sorted(command.list_commands(ctx)):
            yield from _commands(command.get_command(ctx, name), (*path, name))


def test_help_shows_no_bool_no_hard_line_breaks_and_no_double_backticks(cli, monkeypatch):
    """``--help`` showed ``--force <bool>``, the docstrings' hard line breaks (ragged
    lines ending mid-width) and their ``double backticks``."""
    import re

    import typer.main

    from scheduler.cli import app

    monkeypatch.setenv("COLUMNS", "100")
    root = typer.main.get_command(app)
    seen = 0
    for path, command in _commands(root):
        if path and path[0] in ("sim", "inventory"):  # mounted lazily: their own help
            continue
        out = cli(*path, "--help").output
        seen += 1
        assert "<bool>" not in out, (path, out)
        assert "``" not in out, (path, out)
        doc = command.help or ""
        # every word of the docstring is shown: reflowing (markdown) drops none
        for word in re.findall(r"[A-Za-z][A-Za-z0-9]{3,}", doc.split("\f")[0]):
            assert word in out, (path, word, out)
        for placeholder in re.findall(r"<[a-z]+>", doc):  # not taken for an HTML tag
            assert placeholder in out, (path, placeholder, out)
        # reflowed: a long paragraph's lines fill the width, none ends early as the
        # docstring's own line breaks did (Rich pads each line to the panel's width)
        text = [
            line.strip() if line.startswith(" ") else ""  # panels end the text
            for line in out.splitlines()[3:]
        ]
        for line, after in zip(text, text[1:], strict=False):
            if line and after and len(line) + 1 + len(after.split()[0]) < 96:
                raise AssertionError((path, "hard line break", line, out))
    assert seen > 40


def test_node_show_says_0_gpus_memory_units_and_no_empty_event_box(logged_in, cli):
    """``allocated 0 cpu, 0``: no GPU count and a memory of 0 without a unit; a node
    without events printed an empty table."""
    r = cli("node", "show", "node-1")
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split(None, 1)[1].strip() for line in r.output.splitlines()[1:9]}
    assert rows["capacity"] == "8 cpu, 16Gi, 0 gpu", r.output
    assert rows["allocated"] == "0 cpu, 0B, 0 gpu", r.output
    assert rows["free"] == "8 cpu, 16Gi, 0 gpu", r.output
    assert "events: none" in r.output and "┏" not in r.output.split("tasks: none")[1]


def _dashboard_browser():
    """tests/scheduler/dashboard/conftest.py's Browser (a cookie-keeping httpx client)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "dashboard" / "conftest.py"
    spec = importlib.util.spec_from_file_location("dashboard_browser", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Browser


def test_node_events_are_oldest_first_on_the_web_and_in_the_cli(logged_in, cli):
    """The web listed them newest first, the CLI oldest first."""
    import re

    Browser = _dashboard_browser()

    url, env = logged_in
    env.store.set_node_state("node-1", "cordoned", "first: fan", event={"by": "root"})
    time.sleep(0.01)
    env.store.set_node_state("node-1", "ready", "second: fixed", event={"by": "root"})
    out = cli("node", "show", "node-1").output.split("tasks: none")[1]
    assert out.index("first: fan") < out.index("second: fixed"), out
    b = Browser(url)
    try:
        assert b.login(env.admin).status_code == 303
        page = b.get("/dashboard/nodes/node-1").text
    finally:
        b.close()
    events = page[page.index('id="node-events"') :]
    assert re.search(r"first: fan.*second: fixed", events, re.DOTALL), events
    assert "oldest first" in page


def test_no_schedules_is_a_sentence_not_an_empty_table(logged_in, cli):
    r = cli("schedule", "list")
    assert r.exit_code == 0 and r.output == "no schedules\n", r.output
