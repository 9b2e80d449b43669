"""`pasture dev up` and GPUs: by default the first node detects the host's GPUs through
NVML (here the answers a real H200 gave, replayed: tests/fixtures/nvml/h200_recorded.json),
as an agent on a GPU host does; ``--gpus N`` pins a count. Real processes (redis, loop,
agents), seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from scheduler import dev

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "nvml" / "h200_recorded.json"


def _nodes(cluster: dev.DevCluster) -> dict[str, tuple[int, str | None]]:
    return {n.name: (n.gpu, n.gpu_model) for n in cluster.store().list_nodes()}


def test_node_split_detected_on_the_first_node_or_pinned_on_each():
    assert dev.node_gpus(3, None, detected=8) == [8, 0, 0]
    assert dev.node_gpus(2, 2, detected=8) == [2, 2]
    assert dev.node_gpus(2, 0, detected=8) == [0, 0]
    assert dev.host_gpus(H200) == (1, "NVIDIA H200")


def test_dev_up_announces_the_gpus_nvml_reports_by_default(tmp_path):
    cluster = dev.up(nodes=2, api=False, directory=tmp_path, nvml_recording=H200)
    try:
        assert cluster.gpus == [1, 0]
        agent0 = yaml.safe_load(Path(cluster.agent_configs[0]).read_text())
        assert agent0["resources"]["gpu"] is None  # detected by the agent, not written
        assert _nodes(cluster) == {"dev-node-0": (1, "NVIDIA H200"), "dev-node-1": (0, None)}
        # the per-GPU health comes with the agent's first usage report, a heartbeat or two
        # after registration (seconds on a loaded machine)
        deadline = time.monotonic() + 60
        node = cluster.store().get_node("dev-node-0")
        while "gpu_health" not in node.usage and time.monotonic() < deadline:
            time.sleep(0.5)
            node = cluster.store().get_node("dev-node-0")
        assert [g["name"] for g in node.usage["gpu_health"]] == ["NVIDIA H200"]
        settings = yaml.safe_load(Path(cluster.scheduler_config).read_text())
        assert settings["virtual_clusters"][0]["guarantee"]["gpu"] == 1
    finally:
        assert dev.down(tmp_path)


def test_a_pinned_count_wins_over_detection(tmp_path):
    cluster = dev.up(nodes=1, gpus_per_node=3, api=False, directory=tmp_path, nvml_recording=H200)
    try:
        assert cluster.gpus == [3]
        # the model is still the detected one; the count is the pinned one
        assert _nodes(cluster) == {"dev-node-0": (3, "NVIDIA H200")}
    finally:
        assert dev.down(tmp_path)


def test_cli_gpus_flag_pins_fake_gpus_on_a_host_without_nvidia_driver(tmp_path):
    if dev.host_gpus() != (0, None):
        pytest.skip("this host has NVIDIA GPUs: the fake-GPU model is not used")
    env = {**os.environ, "PASTURE_DEV_DIR": str(tmp_path / "dev")}
    pasture = [sys.executable, "-m", "scheduler.cli"]
    up = subprocess.run(
        [*pasture, "dev", "up", "--nodes", "1", "--gpus", "2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert json.loads(up.stdout)["gpus"] == [2]
        state = dev.read_state(tmp_path / "dev")
        assert state is not None
        assert _nodes(dev.DevCluster.from_dict(state)) == {"dev-node-0": (2, "dev-fake")}
    finally:
        subprocess.run([*pasture, "dev", "down"], env=env, capture_output=True, timeout=120)
    bad = subprocess.run(
        [*pasture, "dev", "up", "--gpus", "-1"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--gpus" in bad.stdout + bad.stderr
