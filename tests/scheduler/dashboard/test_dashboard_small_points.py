"""Issue 34, item 8 on the dashboard. The all-logs page: each shown (and each matched)
line with its line number and the attempt it came from, also when only the end of a log
is shown; downloads named per submission and attempt. The submit form's example under a
name of its own."""

from __future__ import annotations

import re

import pytest
from test_dashboard_http import submit

from scheduler.api.dashboard.joblogs import PER_TASK_BYTES
from scheduler.logpaths import job_log_dir

pytestmark = pytest.mark.integration

NUMBERED = re.compile(
    r'<pre class="gutter" aria-hidden="true">(.*?)</pre><pre class="text">(.*?)</pre>', re.DOTALL
)


def _shown(page: str) -> list[tuple[int, str, str]]:
    """(line number, attempt, text without markup) of every shown line: the gutter's
    "N aK" beside the text's line (one line each, so they stand side by side)."""
    out = []
    for gutter, text in NUMBERED.findall(page):
        lines = text.split("\n")[:-1]
        marks = gutter.split("\n")[:-1]
        assert len(marks) == len(lines), (gutter, text)
        for mark, line in zip(marks, lines, strict=True):
            if line.startswith("… (earlier lines"):
                assert mark == ""
                continue
            number, attempt = mark.split(" ")
            out.append((int(number), attempt.removeprefix("a"), re.sub(r"</?mark>", "", line)))
    return out


def _log(env, job: str, text: str) -> None:
    d = job_log_dir(env.share, job, env.store.get_job(job).uid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "worker-0.log").write_text(text)


def test_matched_lines_keep_their_attempt_and_line_number(browser, base, env):
    submit(base, env.alice, "two-tries")
    _log(
        env,
        "two-tries",
        "=== attempt 1 on node-1 ===\nstep 1 loss 0.9\nboom\n"
        "=== attempt 2 on node-2 ===\nstep 1 loss 0.8\nstep 2 loss 0.7\n",
    )
    b = browser()
    b.login(env.alice)
    found = b.get("/dashboard/jobs/two-tries/logs", params={"q": "loss"}).text
    assert _shown(found) == [
        (2, "1", "step 1 loss 0.9"),
        (5, "2", "step 1 loss 0.8"),
        (6, "2", "step 2 loss 0.7"),
    ], found
    every = _shown(b.get("/dashboard/jobs/two-tries/logs").text)
    assert [n for n, _, _ in every] == [1, 2, 3, 4, 5, 6]


def test_the_end_of_a_big_log_is_numbered_from_the_start_of_the_log(browser, base, env):
    submit(base, env.alice, "long")
    head = "=== attempt 1 on node-1 ===\nfirst\n=== attempt 3 on node-2 ===\n"
    lines = [f"line {i:07d}" for i in range(PER_TASK_BYTES // 6)]
    _log(env, "long", head + "\n".join(lines) + "\n")
    b = browser()
    b.login(env.alice)
    shown = _shown(b.get("/dashboard/jobs/long/logs").text)
    assert shown and shown[-1] == (3 + len(lines), "3", lines[-1])
    for number, attempt, text in shown:  # every number is the line's own
        assert text == lines[number - 4] and attempt == "3"


def test_scan_before_finds_a_header_split_across_chunks():
    from scheduler.api.dashboard.joblogs import scan_before

    data = b"a\nb\n=== attempt 7 on node-1 ===\nc\n"
    for cut in range(1, len(data)):
        assert scan_before(iter([data[:cut], data[cut:]])) == (4, 7), cut


def test_downloads_are_named_per_submission_and_attempt(browser, base, env):
    names = []
    attempts = []
    for _ in range(2):  # submitted, deleted, submitted again under the same name
        if env.store.get_job("again") is not None:
            env.store.transition("again", "stopped", "test")
            env.store.delete_job("again")
        submit(base, env.alice, "again")
        _log(env, "again", "hello\n")
        attempts.append(env.store.get_job("again").attempt)
        b = browser()
        b.login(env.alice)
        for params in ({"role": "worker", "index": 0}, {}):
            r = b.get("/dashboard/jobs/again/logs/download", params=params)
            assert r.status_code == 200
            names.append(re.search(r'filename="([^"]+)"', r.headers["content-disposition"])[1])
    uids = [names[0].split("-")[1], names[2].split("-")[1]]
    assert uids[0] != uids[1]
    first = f"again-{uids[0]}-{attempts[0]}"
    assert names[0] == f"{first}-worker-0.log" and names[1] == f"{first}.log"
    assert len(set(names)) == 4


def test_the_submit_example_can_be_submitted_as_it_comes_again_and_again(browser, env):
    """The form's example was always ``hello-gang``: after one use, Check said the name
    exists. Each form now comes with a generated name."""
    import html

    b = browser()
    b.login(env.alice)
    names = []
    for _ in range(3):
        page = b.get("/dashboard/submit").text
        spec = html.unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", page, re.DOTALL)[1])
        name = re.search(r"^name: (\S+)", spec, re.MULTILINE)[1]
        assert re.fullmatch(r"hello-gang-[0-9a-f]{6}", name)
        csrf = b.csrf("/dashboard/submit")
        r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": spec, "action": "check"})
        assert r.status_code == 200 and 'id="submit-spec"' in r.text, r.text
        r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": spec, "action": "submit"})
        assert r.status_code == 303, r.text
        names.append(name)
    assert len(set(names)) == 3 and all(env.store.get_job(n) for n in names)
