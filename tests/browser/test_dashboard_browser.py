"""The dashboard in a real browser (Chromium) against a real process-mode cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def login(page, cluster, token: str) -> None:
    page.goto(f"{cluster.endpoint}/dashboard/")
    assert "/dashboard/login" in page.url
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{cluster.endpoint}/dashboard/")


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def test_admin_sees_nodes_follows_log_and_stops_job(page, cluster):
    cluster.submit(cluster.alice, "ticker")
    cluster.wait_state("ticker", "running")
    login(page, cluster, cluster.admin)

    # the session cookie is Secure + HttpOnly + SameSite and still works on http://127.0.0.1
    cookie = next(c for c in page.context.cookies() if c["name"] == "pasture_session")
    assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.text_content("#node-count") == "2"
    # the uPlot chart is drawn from /dashboard/usage (heartbeats' samples)
    expect(page.locator("#usage-chart .uplot canvas")).to_have_count(1)
    screenshot(page, "overview.png")

    page.click("nav >> text=Nodes")
    assert page.locator("#nodes tbody tr[data-node]").count() == 2
    assert page.locator("#nodes button.cordon").count() == 2  # admins get the buttons

    page.click("nav >> text=Jobs")
    row = page.locator('#jobs tr[data-job="ticker"]')
    assert row.locator(".state").text_content() == "running"
    row.locator("a").click()
    page.wait_for_url("**/dashboard/jobs/ticker.default")  # links name the job's VC
    assert page.text_content("#job-state") == "running"
    assert page.locator("#tasks tbody tr").count() == 1
    # log lines arrive while we look: the tail grows without a reload
    expect(page.locator("#log")).to_contain_text("tick 2")
    seen = page.text_content("#log").count("tick")
    expect(page.locator("#log")).to_contain_text(f"tick {seen + 3}")
    screenshot(page, "job.png")

    page.click("#stop-job")
    page.click("#confirm-ok")  # the confirmation dialog (tests/browser/test_dashboard_new.py)
    expect(page.locator("#job-state")).to_have_text("stopped", timeout=30000)
    assert cluster.job("ticker")["state"] == "stopped"
    assert page.locator("#stop-job").count() == 0
    screenshot(page, "job-stopped.png")


def test_user_cannot_see_another_vcs_job(page, cluster):
    cluster.submit(cluster.bob, "bobs-secret", vc="research")
    cluster.submit(cluster.alice, "alices-own")
    login(page, cluster, cluster.alice)
    page.goto(f"{cluster.endpoint}/dashboard/jobs")
    assert page.locator('#jobs tr[data-job="alices-own"]').count() == 1
    assert page.locator('#jobs tr[data-job="bobs-secret"]').count() == 0
    resp = page.goto(f"{cluster.endpoint}/dashboard/jobs/bobs-secret")
    assert resp.status == 404
    assert "not found" in page.text_content("#error")
    # users get no node buttons
    page.goto(f"{cluster.endpoint}/dashboard/nodes")
    assert page.locator("#nodes button").count() == 0


def test_form_post_without_csrf_token_is_refused(page, cluster):
    cluster.submit(cluster.alice, "csrf-target")
    cluster.wait_state("csrf-target", "running")
    login(page, cluster, cluster.alice)
    page.goto(f"{cluster.endpoint}/dashboard/jobs/csrf-target")
    # a forged form: the same post without the hidden synchronizer token
    page.evaluate("document.querySelector('form.stop input[name=csrf_token]').remove()")
    page.evaluate("document.querySelector('form.stop input[name=confirmed]').value = 'yes'")
    with page.expect_navigation() as nav:
        page.click("#stop-job")
    assert nav.value.status == 403
    assert "CSRF" in page.text_content("#error")
    # and a post from script with the session cookie but a wrong token
    resp = page.request.post(
        f"{cluster.endpoint}/dashboard/jobs/csrf-target/stop", form={"csrf_token": "forged"}
    )
    assert resp.status == 403
    time.sleep(1)
    assert cluster.job("csrf-target")["state"] == "running"
    assert not cluster.job("csrf-target").get("stop_requested")
    # the real form still works
    page.goto(f"{cluster.endpoint}/dashboard/jobs/csrf-target")
    page.click("#stop-job")
    page.click("#confirm-ok")
    cluster.wait_state("csrf-target", "stopped")
