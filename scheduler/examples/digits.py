"""Synchronous data-parallel training on scikit-learn's handwritten digits, ps + workers.

The parameter-server architecture of Li et al., "Scaling Distributed Machine Learning with
the Parameter Server" (OSDI 2014), in its synchronous form (every step waits for every
worker, like TensorFlow's SyncReplicasOptimizer):

```
 ps-0 (holds the parameters, evaluates)          worker-i (holds shard i of the training set)
   |-- params (step s) -------------------------->  |
   |                                                | gradient of the loss on its shard
   |<------------------------------ gradient, n ----|
   | average the gradients (weighted by n), momentum SGD step, next s
```

Data: ``sklearn.datasets.load_digits`` (1,797 8x8 images shipped inside scikit-learn, no
download), split 75/25 into train/test with a fixed seed, so that every task computes the
same split on its own. Model: a one-hidden-layer MLP (64 -> ``--hidden`` tanh -> 10
softmax), full-shard gradient steps with momentum. The ps prints ``test accuracy: 0.9xx``
and writes ``$PASTURE_JOB_DIR/result.json``; it exits 3 when the accuracy is below
``--min-accuracy``, so a job can fail on a bad model.

Tasks find each other through the discovery environment (``PASTURE_ROLE_PS_HOSTS``,
``PASTURE_TASK_INDEX``, ``PASTURE_ROLE_WORKER_REPLICAS``); the protocol is
:mod:`scheduler.examples.wire`. Run as a task: ``python3 -m scheduler.examples.digits``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass

import numpy as np

from scheduler.examples import wire
from scheduler.examples.gang import DiscoveryError, TaskEnv

Params = dict[str, np.ndarray]
SPLIT_SEED = 0
TEST_FRACTION = 0.25


@dataclass(frozen=True)
class Split:
    """Train/test arrays. ``x_*``: float64 (n, 64) pixel values scaled to [0, 1];
    ``y_*``: int64 (n,) class labels 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_split() -> Split:
    """The digits data set split 75/25 (stratified, seed 0), identical in every task."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.data.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return Split(x_train, y_train, x_test, y_test)


def shard(x: np.ndarray, y: np.ndarray, index: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``index`` of ``count`` gets every ``count``-th example starting at ``index``."""
    if not 0 <= index < count:
        raise ValueError(f"worker index must be in [0, {count}), got {index}")
    return x[index::count], y[index::count]


def init_params(hidden: int, seed: int = 0, n_in: int = 64, n_out: int = 10) -> Params:
    """Glorot-uniform weights, zero biases. Shapes: w1 (n_in, hidden), b1 (hidden,),
    w2 (hidden, n_out), b2 (n_out,)."""
    rng = np.random.default_rng(seed)

    def glorot(a: int, b: int) -> np.ndarray:
        limit = np.sqrt(6.0 / (a + b))
        return rng.uniform(-limit, limit, size=(a, b))

    return {
        "w1": glorot(n_in, hidden),
        "b1": np.zeros(hidden),
        "w2": glorot(hidden, n_out),
        "b2": np.zeros(n_out),
    }


def forward(params: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden activations (n, hidden) and class probabilities (n, 10)."""
    h = np.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return h, p


def loss_and_grad(
    params: Params, x: np.ndarray, y: np.ndarray, l2: float = 1e-4
) -> tuple[float, Params]:
    """Mean cross-entropy (+ L2 on weights) over ``(x, y)`` and its gradient."""
    n = len(y)
    h, p = forward(params, x)
    loss = -np.log(p[np.arange(n), y] + 1e-12).mean()
    loss += 0.5 * l2 * (np.sum(params["w1"] ** 2) + np.sum(params["w2"] ** 2))
    d_logits = p.copy()
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    d_h = (d_logits @ params["w2"].T) * (1.0 - h**2)
    grads = {
        "w2": h.T @ d_logits + l2 * params["w2"],
        "b2": d_logits.sum(axis=0),
        "w1": x.T @ d_h + l2 * params["w1"],
        "b1": d_h.sum(axis=0),
    }
    return float(loss), grads


def accuracy(params: Params, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` classified as ``y``."""
    return float((forward(params, x)[1].argmax(axis=1) == y).mean())


def run_ps(env: TaskEnv, args: argparse.Namespace) -> int:
    """Serve parameters to the workers for ``args.steps`` synchronous steps, then evaluate.

    Returns:
        Exit code: 0, or 3 when the test accuracy is below ``args.min_accuracy``.

    Raises:
        TimeoutError: the workers did not all connect within ``args.timeout`` seconds.
        ConnectionError: a worker went away mid-training (the job's retry policy decides).
    """
    n_workers = env.replicas(args.worker_role)
    if n_workers < 1:
        raise DiscoveryError(f"the job has no {args.worker_role!r} tasks to train with")
    split = load_split()
    params = init_params(args.hidden)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    with wire.listen(env.task_port) as server:
        print(
            f"ps-{env.index}: listening on {env.task_host}:{env.task_port} for "
            f"{n_workers} workers (attempt {env.attempt})",
            flush=True,
        )
        conns = wire.accept(server, n_workers, args.timeout)
    by_index: dict[int, tuple[socket.socket, int]] = {}
    for conn in conns:
        conn.settimeout(args.timeout)
        meta, _ = wire.recv(conn)
        by_index[meta["index"]] = (conn, meta["examples"])
        print(
            f"ps: worker-{meta['index']} joined from {meta['host']} with "
            f"{meta['examples']} examples",
            flush=True,
        )
    if sorted(by_index) != list(range(n_workers)):
        raise wire.ProtocolError(f"expected workers 0..{n_workers - 1}, got {sorted(by_index)}")
    started = time.monotonic()
    loss = float("nan")
    for step in range(1, args.steps + 1):
        for conn, _ in by_index.values():
            wire.send(conn, {"step": step}, **params)
        total = sum(n for _, n in by_index.values())
        grad = {k: np.zeros_like(v) for k, v in params.items()}
        loss = 0.0
        for conn, n in by_index.values():
            meta, worker_grad = wire.recv(conn)
            loss += meta["loss"] * n / total
            for k in grad:
                grad[k] += worker_grad[k] * (n / total)
        for k in params:
            velocity[k] = args.momentum * velocity[k] - args.lr * grad[k]
            params[k] = params[k] + velocity[k]
        if step % args.log_every == 0 or step == args.steps:
            print(
                f"step {step:4d}/{args.steps}  train loss {loss:.4f}  "
                f"test accuracy {accuracy(params, split.x_test, split.y_test):.4f}",
                flush=True,
            )
    for conn, _ in by_index.values():
        wire.send(conn, {"done": True})
        conn.close()
    train_s = time.monotonic() - started
    acc = accuracy(params, split.x_test, split.y_test)
    result = {
        "job": env.job_name,
        "attempt": env.attempt,
        "test_accuracy": round(acc, 4),
        "train_loss": round(loss, 4),
        "test_examples": len(split.y_test),
        "train_examples": len(split.y_train),
        "workers": n_workers,
        "steps": args.steps,
        "train_seconds": round(train_s, 3),
        "worker_hosts": [f"{h}:{p}" for h, p in env.hosts[args.worker_role]],
    }
    print(f"trained {args.steps} steps with {n_workers} workers in {train_s:.1f} s")
    print(f"test accuracy: {acc:.3f}", flush=True)
    if env.job_dir:
        os.makedirs(env.job_dir, exist_ok=True)
        path = os.path.join(env.job_dir, "result.json")
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, path)
        print(f"wrote {path}")
    if acc < args.min_accuracy:
        print(
            f"test accuracy {acc:.3f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr
        )
        return 3
    return 0


def run_worker(env: TaskEnv, args: argparse.Namespace) -> int:
    """Compute gradients on this worker's shard for every step the ps sends.

    Returns:
        Exit code 0 once the ps says training is done.

    Raises:
        TimeoutError: the ps did not come up within ``args.timeout`` seconds.
        ConnectionError: the ps went away mid-training.
    """
    split = load_split()
    x, y = shard(split.x_train, split.y_train, env.index, env.replicas(args.worker_role))
    address = env.address(args.ps_role, 0)
    print(
        f"worker-{env.index}: {len(y)} training examples; connecting to ps at "
        f"{address[0]}:{address[1]}",
        flush=True,
    )
    steps = 0
    with wire.connect(address, args.timeout) as sock:
        wire.send(sock, {"index": env.index, "examples": len(y), "host": socket.gethostname()})
        sock.settimeout(args.timeout)
        while True:
            meta, params = wire.recv(sock)
            if meta.get("done"):
                break
            loss, grads = loss_and_grad(params, x, y)
            if args.step_delay:
                time.sleep(args.step_delay)
            wire.send(sock, {"step": meta["step"], "loss": loss}, **grads)
            steps += 1
    print(f"worker-{env.index}: done after {steps} steps")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (all have defaults that reach >= 0.9 test accuracy)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="synchronous steps (default 150)")
    p.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    p.add_argument("--momentum", type=float, default=0.9, help="momentum (default 0.9)")
    p.add_argument("--hidden", type=int, default=32, help="hidden units (default 32)")
    p.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds each worker sleeps per step, to make a long job (default 0)",
    )
    p.add_argument(
        "--min-accuracy",
        type=float,
        default=0.0,
        help="the ps exits 3 when the test accuracy is below this (default 0)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds to wait for peers to connect or answer (default 180)",
    )
    p.add_argument("--log-every", type=int, default=25, help="print progress every N steps")
    p.add_argument("--ps-role", default="ps", help="role name of the parameter server")
    p.add_argument("--worker-role", default="worker", help="role name of the workers")
    args = p.parse_args(argv)
    for name in ("steps", "hidden", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: dispatch on ``PASTURE_TASK_ROLE``; returns the exit code."""
    args = parse_args(argv)
    try:
        env = TaskEnv.from_environ()
        if env.role == args.ps_role:
            return run_ps(env, args)
        if env.role == args.worker_role:
            return run_worker(env, args)
        raise DiscoveryError(
            f"PASTURE_TASK_ROLE={env.role!r}: expected {args.ps_role!r} or {args.worker_role!r}"
        )
    except (DiscoveryError, TimeoutError, ConnectionError) as exc:
        print(f"digits: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
