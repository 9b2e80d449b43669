"""Through the real HTTP API: a Volcano job whose container gives no command (it runs the
image's ENTRYPOINT) is refused at submit on a cluster that has no container or kubernetes
executor node, naming why; and OpenPAI v1 JSON with ``//`` comments is read."""

from __future__ import annotations

import json

VOLCANO = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "ep-api"},
    "spec": {
        "tasks": [
            {
                "name": "worker",
                "replicas": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "example.org/train:1",
                                "args": ["--epochs", "3"],
                                "resources": {"requests": {"cpu": 1, "memory": "1Gi"}},
                            }
                        ]
                    }
                },
            }
        ]
    },
}

OPENPAI_V1 = """{
  // OpenPAI's own examples carry comments like this one
  "jobName": "commented_v1",
  "image": "debian:12",
  /* a block comment */
  "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 512,
                 "gpuNumber": 0, "command": "echo hi"}]
}"""


def test_entrypoint_role_without_a_node_that_can_run_it_is_refused_at_submit(api, http):
    _, env = api  # the seeded nodes carry no executor label
    r = http(env.admin).post("/api/v1/jobs", json=VOLCANO)
    assert r.status_code == 422, r.text
    msg = r.json()["message"]
    assert "role worker runs its image's ENTRYPOINT" in msg
    assert "container or kubernetes executor" in msg and "give the role a command" in msg
    assert env.store.get_job("ep-api") is None


def test_openpai_v1_json_with_comments_is_accepted(api, http):
    _, env = api
    r = http(env.admin).post(
        "/api/v1/jobs", content=OPENPAI_V1, headers={"content-type": "application/json"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "commented-v1"
    assert r.json()["spec"]["roles"]["main"]["command"] == "echo hi"
    bad = OPENPAI_V1.replace('"echo hi"}]', '"echo hi"}')
    r = http(env.admin).post(
        "/api/v1/jobs", content=bad, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert "malformed JSON at line 8" in json.dumps(r.json())
