"""Issue 25 item 5 (submit half): a NUL or other control character in a command or an
environment value is a 422 naming the field, in every format, and nothing is stored."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    ("body", "ctype", "loc"),
    [
        (
            {"name": "nul-cmd", "roles": {"a": {"command": "echo a\u0000b"}}},
            "application/json",
            "roles.a.command",
        ),
        (
            {"name": "nul-env", "env": {"K": "v\u0000"}, "roles": {"a": {"command": "t"}}},
            "application/json",
            "env",
        ),
        (
            {
                "jobName": "nul-v1",
                "taskRoles": [{"name": "w", "command": "python\u0007 train.py"}],
            },
            "application/json",
            "taskRoles[0].command",
        ),
    ],
)
def test_control_characters_are_422_naming_the_field(api, http, body, ctype, loc):
    _, env = api
    client = http(env.admin)
    r = client.post(
        "/api/v1/jobs", content=json.dumps(body).encode(), headers={"content-type": ctype}
    )
    assert r.status_code == 422, r.text
    assert any(".".join(d["loc"]) == loc for d in r.json()["detail"]), r.text
    name = body.get("name") or body.get("jobName")
    assert client.get(f"/api/v1/jobs/{name}").status_code == 404
