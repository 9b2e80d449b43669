"""GPU health from NVML: XID errors, ECC, row remapping, temperature, power, throttling.

Pipeline (the agent runs it with every heartbeat)::

    NvmlBackend (real: pynvml; tests: a JSON recording replayed)
        -> probe(backend) -> [GpuHealth per GPU]      (metrics + the node's condition, in
                                                        the heartbeat's usage["gpu_health"])
        -> GpuHealthMonitor.check(store, node)         cordon the node once when a GPU turns
                                                        unhealthy (reason + node event);
                                                        never uncordons: operators do

What makes a GPU unhealthy (the usual operator reading of NVIDIA's "XID Errors" catalogue,
https://docs.nvidia.com/deploy/xid-errors/, and the NVML API reference,
https://docs.nvidia.com/deploy/nvml-api/):

- an NVML call answers ``NVML_ERROR_GPU_IS_LOST`` (15), ``NVML_ERROR_RESET_REQUIRED`` (16)
  or ``NVML_ERROR_UNKNOWN`` (999) (the GPU fell off the bus / needs a reset);
- a critical XID since the agent started (:data:`scheduler.xid.CRITICAL_XIDS`: 48
  double-bit ECC, 61/62 micro-controller halt, 64 row-remapper failure, 74 NVLink, 79
  fallen off the bus, 95 uncontained ECC, 119/120 GSP, 140 unrecovered ECC);
- volatile uncorrected ECC errors > 0, a row-remapping failure, or remapping pending (a
  reset is needed to apply it);
- temperature at or above the GPU's slowdown threshold.

Thermal / power-brake throttling and XIDs 63, 92, 94 are warnings (shown, not cordoned).
Calls the GPU does not support (``NVML_ERROR_NOT_SUPPORTED``) leave their field None.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scheduler.xid import CRITICAL_XIDS, WARNING_XIDS

log = logging.getLogger("pasture.agent.gpu")

# NVML return codes (nvml.h nvmlReturn_t; the same values as pynvml.NVML_ERROR_*)
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999
FATAL_NVML_ERRORS = {
    NVML_ERROR_GPU_IS_LOST: "GPU is lost (fallen off the bus)",
    NVML_ERROR_RESET_REQUIRED: "GPU requires a reset",
    NVML_ERROR_UNKNOWN: "unknown NVML error",
}

# nvmlClocksThrottleReason* bits (nvml.h)
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
WARNING_THROTTLES = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}

# nvml.h constants used as call arguments
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NvmlCallError(Exception):
    """An NVML call failed with ``code`` (an nvmlReturn_t value)."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or f"NVML error {code}")
        self.code = code


class NvmlBackend(Protocol):
    """The few NVML calls the probe makes. ``call`` raises :class:`NvmlCallError`."""

    def device_count(self) -> int: ...

    def call(self, fn: str, index: int, *args: int) -> Any: ...

    def xid_events(self) -> list[tuple[int, int]]:
        """(GPU index, XID) of critical-error events since the last call (non-blocking)."""
        ...


class PynvmlBackend:
    """The real NVML through nvidia-ml-py (``pynvml``). Registers for XID critical-error
    events once (``nvmlDeviceRegisterEvents``) and drains them without blocking
    (``nvmlEventSetWait_v2`` with a 0 ms timeout).

    Raises:
        NvmlCallError: NVML cannot be initialised (no driver: ``NVML_ERROR_LIBRARY_NOT_FOUND``
            (12) or ``NVML_ERROR_DRIVER_NOT_LOADED`` (9)).
    """

    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlCallError(exc.value, str(exc)) from None
        # a GPU that fell off the bus fails already here (GPU_IS_LOST): keep its error
        self._handles: list[Any] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                self._handles.append(pynvml.nvmlDeviceGetHandleByIndex(i))
            except pynvml.NVMLError as exc:
                self._handles.append(NvmlCallError(exc.value, str(exc)))
        self._events = None
        try:
            self._events = pynvml.nvmlEventSetCreate()
            for h in self._handles:
                if not isinstance(h, NvmlCallError):
                    pynvml.nvmlDeviceRegisterEvents(
                        h, pynvml.nvmlEventTypeXidCriticalError, self._events
                    )
        except pynvml.NVMLError as exc:  # e.g. NOT_SUPPORTED on some boards
            log.info("NVML XID events unavailable: %s", exc)

    def device_count(self) -> int:
        return len(self._handles)

    def call(self, fn: str, index: int, *args: int) -> Any:
        handle = self._handles[index]
        if isinstance(handle, NvmlCallError):
            raise handle
        try:
            value = getattr(self.nv, fn)(handle, *args)
        except self.nv.NVMLError as exc:
            raise NvmlCallError(exc.value, str(exc)) from None
        if isinstance(value, bytes):
            value = value.decode()
        return value

    def xid_events(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        if self._events is None:
            return out
        for _ in range(64):
            try:
                ev = self.nv.nvmlEventSetWait_v2(self._events, 0)
            except self.nv.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                break
            index = next(
                (
                    i
                    for i, h in enumerate(self._handles)
                    if not isinstance(h, NvmlCallError) and h.value == ev.device.value
                ),
                -1,
            )
            out.append((index, int(ev.eventData)))
        return out


class RecordedBackend:
    """NVML answers replayed from a JSON recording (see tests/fixtures/nvml/README.md)::

        {"devices": [{"nvmlDeviceGetTemperature": 34,
                      "nvmlDeviceGetPowerUsage": {"nvml_error": "NVML_ERROR_GPU_IS_LOST",
                                                  "code": 15}, ...}],
         "xid_events": [[0, 79]]}

    A call's key is the function name, with its arguments appended as ``name/arg/arg`` when
    it takes any. A missing key answers ``NVML_ERROR_NOT_SUPPORTED``. XID events are
    delivered once.
    """

    def __init__(self, recording: dict[str, Any] | str | Path) -> None:
        data: dict[str, Any] = (
            recording if isinstance(recording, dict) else json.loads(Path(recording).read_text())
        )
        self.devices: list[dict[str, Any]] = data["devices"]
        self._xids = [tuple(x) for x in data.get("xid_events", [])]

    def device_count(self) -> int:
        return len(self.devices)

    def call(self, fn: str, index: int, *args: int) -> Any:
        key = "/".join([fn, *(str(a) for a in args)])
        dev = self.devices[index]
        if key not in dev:
            raise NvmlCallError(NVML_ERROR_NOT_SUPPORTED, "Not Supported")
        value = dev[key]
        if isinstance(value, dict) and "nvml_error" in value:
            raise NvmlCallError(int(value["code"]), value["nvml_error"])
        return value

    def xid_events(self) -> list[tuple[int, int]]:
        out, self._xids = self._xids, []
        return [(int(i), int(x)) for i, x in out]


VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus(spec: str, backend: NvmlBackend) -> list[int]:
    """The NVML indices an inherited ``CUDA_VISIBLE_DEVICES`` names, in its order: the
    node's GPU set when the agent was started with it (an operator's way to keep GPUs
    for something else). Entries are NVML indices (the agent's tasks get
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, in which CUDA numbers GPUs as NVML does) or GPU
    UUIDs (``GPU-...``, as ``nvidia-smi -L`` prints them); ``""`` is no GPU, as for CUDA.

    Raises:
        ValueError: an entry is neither an index of this node's GPUs nor one's UUID, or
            appears twice (the message names it and what the node has).
    """
    count = backend.device_count()
    out: list[int] = []
    for raw in (e.strip() for e in spec.split(",") if e.strip()):
        if raw.isdigit():
            index = int(raw)
        else:
            uuids = {}
            for i in range(count):
                try:
                    uuids[str(backend.call("nvmlDeviceGetUUID", i))] = i
                except NvmlCallError:
                    continue
            index = uuids.get(raw, -1)
        if not 0 <= index < count:
            raise ValueError(
                f"{VISIBLE_ENV}: {raw!r} is not one of this node's GPUs (expected an NVML "
                f"index 0..{count - 1} or a GPU UUID; the node has {count} GPU(s))"
            )
        if index in out:
            raise ValueError(f"{VISIBLE_ENV}: GPU {raw!r} is named twice in {spec!r}")
        out.append(index)
    return out


class VisibleBackend:
    """The GPUs of ``indices`` only (:func:`visible_gpus`), numbered 0.. in that order:
    pasture's GPU ``i`` of the node is NVML's ``indices[i]``. Wraps any
    :class:`NvmlBackend`, so capacity, usage and health see only the node's GPU set."""

    def __init__(self, inner: NvmlBackend, indices: list[int]) -> None:
        self.inner = inner
        self.indices = list(indices)

    def device_count(self) -> int:
        return len(self.indices)

    def call(self, fn: str, index: int, *args: int) -> Any:
        return self.inner.call(fn, self.indices[index], *args)

    def xid_events(self) -> list[tuple[int, int]]:
        return [
            (self.indices.index(i), xid) for i, xid in self.inner.xid_events() if i in self.indices
        ]


@dataclass
class GpuHealth:
    """One GPU's health.

    Attributes:
        index: NVML index. name, uuid: as NVML reports them ('' when unreadable).
        healthy: False when any ``problems``. problems: why unhealthy (people's words).
        warnings: worth a look, not cordoned. temperature_c: degrees Celsius.
        power_w / power_limit_w: watts. ecc_uncorrected / ecc_corrected: volatile counts
        since the driver loaded. remapped_pending / remap_failure: row remapping state.
        throttle: active throttle reason names. xids: XIDs seen since the agent started.
    """

    index: int
    name: str = ""
    uuid: str = ""
    healthy: bool = True
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    temperature_c: float | None = None
    slowdown_temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None
    remapped_pending: bool | None = None
    remap_failure: bool | None = None
    throttle: list[str] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ask(backend: NvmlBackend, g: GpuHealth, fn: str, *args: int) -> Any:
    try:
        return backend.call(fn, g.index, *args)
    except NvmlCallError as exc:
        if exc.code in FATAL_NVML_ERRORS:
            why = f"NVML: {FATAL_NVML_ERRORS[exc.code]} (NVML error {exc.code})"
            if why not in g.problems:
                g.problems.append(why)
        elif exc.code != NVML_ERROR_NOT_SUPPORTED:
            g.warnings.append(f"{fn}: NVML error {exc.code} ({exc})")
        return None


def probe(backend: NvmlBackend, seen_xids: dict[int, list[int]] | None = None) -> list[GpuHealth]:
    """Every GPU's health (see the module docstring for the rules).

    Args:
        backend: the NVML backend.
        seen_xids: ``{gpu index: [xid...]}`` kept across probes by the caller; new XID
            events are appended to it (XIDs are events, not state: one seen stays seen).
    """
    seen = seen_xids if seen_xids is not None else {}
    for index, xid in backend.xid_events():
        seen.setdefault(index, []).append(xid)
    out = []
    for i in range(backend.device_count()):
        g = GpuHealth(index=i)
        g.name = _ask(backend, g, "nvmlDeviceGetName") or ""
        g.uuid = _ask(backend, g, "nvmlDeviceGetUUID") or ""
        g.temperature_c = _ask(backend, g, "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        g.slowdown_temperature_c = _ask(
            backend, g, "nvmlDeviceGetTemperatureThreshold", NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        )
        mw = _ask(backend, g, "nvmlDeviceGetPowerUsage")
        g.power_w = mw / 1000 if mw is not None else None
        mw = _ask(backend, g, "nvmlDeviceGetEnforcedPowerLimit")
        g.power_limit_w = mw / 1000 if mw is not None else None
        g.ecc_uncorrected = _ask(
            backend,
            g,
            "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            NVML_VOLATILE_ECC,
        )
        g.ecc_corrected = _ask(
            backend,
            g,
            "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_CORRECTED,
            NVML_VOLATILE_ECC,
        )
        rows = _ask(backend, g, "nvmlDeviceGetRemappedRows")
        if rows is not None:  # (corrected rows, uncorrected rows, is pending, failure occurred)
            g.remapped_pending, g.remap_failure = bool(rows[2]), bool(rows[3])
        bits = _ask(backend, g, "nvmlDeviceGetCurrentClocksThrottleReasons")
        if bits is not None:
            g.throttle = [n for b, n in THROTTLE_REASONS.items() if bits & b]
        g.xids = list(seen.get(i, []))
        _judge(g)
        out.append(g)
    return out


def _judge(g: GpuHealth) -> None:
    # XIDs first: they name the cause, the NVML errors that follow are its symptoms
    g.problems[:0] = [f"Xid {x} ({CRITICAL_XIDS[x]})" for x in g.xids if x in CRITICAL_XIDS]
    g.warnings += [f"Xid {x} ({WARNING_XIDS[x]})" for x in g.xids if x in WARNING_XIDS]
    if g.ecc_uncorrected:
        g.problems.append(f"{g.ecc_uncorrected} uncorrected ECC error(s) since the driver loaded")
    if g.remap_failure:
        g.problems.append("row remapping failed (memory cannot be repaired)")
    if g.remapped_pending:
        g.problems.append("row remapping pending (GPU reset needed)")
    if (
        g.temperature_c is not None
        and g.slowdown_temperature_c
        and g.temperature_c >= g.slowdown_temperature_c
    ):
        g.problems.append(
            f"temperature {g.temperature_c:g} C at or above the slowdown threshold"
            f" {g.slowdown_temperature_c:g} C"
        )
    hw = [t for t in g.throttle if t in WARNING_THROTTLES]
    if hw:
        g.warnings.append("throttled: " + ", ".join(hw))
    g.healthy = not g.problems


def unhealthy_reason(report: list[dict[str, Any]]) -> str:
    """One line naming every unhealthy GPU of a ``usage["gpu_health"]`` report, '' when
    all are healthy: ``GPU 0 unhealthy: Xid 79 (GPU has fallen off the bus); GPU 3 ...``."""
    parts = [
        f"GPU {g.get('index')} unhealthy: {', '.join(g.get('problems') or [])}"
        for g in report
        if isinstance(g, dict) and not g.get("healthy", True)
    ]
    return "; ".join(parts)


class GpuHealthMonitor:
    """Probes GPUs for the agent and cordons its node when one turns unhealthy.

    An inherited ``CUDA_VISIBLE_DEVICES`` limits the node to those GPUs, in that order
    (:class:`VisibleBackend`; :attr:`physical`).

    Args:
        backend: an :class:`NvmlBackend` (the agent passes
            :func:`scheduler.agent.gpu_dcgm.node_backend`'s: the node's dcgm-exporter on
            AKS); None: :class:`PynvmlBackend` when the NVIDIA driver is there, else no
            GPUs (the report is an empty list).
    """

    def __init__(self, backend: NvmlBackend | None = None) -> None:
        if backend is None:
            try:
                backend = PynvmlBackend()
            except (NvmlCallError, ImportError) as exc:
                log.debug("no NVML: %s", exc)
        self.physical: list[int] | None = None
        """NVML index of each of the node's GPUs when the agent inherited
        ``CUDA_VISIBLE_DEVICES`` (its GPU set: :func:`visible_gpus`), else None (all)."""
        spec = os.environ.get(VISIBLE_ENV)
        if backend is not None and spec is not None:
            self.physical = visible_gpus(spec, backend)
            backend = VisibleBackend(backend, self.physical)
            log.info("%s=%s: this node's GPUs are NVML's %s", VISIBLE_ENV, spec, self.physical)
        self.backend = backend
        self._xids: dict[int, list[int]] = {}
        self._cordoned_for = ""

    def physical_gpus(self, gpus: list[int]) -> list[int]:
        """NVML indices of the node's GPUs ``gpus`` (pasture's numbering, as the core
        allocates them): unchanged unless the node's GPU set is limited (:attr:`physical`)."""
        if self.physical is None:
            return list(gpus)
        return [self.physical[g] for g in gpus]

    def report(self) -> list[dict[str, Any]]:
        """``[GpuHealth.to_dict()]`` of every GPU ([] without NVML). Never raises."""
        if self.backend is None:
            return []
        try:
            return [g.to_dict() for g in probe(self.backend, self._xids)]
        except Exception:  # noqa: BLE001 - a probe must not stop heartbeats
            log.exception("GPU health probe failed")
            return []

    def check(self, store: Any, node: str, report: list[dict[str, Any]]) -> bool:
        """Ask to cordon ``node`` (with the reason and a node event) when ``report`` has an
        unhealthy GPU (``store.request_cordon``: the loop cordons it if it is ready); once
        per distinct set of problems, so an operator's uncordon sticks until something new
        goes wrong. Returns True when it asked."""
        reason = unhealthy_reason(report)
        if not reason or reason == self._cordoned_for:
            return False
        why = f"cordoned by the GPU health probe: {reason}"
        # a NodeStore queues the request for the loop; a full Store applies it (only a
        # ready node is cordoned: an operator's drain or cordon stays)
        store.request_cordon(node, why)
        self._cordoned_for = reason
        log.warning("node %s: %s", node, why)
        return True


class RecordingBackend:
    """Wraps a backend and keeps every answer in :class:`RecordedBackend`'s format, so
    that a real GPU node's answers can be saved and replayed (:func:`main` ``--record``)."""

    def __init__(self, inner: NvmlBackend) -> None:
        self.inner = inner
        self.devices: list[dict[str, Any]] = [{} for _ in range(inner.device_count())]
        self.xids: list[list[int]] = []

    def device_count(self) -> int:
        return len(self.devices)

    def call(self, fn: str, index: int, *args: int) -> Any:
        key = "/".join([fn, *(str(a) for a in args)])
        try:
            value = self.inner.call(fn, index, *args)
        except NvmlCallError as exc:
            if exc.code != NVML_ERROR_NOT_SUPPORTED:
                self.devices[index][key] = {"nvml_error": str(exc), "code": exc.code}
            raise
        self.devices[index][key] = list(value) if isinstance(value, tuple) else value
        return value

    def xid_events(self) -> list[tuple[int, int]]:
        out = self.inner.xid_events()
        self.xids += [[i, x] for i, x in out]
        return out

    def recording(self) -> dict[str, Any]:
        """The answers so far: ``{"devices": [...], "xid_events": [[gpu, xid]...]}``."""
        return {"devices": self.devices, "xid_events": self.xids}


def main(argv: list[str] | None = None) -> None:
    """``python -m scheduler.agent.gpu_health [--record FILE]``: print this node's GPU
    health as JSON; with ``--record``, also save NVML's answers for replay in tests."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m scheduler.agent.gpu_health")
    parser.add_argument("--record", type=Path, default=None, help="save NVML answers here")
    args = parser.parse_args(argv)
    try:
        backend: NvmlBackend = PynvmlBackend()
    except (NvmlCallError, ImportError) as exc:
        raise SystemExit(f"NVML unavailable: {exc}") from None
    rec = RecordingBackend(backend)
    print(json.dumps([g.to_dict() for g in probe(rec)], indent=2))
    if args.record is not None:
        args.record.write_text(json.dumps(rec.recording(), indent=2) + "\n")


if __name__ == "__main__":
    main()
