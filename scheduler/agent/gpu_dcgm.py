"""GPU health and usage from NVIDIA's dcgm-exporter instead of NVML (Kubernetes nodes).

On AKS the agent pod has no NVIDIA driver library (no NVML): the node's GPUs are seen by
the ``dcgm-exporter`` DaemonSet (stacks/aks/monitoring.py), which serves them as
Prometheus text on ``:9400/metrics`` (host port, so the agent, on the host network, reads
its own node's exporter at ``http://<node address>:9400/metrics``; the stack sets
:data:`DCGM_URL_ENV`). :class:`DcgmBackend` answers the same NVML calls as
:class:`~scheduler.agent.gpu_health.PynvmlBackend` from one scrape, so the agent's one
health pipeline (:func:`~scheduler.agent.gpu_health.probe` ->
:class:`~scheduler.agent.gpu_health.GpuHealthMonitor`: the node cordoned through pasture,
``pasture_gpu_healthy`` exported) runs unchanged on AKS.

Series read (names and labels from dcgm-exporter's ``etc/default-counters.csv`` and its
README, https://github.com/NVIDIA/dcgm-exporter; one series per GPU, label ``gpu`` = the
GPU's index, ``UUID``, ``modelName``):

==================================================  =====================================
NVML call answered                                  DCGM field (unit)
==================================================  =====================================
``nvmlDeviceGetName`` / ``nvmlDeviceGetUUID``       labels ``modelName`` / ``UUID``
``nvmlDeviceGetTemperature``                        ``DCGM_FI_DEV_GPU_TEMP`` (C)
``nvmlDeviceGetTemperatureThreshold`` (slowdown)    ``DCGM_FI_DEV_SLOWDOWN_TEMP`` (C)
``nvmlDeviceGetPowerUsage``                         ``DCGM_FI_DEV_POWER_USAGE`` (W -> mW)
``nvmlDeviceGetEnforcedPowerLimit``                 ``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (W)
``nvmlDeviceGetTotalEccErrors`` (volatile)          ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` /
                                                    ``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``
``nvmlDeviceGetRemappedRows``                       ``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS``,
                                                    ``..._UNCORRECTABLE_REMAPPED_ROWS``,
                                                    ``DCGM_FI_DEV_ROW_REMAP_PENDING``,
                                                    ``DCGM_FI_DEV_ROW_REMAP_FAILURE``
``nvmlDeviceGetCurrentClocksThrottleReasons``       ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``
``nvmlDeviceGetUtilizationRates``                   ``DCGM_FI_DEV_GPU_UTIL``,
                                                    ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%)
``nvmlDeviceGetMemoryInfo`` (v1)                    ``DCGM_FI_DEV_FB_USED`` + ``_FB_FREE``
                                                    (+ ``_FB_RESERVED``) (MiB -> bytes)
XID events                                          ``DCGM_FI_DEV_XID_ERRORS`` (the last
                                                    XID: each new value is an event)
==================================================  =====================================

A field the exporter does not serve (the default counters leave ECC and the slowdown
temperature out) answers ``NVML_ERROR_NOT_SUPPORTED``, as NVML does for a GPU without it.
A GPU that was in an earlier scrape and is missing from a later one answers
``NVML_ERROR_GPU_IS_LOST`` (GPU down: the node is cordoned). An exporter that does not
answer leaves every field unknown with a warning (``NVML_ERROR_TIMEOUT``), never a cordon:
the alert ``PastureDcgmExporterDown`` says so instead.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from scheduler.agent.gpu_health import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_TEMPERATURE_GPU,
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    NvmlBackend,
    NvmlCallError,
    RecordedBackend,
)

DCGM_URL_ENV = "PASTURE_DCGM_URL"
"""Environment variable with the node's dcgm-exporter metrics URL (set by the aks stack)."""
NVML_ERROR_TIMEOUT = 10
MIB = 2**20
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"

_SIMPLE: dict[tuple[str, ...], tuple[str, float]] = {
    ("nvmlDeviceGetTemperature", str(NVML_TEMPERATURE_GPU)): ("DCGM_FI_DEV_GPU_TEMP", 1),
    ("nvmlDeviceGetTemperatureThreshold", str(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)): (
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        1,
    ),
    ("nvmlDeviceGetPowerUsage",): ("DCGM_FI_DEV_POWER_USAGE", 1000),
    ("nvmlDeviceGetEnforcedPowerLimit",): ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 1000),
    ("nvmlDeviceGetTotalEccErrors", str(NVML_MEMORY_ERROR_TYPE_UNCORRECTED), "0"): (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        1,
    ),
    ("nvmlDeviceGetTotalEccErrors", str(NVML_MEMORY_ERROR_TYPE_CORRECTED), "0"): (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        1,
    ),
    ("nvmlDeviceGetCurrentClocksThrottleReasons",): ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1),
}
"""NVML call (name and arguments) -> (DCGM field, factor to NVML's unit)."""


def _http_get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - operator's URL
        body: bytes = resp.read(16 * MIB)
    return body.decode("utf-8", "replace")


class DcgmBackend:
    """An :class:`~scheduler.agent.gpu_health.NvmlBackend` answered from dcgm-exporter's
    metrics (see the module docstring for the mapping).

    Args:
        url: the exporter's metrics URL, e.g. ``http://10.224.0.5:9400/metrics``.
        fetch: ``fetch(url, timeout_s) -> text`` (tests: a served string); default HTTP GET.
        max_age_s: a scrape is reused for this long (one probe and one usage sample of a
            heartbeat read one scrape).
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        url: str,
        fetch: Callable[[str, float], str] | None = None,
        timeout_s: float = 2.0,
        max_age_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._fetch = fetch or _http_get
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._clock = clock
        self._at: float | None = None
        self._gpus: dict[int, dict[str, Any]] = {}  # index -> {field: value, labels}
        self._known = 0  # GPUs seen in any scrape (a GPU never silently disappears)
        self._error: NvmlCallError | None = None
        self._last_xid: dict[int, int] = {}
        self._xids: list[tuple[int, int]] = []

    def _refresh(self) -> None:
        now = self._clock()
        if self._at is not None and now - self._at < self.max_age_s:
            return
        self._at = now
        try:
            text = self._fetch(self.url, self.timeout_s)
            gpus: dict[int, dict[str, Any]] = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if not sample.name.startswith("DCGM_FI_"):
                        continue
                    index = int(sample.labels.get("gpu", "-1"))
                    if index < 0:
                        continue
                    gpu = gpus.setdefault(index, {"_labels": dict(sample.labels)})
                    gpu[sample.name] = sample.value
        except (OSError, ValueError) as exc:  # unreachable, or not Prometheus text
            self._error = NvmlCallError(
                NVML_ERROR_TIMEOUT, f"dcgm-exporter at {self.url} does not answer: {exc}"
            )
            return
        self._error = None
        self._gpus = gpus
        self._known = max(self._known, max(gpus, default=-1) + 1)
        for index, gpu in gpus.items():  # a new last-XID value is a new XID event
            xid = int(gpu.get(XID_FIELD) or 0)
            if xid and xid != self._last_xid.get(index):
                self._xids.append((index, xid))
            self._last_xid[index] = xid

    def device_count(self) -> int:
        """GPUs seen by the exporter in any scrape so far (a lost one stays counted)."""
        self._refresh()
        return self._known

    def xid_events(self) -> list[tuple[int, int]]:
        """(GPU index, XID) for each change of a GPU's ``DCGM_FI_DEV_XID_ERRORS`` to a
        non-zero value since the last call (the first scrape's non-zero values included:
        an XID the exporter saw before this agent started is still this GPU's)."""
        self._refresh()
        out, self._xids = self._xids, []
        return out

    def call(self, fn: str, index: int, *args: int) -> Any:
        """The answer NVML would give to ``fn(handle(index), *args)`` (module docstring).

        Raises:
            NvmlCallError: ``NOT_SUPPORTED`` when the exporter does not serve the field;
                ``GPU_IS_LOST`` for a GPU missing since an earlier scrape; ``TIMEOUT`` when
                the exporter does not answer.
        """
        self._refresh()
        if self._error is not None:
            raise self._error
        gpu = self._gpus.get(index)
        if gpu is None:
            raise NvmlCallError(
                NVML_ERROR_GPU_IS_LOST, f"GPU {index} is missing from dcgm-exporter's metrics"
            )
        key = (fn, *(str(a) for a in args))
        if fn in ("nvmlDeviceGetName", "nvmlDeviceGetUUID"):
            label = gpu["_labels"].get("modelName" if fn == "nvmlDeviceGetName" else "UUID")
            return _need(label)
        if key in _SIMPLE:
            name, factor = _SIMPLE[key]
            return int(_need(gpu.get(name)) * factor)
        if fn == "nvmlDeviceGetRemappedRows":
            failure = _need(gpu.get("DCGM_FI_DEV_ROW_REMAP_FAILURE"))
            return (
                int(gpu.get("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS") or 0),
                int(gpu.get("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") or 0),
                int(gpu.get("DCGM_FI_DEV_ROW_REMAP_PENDING") or 0),
                int(failure),
            )
        if fn == "nvmlDeviceGetUtilizationRates":
            return {
                "gpu": int(_need(gpu.get("DCGM_FI_DEV_GPU_UTIL"))),
                "memory": int(gpu.get("DCGM_FI_DEV_MEM_COPY_UTIL") or 0),
            }
        if fn == "nvmlDeviceGetMemoryInfo" and not args:  # v1 (the v2 argument: unsupported)
            used = _need(gpu.get("DCGM_FI_DEV_FB_USED"))
            free = _need(gpu.get("DCGM_FI_DEV_FB_FREE"))
            reserved = gpu.get("DCGM_FI_DEV_FB_RESERVED") or 0
            return {"used": int(used * MIB), "total": int((used + free + reserved) * MIB)}
        raise NvmlCallError(NVML_ERROR_NOT_SUPPORTED, "Not Supported")


def _need(value: Any) -> Any:
    if value is None:
        raise NvmlCallError(NVML_ERROR_NOT_SUPPORTED, "Not Supported (not exported by DCGM)")
    return value


def node_backend(recording: str | Path | None = None) -> NvmlBackend | None:
    """The GPU backend the agent's health monitor reads: a recording when the settings
    name one (``nvml_recording``), else the node's dcgm-exporter when ``PASTURE_DCGM_URL``
    is set (AKS: the agent pod has no NVML), else None (NVML when the driver is there)."""
    if recording:
        return RecordedBackend(recording)
    url = os.environ.get(DCGM_URL_ENV)
    return DcgmBackend(url) if url else None
