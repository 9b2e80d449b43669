"""The dashboard's Schedules page (issue 37): a tenant sees the scheduled jobs of its VCs,
with their runs linked, and never another VC's (real uvicorn, redis-server, loop)."""

from __future__ import annotations

from pathlib import Path

import httpx

from scheduler.loop import Loop

TEMPLATE = "  jobTemplate:\n    spec:\n"
CRON = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "volcano" / "cronjob.yaml"


def _submit(base: str, token: str, name: str, vc: str, schedule: str) -> None:
    body = (
        CRON.read_text()
        .replace("volcano-cronjob-example", name)
        .replace('"*/5 * * * *"', f'"{schedule}"')
        .replace(
            "  jobTemplate:\n    spec:\n", f"  jobTemplate:\n    spec:\n      queue: {vc}\n", 1
        )
    )
    r = httpx.post(
        f"{base}/api/v1/schedules",
        content=body.encode(),
        headers={"Authorization": f"Bearer {token}", "content-type": "application/yaml"},
    )
    assert r.status_code == 201, r.text


def test_the_schedules_page_shows_a_tenant_its_own_schedules_only(browser, base, env):
    _submit(base, env.alice, "alice-hourly", "default", "@hourly")
    _submit(base, env.bob, "bob-secret-cron", "research", "*/1 * * * *")
    b = browser()
    assert b.login(env.alice).status_code == 303
    page = b.get("/dashboard/schedules")
    assert page.status_code == 200
    assert "alice-hourly" in page.text and "@hourly" in page.text
    assert "bob-secret-cron" not in page.text
    assert 'href="/dashboard/schedules"' in b.get("/dashboard/").text
    # a run started by the loop is linked to its job page (bob's own view)
    store = env.store
    store.r.hset(store.k("schedule", "bob-secret-cron"), "last", "0")  # due now
    Loop(store, env.settings).cycle()
    bob = browser()
    assert bob.login(env.bob).status_code == 303
    text = bob.get("/dashboard/schedules").text
    assert 'href="/dashboard/jobs/bob-secret-cron-' in text
