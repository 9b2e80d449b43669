"""GPU health on AKS, where the agent pod has no NVML: the agent reads its node's
dcgm-exporter (a real HTTP server here serving the exporter's text format) and the one
health pipeline cordons the node through pasture (issue 35, item 10).

The sample lines follow dcgm-exporter's README output and ``etc/default-counters.csv``
(https://github.com/NVIDIA/dcgm-exporter): labels ``gpu``, ``UUID``, ``device``,
``modelName``, ``Hostname``; the XID field is the value of the last XID seen."""

from __future__ import annotations

import http.server
import threading

import pytest
import redis

from scheduler.agent.gpu_dcgm import DCGM_URL_ENV, DcgmBackend
from scheduler.agent.gpu_health import GpuHealthMonitor, probe
from scheduler.agent.resources import gpu_samples
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent

MODEL = "NVIDIA A100 80GB PCIe"


def exporter_text(gpus: dict[int, dict[str, float]]) -> str:
    """dcgm-exporter's /metrics for ``{index: {field: value}}`` (every default field, and
    the fields given)."""
    defaults = {
        "DCGM_FI_DEV_GPU_TEMP": 34,
        "DCGM_FI_DEV_POWER_USAGE": 61.5,
        "DCGM_FI_DEV_GPU_UTIL": 0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 0,
        "DCGM_FI_DEV_FB_FREE": 80_000,
        "DCGM_FI_DEV_FB_USED": 1,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    }
    lines = []
    extra = {f for values in gpus.values() for f in values if f not in defaults}
    for field in [*defaults, *sorted(extra)]:
        kind = "counter" if "REMAPPED_ROWS" in field else "gauge"
        lines += [f"# HELP {field} {field}.", f"# TYPE {field} {kind}"]
        for index, values in gpus.items():
            labels = (
                f'gpu="{index}",UUID="GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd",'
                f'device="nvidia{index}",modelName="{MODEL}",Hostname="aks-a100-0",'
                'DCGM_FI_DRIVER_VERSION="550.54.15"'
            )
            if field in values or field in defaults:
                lines.append(f"{field}{{{labels}}} {values.get(field, defaults.get(field))}")
    return "\n".join(lines) + "\n"


class Exporter:
    """A real HTTP server on 127.0.0.1 serving ``text`` at /metrics (503 when None)."""

    def __init__(self) -> None:
        self.text: str | None = exporter_text({0: {}, 1: {}})
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = outer.text
                if body is None:
                    self.send_error(503)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def exporter():
    e = Exporter()
    yield e
    e.close()


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def test_the_probe_reads_dcgm_like_nvml(exporter):
    backend = DcgmBackend(exporter.url, max_age_s=0)
    health = probe(backend)
    assert [(g.index, g.name, g.healthy) for g in health] == [(0, MODEL, True), (1, MODEL, True)]
    assert health[0].temperature_c == 34 and health[0].power_w == 61.5
    assert health[0].uuid.startswith("GPU-00000000") and health[0].remap_failure is False
    assert health[0].ecc_uncorrected is None  # not among the default counters: unknown
    exporter.text = exporter_text(
        {0: {"DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_FB_USED": 4096}, 1: {}}
    )
    (s0, s1) = gpu_samples(backend)
    assert s0["util_percent"] == 97 and s0["memory_used"] == 4096 * 2**20
    assert s0["memory_total"] == (80_000 + 4096) * 2**20 and s0["memory_api"] == "v1"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({1: {"DCGM_FI_DEV_XID_ERRORS": 79}}, "Xid 79"),
        ({1: {"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1}}, "row remapping failed"),
        ({1: {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2}}, "2 uncorrected ECC error(s)"),
        ({1: None}, "GPU is lost"),  # GPU 1 gone from the exporter: GPU down
    ],
)
def test_an_agent_without_nvml_cordons_its_node_from_dcgm(
    exporter, store, tmp_path, redis_url, monkeypatch, change, problem
):
    """The agent of an AKS node (``PASTURE_DCGM_URL`` set by the stack, no NVML) sees XID,
    memory errors and a GPU down through dcgm-exporter and its node is cordoned through
    pasture (on main the agent had no GPU view at all on AKS: nothing was ever cordoned)."""
    monkeypatch.setenv(DCGM_URL_ENV, exporter.url)
    agent = make_agent(store, tmp_path, redis_url)
    assert isinstance(agent.gpu_health.backend, DcgmBackend)
    agent.gpu_health.backend.max_age_s = 0
    agent.register()
    agent.heartbeat()
    node = store.get_node("n1")
    assert node.state == "ready", node.state_reason
    assert [g["healthy"] for g in node.usage["gpu_health"]] == [True, True]
    gpus = {0: {}, **{i: v for i, v in change.items() if v is not None}}
    gpus |= {1: {}} if 1 not in change else {}
    exporter.text = exporter_text({i: v for i, v in sorted(gpus.items())})
    agent.heartbeat()
    node = store.get_node("n1")
    assert node.state == "cordoned", node.state_reason
    assert node.state_reason.startswith("cordoned by the GPU health probe: GPU 1 unhealthy")
    assert problem in node.state_reason, node.state_reason
    assert [g["healthy"] for g in node.usage["gpu_health"]] == [True, False]


def test_an_exporter_that_does_not_answer_warns_and_cordons_nothing(exporter, store):
    backend = DcgmBackend(exporter.url, max_age_s=0)
    assert [g.healthy for g in probe(backend)] == [True, True]
    exporter.text = None
    health = probe(backend)
    assert [g.healthy for g in health] == [True, True]
    assert any("does not answer" in w for w in health[0].warnings), health[0].warnings
    monitor = GpuHealthMonitor(backend)
    assert monitor.check(store, "n1", monitor.report()) is False
