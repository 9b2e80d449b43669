"""Text from jobs, users and nodes prints as the characters it is (issue 34, item 1).

A property test: job reasons, task messages, job events, cordon reasons, node events,
labels and log lines full of brackets (``[/data]``, ``[/INST]``, ``[red]x[/red]``),
backslashes, ANSI escapes and control characters go through every list/show/logs/events/top
command in every ``-o`` format, against the real API (uvicorn + redis-server). No command
may crash, and each text is shown verbatim: in json/yaml as the same string, in tables and
logs with its control characters made visible (never sent to the terminal raw).
"""

from __future__ import annotations

import json
import time
import unicodedata

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live import job_yaml

from scheduler.logpaths import job_log_dir
from scheduler.spec import JobSpec
from scheduler.store.records import NodeRecord, TaskRecord

pytestmark = pytest.mark.integration

# Pieces that broke or bent the CLI (markup tags, escapes, emoji codes, terminal control)
FRAGMENTS = [
    "[/data]",
    "[/INST]",
    "[INST]",
    "[red]x[/red]",
    "[bold]",
    "[/]",
    "[link=http://x]y[/link]",
    "[",
    "]",
    "\\",
    "\\[",
    "\\\\[red]",
    "\x1b[31m",
    "\x1b[2J",
    "\x1b]0;title\x07",
    "\x00",
    "\x08",
    "\r",
    "\x7f",
    "\x9b",
    "\u202e",
    ":smile:",
    "%s",
    "{}",
    "a",
    "No such file or directory: ",
    "é",
    "\ue000",
    "\ue001",
    " ",
]
hostile = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map("".join)
# one field of a log line: every control character but the newline that ends it
log_text = st.lists(st.sampled_from([*FRAGMENTS, "\t"]), min_size=1, max_size=8).map("".join)


def shown(text: str, keep_tab: bool = False) -> str:
    """How the CLI must show ``text`` on a terminal: the oracle, written apart from
    :mod:`scheduler.cli.text` (control pictures for C0 and DEL, <U+XXXX> for C1 and bidi
    controls; everything else as it is)."""
    out = []
    for ch in text:
        code = ord(ch)
        if keep_tab and ch == "\t":
            out.append(ch)
        elif code < 0x20:
            out.append(chr(0x2400 + code))
        elif code == 0x7F:
            out.append("\u2421")
        elif unicodedata.category(ch) == "Cc" or ch in "\u202a\u202b\u202c\u202d\u202e\ue000\ue001":
            out.append(f"<U+{code:04X}>")
        else:
            out.append(ch)
    return "".join(out)


def no_raw_control(out: str) -> None:
    bad = {ch for ch in out if unicodedata.category(ch) == "Cc" and ch not in "\n\t"}
    assert not bad, f"raw control characters reached the terminal: {bad!r}"


def _seed(env, reason: str, message: str, event: str, cordon: str, label: str, line: str):
    """A failed job ``hostile`` with the texts in its reason, task message, an event and
    its log; node-1 cordoned with ``cordon`` and labelled ``label``."""
    store = env.store
    if store.get_job("hostile") is not None:
        store.delete_job("hostile")
    spec = JobSpec.model_validate(yaml.safe_load(job_yaml("hostile")))
    job = store.create_job(spec, user="root")
    now = time.time()
    task = TaskRecord(role="worker", index=0, attempt=1, node="node-1", state="failed", exit_code=3)
    task.message = message
    store.update_tasks("hostile", [task], notify=False)
    store.add_event("hostile", event)
    store.transition("hostile", "failed", reason, now=now, attempt=1, start_time=now - 5)
    log = job_log_dir(env.share, "hostile", job.uid) / "worker-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(line.encode() + b"\n")
    store.register_node(
        NodeRecord(
            name="node-1",
            address="127.0.0.1",
            cpu_m=8000,
            memory=16 << 30,
            labels={"zone": label},
            gpu_model=label,
        )
    )
    store.set_node_state("node-1", "cordoned", cordon, event={"by": "root"})


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    reason=hostile,
    message=hostile,
    event=hostile,
    cordon=hostile,
    label=hostile,
    line=log_text,
)
def test_untrusted_text_prints_verbatim_in_every_command_and_format(
    logged_in, cli, reason, message, event, cordon, label, line
):
    _, env = logged_in
    _seed(env, reason, message, event, cordon, label, line)

    def run(*args: str) -> str:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
        no_raw_control(r.output)
        return r.stdout

    for fmt in ("table", "wide"):
        out = run("job", "list", "-o", fmt)
        assert shown(reason) in out, fmt
        out = run("node", "list", "-o", fmt)
        assert shown(cordon) in out and shown(label) in out, fmt
    for fmt in ("json", "yaml"):
        load = json.loads if fmt == "json" else yaml.safe_load
        page = load(run("job", "list", "-o", fmt))
        assert page["items"][0]["reason"] == reason
        shown_job = load(run("job", "show", "hostile", "-o", fmt))
        assert shown_job["job"]["reason"] == reason
        assert shown_job["job"]["tasks"][0]["message"] == message
        assert event in [e["reason"] for e in shown_job["events"]]
        nodes = {n["name"]: n for n in load(run("node", "list", "-o", fmt))}
        assert nodes["node-1"]["state_reason"] == cordon
        assert nodes["node-1"]["labels"] == {"zone": label}
        node = load(run("node", "show", "node-1", "-o", fmt))
        assert node["state_reason"] == cordon
        assert cordon in [e["reason"] for e in node["events"]]
        top = load(run("job", "top", "hostile", "-o", fmt))
        assert top["job"] == "hostile"
    assert run("job", "list", "-o", "name") == "hostile\n"
    assert run("job", "show", "hostile", "-o", "name") == "hostile\n"
    out = run("job", "show", "hostile")
    for text in (reason, message, event):
        assert shown(text) in out
    out = run("node", "show", "node-1")
    assert shown(cordon) in out and shown(label) in out
    assert out.count(shown(cordon)) >= 2  # the reason row and the node event
    run("job", "top", "hostile")
    assert run("job", "logs", "hostile") == f"worker-0 | {shown(line, keep_tab=True)}\n"
    out = run("job", "logs", "hostile", "--role", "worker", "--index", "0")
    assert out == shown(line, keep_tab=True) + "\n"


@settings(max_examples=300, deadline=None)
@given(text=hostile)
def test_esc_and_table_cells_render_the_characters_of_any_text(text):
    """The two ways of scheduler.cli.text into Rich (markup lines, table cells) print
    :func:`shown` text, with no raw control character (pure, no server)."""
    import io

    from scheduler.cli.output import _Console as Console
    from scheduler.cli.text import Table, esc

    buf = io.StringIO()
    console = Console(file=buf, width=10_000, emoji=False, color_system="truecolor")
    console.print(f"[red]reason:[/red] {esc(text)} [bold]end[/bold]")
    table = Table("cell")
    table.add_row(text)
    console.print(table)
    plain = Console(file=io.StringIO(), width=10_000, emoji=False)
    plain.print(f"[red]reason:[/red] {esc(text)} [bold]end[/bold]")
    plain.print(table)
    out = plain.file.getvalue()
    assert f"reason: {shown(text)} end" in out
    assert f"│ {shown(text)}" in out
    styled_out = buf.getvalue()  # with colour: only our own SGR codes, no raw controls
    assert "\x1b[2J" not in styled_out and "\x07" not in styled_out and "\x00" not in styled_out
