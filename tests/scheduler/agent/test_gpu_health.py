"""GPU health from recorded NVML answers (tests/fixtures/nvml/README.md), and the agent's
automatic cordon against a real redis-server."""

from pathlib import Path

import pynvml
import pytest
import redis

from scheduler.agent import gpu_health as gh
from scheduler.agent.gpu_health import (
    GpuHealthMonitor,
    NvmlCallError,
    PynvmlBackend,
    RecordedBackend,
    RecordingBackend,
    probe,
    unhealthy_reason,
)
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent

NVML = Path(__file__).parents[2] / "fixtures" / "nvml"


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def test_our_nvml_constants_are_pynvml_s():
    assert gh.NVML_ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST
    assert gh.NVML_ERROR_RESET_REQUIRED == pynvml.NVML_ERROR_RESET_REQUIRED
    assert gh.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert gh.NVML_ERROR_UNKNOWN == pynvml.NVML_ERROR_UNKNOWN
    assert gh.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    assert gh.NVML_MEMORY_ERROR_TYPE_UNCORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert gh.NVML_VOLATILE_ECC == pynvml.NVML_VOLATILE_ECC
    bits = {
        "gpu_idle": pynvml.nvmlClocksThrottleReasonGpuIdle,
        "sw_power_cap": pynvml.nvmlClocksThrottleReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksThrottleReasonHwSlowdown,
        "sw_thermal_slowdown": pynvml.nvmlClocksThrottleReasonSwThermalSlowdown,
        "hw_thermal_slowdown": pynvml.nvmlClocksThrottleReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
    }
    mine = {v: k for k, v in gh.THROTTLE_REASONS.items()}
    assert all(mine[name] == bit for name, bit in bits.items())


def test_fixture_error_codes_are_what_pynvml_raises():
    """Every recorded error is a real nvmlReturn_t whose string pynvml gives."""
    for f in NVML.glob("*.json"):
        for dev in RecordedBackend(f).devices:
            for v in dev.values():
                if isinstance(v, dict) and "nvml_error" in v:  # else a struct's fields
                    err = pynvml.NVMLError(v["code"])
                    assert str(err) == v["nvml_error"], f.name


def test_no_driver_here_means_no_backend_and_an_empty_report():
    with pytest.raises(NvmlCallError) as exc:
        PynvmlBackend()
    assert exc.value.code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert GpuHealthMonitor().report() == []


def test_healthy_a100s():
    gpus = probe(RecordedBackend(NVML / "a100_healthy.json"))
    assert len(gpus) == 4 and all(g.healthy for g in gpus)
    g = gpus[0]
    assert (g.name, g.temperature_c, g.power_w, g.power_limit_w) == (
        "NVIDIA A100-SXM4-80GB",
        33,
        61.245,
        400.0,
    )
    assert g.throttle == ["gpu_idle"] and g.warnings == [] and g.ecc_uncorrected == 0


def test_gpu_fallen_off_the_bus():
    gpus = probe(RecordedBackend(NVML / "h100_fallen_off_bus.json"))
    assert gpus[0].healthy
    lost = gpus[1]
    assert not lost.healthy and lost.xids == [79]
    assert "Xid 79 (GPU has fallen off the bus)" in lost.problems
    assert lost.problems == [
        "Xid 79 (GPU has fallen off the bus)",
        "NVML: GPU is lost (fallen off the bus) (NVML error 15)",
    ]
    assert lost.temperature_c is None and lost.name == ""


def test_uncorrectable_ecc_and_pending_remap():
    gpus = probe(RecordedBackend(NVML / "a100_uncorrectable_ecc.json"))
    bad = gpus[1]
    assert gpus[0].healthy and not bad.healthy
    assert bad.ecc_uncorrected == 2 and bad.ecc_corrected == 17
    assert bad.remapped_pending is True and bad.remap_failure is False
    assert "Xid 95 (uncontained ECC error)" in bad.problems
    assert "Xid 63 (ECC page retirement / row remapping event)" in bad.warnings
    assert "row remapping pending (GPU reset needed)" in bad.problems


def test_too_hot_is_unhealthy_power_cap_is_a_warning():
    (hot,) = probe(RecordedBackend(NVML / "h100_thermal.json"))
    assert not hot.healthy
    assert hot.problems == ["temperature 88 C at or above the slowdown threshold 87 C"]
    assert "sw_thermal_slowdown" in hot.throttle and "hw_thermal_slowdown" in hot.throttle
    (busy,) = probe(RecordedBackend(NVML / "a100_throttled_warning.json"))
    assert busy.healthy and busy.xids == [13]
    assert busy.warnings == ["throttled: hw_power_brake_slowdown"]


def test_xids_are_events_kept_across_probes():
    backend = RecordedBackend(NVML / "h100_fallen_off_bus.json")
    seen: dict = {}
    probe(backend, seen)
    again = probe(backend, seen)  # the event is delivered once; the XID stays known
    assert again[1].xids == [79] and backend.xid_events() == []


def test_recording_round_trip():
    rec = RecordingBackend(RecordedBackend(NVML / "a100_uncorrectable_ecc.json"))
    first = [g.to_dict() for g in probe(rec)]
    replayed = [g.to_dict() for g in probe(RecordedBackend(rec.recording()))]
    assert replayed == first


def test_reason_names_every_unhealthy_gpu():
    report = [g.to_dict() for g in probe(RecordedBackend(NVML / "h100_fallen_off_bus.json"))]
    reason = unhealthy_reason(report)
    assert reason.startswith("GPU 1 unhealthy: Xid 79 (GPU has fallen off the bus)")
    assert "GPU 0" not in reason
    assert unhealthy_reason([{"index": 0, "healthy": True}]) == ""


def test_agent_cordons_once_and_an_uncordon_sticks(store, tmp_path, redis_url):
    agent = make_agent(
        store, tmp_path, redis_url, nvml_recording=str(NVML / "h100_fallen_off_bus.json")
    )
    agent.register()
    agent.heartbeat()
    node = store.get_node("n1")
    assert node.state == "cordoned"
    assert node.state_reason.startswith("cordoned by the GPU health probe: GPU 1 unhealthy")
    assert [g["healthy"] for g in node.usage["gpu_health"]] == [True, False]
    (event,) = store.node_events("n1")
    assert event["state"] == "cordoned" and "Xid 79" in event["reason"]
    # the operator uncordons (e.g. after a reset the probe cannot see yet): it sticks
    store.set_node_state("n1", "ready", "uncordon by admin")
    agent.heartbeat()
    agent.heartbeat()
    assert store.get_node("n1").state == "ready" and len(store.node_events("n1")) == 1


def test_healthy_node_stays_ready(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url, nvml_recording=str(NVML / "a100_healthy.json"))
    agent.register()
    agent.heartbeat()
    node = store.get_node("n1")
    assert node.state == "ready" and store.node_events("n1") == []
    assert len(node.usage["gpu_health"]) == 4
