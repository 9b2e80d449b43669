"""What this node has and uses: psutil for CPU and memory, nvidia-ml-py for GPUs (in a
Kubernetes pod: the node object, see :mod:`scheduler.agent.k8s_capacity`).

GPU detection is guarded: without the NVIDIA driver (``libnvidia-ml.so`` missing, as on
this build machine) or without the ``pynvml`` module, the node has 0 GPUs and usage reports
an empty GPU list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class Capacity:
    """Node capacity: cpu_m millicores, memory bytes, gpu devices, gpu_model name."""

    cpu_m: int
    memory: int
    gpu: int
    gpu_model: str | None


def _nvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    return pynvml


def detect_gpus() -> tuple[int, str | None]:
    """(count, model of GPU 0) via NVML; (0, None) without a driver."""
    nv = _nvml()
    if nv is None:
        return 0, None
    try:
        count = nv.nvmlDeviceGetCount()
        model = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(0)) if count else None
        if isinstance(model, bytes):
            model = model.decode()
        return count, model
    except Exception:  # noqa: BLE001
        return 0, None
    finally:
        nv.nvmlShutdown()


def detect_capacity(overrides: Any = None) -> Capacity:
    """Capacity from psutil / NVML, or in a Kubernetes pod (``PASTURE_K8S_NODE_NAME`` set)
    from the node object (:mod:`scheduler.agent.k8s_capacity`); fields of ``overrides``
    (settings ``resources``) that are not None win.

    Raises:
        NodeCapacityError: in a Kubernetes pod, the node object cannot be read.
    """
    from scheduler.agent.k8s_capacity import capacity_from_env  # imports this module

    node = capacity_from_env()
    if node is not None:
        cap = asdict(node)
    else:
        gpu, model = detect_gpus()
        cap = {
            "cpu_m": (psutil.cpu_count() or 1) * 1000,
            "memory": psutil.virtual_memory().total,
            "gpu": gpu,
            "gpu_model": model,
        }
    if overrides is not None:
        for src, dst in (
            ("cpu", "cpu_m"),
            ("memory", "memory"),
            ("gpu", "gpu"),
            ("gpu_model", "gpu_model"),
        ):
            value = getattr(overrides, src, None)
            if value is not None:
                cap[dst] = value
    return Capacity(**cap)


def usage() -> dict[str, Any]:
    """Current usage: ``{cpu_percent, memory_used, memory_total, load1, gpus: [{index,
    util_percent, memory_used, memory_total}]}`` (bytes, percent)."""
    vm = psutil.virtual_memory()
    out: dict[str, Any] = {
        "cpu_percent": psutil.cpu_percent(interval=None),
        "memory_used": vm.total - vm.available,
        "memory_total": vm.total,
        "load1": psutil.getloadavg()[0],
        "gpus": [],
    }
    nv = _nvml()
    if nv is not None:
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                util = nv.nvmlDeviceGetUtilizationRates(h)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                out["gpus"].append(
                    {
                        "index": i,
                        "util_percent": util.gpu,
                        "memory_used": mem.used,
                        "memory_total": mem.total,
                    }
                )
        except Exception:  # noqa: BLE001
            pass
        finally:
            nv.nvmlShutdown()
    return out
