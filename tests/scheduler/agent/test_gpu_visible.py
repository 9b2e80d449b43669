"""An agent started with ``CUDA_VISIBLE_DEVICES`` (an operator keeping GPUs of the node
for something else) takes those GPUs, in that order, as the node's GPU set: only they
are announced, reported and handed to tasks (issue 35, item 12). A node of 4 A100s is
replayed from a recording (tests/fixtures/nvml/a100_healthy.json); the tasks run for
real with the process executor over a real redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from scheduler.agent.gpu_health import RecordedBackend, VisibleBackend, visible_gpus
from scheduler.logpaths import job_log_dir
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent, place, until

NVML = Path(__file__).parents[2] / "fixtures" / "nvml"
UUID = "GPU-3c5b0d6e-8f1a-4b7e-9d2c-5a1e0f7b8c0{}"


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def test_an_inherited_cuda_visible_devices_is_the_nodes_gpu_set(
    store, tmp_path, redis_url, monkeypatch
):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"3,{UUID.format(1)}")
    agent = make_agent(
        store,
        tmp_path,
        redis_url,
        nvml_recording=str(NVML / "a100_healthy.json"),
        resources={"cpu": 4, "memory": "8Gi"},  # GPUs as NVML (and the variable) say
    )
    agent.register()
    agent.heartbeat()
    node = store.get_node("n1")
    assert node.gpu == 2  # of the 4 NVML lists
    assert [g["uuid"] for g in node.usage["gpu_health"]] == [UUID.format(3), UUID.format(1)]
    assert [g["index"] for g in node.usage["gpus"]] == [0, 1]
    place(store, "j", 'echo "gpus=$CUDA_VISIBLE_DEVICES"', replicas=2)
    agent.reconcile()

    def finished():
        agent.reconcile()
        return all(t.done for t in store.tasks("j"))

    until(finished)
    logs = job_log_dir(tmp_path / "share", "j", store.get_job("j").uid)
    seen = {}
    for t in store.tasks("j"):
        (line,) = [x for x in (logs / f"w-{t.index}.log").read_text().splitlines() if "gpus=" in x]
        seen[tuple(t.gpus)] = line
    # pasture's GPU 0 of this node is NVML's 3, its GPU 1 NVML's 1: never 0 or 2
    assert seen == {(0,): "gpus=3", (1,): "gpus=1"}


def test_the_gpu_set_is_checked_against_the_node():
    backend = RecordedBackend(NVML / "a100_healthy.json")
    assert visible_gpus("", backend) == []  # CUDA's meaning: no GPU
    assert visible_gpus(" 2, 0 ", backend) == [2, 0]
    with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES: '7' is not one of .* 4 GPU"):
        visible_gpus("0,7", backend)
    with pytest.raises(ValueError, match=r"'GPU-nope' is not one of"):
        visible_gpus("GPU-nope", backend)
    with pytest.raises(ValueError, match="named twice"):
        visible_gpus("1,1", backend)
    only = VisibleBackend(backend, [2])
    assert only.device_count() == 1
    assert only.call("nvmlDeviceGetUUID", 0) == UUID.format(2)


def test_a_node_of_mixed_gpus_has_no_single_model(tmp_path, store, redis_url):
    """detect_gpus reported GPU 0's model for the node: on an A100 + T4 node a job asking
    for the A100 could be handed the T4. Now each GPU's model is reported per index
    (``usage.gpu_health``) and the node has no model unless declared."""
    import json

    from scheduler.agent.resources import gpu_models, gpus_of

    data = json.loads((NVML / "a100_healthy.json").read_text())
    data["devices"][3]["nvmlDeviceGetName"] = "Tesla T4"
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(data))
    backend = RecordedBackend(mixed)
    a100 = data["devices"][0]["nvmlDeviceGetName"]
    assert gpu_models(backend) == {0: a100, 1: a100, 2: a100, 3: "Tesla T4"}
    assert gpus_of(backend) == (4, None)
    assert gpus_of(RecordedBackend(NVML / "a100_healthy.json")) == (4, a100)
    agent = make_agent(
        store, tmp_path, redis_url, nvml_recording=str(mixed), resources={"cpu": 1, "memory": "1Gi"}
    )
    agent.register()
    agent.heartbeat()
    node = store.get_node("n1")
    assert (node.gpu, node.gpu_model) == (4, None)
    assert [g["name"] for g in node.usage["gpu_health"]] == [a100, a100, a100, "Tesla T4"]
