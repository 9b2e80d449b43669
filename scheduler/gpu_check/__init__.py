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

Layout (issue 33): :mod:`~scheduler.gpu_check.steps` (outcomes, summary, hard limits,
the step runner), :mod:`~scheduler.gpu_check.probe` (what the tasks run),
:mod:`~scheduler.gpu_check.metrics` (pure comparisons), :mod:`~scheduler.gpu_check.harness`
(the cluster, detection and the checks); here the command line.

Tasks run ``python -m scheduler.gpu_check probe ...`` with this interpreter (so torch is the
one importable here), which prints one ``GPUCHECK {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scheduler.gpu_check.harness import (
    ACCURACY_RE,
    TERMINAL,
    Harness,
    check_memory_limit,
    detect,
    has_torch,
    models_by_index,
    nvidia_smi,
    run_checks,
)
from scheduler.gpu_check.metrics import (
    MIB,
    compare_gpu_metrics,
    parse_nvidia_smi,
    parse_prometheus,
    pasture_gpu_figures,
    utilisation_rise,
)
from scheduler.gpu_check.probe import (
    PROBE_RE,
    memory_limit_bytes,
    probe,
    probe_of,
)
from scheduler.gpu_check.steps import (
    Check,
    CheckFailed,
    Interrupted,
    Skip,
    StepTimeout,
    Summary,
    hard_limit,
    run_step,
)


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


__all__ = [
    "ACCURACY_RE",
    "Check",
    "CheckFailed",
    "Harness",
    "Interrupted",
    "MIB",
    "PROBE_RE",
    "Skip",
    "StepTimeout",
    "Summary",
    "TERMINAL",
    "check_memory_limit",
    "compare_gpu_metrics",
    "detect",
    "hard_limit",
    "has_torch",
    "main",
    "memory_limit_bytes",
    "models_by_index",
    "nvidia_smi",
    "parse_nvidia_smi",
    "parse_prometheus",
    "pasture_gpu_figures",
    "probe",
    "probe_of",
    "run_checks",
    "run_step",
    "utilisation_rise",
]
