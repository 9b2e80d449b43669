"""The CLI's client parses every answer with the API's own response models: against the
real API each call returns its model, and an answer missing a field (as after a rename)
is an error that names the field, not a blank in a table."""

from __future__ import annotations

import httpx
import pytest
from live import job_yaml

from scheduler.api import schemas
from scheduler.cli.client import ApiClient, ApiError, parse
from scheduler.cli.config import ClientConfig
from scheduler.loop import Loop


def test_every_call_returns_the_api_model(api):
    url, env = api
    client = ApiClient(ClientConfig(url, env.admin, None))
    job = client.submit(job_yaml("typed").encode())
    assert isinstance(job, schemas.JobSubmitOut) and job.name == "typed" and job.warnings == []
    Loop(env.store, env.settings).cycle()
    shown = client.job("typed")
    assert isinstance(shown, schemas.JobOut)
    assert {t.node for t in shown.tasks} <= {"node-1", "node-2"}
    assert sum(t.cpu_m for t in shown.tasks) == 2000  # 1 ps x 1 core + 2 workers x 500m
    page = client.jobs(limit=10)
    assert isinstance(page, schemas.JobPage) and [j.name for j in page.items] == ["typed"]
    assert isinstance(client.events("typed"), schemas.JobEventsOut)
    nodes = client.nodes()
    assert [type(n) for n in nodes] == [schemas.NodeOut] * 2
    assert client.node("node-1").events == []
    assert isinstance(client.status(), schemas.StatusOut)
    assert [v.name for v in client.vcs()] == ["default", "research"]
    assert client.whoami().role == "admin"
    dry = client.dry_run(job_yaml("typed2").encode())
    assert isinstance(dry, schemas.DryRunOut) and dry.jobs[0].name == "typed2"
    assert isinstance(client.stop("typed"), schemas.JobOut)


@pytest.mark.parametrize("missing", ["state", "vc", "priority"])
def test_an_answer_without_a_field_is_an_error_naming_it(api, missing):
    url, env = api
    httpx.post(
        f"{url}/api/v1/jobs",
        content=job_yaml("renamed"),
        headers={"Authorization": f"Bearer {env.admin}"},
    ).raise_for_status()
    data = httpx.get(
        f"{url}/api/v1/jobs/renamed", headers={"Authorization": f"Bearer {env.admin}"}
    ).json()
    assert parse(schemas.JobOut, data, "job renamed").name == "renamed"  # as it came
    data[f"{missing}_renamed"] = data.pop(missing)
    with pytest.raises(ApiError) as err:
        parse(schemas.JobOut, data, "job renamed")
    assert f"{missing}: Field required" in err.value.message
    assert "job renamed (JobOut)" in err.value.message


def test_a_state_outside_the_one_definition_is_an_error(api):
    url, env = api
    auth = {"Authorization": f"Bearer {env.admin}"}
    httpx.post(f"{url}/api/v1/jobs", content=job_yaml("odd"), headers=auth).raise_for_status()
    data = httpx.get(f"{url}/api/v1/jobs/odd", headers=auth).json()
    assert parse(schemas.JobOut, data, "job odd").state is schemas.JobState.SUBMITTED
    data["state"] = "paused"
    with pytest.raises(ApiError, match="state: Input should be 'submitted', 'queued'"):
        parse(schemas.JobOut, data, "job odd")
