"""PyTorch DistributedDataParallel on the digits data set, torchrun-style.

For users whose task images carry torch (the project's own venv and example image do not).
Every task of the job is one DDP rank; it joins the process group with PyTorch's ``env://``
rendezvous from the variables pasture's discovery environment sets exactly as ``torchrun``
would: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` (rank 0's
address and first port). The backend is NCCL when the task sees a CUDA device and gloo on
CPU. The device is one of those the task sees (:func:`cuda_device_index`): pasture gives
each task only its own GPUs (CUDA_VISIBLE_DEVICES), so a task is never sent to
``cuda:{LOCAL_RANK}`` beyond them. Each rank trains on its own shard
(``DistributedSampler``); DDP all-reduces gradients (Li et al., "PyTorch Distributed",
VLDB 2020). Rank 0 prints ``test accuracy: 0.9xx`` and writes
``$PASTURE_JOB_DIR/result.json``.

Run as a task: ``python3 -m scheduler.examples.torch_ddp``, or under torchrun with one
process per task (see examples/jobs/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30, help="passes over each shard")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--hidden", type=int, default=64, help="hidden units")
    p.add_argument(
        "--min-accuracy",
        type=float,
        default=0.0,
        help="rank 0 exits 3 when the test accuracy is below this",
    )
    p.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for all ranks to join"
    )
    return p.parse_args(argv)


def _rendezvous_env() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the environment.

    Raises:
        SystemExit: a variable is missing (with its name).
    """
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise SystemExit(
            f"torch_ddp: {', '.join(missing)} not set: run as a task of a pasture job or "
            "under torchrun"
        )
    return (
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def cuda_device_index(local_rank: int, visible: int) -> int:
    """The CUDA ordinal (0 .. visible-1) a rank uses, of the ``visible`` devices it sees
    (``torch.cuda.device_count()``, i.e. within CUDA_VISIBLE_DEVICES).

    Under torchrun with one process per GPU of a task, LOCAL_RANK is below ``visible`` and
    picks that GPU. A pasture task without torchrun is one process: its LOCAL_RANK counts the
    job's tasks on the node, while it sees only its own GPUs, so it wraps into them
    (``local_rank % visible``: cuda:0 with one GPU).

    Raises:
        ValueError: ``visible`` < 1 or ``local_rank`` < 0.
    """
    if visible < 1:
        raise ValueError(f"visible must be at least 1 CUDA device, got {visible}")
    if local_rank < 0:
        raise ValueError(f"LOCAL_RANK must be at least 0, got {local_rank}")
    return local_rank % visible


def main(argv: list[str] | None = None) -> int:
    """Train, evaluate on rank 0; returns the exit code."""
    args = parse_args(argv)
    rank, world_size, local_rank = _rendezvous_env()
    try:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.distributed import DistributedSampler
    except ImportError:
        print(
            "torch_ddp: this task image has no torch; use an image that carries it", file=sys.stderr
        )
        return 1
    from datetime import timedelta

    from scheduler.examples.digits import load_split

    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    gpu = cuda_device_index(local_rank, torch.cuda.device_count()) if use_cuda else 0
    device = torch.device(f"cuda:{gpu}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    print(
        f"rank {rank}/{world_size}: joining {os.environ['MASTER_ADDR']}:"
        f"{os.environ['MASTER_PORT']} with {backend} on {device}",
        flush=True,
    )
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=args.timeout),
    )
    try:
        torch.manual_seed(0)
        split = load_split()
        train = TensorDataset(
            torch.tensor(split.x_train, dtype=torch.float32), torch.tensor(split.y_train)
        )
        sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
            train, num_replicas=world_size, rank=rank, seed=0
        )
        loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)
        ).to(device)
        ddp = DistributedDataParallel(model, device_ids=[gpu] if use_cuda else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        started = time.monotonic()
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            total = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                loss = loss_fn(ddp(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
                total += float(loss) * len(y)
            if rank == 0 and ((epoch + 1) % 5 == 0 or epoch + 1 == args.epochs):
                print(
                    f"epoch {epoch + 1:3d}/{args.epochs}  rank-0 train loss "
                    f"{total / len(sampler):.4f}",
                    flush=True,
                )
        dist.barrier()
        if rank != 0:
            return 0
        with torch.no_grad():
            logits = model(torch.tensor(split.x_test, dtype=torch.float32, device=device))
            acc = float((logits.argmax(dim=1).cpu().numpy() == split.y_test).mean())
        train_s = time.monotonic() - started
        print(f"trained {args.epochs} epochs on {world_size} ranks ({backend}) in {train_s:.1f} s")
        print(f"test accuracy: {acc:.3f}", flush=True)
        job_dir = os.environ.get("PASTURE_JOB_DIR")
        if job_dir:
            os.makedirs(job_dir, exist_ok=True)
            path = os.path.join(job_dir, "result.json")
            with open(f"{path}.tmp", "w") as f:
                json.dump(
                    {
                        "test_accuracy": round(acc, 4),
                        "world_size": world_size,
                        "backend": backend,
                        "epochs": args.epochs,
                        "train_seconds": round(train_s, 3),
                    },
                    f,
                    indent=2,
                )
            os.replace(f"{path}.tmp", path)
        return 3 if acc < args.min_accuracy else 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
