"""Automatic cordon end to end in process mode: a real redis-server, loop, API and agents
as processes; one agent is fed recorded NVML answers of an H100 whose GPU 1 fell off the
bus (tests/fixtures/nvml/h100_fallen_off_bus.json). The node cordons itself, a gang that
needs both nodes waits, the reason shows in the API's node view, its events and /metrics,
and only the operator's uncordon lets the gang run."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.devcluster import submit, wait_job
from tests.integration.test_process_mode import make_cluster  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NVML = Path(__file__).parents[1] / "fixtures" / "nvml"


def until(fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_unhealthy_gpu_cordons_its_node_until_an_operator_uncordons(make_cluster, tmp_path):  # noqa: F811
    cluster = make_cluster(nodes=2, api=True, gpus_per_node=2)
    store = cluster.store()
    api = httpx.Client(
        base_url=cluster.endpoint, headers={"Authorization": f"Bearer {cluster.token}"}
    )
    sick = cluster.nodes[1]
    # restart agent 1 replaying the recorded NVML answers of a GPU that fell off the bus
    cluster.kill("agent-1")
    path = Path(cluster.agent_configs[1])
    settings = yaml.safe_load(path.read_text())
    settings["nvml_recording"] = str(NVML / "h100_fallen_off_bus.json")
    path.write_text(yaml.safe_dump(settings))
    cluster.start_agent(1)
    cluster.save(tmp_path / "dev-0")  # so that the fixture's dev.down stops the new agent

    node = until(lambda: (n := store.get_node(sick)) and n.state == "cordoned" and n)
    assert node.state_reason.startswith("cordoned by the GPU health probe: GPU 1 unhealthy: Xid 79")
    assert store.get_node(cluster.nodes[0]).state == "ready"

    view = api.get(f"/api/v1/nodes/{sick}").json()
    assert view["state"] == "cordoned" and "Xid 79" in view["state_reason"]
    assert [e["state"] for e in view["events"]] == ["cordoned"]
    assert [g["healthy"] for g in view["usage"]["gpu_health"]] == [True, False]
    metrics = api.get("/metrics").text
    assert f'pasture_gpu_healthy{{gpu="1",node="{sick}"}} 0.0' in metrics
    assert f'pasture_node_cordoned{{node="{sick}",reason="gpu_health"}} 1.0' in metrics

    # a gang that needs both nodes' GPUs waits while the node is cordoned
    name = submit(
        store,
        {
            "name": "needs-both",
            "roles": {
                "w": {
                    "replicas": 2,
                    "command": "echo trained on $(hostname)",
                    "resources": {"cpu": 1, "memory": "128Mi", "gpu": 2},
                }
            },
        },
    )
    wait_job(store, name, states=("queued",))
    time.sleep(3)  # several loop cycles and heartbeats: still waiting, still cordoned
    assert store.get_job(name).state == "queued"
    assert store.get_node(sick).state == "cordoned"

    # only the operator's uncordon brings it back; the probe does not cordon it again for
    # the same problem
    r = api.post(f"/api/v1/nodes/{sick}/uncordon")
    assert r.status_code == 200 and r.json()["state"] == "ready"
    job = wait_job(store, name)
    assert job.state == "succeeded", store.events(name)
    assert {t.node for t in store.tasks(name)} == set(cluster.nodes)
    assert store.get_node(sick).state == "ready"
    events = store.node_events(sick)  # the probe's cordon once, then the operator's uncordon
    assert [(e["state"], e.get("action")) for e in events] == [
        ("cordoned", None),
        ("ready", "uncordon"),
    ]
