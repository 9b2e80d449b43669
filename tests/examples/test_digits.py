"""digits: the model's maths, and ps + 2 workers training as real processes."""

import json
import re

import numpy as np

from scheduler.examples import digits


def test_shards_partition_the_training_set():
    split = digits.load_split()
    assert len(split.y_train) + len(split.y_test) == 1797
    shards = [digits.shard(split.x_train, split.y_train, i, 3) for i in range(3)]
    assert sum(len(y) for _, y in shards) == len(split.y_train)
    assert max(len(y) for _, y in shards) - min(len(y) for _, y in shards) <= 1


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    x, y = rng.random((20, 64)), rng.integers(0, 10, 20)
    params = digits.init_params(hidden=5, seed=2)
    _, grads = digits.loss_and_grad(params, x, y)
    eps = 1e-6
    for name in ("w1", "b1", "w2", "b2"):
        for idx in [tuple(rng.integers(0, s) for s in params[name].shape) for _ in range(3)]:
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric = digits.loss_and_grad(plus, x, y)[0] - digits.loss_and_grad(minus, x, y)[0]
            assert abs(numeric / (2 * eps) - grads[name][idx]) < 1e-5, (name, idx)


def test_ps_and_two_workers_reach_90_percent(gang):
    gang.start("scheduler.examples.digits", {"ps": 1, "worker": 2}, ["--min-accuracy", "0.9"])
    runs = gang.wait(timeout=120)
    assert {k: r.returncode for k, r in runs.items()} == {"ps-0": 0, "worker-0": 0, "worker-1": 0}
    acc = float(re.search(r"^test accuracy: (\d\.\d+)$", runs["ps-0"].output, re.M).group(1))
    assert acc >= 0.9
    result = json.loads((gang.job_dir / "result.json").read_text())
    assert result["workers"] == 2 and result["test_accuracy"] >= 0.9
    assert result["test_examples"] == 450 and result["train_examples"] == 1347
    for w in ("worker-0", "worker-1"):
        assert "done after 150 steps" in runs[w].output


def test_ps_fails_when_a_worker_dies_mid_training(gang):
    gang.start(
        "scheduler.examples.digits",
        {"ps": 1, "worker": 2},
        ["--steps", "1000", "--step-delay", "0.05", "--timeout", "30"],
    )
    ps = gang.procs["ps-0"]
    assert ps.stdout is not None
    seen = []
    while not seen or not seen[-1].startswith("step "):  # training is under way
        seen.append(ps.stdout.readline())
        assert seen[-1], "the ps exited before training started: " + "".join(seen)
    gang.procs["worker-1"].kill()
    runs = gang.wait(timeout=60)
    assert runs["ps-0"].returncode == 1
    # EOF or a reset, depending on whether the kill lands between or during messages.
    assert re.search(
        r"digits: (peer closed the connection|.*Connection reset by peer)", runs["ps-0"].output
    ), runs["ps-0"].output
    assert not (gang.job_dir / "result.json").exists()


def test_ps_exits_3_below_min_accuracy(gang):
    gang.start(
        "scheduler.examples.digits",
        {"ps": 1, "worker": 1},
        ["--steps", "2", "--lr", "0.001", "--min-accuracy", "0.9"],
    )
    runs = gang.wait(timeout=120)
    assert runs["ps-0"].returncode == 3
    assert "is below --min-accuracy 0.9" in runs["ps-0"].output
    assert runs["worker-0"].returncode == 0
