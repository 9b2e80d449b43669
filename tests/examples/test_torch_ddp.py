"""torch_ddp: clear failures without torch; a real 2-rank gloo run when a torch interpreter
is given in PASTURE_TORCH_PYTHON (torch is not in the project venv, see the job README)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(python: str, env: dict[str, str], args=()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [python, "-m", "scheduler.examples.torch_ddp", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_missing_rendezvous_variables_are_named():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.examples.torch_ddp"],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in out.stderr


def test_image_without_torch_fails_with_the_reason():
    try:
        import torch  # noqa: F401

        pytest.skip("torch is importable here; the no-torch path cannot be exercised")
    except ImportError:
        pass
    p = _run(
        sys.executable,
        {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
    )
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1 and "has no torch" in out


@pytest.mark.skipif(
    not os.environ.get("PASTURE_TORCH_PYTHON"),
    reason="set PASTURE_TORCH_PYTHON to an interpreter with torch to run DDP",
)
def test_two_gloo_ranks_train_to_90_percent(tmp_path, free_port):
    python = os.environ["PASTURE_TORCH_PYTHON"]
    port = free_port()
    common = {
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "LOCAL_RANK": "0",
        "PASTURE_JOB_DIR": str(tmp_path),
    }
    procs = [_run(python, {**common, "RANK": str(r)}, ["--min-accuracy", "0.9"]) for r in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "with gloo" in outs[0]
    acc = float(re.search(r"^test accuracy: (\d\.\d+)$", outs[0], re.M).group(1))
    assert acc >= 0.9
    assert (tmp_path / "result.json").exists()


def test_each_rank_uses_a_device_it_sees_never_local_rank_beyond_them():
    """H200 run (../shared/gpu/): the second GPU task of a job on a node has LOCAL_RANK 1
    but sees one GPU (its own); cuda:1 does not exist for it."""
    from scheduler.examples.torch_ddp import cuda_device_index

    assert cuda_device_index(local_rank=1, visible=1) == 0
    assert cuda_device_index(local_rank=0, visible=1) == 0
    # torchrun, one process per GPU of a 4-GPU task: LOCAL_RANK picks its GPU
    assert [cuda_device_index(r, 4) for r in range(4)] == [0, 1, 2, 3]
    # a 2-GPU task that is the third of its job on the node stays within its own two
    assert cuda_device_index(local_rank=2, visible=2) == 0
    assert all(0 <= cuda_device_index(r, v) < v for r in range(16) for v in range(1, 9))
    with pytest.raises(ValueError, match="visible must be at least 1"):
        cuda_device_index(0, 0)
