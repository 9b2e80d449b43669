"""The dashboard's submit form (paste, dry run, then submit) and the all-logs page
(every task, search, download) in Chromium, against a real process-mode cluster whose
agents run the job's tasks as processes. Screenshots: submit-dry-run.png,
all-logs-search.png (artifacts/screenshots/)."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard_browser import login, screenshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TWO_TASKS = """\
name: {name}
roles:
  worker:
    replicas: 2
    resources: {{cpu: 100m, memory: 64Mi}}
    command: >-
      python3 -u -c "import os; i = os.environ.get('PASTURE_TASK_INDEX', '?');
      [print('step', s, 'loss', 1.0 / (s + 1), 'from', i, flush=True) for s in range(5)]"
"""


def _stored(cluster, name: str) -> bool:
    r = httpx.get(
        f"{cluster.endpoint}/api/v1/jobs/{name}",
        headers={"Authorization": f"Bearer {cluster.admin}"},
        timeout=30,
    )
    return r.status_code == 200


def test_submit_from_the_browser_after_a_dry_run(page, cluster):
    login(page, cluster, cluster.alice)
    page.click("a[href='/dashboard/submit']")
    expect(page.locator("#spec")).to_be_visible()
    expect(page.locator("#submit-spec")).to_have_count(0)
    page.fill("#spec", TWO_TASKS.format(name="browser-sub"))
    page.click("#check-spec")
    expect(page.locator("#dry-run")).to_contain_text("Would start now")
    expect(page.locator("#dry-run table.placements tbody tr")).to_have_count(2)
    screenshot(page, "submit-dry-run.png")
    assert not _stored(cluster, "browser-sub")  # the check stored nothing
    page.click("#submit-spec")
    page.wait_for_url(f"{cluster.endpoint}/dashboard/jobs/browser-sub.default")
    job = cluster.wait_state("browser-sub", "succeeded")
    assert job["user"] == "alice"

    # an invalid spec names its field, and offers no Submit
    page.goto(f"{cluster.endpoint}/dashboard/submit")
    page.fill("#spec", TWO_TASKS.format(name="bad").replace("replicas: 2", "replicas: 0"))
    page.click("#check-spec")
    expect(page.locator("#submit-error")).to_contain_text("roles.worker.replicas")
    expect(page.locator("#submit-spec")).to_have_count(0)


def test_all_logs_with_search_and_download(page, cluster):
    name = "browser-logs"
    login(page, cluster, cluster.alice)
    page.goto(f"{cluster.endpoint}/dashboard/submit")
    page.fill("#spec", TWO_TASKS.format(name=name))
    page.click("#check-spec")
    page.click("#submit-spec")
    cluster.wait_state(name, "succeeded")
    page.goto(f"{cluster.endpoint}/dashboard/jobs/{name}")
    page.click("#all-logs-link")
    expect(page.locator("section.task-log")).to_have_count(2)
    for index in (0, 1):
        expect(page.locator(f"section[data-task='worker-{index}'] pre.text")).to_contain_text(
            f"step 4 loss 0.2 from {index}"
        )
    page.fill("#log-q", "step 2")
    page.click("#log-search button[type=submit]")
    expect(page.locator("#match-count")).to_have_text("2 matching lines")
    expect(page.locator("mark")).to_have_count(2)
    screenshot(page, "all-logs-search.png")
    with page.expect_download() as info:
        page.click("#download-all")
    text = info.value.path().read_text()
    lines = text.splitlines()
    # <job>-<uid>-<attempt>.log: distinct across submissions of the name (issue 34 item 8)
    assert re.fullmatch(rf"{name}-[0-9a-f]{{8}}-1\.log", info.value.suggested_filename)
    for index in (0, 1):
        mine = [line for line in lines if line.startswith(f"worker-{index} | step")]
        assert len(mine) == 5, text
