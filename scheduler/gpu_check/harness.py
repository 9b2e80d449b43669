"""The GPU check's harness: a one-node process-mode cluster, its jobs through the API, GPU
detection, and the checks themselves in order (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.gpu_check.metrics import (
    compare_gpu_metrics,
    parse_nvidia_smi,
    pasture_gpu_figures,
    utilisation_rise,
)
from scheduler.gpu_check.probe import probe_of
from scheduler.gpu_check.steps import CheckFailed, Skip, Summary, run_step
from scheduler.states import TERMINAL_JOB_STATES

ACCURACY_RE = re.compile(r"^test accuracy: (\d+\.\d+)\s*$", re.M)

TERMINAL: set[str] = {str(s) for s in TERMINAL_JOB_STATES}


class Harness:
    """A process-mode cluster of one node and the API client on it.

    Args:
        work: a directory of this run (state dir, specs).
        nvml_recording: the agent replays these NVML answers (replay mode).
        python: the interpreter tasks run (default: this one).
    """

    def __init__(self, work: Path, nvml_recording: Path | None, python: str = sys.executable):
        self.work = work
        self.nvml_recording = nvml_recording
        self.python = python
        self.cluster: Any = None
        self.client: Any = None
        self.node = "dev-node-0"

    def up(self, timeout_s: float) -> dict[str, Any]:
        """Start the cluster (one node, GPUs detected) and log in to it."""
        from scheduler import dev
        from scheduler.cli.client import ApiClient
        from scheduler.cli.config import ClientConfig

        self.cluster = dev.up(
            nodes=1,
            directory=self.work / "dev",
            nvml_recording=self.nvml_recording,
            heartbeat_interval_s=1.0,
            timeout_s=timeout_s,
        )
        self.client = ApiClient(
            ClientConfig(endpoint=self.cluster.endpoint, token=self.cluster.token)
        )
        return {"endpoint": self.cluster.endpoint, "nodes": self.cluster.nodes}

    def down(self) -> None:
        from scheduler import dev

        if self.client is not None:
            self.client.close()
        dev.down(self.work / "dev")  # also after an interrupted up (False: nothing runs)

    def submit(self, name: str, roles: dict[str, dict[str, Any]]) -> None:
        """Submit a job of ``{role: {replicas, gpu, command, memory}}`` (1 core per task;
        memory default 1Gi, GPU code asks 16Gi: a CUDA context maps ~17 GiB of address
        space and NCCL far more, issue 24)."""
        spec = {
            "name": name,
            "roles": {
                role: {
                    "replicas": r.get("replicas", 1),
                    "resources": {"cpu": 1, "memory": r.get("memory", "1Gi"), "gpu": r["gpu"]},
                    "command": r["command"],
                }
                for role, r in roles.items()
            },
            "retry": {"max_attempts": 1},
            "env": {"PYTHONUNBUFFERED": "1"},
        }
        self.client.submit(json.dumps(spec).encode(), json_body=True)

    def probe_command(self, kind: str, seconds: float = 0.0) -> str:
        return f"{self.python} -m scheduler.gpu_check probe {kind} --seconds {seconds:g}"

    def job(self, name: str) -> Any:
        return self.client.job(name)

    def wait(self, name: str, timeout_s: float, until: set[str] = TERMINAL) -> Any:
        """The job once its state is in ``until`` (default: ended).

        Raises:
            AssertionError: not within ``timeout_s`` (the job is stopped).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.client.job(name)
            if str(job.state) in until:
                return job
            if time.monotonic() > deadline:
                with contextlib.suppress(Exception):
                    self.client.stop(name)
                raise AssertionError(f"job {name} still {job.state} after {timeout_s:g} s")
            time.sleep(0.5)

    def log(self, name: str, role: str, index: int = 0) -> str:
        data: bytes = self.client.log_bytes(name, role, index)
        return data.decode("utf-8", "replace")

    def succeeded(self, name: str, timeout_s: float, role: str = "main") -> tuple[Any, str]:
        """Wait for the job to end; its record and ``role``-0's log.

        Raises:
            AssertionError: it did not succeed (with the log's tail).
        """
        job = self.wait(name, timeout_s)
        log = self.log(name, role)
        assert str(job.state) == "succeeded", (
            f"job {name} {job.state}: {job.reason}; {role}-0 log tail:\n{log[-1500:]}"
        )
        return job, log


def nvidia_smi(*args: str, timeout_s: float = 30.0) -> str:
    """nvidia-smi's output. Raises: Skip: not installed; RuntimeError: it failed."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise Skip("nvidia-smi is not installed")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def has_torch(python: str) -> bool:
    """Whether ``python`` can import torch."""
    proc = subprocess.run([python, "-c", "import torch"], capture_output=True, timeout=120)
    return proc.returncode == 0


def check_memory_limit(seen: dict[str, Any], requested: int) -> None:
    """The task's memory limit (what its probe read from its cgroup) equals its request.

    Raises:
        CheckFailed: no limit, or another one (with what the task saw).
    """
    limit = seen.get("memory_limit_bytes")
    if limit != requested:
        raise CheckFailed(
            f"the task's memory limit is {limit!r} bytes, its request {requested} "
            "(the executor must set limit = request)",
            seen,
        )


def run_checks(summary: Summary, h: Harness, step_timeout: float, hold_s: float = 4.0) -> Summary:
    """Run every check in order on harness ``h`` (its cluster is started here and stopped
    at the end); ``hold_s``: seconds the queueing check's first job holds the GPUs."""
    mode = summary.mode
    no_gpu = {
        "none": "no NVIDIA GPU on this host (NVML found none)",
        "replay": "replayed NVML answers: no device to run on",
    }.get(mode, "")
    gpus = int(summary.gpus.get("count") or 0)
    torch_ok = mode == "gpu" and has_torch(h.python)
    need_torch = "" if torch_ok else (no_gpu or f"torch is not importable by {h.python}")

    def nvml() -> dict[str, Any]:
        if mode == "none":
            raise Skip(no_gpu)
        assert gpus >= 1, f"NVML lists {gpus} GPUs"
        details = dict(summary.gpus)
        if mode == "gpu":
            try:
                text = nvidia_smi("-L")
            except Skip as exc:  # NVML alone decides then
                details["nvidia_smi"] = str(exc)
                return details
            listed = [line for line in text.splitlines() if line.startswith("GPU ")]
            assert len(listed) == gpus, f"NVML lists {gpus} GPUs, nvidia-smi -L {len(listed)}"
            details["nvidia_smi"] = listed
        return details

    def cluster() -> dict[str, Any]:
        details = h.up(timeout_s=max(step_timeout - 5, 10))
        node = next(n for n in h.client.nodes() if n.name == h.node)
        details.update(state=node.state, gpu=node.gpu, gpu_model=node.gpu_model)
        assert node.gpu == gpus, f"node announces {node.gpu} GPUs, NVML lists {gpus}"
        assert node.gpu_model == summary.gpus.get("model"), (
            f"node model {node.gpu_model!r}, NVML {summary.gpus.get('model')!r}"
        )
        return details

    def one_gpu_job() -> dict[str, Any]:
        if no_gpu:
            raise Skip(no_gpu)
        job = {"gpu": 1, "memory": "16Gi", "command": h.probe_command("cuda", 5)}
        h.submit("gpucheck-one", {"main": job})
        _, log = h.succeeded("gpucheck-one", step_timeout - 5)
        seen = probe_of(log)
        visible = (seen["CUDA_VISIBLE_DEVICES"] or "").split(",")
        if len([v for v in visible if v]) != 1:
            raise CheckFailed(f"CUDA_VISIBLE_DEVICES={seen['CUDA_VISIBLE_DEVICES']!r}", seen)
        if seen["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID":
            raise CheckFailed(f"CUDA_DEVICE_ORDER={seen['CUDA_DEVICE_ORDER']!r}", seen)
        if seen.get("torch"):
            assert seen["device_count"] == 1, f"torch sees {seen['device_count']} devices"
            assert seen.get("cuda_ok"), "the matmul did not run"
        check_memory_limit(seen, 16 << 30)
        return seen

    def queueing() -> dict[str, Any]:
        if mode == "none":
            raise Skip(no_gpu + "; no recording to replay (--nvml-recording)")
        # busy GPUs: a matmul where torch is, else a sleep (the scheduler sees the same)
        hold = h.probe_command("cuda", hold_s) if torch_ok else f"sleep {hold_s:g}"
        mem = "1Gi" if no_gpu else "16Gi"
        h.submit("gpucheck-hold", {"main": {"gpu": gpus, "command": hold, "memory": mem}})
        h.wait("gpucheck-hold", step_timeout / 2, until={"running", *TERMINAL})
        h.submit("gpucheck-queued", {"main": {"gpu": 1, "command": "true"}})
        time.sleep(1.5)  # a few scheduling cycles
        waiting = h.job("gpucheck-queued")
        holder = h.job("gpucheck-hold")
        assert str(holder.state) == "running", f"the holding job is {holder.state}"
        assert str(waiting.state) in {"submitted", "queued"}, (
            f"second job {waiting.state} while the first holds every GPU"
        )
        why = waiting.pending_reason.message if waiting.pending_reason else ""
        assert "GPU" in why, f"pending reason does not name GPUs: {why!r}"
        held = h.wait("gpucheck-hold", step_timeout / 2)
        assert str(held.state) == "succeeded", f"holding job {held.state}: {held.reason}"
        done = h.wait("gpucheck-queued", step_timeout / 2)
        assert str(done.state) == "succeeded", f"queued job {done.state}: {done.reason}"
        gap = (done.start_time or 0) - (held.end_time or 0)
        assert gap >= 0, f"the queued job started {-gap:.2f} s before the GPUs were free"
        return {"pending_reason": why, "started_after_release_s": round(gap, 3)}

    def zero_gpu_job() -> dict[str, Any]:
        h.submit("gpucheck-zero", {"main": {"gpu": 0, "command": h.probe_command("env")}})
        _, log = h.succeeded("gpucheck-zero", step_timeout - 5)
        seen = probe_of(log)
        if seen["CUDA_VISIBLE_DEVICES"] != "":
            why = f"a 0-GPU task got CUDA_VISIBLE_DEVICES={seen['CUDA_VISIBLE_DEVICES']!r}, not ''"
            raise CheckFailed(why, seen)
        if seen.get("torch") and seen["device_count"] != 0:
            raise CheckFailed(f"torch sees {seen['device_count']} devices", seen)
        if seen["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID":
            why = f"CUDA_DEVICE_ORDER={seen['CUDA_DEVICE_ORDER']!r}, not 'PCI_BUS_ID'"
            raise CheckFailed(why + " (CUDA would number GPUs unlike NVML)", seen)
        check_memory_limit(seen, 1 << 30)
        return seen

    def smi_figures() -> dict[int, dict[str, float]]:
        return parse_nvidia_smi(
            nvidia_smi(
                "--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"
            )
        )

    def metrics() -> dict[str, Any]:
        if no_gpu:
            raise Skip(no_gpu)
        if need_torch:  # without a load, idle would be compared with idle
            raise Skip(f"no GPU load to measure: {need_torch}")
        idle = smi_figures()
        h.submit(
            "gpucheck-metrics",
            {"main": {"gpu": 1, "memory": "16Gi", "command": h.probe_command("cuda", 20)}},
        )
        started = h.wait("gpucheck-metrics", 60, until={"running", *TERMINAL})
        assert str(started.state) == "running", (
            f"the load job is {started.state} ({started.reason}), not running"
        )
        time.sleep(6)  # the matmul is under way; heartbeats carried new samples
        samples: list[dict[str, Any]] = []
        problems: list[str] = []
        for _ in range(3):
            ours = pasture_gpu_figures(h.client.request("GET", "/metrics"), h.node)
            smi = smi_figures()
            running = str(h.job("gpucheck-metrics").state) == "running"
            samples.append({"pasture": ours, "nvidia_smi": smi, "load_running": running})
            _, rise = utilisation_rise(idle, smi)
            problems = (
                compare_gpu_metrics(ours, smi)
                + rise
                + ([] if running else ["the load job ended before the sample"])
            )
            if not problems:
                break
            time.sleep(2)
        _, log = h.succeeded("gpucheck-metrics", 60)
        seen = probe_of(log)
        assert seen.get("cuda_ok"), f"the load's matmul did not run: {seen}"
        details = {"idle": idle, "samples": samples, "load": seen}
        if problems:
            raise CheckFailed("; ".join(problems), details)
        return details

    def nccl(world: int) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            if need_torch:
                raise Skip(need_torch)
            if gpus < world:
                raise Skip(f"world size {world} needs {world} GPUs, this host has {gpus}")
            name = f"gpucheck-nccl{world}"
            cmd = h.probe_command("nccl")
            role = {"replicas": world, "gpu": 1, "memory": "16Gi", "command": cmd}
            h.submit(name, {"main": role})
            _, log = h.succeeded(name, step_timeout - 5)
            seen = probe_of(log)
            expected = world * (world + 1) / 2
            assert seen.get("world_size") == world, f"world size {seen.get('world_size')}"
            assert seen.get("all_reduce") == expected, f"all_reduce {seen.get('all_reduce')}"
            return seen

        return run

    def torch_ddp() -> dict[str, Any]:
        if need_torch:
            raise Skip(need_torch)
        ranks = min(2, gpus)
        cmd = f"{h.python} -m scheduler.examples.torch_ddp --epochs 30 --min-accuracy 0.9"
        role = {"replicas": ranks, "gpu": 1, "memory": "16Gi", "command": cmd}
        h.submit("gpucheck-ddp", {"trainer": role})
        _, log = h.succeeded("gpucheck-ddp", step_timeout - 5, role="trainer")
        found = ACCURACY_RE.findall(log)
        assert found, f"no test accuracy in trainer-0's log:\n{log[-1500:]}"
        assert "with nccl" in log, "the example did not use NCCL"
        return {"ranks": ranks, "test_accuracy": float(found[-1])}

    try:
        run_step(summary, "nvml", nvml, step_timeout)
        if (
            run_step(summary, "cluster", cluster, step_timeout).status != "pass"
            and h.client is None
        ):
            return summary
        run_step(summary, "one_gpu_job", one_gpu_job, step_timeout)
        run_step(summary, "queueing", queueing, step_timeout)
        run_step(summary, "zero_gpu_job", zero_gpu_job, step_timeout)
        run_step(summary, "metrics", metrics, step_timeout)
        run_step(summary, "nccl_world1", nccl(1), step_timeout)
        run_step(summary, "nccl_world2", nccl(2), step_timeout)
        run_step(summary, "torch_ddp", torch_ddp, step_timeout)
    finally:
        # a second SIGTERM (or the first one, arriving now) must not cut the cleanup short:
        # that left redis-server and the agent running
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        h.down()
    return summary


def models_by_index(nvml_recording: Path | None) -> dict[str, str | None]:
    """``{"<GPU index>": model}`` of this host's NVML or of the recording; {} without a
    driver."""
    from scheduler.agent.gpu_health import NvmlCallError, PynvmlBackend, RecordedBackend
    from scheduler.agent.resources import gpu_models

    backend: Any
    if nvml_recording is not None:
        backend = RecordedBackend(nvml_recording)
    else:
        try:
            backend = PynvmlBackend()
        except (NvmlCallError, ImportError):
            return {}
    try:
        return {str(i): m for i, m in gpu_models(backend).items()}
    finally:
        if nvml_recording is None:
            with contextlib.suppress(Exception):
                backend.nv.nvmlShutdown()


def detect(nvml_recording: Path | None) -> tuple[str, dict[str, Any]]:
    """(mode, {count, model (GPU 0's, what the node announces), models (per GPU index),
    heterogeneous}) of this host or of the recording."""
    from scheduler.dev import host_gpus

    count, model = host_gpus(nvml_recording)
    models = models_by_index(nvml_recording)
    gpus = {
        "count": count,
        "model": model,
        "models": models,
        "heterogeneous": len(set(models.values())) > 1,
    }
    if nvml_recording is not None:
        return "replay", {**gpus, "recording": str(nvml_recording)}
    return ("gpu" if count else "none"), gpus
