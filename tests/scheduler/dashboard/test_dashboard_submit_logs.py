"""The dashboard's submit form (dry run first, CSRF), the all-logs page (search,
download), failure reasons in the jobs list and the expired-token login message, over
real HTTP (uvicorn + redis-server)."""

from __future__ import annotations

import time

from live import job_yaml
from test_dashboard_http import submit

from scheduler.logpaths import job_log_dir
from scheduler.store.tokens import TokenStore


def test_submit_form_checks_then_submits(browser, env):
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/submit")
    assert page.status_code == 200 and "<textarea" in page.text
    assert 'id="submit-spec"' not in page.text  # no Submit before a check
    csrf = b.csrf("/dashboard/submit")
    spec = job_yaml("from-browser")
    r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": spec, "action": "check"})
    assert r.status_code == 200, r.text
    assert 'id="dry-run"' in r.text and 'id="submit-spec"' in r.text
    assert "Would start now" in r.text and "node-" in r.text
    assert env.store.get_job("from-browser") is None  # a check stores nothing
    # without the CSRF token nothing is submitted
    r = b.post("/dashboard/submit", {"csrf_token": "", "spec": spec, "action": "submit"})
    assert r.status_code == 403 and env.store.get_job("from-browser") is None
    r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": spec, "action": "submit"})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/jobs/from-browser.default"
    job = env.store.get_job("from-browser")
    assert job is not None and job.user == "alice"
    # the user's VC rules hold: another VC is refused with the API's words
    r = b.post(
        "/dashboard/submit",
        {"csrf_token": csrf, "spec": job_yaml("elsewhere", "research"), "action": "check"},
    )
    assert r.status_code == 403 and 'id="submit-error"' in r.text
    assert 'id="submit-spec"' not in r.text


def test_submit_form_names_each_invalid_field(browser, env):
    b = browser()
    b.login(env.admin)
    csrf = b.csrf("/dashboard/submit")
    bad = job_yaml("bad").replace("replicas: 2", "replicas: -1")
    r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": bad, "action": "check"})
    assert r.status_code == 422
    assert "roles.worker.replicas" in r.text
    r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": "a: [", "action": "submit"})
    assert r.status_code == 400 and 'id="submit-error"' in r.text
    r = b.post("/dashboard/submit", {"csrf_token": csrf, "spec": "x", "action": "delete"})
    assert r.status_code == 400
    assert b.get("/dashboard/submit").status_code == 200
    assert browser().get("/dashboard/submit").status_code == 303  # no session: login


def _logs(env, job: str):
    d = job_log_dir(env.share, job, env.store.get_job(job).uid)
    d.mkdir(parents=True)
    return d


def test_all_logs_page_search_and_download(browser, base, env):
    submit(base, env.alice, "many")
    d = _logs(env, "many")
    (d / "ps-0.log").write_text("=== attempt 1 on node-1 ===\nps starting\nloss 0.5\n")
    (d / "worker-0.log").write_text("worker starting\nLOSS 0.4\n")
    (d / "worker-1.log").write_text("worker one\n" + "x" * 10 + "\nno newline at end")
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/many/logs").text
    for task in ("ps-0", "worker-0", "worker-1"):
        assert f'data-task="{task}"' in page
    assert "ps starting" in page and "worker one" in page
    found = b.get("/dashboard/jobs/many/logs", params={"q": "loss"}).text
    assert "<mark>loss</mark> 0.5" in found and "<mark>LOSS</mark> 0.4" in found
    assert "2 matching lines" in found and "ps starting" not in found
    one = b.get("/dashboard/jobs/many/logs/download", params={"role": "worker", "index": 0})
    assert one.status_code == 200 and one.text == "worker starting\nLOSS 0.4\n"
    many = env.store.get_job("many")
    stem = f"many-{many.uid[:8]}-{many.attempt}"
    assert f'filename="{stem}-worker-0.log"' in one.headers["content-disposition"]
    every = b.get("/dashboard/jobs/many/logs/download")
    assert every.text.splitlines() == [
        "ps-0 | === attempt 1 on node-1 ===",
        "ps-0 | ps starting",
        "ps-0 | loss 0.5",
        "worker-0 | worker starting",
        "worker-0 | LOSS 0.4",
        "worker-1 | worker one",
        "worker-1 | xxxxxxxxxx",
        "worker-1 | no newline at end",
    ]
    assert b.get("/dashboard/jobs/many/logs/download", params={"role": "ps"}).status_code == 400
    # another VC's user sees nothing of it
    bob = browser()
    bob.login(env.bob)
    assert bob.get("/dashboard/jobs/many/logs").status_code == 404
    assert bob.get("/dashboard/jobs/many/logs/download").status_code == 404
    assert 'id="all-logs-link"' in b.get("/dashboard/jobs/many").text


def test_all_logs_page_shows_only_the_end_of_a_big_log(browser, base, env):
    from scheduler.api.dashboard.joblogs import PER_TASK_BYTES

    submit(base, env.alice, "big")
    d = _logs(env, "big")
    lines = [f"line {i:07d}" for i in range(PER_TASK_BYTES // 6)]
    (d / "ps-0.log").write_text("\n".join(lines) + "\n")
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/big/logs").text
    assert lines[-1] in page and lines[0] not in page
    assert "earlier lines in the download" in page
    assert len(page) < 2 * PER_TASK_BYTES
    assert b.get("/dashboard/jobs/big/logs/download").text.count("\n") == len(lines)


def test_jobs_list_shows_why_a_job_failed(browser, base, env):
    submit(base, env.alice, "broke")
    env.store.set_job_fields("broke", state="failed", reason="task ps-0 exited 3")
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs").text
    assert '<td class="reason failure">task ps-0 exited 3</td>' in page


def test_login_with_an_expired_token_says_so_with_the_date(browser, env):
    tokens: TokenStore = env.tokens
    old = tokens.create("old", "user", ["default"], ttl_s=1)
    time.sleep(1.2)
    b = browser()
    r = b.login(old)
    assert r.status_code == 401
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert "This token expired on " + day in r.text and "Unknown or revoked" not in r.text
    r = browser().login("not-a-token")
    assert "Unknown or revoked token." in r.text


def test_vc_limits_show_only_capped_parts():
    from scheduler.api.dashboard.views import limit_text
    from scheduler.api.schemas import ResourcesOut

    assert limit_text(ResourcesOut(cpu_m=0, memory=0, gpu=4)) == "4 gpu"
    assert limit_text({"cpu_m": 2000, "memory": 0, "gpu": 0}) == "2 cpu"
    assert limit_text(None) == "no cap"


def test_vcs_page_shows_no_cap(browser, env):
    b = browser()
    b.login(env.admin)
    page = b.get("/dashboard/vcs").text
    assert '<td class="max">no cap</td>' in page


def test_all_logs_download_survives_a_task_swapping_its_log(browser, base, env):
    """Issue 32 item 7: a task swapping its own log between a file and a link (a real
    process racing the downloads) broke the all-logs download (44 of 150) with a
    traceback: every download now completes, with the other tasks' logs whole."""
    import subprocess
    import sys

    submit(base, env.alice, "racy")
    d = _logs(env, "racy")
    (d / "worker-1.log").write_text("steady line\n" * 50)
    swapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "d = sys.argv[1]\n"
            "f, t = os.path.join(d, 'ps-0.log'), os.path.join(d, 'tmp')\n"
            "while True:\n"
            "    with open(t, 'w') as out: out.write('mine\\n')\n"
            "    os.replace(t, f)\n"
            "    os.symlink('/etc/hostname', t); os.replace(t, f)\n",
            str(d),
        ]
    )
    try:
        b = browser()
        b.login(env.alice)
        for _ in range(60):
            r = b.get("/dashboard/jobs/racy/logs/download")
            assert r.status_code == 200
            lines = r.text.splitlines()
            assert lines.count("worker-1 | steady line") == 50, lines[:5]
            assert all(line.startswith(("ps-0 | ", "worker-1 | ")) for line in lines)
            assert not any("hostname" in line for line in lines)
            page = b.get("/dashboard/jobs/racy/logs")
            assert page.status_code == 200
    finally:
        swapper.kill()
        swapper.wait()
