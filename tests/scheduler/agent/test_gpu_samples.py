"""Per-GPU utilisation and memory samples (scheduler.agent.resources.gpu_samples) through
the agent's NVML backend interface: NVML's answers replayed (RecordedBackend), and the
struct shapes nvidia-ml-py returns."""

from __future__ import annotations

import pynvml

from scheduler.agent.gpu_health import RecordedBackend
from scheduler.agent.resources import NVML_MEMORY_V2, gpu_samples, usage

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


def _sample(index, util, used, total, reserved=None, api="v1"):
    return {
        "index": index,
        "util_percent": util,
        "memory_used": used,
        "memory_total": total,
        "memory_reserved": reserved,
        "memory_api": api,
    }


def test_each_gpu_keeps_its_own_figures_and_refusals_stay_unknown():
    """These recordings answer only v1 (a driver before R510): its figures, said so."""
    samples = gpu_samples(RecordedBackend(RECORDING))
    assert samples == [
        _sample(0, 87, 20 * GIB, 80 * GIB),
        _sample(1, None, None, None, api=None),
        _sample(2, None, 0, 16 * GIB),
    ]


MIB = 1 << 20
V2 = f"nvmlDeviceGetMemoryInfo/{NVML_MEMORY_V2}"
# What the H200 of ../shared/gpu/ answered with no process on it: nvidia-smi showed the v2
# "used"; v1 counts the driver's 615 MiB reservation as used too (1846 vs 1231 MiB during
# the job there; here idle: 615 vs 0).
H200_TOTAL = 143771 * MIB
H200_BOTH = {
    "devices": [
        {
            "nvmlDeviceGetMemoryInfo": {
                "total": H200_TOTAL,
                "free": H200_TOTAL - 615 * MIB,
                "used": 615 * MIB,
            },
            V2: {
                "version": NVML_MEMORY_V2,
                "total": H200_TOTAL,
                "reserved": 615 * MIB,
                "free": H200_TOTAL - 615 * MIB,
                "used": 0,
            },
        },
        {  # an old driver: the versioned call does not exist
            "nvmlDeviceGetMemoryInfo": {"total": 80 * GIB, "free": 79 * GIB, "used": GIB},
            V2: {"nvml_error": "Function Not Found", "code": 13},
        },
    ]
}


def test_memory_used_is_nvidia_smis_v2_figure_with_v1_as_a_named_fallback():
    samples = gpu_samples(RecordedBackend(H200_BOTH))
    assert samples[0] == _sample(0, None, 0, H200_TOTAL, 615 * MIB, "v2")
    assert samples[1] == _sample(1, None, GIB, 80 * GIB, None, "v1")


def test_pynvml_v2_struct_is_read_by_attribute():
    """``nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2)`` returns a c_nvmlMemory_v2_t."""
    assert pynvml.nvmlMemory_v2 == NVML_MEMORY_V2

    class Real:
        def device_count(self):
            return 1

        def call(self, fn, index, *args):
            if fn == "nvmlDeviceGetUtilizationRates":
                u = pynvml.c_nvmlUtilization_t()
                u.gpu, u.memory = 99, 10
                return u
            assert args == (pynvml.nvmlMemory_v2,)
            m = pynvml.c_nvmlMemory_v2_t()
            m.total, m.reserved, m.free, m.used = 140 * GIB, 615 * MIB, 139 * GIB, 1231 * MIB
            return m

    assert gpu_samples(Real()) == [_sample(0, 99, 1231 * MIB, 140 * GIB, 615 * MIB, "v2")]


def test_pynvml_structs_are_read_by_attribute():
    """The real backend returns ctypes structs (c_nvmlUtilization_t, c_nvmlMemory_t); a
    backend whose call takes no version argument (an old nvidia-ml-py) falls back to v1."""

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

    assert gpu_samples(Real()) == [_sample(0, 55, 10 * GIB, 40 * GIB)]


def test_without_nvml_the_usage_report_has_no_gpu_figures():
    """No NVIDIA driver (fake dev-cluster GPUs): an empty list, never made-up numbers."""
    report = usage(None)
    assert report["gpus"] == []
    assert 0 <= report["cpu_percent"] <= 100 and report["memory_total"] > 0
    assert usage(RecordedBackend(RECORDING))["gpus"][0]["util_percent"] == 87
