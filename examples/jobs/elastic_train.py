"""Elastic data-parallel training under ``torchrun --nnodes=MIN:MAX`` (issue 29).

What an elastic program must do (docs/jobs.md, "Elastic jobs"):

1. join the process group through torchrun's elastic rendezvous (``init_process_group``
   with no address: torchrun sets RANK / WORLD_SIZE / MASTER_* for each round; pasture
   gives torchrun the rendezvous through ``PET_*`` variables);
2. load the last checkpoint at start (every round starts the program anew: after a grow,
   after a shrink, after a preemption);
3. checkpoint often, atomically (write a temporary file, then rename), from rank 0 only,
   on storage every replica sees (the job directory on the cluster share);
4. compute a result that does not depend on the world size (here: gradients are averaged).

The model is one parameter ``w`` minimising ``(w - 3)^2 / 2`` by averaged gradient steps:
after ``--steps`` steps from 0, ``w = 3 (1 - 0.95^steps)`` whatever the world size and
however often the group re-formed (each step reads and writes one consistent checkpoint).
Rank 0 appends one JSON line per step to ``--log``: ``{"step", "world", "restart"}``.

Run (one process per task)::

    torchrun --nproc-per-node 1 elastic_train.py --steps 200

Needs torch (gloo on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

LR = 0.05
TARGET = 3.0


def expected(steps: int) -> float:
    """``w`` after ``steps`` steps from 0."""
    return TARGET * (1.0 - (1.0 - LR) ** steps)


def main() -> None:
    job_dir = Path(os.environ.get("PASTURE_JOB_DIR", "."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="training steps in all")
    ap.add_argument("--step-s", type=float, default=0.1, help="seconds of 'work' per step")
    ap.add_argument("--ckpt", type=Path, default=job_dir / "elastic-ckpt.json")
    ap.add_argument("--log", type=Path, default=job_dir / "elastic-steps.jsonl")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    state = {"step": 0, "w": 0.0}
    if a.ckpt.exists():  # 2. resume from the last checkpoint
        state = json.loads(a.ckpt.read_text())
    w = torch.tensor(float(state["w"]), dtype=torch.float64)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    for step in range(int(state["step"]), a.steps):
        grad = (w - TARGET).clone()  # each rank's gradient on its (identical) shard
        dist.all_reduce(grad)
        w -= LR * grad / world  # 4. averaged: independent of the world size
        if rank == 0:  # 3. atomic checkpoint, then the step's log line
            tmp = a.ckpt.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": step + 1, "w": w.item()}))
            os.replace(tmp, a.ckpt)
            with a.log.open("a") as f:
                f.write(json.dumps({"step": step + 1, "world": world, "restart": restart}) + "\n")
        time.sleep(a.step_s)
    if rank == 0:
        print(f"done: w={w.item():.12f} expected {expected(a.steps):.12f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
