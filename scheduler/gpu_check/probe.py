"""What the GPU check's tasks run (``python -m scheduler.gpu_check probe KIND``): their GPU
variables, cgroup memory limit and, with torch, the devices, a matmul or an NCCL all_reduce,
printed as one ``GPUCHECK {json}`` line; and reading that line back."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

PROBE_RE = re.compile(r"^GPUCHECK (\{.*\})\s*$", re.M)


def memory_limit_bytes(
    proc_cgroup: str | None = None, root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """This process's cgroup memory limit in bytes (cgroup v2 ``memory.max`` of its
    ``0::`` cgroup, else v1 ``memory.limit_in_bytes`` of its ``memory`` controller's
    cgroup); None when unlimited (``max``) or unreadable. ``proc_cgroup``: the text of
    ``/proc/self/cgroup`` (read when None)."""
    text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    candidates = []
    for line in text.splitlines():
        hid, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if hid == "0" and controllers == "":
            candidates.append(root / rel / "memory.max")
        elif "memory" in controllers.split(","):
            candidates.append(root / "memory" / rel / "memory.limit_in_bytes")
    for f in candidates:
        try:
            value = f.read_text().strip()
        except OSError:
            continue
        if value == "max" or not value.isdigit() or int(value) >= 1 << 62:
            continue  # unlimited here (v1 says so with a huge number)
        return int(value)
    return None


def probe(kind: str, seconds: float = 0.0) -> dict[str, Any]:
    """What a task sees (``kind`` env | cuda | nccl): its GPU variables; with torch, the
    devices, a bf16 matmul (``cuda``, for ``seconds``), an NCCL all_reduce (``nccl``)."""
    out: dict[str, Any] = {
        "kind": kind,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
        "NVIDIA_VISIBLE_DEVICES": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "memory_limit_bytes": memory_limit_bytes(),
    }
    try:
        import torch
    except ImportError:
        out["torch"] = None
        return out
    out["torch"] = torch.__version__
    out["device_count"] = torch.cuda.device_count()
    if kind == "cuda" and out["device_count"]:
        a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        n, t0 = 0, time.monotonic()
        while True:
            a @ a
            n += 1
            if n % 20 == 0:
                torch.cuda.synchronize()
                if time.monotonic() - t0 >= max(seconds, 1.0):
                    break
        out["tflops"] = round(2 * 8192**3 * n / (time.monotonic() - t0) / 1e12, 1)
        out["cuda_ok"] = True
    if kind == "nccl":
        import torch.distributed as dist

        from scheduler.examples.torch_ddp import cuda_device_index

        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(cuda_device_index(local, torch.cuda.device_count()))
        dist.init_process_group("nccl", init_method="env://")
        t = torch.ones(1, device="cuda") * (rank + 1)
        dist.all_reduce(t)
        out["world_size"] = dist.get_world_size()
        out["all_reduce"] = float(t.item())
        dist.destroy_process_group()
    return out


def probe_of(log: str) -> dict[str, Any]:
    """The last ``GPUCHECK {json}`` line a probe task printed.

    Raises:
        AssertionError: none in the log (with the log's tail).
    """
    found = PROBE_RE.findall(log)
    assert found, f"the task printed no GPUCHECK line; log tail:\n{log[-1500:]}"
    result: dict[str, Any] = json.loads(found[-1])
    return result
