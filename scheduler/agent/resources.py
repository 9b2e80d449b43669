"""What this node has and uses: psutil for CPU and memory, nvidia-ml-py for GPUs (in a
Kubernetes pod: the node object, see :mod:`scheduler.k8s.capacity`).

GPU detection is guarded: without the NVIDIA driver (``libnvidia-ml.so`` missing, as on
this build machine) or without the ``pynvml`` module, the node has 0 GPUs and usage reports
an empty GPU list.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict
from typing import Any

import psutil

from scheduler.k8s.capacity import Capacity, capacity_from_env

log = logging.getLogger("pasture.agent.resources")


def detect_gpus() -> tuple[int, str | None]:
    """``(count, model)`` of this host's GPUs via NVML (:func:`gpus_of` over the driver):
    the model is the one every GPU has, None on a host of mixed GPUs; (0, None) without
    a driver. Each GPU's own model: :func:`gpu_models`."""
    from scheduler.agent.gpu_health import NvmlCallError, PynvmlBackend

    try:
        backend = PynvmlBackend()
    except (NvmlCallError, ImportError):
        return 0, None
    try:
        return gpus_of(backend)
    except Exception:  # noqa: BLE001 - a driver that fails here: no usable GPU
        return 0, None


def gpus_of(backend: Any) -> tuple[int, str | None]:
    """``(count, model)`` as an NVML backend answers them (an
    :class:`scheduler.agent.gpu_health.NvmlBackend`: the real one or a recording, e.g. the
    agent setting ``nvml_recording``). The model is the node's only when every GPU
    answers the same one (:func:`gpu_models`, per index); on a node of mixed GPUs (an
    H200 beside an L4) it is None, so that a job asking for a model is never handed
    another one of the node's GPUs (set ``resources.gpu_model`` to declare one anyway)."""
    models = gpu_models(backend)
    names = {m for m in models.values() if m}  # a GPU that does not answer: unknown
    if len(names) > 1:
        log.warning("GPUs of different models on this node: %s; no node GPU model", models)
    return len(models), (names.pop() if len(names) == 1 else None)


def gpu_models(backend: Any) -> dict[int, str | None]:
    """``{GPU index: model}`` as an NVML backend answers (a
    :class:`scheduler.agent.gpu_health.NvmlBackend`); a GPU that does not answer
    ``nvmlDeviceGetName`` is None. Every index, so a host with mixed GPUs is reported as
    it is."""
    from scheduler.agent.gpu_health import NvmlCallError

    out: dict[int, str | None] = {}
    for i in range(backend.device_count()):
        try:
            out[i] = backend.call("nvmlDeviceGetName", i) or None
        except NvmlCallError:
            out[i] = None
    return out


def detect_capacity(
    overrides: Any = None, nvml: Any = None, node: Capacity | None = None
) -> Capacity:
    """Capacity from psutil / NVML, or in a Kubernetes pod (``PASTURE_K8S_NODE_NAME`` set)
    from the node object (:mod:`scheduler.k8s.capacity`); fields of ``overrides``
    (settings ``resources``) that are not None win.

    Args:
        overrides: settings ``resources`` (``cpu``, ``memory``, ``gpu``, ``gpu_model``).
        nvml: the agent's NVML backend (its GPU health monitor's: the driver, or a recording
            replayed); the GPUs are counted through it, so that the node announces the GPUs
            it reports metrics for. None: NVML asked directly (:func:`detect_gpus`).
        node: what the platform's node object offers (the kubernetes executor's
            :meth:`~scheduler.agent.executor.Executor.node_capacity`); None: as above.

    Raises:
        NodeCapacityError: in a Kubernetes pod, the node object cannot be read.
    """
    node = node if node is not None else capacity_from_env()
    if node is not None:
        cap = asdict(node)
    else:
        gpu, model = gpus_of(nvml) if nvml is not None else detect_gpus()
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


def _field(value: Any, name: str) -> Any:
    """``value.name`` of a pynvml struct, or ``value[name]`` of a recorded answer."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


# nvml.h ``nvmlMemory_v2`` (NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24):
# the version argument that makes nvidia-ml-py call ``nvmlDeviceGetMemoryInfo_v2``
NVML_MEMORY_V2 = 0x02000028


def gpu_memory(backend: Any, index: int) -> dict[str, Any]:
    """GPU ``index``'s memory as nvidia-smi shows it: ``{memory_used, memory_total,
    memory_reserved (bytes; None when unknown), memory_api ("v2" | "v1")}``.

    ``nvmlDeviceGetMemoryInfo_v2`` first: its ``used`` is what nvidia-smi prints as used
    (the driver's own reservation is apart, in ``reserved``; on an idle H200 with driver 580
    that is 615 MiB, ../shared/gpu/). Drivers older than R510 and nvidia-ml-py builds without
    the versioned call answer NOT_SUPPORTED / FUNCTION_NOT_FOUND (or reject the argument):
    then ``nvmlDeviceGetMemoryInfo`` (v1), whose ``used`` also counts that reservation, so
    it reads higher than nvidia-smi by the reserved amount, and ``memory_api`` says "v1".

    Raises:
        NvmlCallError: neither call answers (a lost GPU...).
    """
    from scheduler.agent.gpu_health import NvmlCallError

    try:
        mem, api = backend.call("nvmlDeviceGetMemoryInfo", index, NVML_MEMORY_V2), "v2"
    except (NvmlCallError, TypeError):
        mem, api = backend.call("nvmlDeviceGetMemoryInfo", index), "v1"
    used, total = _field(mem, "used"), _field(mem, "total")
    reserved = _field(mem, "reserved") if api == "v2" else None
    return {
        "memory_used": None if used is None else int(used),
        "memory_total": None if total is None else int(total),
        "memory_reserved": None if reserved is None else int(reserved),
        "memory_api": api,
    }


def gpu_samples(backend: Any) -> list[dict[str, Any]]:
    """One sample per GPU the NVML backend lists (an
    :class:`scheduler.agent.gpu_health.NvmlBackend`: the real ``PynvmlBackend`` or a
    recording): ``[{index, util_percent (0-100, the share of the last sample period a kernel
    ran), memory_used, memory_total, memory_reserved (bytes), memory_api}]`` from
    ``nvmlDeviceGetUtilizationRates`` and :func:`gpu_memory` (memory used as nvidia-smi
    shows it). A call NVML refuses for one GPU (``NOT_SUPPORTED``, a lost GPU...) leaves
    that GPU's fields None: nothing is guessed, the other GPUs keep theirs."""
    from scheduler.agent.gpu_health import NvmlCallError

    out = []
    for i in range(backend.device_count()):
        sample: dict[str, Any] = {
            "index": i,
            "util_percent": None,
            "memory_used": None,
            "memory_total": None,
            "memory_reserved": None,
            "memory_api": None,
        }
        with contextlib.suppress(NvmlCallError):
            util = _field(backend.call("nvmlDeviceGetUtilizationRates", i), "gpu")
            sample["util_percent"] = None if util is None else int(util)
        with contextlib.suppress(NvmlCallError):
            sample.update(gpu_memory(backend, i))
        out.append(sample)
    return out


def usage(gpus: Any = None) -> dict[str, Any]:
    """Current usage: ``{cpu_percent, memory_used, memory_total, load1, gpus: [{index,
    util_percent, memory_used, memory_total, memory_reserved, memory_api}]}`` (bytes,
    percent; see :func:`gpu_samples`).

    Args:
        gpus: the agent's NVML backend (its GPU health monitor's); None (no NVIDIA driver)
            leaves ``gpus`` empty, so GPUs that are only declared (the dev cluster's fake
            GPUs) show as unknown, never as numbers. See :func:`gpu_samples`.
    """
    vm = psutil.virtual_memory()
    return {
        "cpu_percent": psutil.cpu_percent(interval=None),
        "memory_used": vm.total - vm.available,
        "memory_total": vm.total,
        "load1": psutil.getloadavg()[0],
        "gpus": gpu_samples(gpus) if gpus is not None else [],
    }
