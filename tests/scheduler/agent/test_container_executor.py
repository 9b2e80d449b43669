"""The container executor with the real podman CLI and the base image (no mocks)."""

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from scheduler.agent.container import ContainerExecutor
from scheduler.agent.executor import ExecutorError, TaskLaunch

IMAGE = "localhost/pasture-base:bookworm"

pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None
    or subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0,
    reason=f"podman or {IMAGE} missing (scripts build the base image)",
)


def launch(tmp_path: Path, command: str, image: str | None = IMAGE) -> TaskLaunch:
    tid = f"test-{uuid.uuid4().hex[:10]}"
    (tmp_path / "share" / "jobs" / "j" / "logs").mkdir(parents=True, exist_ok=True)
    return TaskLaunch(
        task_id=tid,
        job="j",
        role="w",
        index=0,
        attempt=1,
        node="n",
        command=command,
        image=image,
        env={"PASTURE_JOB_DIR": str(tmp_path / "share/jobs/j"), "WHO": "task"},
        cpu_m=500,
        memory=256 * 2**20,
        gpus=[],
        log_path=tmp_path / "share/jobs/j/logs/w-0.log",
        share_dir=tmp_path / "share",
        state_dir=tmp_path / "state" / tid,
    )


@pytest.fixture()
def ex():
    ex = ContainerExecutor("podman")
    handles: list[str] = []
    ex.started = handles  # type: ignore[attr-defined]
    yield ex
    for h in handles:
        ex.cleanup(h)


def wait_exit(ex, handle, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = ex.poll(handle)
        if code is not None:
            return code
        time.sleep(0.2)
    raise AssertionError("container did not finish")


def test_runs_with_limits_env_share_and_exit_code(ex, tmp_path):
    spec = launch(
        tmp_path,
        'echo "$WHO in $(pwd)"; cat /sys/fs/cgroup/memory.max '
        "/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null; exit 3",
    )
    h = ex.start(spec)
    ex.started.append(h)
    assert wait_exit(ex, h) == 3
    lines = spec.log_path.read_text().splitlines()
    assert lines[0] == f"task in {tmp_path / 'share/jobs/j'}"
    assert str(256 * 2**20) in lines[1:]  # the memory limit is applied
    inspect = subprocess.run(
        ["podman", "inspect", json.loads(h)["name"]], capture_output=True, text=True, check=True
    )
    host = json.loads(inspect.stdout)[0]["HostConfig"]
    assert host["NanoCpus"] == 500_000_000 and host["NetworkMode"] == "host"


def test_stop_and_cleanup(ex, tmp_path):
    h = ex.start(launch(tmp_path, "sleep 300"))
    ex.started.append(h)
    assert ex.poll(h) is None
    t0 = time.monotonic()
    ex.stop(h, grace_s=2)
    assert time.monotonic() - t0 < 30
    assert ex.poll(h) is not None
    ex.cleanup(h)
    assert ex.poll(h) == -1  # gone


def test_missing_image_is_a_clear_error(ex, tmp_path):
    with pytest.raises(ExecutorError, match="needs an image"):
        ex.start(launch(tmp_path, "true", image=None))
    with pytest.raises(ExecutorError, match="run failed"):
        ex.start(launch(tmp_path, "true", image="localhost/no-such-image:none"))


def test_gpu_devices_are_cdi_and_renumbered(tmp_path):
    spec = launch(tmp_path, "true")
    spec = TaskLaunch(**{**spec.__dict__, "gpus": [2, 5]})
    argv = ContainerExecutor("podman").argv(spec, "/tmp/env")
    assert argv.count("--device") == 2
    assert "nvidia.com/gpu=2" in argv and "nvidia.com/gpu=5" in argv
