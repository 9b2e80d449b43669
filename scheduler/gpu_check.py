"""``scripts/gpu-check.sh``: pasture on a GPU host, checked the way it is used, with a JSON
summary.

Starts a process-mode cluster as ``pasture dev up`` does (:func:`scheduler.dev.up`: redis,
API, loop and one agent with the process executor, which detects the GPUs by NVML), submits
jobs through the API with the CLI's typed client, and checks:

==================  ==========================================================  ==========
check               passes when                                                 needs
==================  ==========================================================  ==========
nvml                NVML lists >= 1 GPU (and nvidia-smi as many)                a GPU
cluster             the node is ready and announces NVML's GPU count and model  -
one_gpu_job         a 1-GPU task sees exactly one device (CUDA_VISIBLE_DEVICES;  a GPU
                    with torch: device_count 1 and a bf16 matmul runs)
queueing            a 1-GPU job waits, naming GPUs, while a job holds all GPUs,  a GPU or a
                    and starts once it ends                                     recording
zero_gpu_job        a 0-GPU task gets CUDA_VISIBLE_DEVICES="" (torch: 0 devices) -
                    and CUDA_DEVICE_ORDER=PCI_BUS_ID; its cgroup memory limit
                    equals its request (1 GiB; one_gpu_job: 16 GiB)
metrics             a bf16 matmul job runs (state running while sampled, its     a GPU,
                    probe says the matmul ran), utilisation rose >= 20 points    torch
                    over idle (:func:`utilisation_rise`), and per-GPU
                    utilisation and memory used in /metrics match nvidia-smi
                    (:func:`compare_gpu_metrics`)
nccl_world1/2       NCCL all_reduce with only pasture's RANK/WORLD_SIZE/MASTER_*  a GPU (2
                    (world size 2 with two GPUs)                                 GPUs), torch
torch_ddp           scheduler/examples/torch_ddp.py reaches its test accuracy    a GPU, torch
==================  ==========================================================  ==========

Modes: ``gpu`` (NVML finds GPUs: everything runs), ``replay`` (``--nvml-recording FILE``:
the agent replays recorded NVML answers, its GPUs are numbers only; the checks that run code
on a GPU are skipped, naming why), ``none`` (no NVIDIA driver and no recording: only the
cluster and the 0-GPU job run, the rest is skipped with the reason). A skipped check is
not a failure. Every step has a hard time limit (``--step-timeout`` seconds, SIGALRM);
the shell script puts one more around the whole run.

``gpus`` names every GPU's model by index (``models``) and says whether they differ
(``heterogeneous``); the node announces GPU 0's model.

Summary (``--out``, rewritten after every check and on every exit; also printed):
``{"mode", "started_utc", "passed", "interrupted" (null, or "SIGTERM" when the script's
limit or a user stopped it: the cluster is stopped, further SIGTERMs ignored meanwhile,
and the run does not pass), "elapsed_s",
"failed_checks", "skipped_checks", "gpus": {count, model}, "checks": {name: {status: pass |
fail | skip, seconds, reason, details}}}``. Exit code 0: no check failed; 1: one failed;
2: ``--require-gpu`` and no GPU; 128 + signal: interrupted.

Tasks run ``python -m scheduler.gpu_check probe ...`` with this interpreter (so torch is the
one importable here), which prints one ``GPUCHECK {json}`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scheduler.states import TERMINAL_JOB_STATES

PROBE_RE = re.compile(r"^GPUCHECK (\{.*\})\s*$", re.M)
ACCURACY_RE = re.compile(r"^test accuracy: (\d+\.\d+)\s*$", re.M)
MIB = 1 << 20
TERMINAL: set[str] = {str(s) for s in TERMINAL_JOB_STATES}


class Interrupted(BaseException):
    """The run got SIGTERM or SIGINT (the script's hard limit, a user): not an Exception,
    so no step records it as its own failure; the summary says ``interrupted``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StepTimeout(Exception):
    """A step ran past its hard time limit."""


class Skip(Exception):
    """A step cannot run here; the message says why."""


class CheckFailed(AssertionError):
    """A check's rule does not hold; ``details`` keeps what was measured for the summary."""

    def __init__(self, reason: str, details: dict[str, Any]) -> None:
        super().__init__(reason)
        self.details = details


@dataclass
class Check:
    """One check's outcome: ``status`` pass | fail | skip, ``seconds`` it took, ``reason``
    (why it failed or was skipped), ``details`` (what was measured)."""

    name: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Summary:
    """All checks of one run (see the module docstring for the JSON shape)."""

    mode: str
    started_utc: str
    gpus: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    out: Path | None = None
    interrupted: str | None = None

    def save(self) -> None:
        """Write the JSON summary to ``out`` (when set) atomically: rewritten after every
        check and on exit, so a run killed at its limit leaves what it had measured."""
        if self.out is None:
            return
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(self.out)

    def check(self, name: str) -> Check | None:
        """The check called ``name``, None when it did not run."""
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary."""
        failed = [c.name for c in self.checks if c.status == "fail"]
        return {
            "mode": self.mode,
            "started_utc": self.started_utc,
            "passed": not failed and self.interrupted is None,
            "interrupted": self.interrupted,
            "elapsed_s": round(time.monotonic() - self.started, 1),
            "failed_checks": failed,
            "skipped_checks": [c.name for c in self.checks if c.status == "skip"],
            "gpus": self.gpus,
            "checks": {
                c.name: {k: v for k, v in asdict(c).items() if k != "name"} for c in self.checks
            },
        }


@contextlib.contextmanager
def hard_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`StepTimeout` in this (the main) thread after ``seconds``."""

    def _expired(signum: int, frame: Any) -> None:
        raise StepTimeout(f"step ran past its limit of {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_step(
    summary: Summary, name: str, fn: Callable[[], dict[str, Any]], timeout_s: float
) -> Check:
    """Run one check with a hard limit and record it: ``fn`` returns its details (pass),
    raises :class:`Skip` (skip), AssertionError or anything else (fail, with the reason)."""
    t0 = time.monotonic()
    check = Check(name, "pass")
    try:
        with hard_limit(timeout_s):
            check.details = fn()
    except Skip as exc:
        check.status, check.reason = "skip", str(exc)
    except StepTimeout as exc:
        check.status, check.reason = "fail", str(exc)
    except AssertionError as exc:
        check.status, check.reason = "fail", str(exc) or "assertion failed"
        check.details = getattr(exc, "details", {})
    except Exception as exc:  # noqa: BLE001 - a broken step is a failed check, not a crash
        check.status, check.reason = "fail", f"{type(exc).__name__}: {exc}"
    check.seconds = round(time.monotonic() - t0, 2)
    summary.checks.append(check)
    summary.save()
    print(f"[{check.seconds:7.1f}s] {name}: {check.status.upper()} {check.reason}", flush=True)
    return check


# ---- comparison logic (pure) -----------------------------------------------------------
def parse_prometheus(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples of a Prometheus text exposition: ``{metric: {sorted label pairs: value}}``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
    return out


def pasture_gpu_figures(metrics_text: str, node: str) -> dict[int, dict[str, float]]:
    """``{gpu index: {util_percent, memory_used_mib}}`` of ``node`` from ``/metrics``
    (``pasture_gpu_utilisation_ratio``, ``pasture_gpu_memory_used_bytes``)."""
    samples = parse_prometheus(metrics_text)
    out: dict[int, dict[str, float]] = {}
    for metric, key, scale in (
        ("pasture_gpu_utilisation_ratio", "util_percent", 100.0),
        ("pasture_gpu_memory_used_bytes", "memory_used_mib", 1.0 / MIB),
    ):
        for labels, value in samples.get(metric, {}).items():
            d = dict(labels)
            if d.get("node") == node and "gpu" in d:
                out.setdefault(int(d["gpu"]), {})[key] = value * scale
    return out


def parse_nvidia_smi(csv: str) -> dict[int, dict[str, float]]:
    """``nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,
    nounits`` as ``{gpu index: {util_percent, memory_used_mib}}``."""
    out: dict[int, dict[str, float]] = {}
    for line in csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            raise ValueError(f"nvidia-smi line {line!r}: expected 'index, util %, MiB'")
        out[int(parts[0])] = {"util_percent": float(parts[1]), "memory_used_mib": float(parts[2])}
    return out


def compare_gpu_metrics(
    pasture: dict[int, dict[str, float]],
    smi: dict[int, dict[str, float]],
    util_tolerance_percent: float = 15.0,
    memory_tolerance_mib: float = 64.0,
) -> list[str]:
    """What differs between pasture's per-GPU figures and nvidia-smi's (taken at about the
    same time); [] when they match.

    Utilisation is NVML's share of the last sample period a kernel ran, so two readings a
    moment apart differ a little: ``util_tolerance_percent`` points. Memory used moves only
    when a process allocates: ``memory_tolerance_mib`` MiB (pasture's used memory is NVML
    v2, what nvidia-smi prints; v1 would be higher by the driver's reservation, 615 MiB on
    an H200).
    """
    problems = []
    if set(pasture) != set(smi):
        problems.append(f"GPUs differ: pasture {sorted(pasture)}, nvidia-smi {sorted(smi)}")
    for i in sorted(set(pasture) & set(smi)):
        p, s = pasture[i], smi[i]
        for key, tol, unit in (
            ("util_percent", util_tolerance_percent, "%"),
            ("memory_used_mib", memory_tolerance_mib, " MiB"),
        ):
            if key not in p:
                problems.append(f"GPU {i}: pasture reports no {key}")
            elif abs(p[key] - s[key]) > tol:
                problems.append(
                    f"GPU {i} {key}: pasture {p[key]:.0f}{unit}, nvidia-smi {s[key]:.0f}{unit}"
                    f" (tolerance {tol:g}{unit})"
                )
    return problems


def utilisation_rise(
    before: dict[int, dict[str, float]],
    during: dict[int, dict[str, float]],
    min_rise_percent: float = 20.0,
) -> tuple[int | None, list[str]]:
    """The GPU whose utilisation rose most between ``before`` (idle, ``{gpu index:
    {util_percent, ...}}``) and ``during`` a load, and the problems: [] when it rose by at
    least ``min_rise_percent`` points. Without this, comparing pasture with nvidia-smi
    proves nothing when the load never ran (idle matches idle, issue 35 item 12)."""
    rises = {
        i: during[i]["util_percent"] - before.get(i, {}).get("util_percent", 0.0)
        for i in during
        if "util_percent" in during[i]
    }
    if not rises:
        return None, ["no GPU utilisation was measured during the load"]
    gpu = max(rises, key=lambda i: rises[i])
    if rises[gpu] < min_rise_percent:
        return gpu, [
            f"utilisation did not rise under load: at most +{rises[gpu]:.0f} points (GPU "
            f"{gpu}), expected >= +{min_rise_percent:g}; the load did not run on a GPU"
        ]
    return gpu, []


def probe_of(log: str) -> dict[str, Any]:
    """The last ``GPUCHECK {json}`` line a probe task printed.

    Raises:
        AssertionError: none in the log (with the log's tail).
    """
    found = PROBE_RE.findall(log)
    assert found, f"the task printed no GPUCHECK line; log tail:\n{log[-1500:]}"
    result: dict[str, Any] = json.loads(found[-1])
    return result


# ---- the probes tasks run -----------------------------------------------------------------
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


# ---- the cluster and its jobs ------------------------------------------------------------
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


# ---- the checks --------------------------------------------------------------------------
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


def main(argv: list[str] | None = None) -> int:
    """``python -m scheduler.gpu_check [--out FILE] [--nvml-recording FILE]
    [--step-timeout S] [--require-gpu]``, or ``... probe KIND`` (run by the check's tasks).
    Returns the exit code (see the module docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m scheduler.gpu_check", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    sub = p.add_subparsers(dest="cmd")
    pr = sub.add_parser("probe", help="(run by the check's tasks) print what this task sees")
    pr.add_argument("kind", choices=["env", "cuda", "nccl"])
    pr.add_argument("--seconds", type=float, default=0.0, help="matmul duration (cuda)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON summary here")
    p.add_argument("--nvml-recording", type=Path, default=None, help="replay these NVML answers")
    p.add_argument("--step-timeout", type=float, default=300.0, help="hard limit per check, s")
    p.add_argument(
        "--hold", type=float, default=4.0, help="seconds the queueing check holds the GPUs"
    )
    p.add_argument("--require-gpu", action="store_true", help="exit 2 when there is no GPU")
    args = p.parse_args(argv)
    if args.cmd == "probe":
        print("GPUCHECK " + json.dumps(probe(args.kind, args.seconds)), flush=True)
        return 0
    if args.step_timeout <= 10:
        p.error(f"--step-timeout must be more than 10 seconds, got {args.step_timeout:g}")
    if args.nvml_recording is not None and not args.nvml_recording.is_file():
        p.error(f"--nvml-recording: no such file {args.nvml_recording}")

    # the shell script's hard limit sends SIGTERM: leave through the finally blocks, so
    # that the cluster's processes are stopped and the summary is written
    def _interrupt(signum: int, frame: Any) -> None:
        # once: every later SIGTERM/SIGINT is ignored, so the cleanup this starts (here or
        # in dev.up's own) is never cut short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    mode, gpus = detect(args.nvml_recording)
    if args.require_gpu and mode != "gpu":
        print(f"gpu-check: no GPU here (mode {mode}) and --require-gpu given", file=sys.stderr)
        return 2
    summary = Summary(mode, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), gpus)
    summary.out = args.out
    work = Path(tempfile.mkdtemp(prefix="pasture-gpu-check-"))
    print(f"gpu-check: mode {mode}, GPUs {gpus}, work dir {work}", flush=True)
    code = 1
    try:
        summary.save()
        run_checks(summary, Harness(work, args.nvml_recording), args.step_timeout, args.hold)
    except Interrupted as exc:
        summary.interrupted = str(exc)
        code = 128 + exc.signum
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        shutil.rmtree(work, ignore_errors=True)
        summary.save()  # on every exit, an exception's included
    result = summary.to_dict()
    print(json.dumps(result, indent=2))
    if summary.interrupted is not None:
        return code
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
