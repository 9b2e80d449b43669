"""The agent's Kubernetes capacity source against recorded AKS node objects
(tests/scheduler/agent/data/aks-nodes, see its README), read over real HTTP the way the
agent reads them in a pod (bearer token, GET /api/v1/nodes/<name>)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from scheduler.agent.resources import detect_capacity
from scheduler.k8s import capacity as k8s_capacity
from scheduler.k8s.capacity import (
    Capacity,
    NodeCapacityError,
    expects_gpus,
    fetch_node,
    node_capacity,
    read_capacity,
)
from scheduler.settings import NodeResourceOverrides

NODES = Path(__file__).parent / "data" / "aks-nodes"
KI = 1024
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InBhc3R1cmUifQ.agent-token"


def node(file: str) -> dict:
    return json.loads((NODES / file).read_text())


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        # 1 A100 on a Spot node without GPU feature discovery: the pool's model label.
        ("nc24ads-a100-v4-spot.json", Capacity(23870, 225332072 * KI, 1, "A100")),
        # GPU feature discovery's product label wins over the pool label.
        ("nc96ads-a100-v4-gfd.json", Capacity(95770, 917391360 * KI, 4, "NVIDIA-A100-PCIe-80GB")),
        ("nc4as-t4-v3.json", Capacity(3920, 23536640 * KI, 1, "T4")),
        # No nvidia.com/gpu advertised yet: 0 GPUs and no model.
        ("nc4as-t4-v3-plugin-starting.json", Capacity(3920, 23536640 * KI, 0, None)),
        ("d4s-v5-system.json", Capacity(3920, 12171683 * KI, 0, None)),
    ],
)
def test_capacity_is_the_node_allocatable(file, expected):
    assert node_capacity(node(file)) == expected


def test_gpu_nodes_are_known_by_their_labels_before_the_plugin_runs():
    assert expects_gpus(node("nc4as-t4-v3-plugin-starting.json"))
    assert expects_gpus(node("nc96ads-a100-v4-gfd.json"))
    assert not expects_gpus(node("d4s-v5-system.json"))


def test_a_node_without_allocatable_is_an_error_naming_it():
    bad = node("d4s-v5-system.json")
    del bad["status"]["allocatable"]["memory"]
    with pytest.raises(NodeCapacityError, match="node aks-system-12345678-vmss000000: expected"):
        node_capacity(bad)


def test_waits_for_the_device_plugin_then_counts_the_gpus():
    """A GPU node read before its device plugin registered is read again until it has."""
    readings = [
        node("nc4as-t4-v3-plugin-starting.json"),
        node("nc4as-t4-v3-plugin-starting.json"),
        node("nc4as-t4-v3.json"),
    ]
    now = [0.0]
    slept = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    cap = read_capacity(
        "aks-t4-77312045-vmss000001",
        fetch=lambda name: readings.pop(0),
        sleep=sleep,
        clock=lambda: now[0],
        interval_s=5,
    )
    assert cap.gpu == 1 and cap.gpu_model == "T4"
    assert slept == [5, 5] and readings == []


def test_gives_up_waiting_with_the_last_reading():
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    cap = read_capacity(
        "aks-t4-77312045-vmss000001",
        fetch=lambda name: node("nc4as-t4-v3-plugin-starting.json"),
        sleep=sleep,
        clock=lambda: now[0],
        wait_s=30,
        interval_s=5,
    )
    assert cap.gpu == 0 and now[0] == 30


def test_a_cpu_node_is_not_waited_for():
    calls = []
    read_capacity(
        "aks-system-12345678-vmss000000",
        fetch=lambda name: calls.append(name) or node("d4s-v5-system.json"),
        sleep=lambda s: pytest.fail("slept for a node without GPUs"),
    )
    assert calls == ["aks-system-12345678-vmss000000"]


@pytest.fixture()
def api_server():
    """An HTTP endpoint answering GET /api/v1/nodes/<name> from the recorded objects, as
    the API server does: 401 without the bearer token, 403 for a forbidden node, 404 for
    an unknown one. Yields (url, requests seen)."""
    objects = {
        n["metadata"]["name"]: n for n in map(node, sorted(p.name for p in NODES.glob("*.json")))
    }
    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append((self.path, self.headers.get("Authorization")))
            name = self.path.removeprefix("/api/v1/nodes/")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, body = 401, {"kind": "Status", "reason": "Unauthorized"}
            elif name == "forbidden":
                status, body = 403, {"kind": "Status", "reason": "Forbidden"}
            elif name in objects:
                status, body = 200, objects[name]
            else:
                status, body = 404, {"kind": "Status", "reason": "NotFound"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture()
def token_file(tmp_path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def test_fetch_reads_the_node_with_the_service_account_token(api_server, token_file):
    url, seen = api_server
    got = fetch_node("aks-a100-38541297-vmss000000", server=url, token_file=token_file)
    assert got == node("nc24ads-a100-v4-spot.json")
    assert seen == [("/api/v1/nodes/aks-a100-38541297-vmss000000", f"Bearer {TOKEN}")]


def test_fetch_errors_say_what_is_missing(api_server, token_file, tmp_path):
    url, _ = api_server
    with pytest.raises(NodeCapacityError, match="needs 'get' on 'nodes'"):
        fetch_node("forbidden", server=url, token_file=token_file)
    with pytest.raises(NodeCapacityError, match="answered 404"):
        fetch_node("aks-gone-1", server=url, token_file=token_file)
    with pytest.raises(NodeCapacityError, match="cannot read the service account token"):
        fetch_node("aks-gone-1", server=url, token_file=tmp_path / "absent")


def test_fetch_outside_a_cluster_says_so(monkeypatch, token_file):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(NodeCapacityError, match="not running in a Kubernetes pod"):
        fetch_node("n", token_file=token_file)


def test_agent_in_a_pod_registers_the_node_object_not_its_container(
    api_server, token_file, monkeypatch
):
    """detect_capacity (what Agent.register calls) reads the node object when the aks
    DaemonSet set PASTURE_K8S_NODE_NAME; settings overrides still win."""
    url, seen = api_server
    monkeypatch.setattr(
        k8s_capacity,
        "fetch_node",
        lambda name: fetch_node(name, server=url, token_file=token_file),
    )
    monkeypatch.setenv(k8s_capacity.NODE_ENV, "aks-a100x4-20931847-vmss000002")
    cap = detect_capacity(NodeResourceOverrides())
    assert cap == Capacity(95770, 917391360 * KI, 4, "NVIDIA-A100-PCIe-80GB")
    assert cap == detect_capacity(None)
    overridden = detect_capacity(NodeResourceOverrides(gpu=2, gpu_model="A100"))
    assert (overridden.cpu_m, overridden.gpu, overridden.gpu_model) == (95770, 2, "A100")
    assert len(seen) == 3
    monkeypatch.delenv(k8s_capacity.NODE_ENV)
    assert detect_capacity(None).gpu == 0  # psutil / NVML again (no GPU here)
    assert len(seen) == 3


def test_nodes_gone_are_the_ones_the_api_server_no_longer_knows(api_server, token_file):
    """The loop's probe (scheduler/rules/health.py): a 404 is a node the cloud removed; any
    other refusal is an error, so that the loop assumes nothing is gone."""
    url, seen = api_server
    names = ["aks-a100-38541297-vmss000000", "aks-gone-1"]
    assert k8s_capacity.nodes_gone(names, server=url, token_file=token_file) == {"aks-gone-1"}
    assert [p for p, _ in seen] == [f"/api/v1/nodes/{n}" for n in names]
    with pytest.raises(NodeCapacityError, match="needs 'get' on 'nodes'"):
        k8s_capacity.nodes_gone(["forbidden"], server=url, token_file=token_file)


def test_the_gone_probe_only_runs_in_a_pod():
    assert k8s_capacity.gone_probe({}) is None


def test_the_capacity_watch_says_when_allocatable_changed():
    """An agent re-registers when the node's allocatable changes (a GPU advertised late or
    gone); it reads the node at most once per interval."""
    before = node("nc24ads-a100-v4-spot.json")
    after = json.loads(json.dumps(before))
    after["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # the device plugin lost it
    answers, now = [before, before, after], [0.0]
    watch = k8s_capacity.CapacityWatch(
        "n", interval_s=60, fetch=lambda name: answers.pop(0), clock=lambda: now[0]
    )
    assert watch.changed() is False  # the first reading only remembers
    now[0] = 30.0
    assert watch.changed() is False and len(answers) == 2  # not read again within 60 s
    now[0] = 61.0
    assert watch.changed() is False  # same allocatable
    now[0] = 122.0
    assert watch.changed() is True


def test_a_failed_capacity_reading_is_no_change():
    def fail(name):
        raise NodeCapacityError("node n: GET /api/v1/nodes: timed out")

    assert k8s_capacity.CapacityWatch("n", fetch=fail).changed() is False
    assert k8s_capacity.capacity_watch_from_env({}) is None
