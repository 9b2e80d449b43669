"""The dashboard over real HTTP: login/session cookie, visibility, CSRF, pages, log tail."""

from __future__ import annotations

import re

import httpx
from live import job_yaml

from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.logpaths import job_log_dir
from scheduler.store import NodeRecord
from scheduler.store.snapshot import commit_payload, take_snapshot


def submit(base: str, token: str, name: str, vc: str = "default") -> None:
    r = httpx.post(
        f"{base}/api/v1/jobs",
        content=job_yaml(name, vc),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
    )
    assert r.status_code == 201, r.text


def test_pages_redirect_to_login_without_session(browser):
    b = browser()
    for path in ("/dashboard/", "/dashboard/nodes", "/dashboard/jobs", "/dashboard/vcs"):
        r = b.get(path)
        assert r.status_code == 303
        assert r.headers["location"].startswith("/dashboard/login?next=")


def test_login_sets_secure_httponly_samesite_session(browser, env):
    b = browser()
    r = b.login(env.admin)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/"
    cookie = next(h for h in b.set_cookie_headers if h.startswith("pasture_session="))
    flags = cookie.lower()
    assert "secure" in flags and "httponly" in flags and "samesite=strict" in flags
    page = b.get("/dashboard/")
    assert page.status_code == 200
    assert 'id="node-count">2<' in page.text
    # the session id is not stored in Redis as such, only its digest
    sid = b.cookies["pasture_session"]
    assert not [k for k in env.store.r.keys("*") if sid in k]


def test_bad_token_and_agent_token_are_refused(browser, env):
    b = browser()
    assert b.login("not-a-token").status_code == 401
    assert b.login(env.agent).status_code == 401
    assert "pasture_session" not in b.cookies


def test_login_without_csrf_is_refused(browser, env):
    b = browser()
    b.get("/dashboard/login")
    r = b.post("/dashboard/login", {"token": env.admin})
    assert r.status_code == 403
    assert "pasture_session" not in b.cookies


def test_revoked_token_ends_the_session(browser, env):
    b = browser()
    b.login(env.alice)
    assert b.get("/dashboard/jobs").status_code == 200
    env.tokens.revoke("alice")
    assert b.get("/dashboard/jobs").status_code == 303


def test_user_sees_only_own_vc_jobs(browser, base, env):
    submit(base, env.alice, "alice-job", "default")
    submit(base, env.bob, "bob-job", "research")
    alice = browser()
    alice.login(env.alice)
    page = alice.get("/dashboard/jobs").text
    assert "alice-job" in page and "bob-job" not in page
    r = alice.get("/dashboard/jobs/bob-job")
    assert r.status_code == 404 and "bob-job" in r.text  # same answer as an unknown job
    assert alice.get("/dashboard/jobs/bob-job/log").status_code == 404
    admin = browser()
    admin.login(env.admin)
    page = admin.get("/dashboard/jobs").text
    assert "alice-job" in page and "bob-job" in page


def test_job_filters_and_pending_reason_in_words(browser, base, env):
    submit(base, env.alice, "a1")
    submit(base, env.admin, "a2")
    env.store.set_job_fields(
        "a1",
        state="queued",
        pending_reason={"kind": "insufficient-resources", "message": "needs 4 GPUs; 0 free"},
    )
    b = browser()
    b.login(env.admin)
    page = b.get("/dashboard/jobs", params={"state": "queued"}).text
    assert "a1" in page and 'data-job="a2"' not in page
    assert "Waiting for free resources: needs 4 GPUs; 0 free" in page
    page = b.get("/dashboard/jobs", params={"user": "alice"}).text
    assert 'data-job="a1"' in page and 'data-job="a2"' not in page
    assert b.get("/dashboard/jobs", params={"state": "bogus"}).status_code == 400


def test_stop_needs_csrf_then_stops(browser, base, env):
    submit(base, env.alice, "s1")
    b = browser()
    b.login(env.alice)
    r = b.post("/dashboard/jobs/s1/stop", {})
    assert r.status_code == 403
    assert not env.store.get_job("s1").stop_requested
    csrf = b.csrf("/dashboard/jobs/s1")
    # without confirmed=yes (a browser without the dialog): a confirmation page, no stop
    r = b.post("/dashboard/jobs/s1/stop", {"csrf_token": csrf})
    assert r.status_code == 200 and 'name="confirmed" value="yes"' in r.text
    assert "Stop job s1?" in r.text
    assert "Stop job s1? Its tasks get SIGTERM" in b.get("/dashboard/jobs/s1").text
    assert not env.store.get_job("s1").stop_requested
    r = b.post("/dashboard/jobs/s1/stop", {"csrf_token": csrf, "confirmed": "yes"})
    assert r.status_code == 303
    assert env.store.get_job("s1").stop_requested


def test_node_actions_admin_only_with_csrf(browser, env):
    user = browser()
    user.login(env.alice)
    assert "cordon" not in user.get("/dashboard/nodes").text.split("<tbody")[1]
    r = user.post("/dashboard/nodes/node-1/cordon", {"csrf_token": user.csrf()})
    assert r.status_code == 403
    assert env.store.get_node("node-1").state == "ready"
    admin = browser()
    admin.login(env.admin)
    assert admin.post("/dashboard/nodes/node-1/cordon", {}).status_code == 403
    r = admin.post("/dashboard/nodes/node-1/drain", {"csrf_token": admin.csrf()})
    assert r.status_code == 200 and "running tasks are stopped and requeued" in r.text
    assert env.store.get_node("node-1").state == "ready"  # asked, not done
    r = admin.post(
        "/dashboard/nodes/node-1/cordon", {"csrf_token": admin.csrf(), "confirmed": "yes"}
    )
    assert r.status_code == 303
    assert env.store.get_node("node-1").state == "cordoned"
    r = admin.post("/dashboard/nodes/node-1/uncordon", {"csrf_token": admin.csrf()})
    assert env.store.get_node("node-1").state == "ready"
    r = admin.post("/dashboard/nodes/nope/drain", {"csrf_token": admin.csrf(), "confirmed": "yes"})
    assert r.status_code == 404


def test_log_tail_polls_from_offset(browser, base, env):
    submit(base, env.alice, "logjob")
    logs = job_log_dir(env.share, "logjob", env.store.get_job("logjob").uid)
    logs.mkdir(parents=True)
    (logs / "ps-0.log").write_text("line 1\n")
    b = browser()
    b.login(env.alice)
    first = b.get("/dashboard/jobs/logjob/log", params={"role": "ps", "index": 0}).json()
    assert first["text"] == "line 1\n" and first["offset"] == 7
    with (logs / "ps-0.log").open("a") as f:
        f.write("line 2\n")
    nxt = b.get("/dashboard/jobs/logjob/log", params={"role": "ps", "index": 0, "offset": 7}).json()
    assert nxt["text"] == "line 2\n" and nxt["offset"] == 14
    assert 'option value="ps/0"' in b.get("/dashboard/jobs/logjob").text


def test_logout_needs_csrf_and_ends_session(browser, env):
    b = browser()
    b.login(env.admin)
    sid = b.cookies["pasture_session"]
    assert b.post("/dashboard/logout", {}).status_code == 403
    r = b.post("/dashboard/logout", {"csrf_token": b.csrf()})
    assert r.status_code == 303
    b.cookies["pasture_session"] = sid  # a kept cookie no longer works
    assert b.get("/dashboard/").status_code == 303


def test_overview_shows_usage_chart_and_vc_bars(browser, env):
    env.store.register_node(
        NodeRecord(name="gpu-1", address="127.0.0.3", cpu_m=8000, memory=1 << 34, gpu=4)
    )
    usage = {"cpu_percent": 50.0, "memory_used": 1, "memory_total": 4, "gpus": []}
    env.store.heartbeat("node-1", usage)
    b = browser()
    b.login(env.admin)
    page = b.get("/dashboard/").text
    assert 'id="node-count">3<' in page
    assert 'id="gpu-total">4<' in page and 'id="gpu-free">4<' in page
    assert 'data-src="/dashboard/usage"' in page and "uPlot.iife.min.js" in page
    assert "used 0 of 4 guaranteed" in page  # default VC's CPU bar (4 cores guaranteed)
    assert b.get("/dashboard/vcs").status_code == 200
    # the chart's data: the cluster's per-minute means, and one node's samples
    cluster = b.get("/dashboard/usage").json()
    assert cluster["cpu"][-1] == 50.0 and len(cluster["t"]) == len(cluster["gpu"]) == 1
    assert cluster["gpu"] == [None]  # no GPU figure: a gap, not 0
    node = b.get("/dashboard/usage", params={"node": "node-1"}).json()
    assert node["cpu"] == [50.0] and node["window_s"] == 3600
    assert b.get("/dashboard/usage", params={"node": "nope"}).status_code == 404
    assert b.get("/dashboard/usage", params={"window_s": 10**6}).status_code == 422
    assert browser().get("/dashboard/usage").status_code == 401


def test_overview_totals_are_the_status_services(browser, base, env):
    """The overview prints the figures GET /api/v1/status gives (one computation)."""
    env.store.register_node(
        NodeRecord(name="gpu-2", address="127.0.0.5", cpu_m=4000, memory=1 << 33, gpu=2)
    )
    status = httpx.get(
        f"{base}/api/v1/status", headers={"Authorization": f"Bearer {env.admin}"}
    ).json()
    b = browser()
    b.login(env.admin)
    page = b.get("/dashboard/").text
    assert f'id="gpu-total">{status["capacity"]["gpu"]}<' in page
    assert f'id="node-count">{sum(status["nodes"].values())}<' in page


def test_node_page_per_gpu_table(browser, env):
    env.store.register_node(
        NodeRecord(name="gpu-1", address="127.0.0.3", cpu_m=8000, memory=1 << 34, gpu=2)
    )
    gpu0 = {"index": 0, "util_percent": 73, "memory_used": 3 << 30, "memory_total": 16 << 30}
    env.store.heartbeat("gpu-1", {"cpu_percent": 5.0, "gpus": [gpu0]})
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/nodes/gpu-1").text
    row0 = page.split('data-gpu="0"')[1].split("</tr>")[0]
    row1 = page.split('data-gpu="1"')[1].split("</tr>")[0]
    assert "73%" in row0 and "3Gi / 16Gi" in row0
    assert "unknown" in row1 and "%" not in row1  # declared, never measured
    assert "73% unknown" in b.get("/dashboard/nodes").text


def test_open_redirect_is_not_followed(browser, env):
    b = browser()
    page = b.get("/dashboard/login", params={"next": "https://evil.example/"})
    csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    r = b.post(
        "/dashboard/login",
        {"token": env.admin, "csrf_token": csrf, "next": "//evil.example/"},
    )
    assert r.headers["location"] == "/dashboard/"


def test_static_assets(base):
    assert httpx.get(f"{base}/dashboard/static/dashboard.css").status_code == 200
    assert httpx.get(f"{base}/dashboard/static/job.js").status_code == 200
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "charts.js", "dashboard.js"):
        assert httpx.get(f"{base}/dashboard/static/{name}").status_code == 200, name
    assert httpx.get(f"{base}/dashboard/static/../app.py").status_code == 404


def test_job_page_shows_failed_tasks_diagnosis(browser, base, env):
    """A task the agent reported failed with a diagnosis (the store's report path) shows its
    class, summary, hint and whether a retry can help; a running task shows none."""
    submit(base, env.alice, "diag")
    env.store.transition("diag", "queued", "queued")
    snap, ctx = take_snapshot(env.store)
    roles = {r.name: r for r in next(p for p in snap.pending if p.name == "diag").roles}
    places = (
        TaskPlacement("ps", 0, "node-1", roles["ps"].resources),
        TaskPlacement("worker", 0, "node-2", roles["worker"].resources),
        TaskPlacement("worker", 1, "node-2", roles["worker"].resources),
    )
    ok, detail = env.store.commit(
        ctx.version, commit_payload(Decision(binds=(Bind("diag", places),)), ctx)
    )
    assert ok, detail
    oom = {
        "kind": "cuda_oom",
        "summary": "CUDA out of memory: tried to allocate 2.00 GiB",
        "retry": False,
        "hint": "Lower the batch size or ask for a bigger GPU.",
    }
    nccl = {"kind": "nccl_error", "summary": "NCCL timeout", "retry": True, "hint": ""}
    assert env.store.report_task("diag", "worker-0", 1, "node-2", "running")
    assert env.store.report_task(
        "diag", "worker-0", 1, "node-2", "failed", 1, "exited with code 1", diagnosis=oom
    )
    assert env.store.report_task(
        "diag", "worker-1", 1, "node-2", "failed", 1, "exited with code 1", diagnosis=nccl
    )
    assert env.store.report_task("diag", "ps-0", 1, "node-1", "running")
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/diag")
    assert page.status_code == 200
    assert "<th>diagnosis</th>" in page.text
    rows = {  # the task table's rows by "role-index"
        f"{m.group(1)}-{m.group(2)}": m.group(0)
        for m in re.finditer(r"<tr><td>(\w+)</td><td>(\d+)</td>.*?</tr>", page.text, re.S)
    }
    w0, w1, ps0 = rows["worker-0"], rows["worker-1"], rows["ps-0"]
    assert "cuda_oom" in w0 and "CUDA out of memory: tried to allocate 2.00 GiB" in w0
    assert "retry will not help" in w0 and "Lower the batch size" in w0
    assert "nccl_error" in w1 and "NCCL timeout" in w1 and "retry can help" in w1
    assert "retry" not in ps0 and 'class="diagnosis"' not in ps0


def test_job_page_spec_and_resubmit(browser, base, env):
    """The job page shows the stored spec; resubmit goes through the job service's submit
    as NAME-r2, then NAME-r3; another VC's job cannot be resubmitted (404)."""
    submit(base, env.alice, "rs")
    b = browser()
    b.login(env.alice)
    page = b.get("/dashboard/jobs/rs").text
    assert 'id="spec-yaml"' in page and "name: rs" in page
    csrf = b.csrf("/dashboard/jobs/rs")
    r = b.post("/dashboard/jobs/rs/resubmit", {"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/jobs/rs-r2.default"
    again = b.post("/dashboard/jobs/rs/resubmit", {"csrf_token": csrf})
    assert again.headers["location"] == "/dashboard/jobs/rs-r3.default"
    old, new = env.store.get_job("rs"), env.store.get_job("rs-r2")
    assert new.user == "alice" and new.vc == old.vc
    assert new.spec["roles"] == old.spec["roles"]
    assert b.post("/dashboard/jobs/rs/resubmit", {}).status_code == 403
    bob = browser()
    bob.login(env.bob)
    r = bob.post("/dashboard/jobs/rs/resubmit", {"csrf_token": bob.csrf()})
    assert r.status_code == 404 and env.store.get_job("rs-r4") is None
