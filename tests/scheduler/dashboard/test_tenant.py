"""The dashboard shows a user nothing the API would hide: with another VC's job placed on
the cluster's nodes by the real scheduling loop, no dashboard page a user of VC
``default`` can open names it (real uvicorn, real redis-server, real loop cycles)."""

from __future__ import annotations

import httpx
import pytest
from live import job_yaml

from scheduler.jobref import job_key
from scheduler.logpaths import job_log_dir
from scheduler.loop import Loop

SECRET = "bob-secret-training"
MINE = "alice-visible-job"


def submit(base: str, token: str, name: str, vc: str) -> None:
    r = httpx.post(
        f"{base}/api/v1/jobs",
        content=job_yaml(name, vc),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text


@pytest.fixture()
def placed(base, env):
    """alice's job (vc default) and bob's (vc research), both placed on nodes."""
    submit(base, env.alice, MINE, "default")
    submit(base, env.bob, SECRET, "research")
    loop = Loop(env.store, env.settings)
    for _ in range(3):
        loop.cycle()
    on = {a.job: a.node for a in env.store.ledger().values()}
    assert {MINE, job_key("research", SECRET)} <= set(on), on
    for node in ("node-1", "node-2"):  # a usage sample each, for the charts
        env.store.heartbeat(node, {"cpu_percent": 25.0, "memory_used": 1, "memory_total": 4})
    return {MINE: on[MINE], SECRET: on[job_key("research", SECRET)]}  # by name, as users say


def test_other_vcs_job_names_appear_on_no_dashboard_page(browser, base, env, placed):
    b = browser()
    assert b.login(env.alice).status_code == 303
    pages = [
        "/dashboard/",
        "/dashboard/nodes",
        "/dashboard/nodes/node-1",
        "/dashboard/nodes/node-2",
        "/dashboard/jobs",
        "/dashboard/jobs?vc=research",
        "/dashboard/jobs?user=bob",
        "/dashboard/jobs?state=scheduled",
        "/dashboard/jobs?user=bob&vc=research",
        "/dashboard/jobs?vc=research&state=scheduled",
        "/dashboard/jobs?page=2",
        "/dashboard/vcs",
        f"/dashboard/jobs/{MINE}",
        "/dashboard/usage",
        "/dashboard/usage?node=node-1",
        "/dashboard/usage?node=node-2",
    ]
    seen = {}
    for page in pages:
        r = b.get(page)
        assert r.status_code == 200, (page, r.status_code)
        seen[page] = r.text
        assert SECRET not in r.text, f"{page} shows another VC's job name"
    # not vacuous: alice's own job is named, on the page of the node it runs on
    assert MINE in seen[f"/dashboard/nodes/{placed[MINE]}"]
    assert MINE in seen["/dashboard/jobs"]
    assert placed[MINE] in seen["/dashboard/jobs"]  # its placement, from the job service
    # the VC filter offers alice's VCs only (the VC service's names for her token)
    assert '<option value="default"' in seen["/dashboard/jobs"]
    assert '<option value="research"' not in seen["/dashboard/jobs"]
    # the charts: samples only, the same for every caller
    for node in ("node-1", "node-2"):
        assert b.get(f"/dashboard/usage?node={node}").json()["cpu"] == [25.0]
    # bob's tasks are counted on their node without a name
    assert "other virtual clusters" in seen[f"/dashboard/nodes/{placed[SECRET]}"]
    # bob's job itself is "not found", exactly like a job that does not exist
    for path in (f"/dashboard/jobs/{SECRET}", "/dashboard/jobs/no-such-job"):
        assert b.get(path).status_code == 404
    for path in (f"/dashboard/jobs/{SECRET}/log", "/dashboard/jobs/no-such-job/log"):
        assert b.get(path).status_code == 404


def test_the_api_hides_the_same_job(base, env, placed):
    h = {"Authorization": f"Bearer {env.alice}"}
    assert httpx.get(f"{base}/api/v1/jobs/{SECRET}", headers=h).status_code == 404
    listed = httpx.get(f"{base}/api/v1/jobs", headers=h).json()["items"]
    assert [j["name"] for j in listed] == [MINE]


def test_admin_sees_every_job_on_the_node_page(browser, env, placed):
    b = browser()
    assert b.login(env.admin).status_code == 303
    page = b.get(f"/dashboard/nodes/{placed[SECRET]}").text
    assert SECRET in page
    assert "other virtual clusters" not in page


def test_bad_vc_filter_is_a_400_page(browser, env):
    b = browser()
    b.login(env.alice)
    r = b.get("/dashboard/jobs", params={"vc": "../x"})
    assert r.status_code == 400


def test_log_poll_reads_at_most_64_kib_of_a_400_mb_log(browser, base, env):
    """The live tail polls from offset 0 of a 400 MB file: one poll answers 64 KiB and the
    offset to go on from, never the file."""
    submit(base, env.alice, "biglog", "default")
    d = job_log_dir(env.share, "biglog", env.store.get_job("biglog").uid)
    d.mkdir(parents=True)
    size = 400 << 20
    with (d / "ps-0.log").open("wb") as f:
        f.truncate(size - 5)
        f.seek(size - 5)
        f.write(b"\nend\n")
    b = browser()
    b.login(env.alice)
    r = b.get("/dashboard/jobs/biglog/log", params={"offset": 0})
    assert r.status_code == 200
    assert r.json()["offset"] == 64 * 1024
    assert len(r.json()["text"]) == 64 * 1024
    r = b.get("/dashboard/jobs/biglog/log", params={"offset": -1})
    assert r.json()["offset"] == size
    assert r.json()["text"].endswith("\nend\n")
