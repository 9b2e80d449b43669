"""Per-GPU utilisation and memory samples (scheduler.agent.resources.gpu_samples) through
the agent's NVML backend interface: NVML's answers replayed (RecordedBackend), and the
struct shapes nvidia-ml-py returns."""

from __future__ import annotations

import pynvml

from scheduler.agent.gpu_health import RecordedBackend
from scheduler.agent.resources import gpu_samples, usage

GIB = 1 << 30
RECORDING = {
    "devices": [
        {  # a busy H100: utilisation and memory answered
            "nvmlDeviceGetUtilizationRates": {"gpu": 87, "memory": 40},
            "nvmlDeviceGetMemoryInfo": {"total": 80 * GIB, "free": 60 * GIB, "used": 20 * GIB},
        },
        {  # fallen off the bus: every call fails
            "nvmlDeviceGetUtilizationRates": {"nvml_error": "GPU is lost", "code": 15},
            "nvmlDeviceGetMemoryInfo": {"nvml_error": "GPU is lost", "code": 15},
        },
        {  # utilisation not supported (a missing key answers NOT_SUPPORTED)
            "nvmlDeviceGetMemoryInfo": {"total": 16 * GIB, "free": 16 * GIB, "used": 0},
        },
    ]
}


def test_each_gpu_keeps_its_own_figures_and_refusals_stay_unknown():
    samples = gpu_samples(RecordedBackend(RECORDING))
    assert samples == [
        {"index": 0, "util_percent": 87, "memory_used": 20 * GIB, "memory_total": 80 * GIB},
        {"index": 1, "util_percent": None, "memory_used": None, "memory_total": None},
        {"index": 2, "util_percent": None, "memory_used": 0, "memory_total": 16 * GIB},
    ]


def test_pynvml_structs_are_read_by_attribute():
    """The real backend returns ctypes structs (c_nvmlUtilization_t, c_nvmlMemory_t)."""

    class Real:
        def device_count(self):
            return 1

        def call(self, fn, index):
            if fn == "nvmlDeviceGetUtilizationRates":
                u = pynvml.c_nvmlUtilization_t()
                u.gpu, u.memory = 55, 10
                return u
            m = pynvml.c_nvmlMemory_t()
            m.total, m.free, m.used = 40 * GIB, 30 * GIB, 10 * GIB
            return m

    assert gpu_samples(Real()) == [
        {"index": 0, "util_percent": 55, "memory_used": 10 * GIB, "memory_total": 40 * GIB}
    ]


def test_without_nvml_the_usage_report_has_no_gpu_figures():
    """No NVIDIA driver (fake dev-cluster GPUs): an empty list, never made-up numbers."""
    report = usage(None)
    assert report["gpus"] == []
    assert 0 <= report["cpu_percent"] <= 100 and report["memory_total"] > 0
    assert usage(RecordedBackend(RECORDING))["gpus"][0]["util_percent"] == 87
