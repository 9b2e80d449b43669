"""The container executor with the real podman CLI and the base image (no mocks)."""

import dataclasses
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from scheduler import tenants
from scheduler.agent.container import ContainerExecutor
from scheduler.agent.executor import ExecutorError, TaskLaunch
from scheduler.logpaths import job_log_dir
from tests.ports import task_ports

IMAGE = "localhost/pasture-base:bookworm"

pytestmark = [
    pytest.mark.skipif(
        shutil.which("podman") is None
        or subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0,
        reason=f"podman or {IMAGE} missing (scripts build the base image)",
    ),
    pytest.mark.xdist_group("podman"),
]


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


def container_agent(store, tmp_path: Path, redis_url: str, ports: tuple[int, int]):
    """The registered agent of node ``c1`` (2 cores, 2 GiB) with the container executor;
    jobs go to it with ``test_startup.place_all(store, spec, "c1")`` and
    ``run_to_end(store, agent, job)``."""
    from tests.scheduler.agent.test_agent import make_agent

    agent = make_agent(
        store, tmp_path, redis_url, "c1", executor="container", stop_grace_s=2,
        port_range=task_ports(*ports), resources={"cpu": 2, "memory": "2Gi"},
    )  # fmt: skip
    agent.register()
    return agent


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
        "/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null;"
        ' echo "gpus=[${CUDA_VISIBLE_DEVICES-unset}] nvidia=$NVIDIA_VISIBLE_DEVICES'
        ' order=$CUDA_DEVICE_ORDER"; exit 3',
    )
    h = ex.start(spec)
    ex.started.append(h)
    assert not (spec.state_dir / "env").exists()  # may hold secrets: removed once read
    assert wait_exit(ex, h) == 3
    lines = spec.log_path.read_text().splitlines()
    assert lines[0] == f"task in {tmp_path / 'share/jobs/j'}"
    assert str(256 * 2**20) in lines[1:-1]  # the memory limit is applied
    # a task without GPUs sees none, whatever the image's NVIDIA_VISIBLE_DEVICES says
    assert lines[-1] == "gpus=[] nvidia=void order=PCI_BUS_ID"
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


def test_agent_runs_a_gang_as_containers(redis_url, tmp_path):
    """The agent with the container executor: discovery env through the env file, logs in
    the bind-mounted share, exit codes from the runtime, containers removed after."""
    import redis

    from scheduler.spec import parse_job_spec
    from scheduler.store import Store
    from tests.scheduler.agent.test_startup import place_all, run_to_end

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    job = f"ctr-{uuid.uuid4().hex[:6]}"
    agent = container_agent(store, tmp_path, redis_url, (33000, 33099))
    place_all(
        store,
        parse_job_spec(
            {
                "name": job,
                "image": IMAGE,
                "roles": {
                    "w": {
                        "replicas": 2,
                        "resources": {"cpu": "500m", "memory": "128Mi"},
                        "command": 'echo "rank $RANK/$WORLD_SIZE hosts $PASTURE_ROLE_W_HOSTS"; '
                        "exit $PASTURE_TASK_INDEX",
                    }
                },
            }
        ),
        "c1",
    )
    run_to_end(store, agent, job, timeout=90)
    t0, t1 = store.tasks(job)
    assert (t0.state, t0.exit_code) == ("succeeded", 0)
    assert (t1.state, t1.exit_code) == ("failed", 1)
    log = (
        (job_log_dir(tmp_path / "share", job, store.get_job(job).uid) / "w-1.log")
        .read_text()
        .splitlines()
    )
    assert log[0] == "=== attempt 1 on c1 ==="
    assert log[1] == f"rank 1/2 hosts 127.0.0.1:{t0.ports['main']},127.0.0.1:{t1.ports['main']}"
    left = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=pasture.job={job}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == []


def test_a_task_run_as_its_tenant_sees_its_job_directory_and_not_the_share(ex, tmp_path):
    """Issue 32 items 1 and 4 in container mode: the task runs as root of a user namespace
    whose ids are its VC's host ids (root inside is the VC's uid:gid outside, another id
    inside is an id of the VC's range), so it writes its container's own /etc/ssh (Volcano's
    MPI jobs do) while its files on the share belong to the VC; and of the share it sees
    its job's directory only: not the share root's files, not another job's directory."""
    share = tmp_path / "share"
    (share / "jobs" / "other").mkdir(parents=True)
    (share / "jobs" / "other" / "secret").write_text("bob's")
    (share / "root.txt").write_text("the share root")
    user = tenants.planned("default")
    spec = dataclasses.replace(
        launch(
            tmp_path,
            'id -u; id -g; echo "jobs: $(ls -A "$SHARE/jobs")";'
            ' echo "root: $(ls -A "$SHARE")"; cat "$SHARE/jobs/other/secret" 2>/dev/null;'
            ' cat "$SHARE/root.txt" 2>/dev/null; echo x > /etc/ssh/pasture && echo etc ok;'
            ' echo mine > "$PASTURE_JOB_DIR/own"; echo theirs > "$PASTURE_JOB_DIR/by-1000";'
            ' chown 1000:1000 "$PASTURE_JOB_DIR/by-1000"',
        ),
        user=user,
    )
    spec.env["SHARE"] = str(share)
    job_dir = share / "jobs" / "j"
    os.chown(job_dir, user.uid, user.gid)  # as the agent leaves it (startup.own_job_dir)
    os.chmod(job_dir, 0o750)
    spec.log_path.touch()
    os.chown(spec.log_path, user.uid, user.gid)
    h = ex.start(spec)
    ex.started.append(h)
    assert wait_exit(ex, h) == 0, spec.log_path.read_text()
    assert spec.log_path.read_text().splitlines() == [
        "0",
        "0",
        "jobs: j",
        "root: jobs",
        "etc ok",
    ]
    own, theirs = (job_dir / "own").stat(), (job_dir / "by-1000").stat()
    assert (own.st_uid, own.st_gid) == (user.uid, user.gid)
    assert (theirs.st_uid, theirs.st_gid) == (user.uid + 1000, user.gid + 1000)
    assert theirs.st_uid in tenants.id_range("default")


def test_the_agent_mounts_declared_data_read_only_unless_declared_writable(redis_url, tmp_path):
    """Issue 32, "the data its job declares (read-only unless declared otherwise)",
    container mode through the agent: a write to the job's mount fails with EROFS (even as
    the container's root), the mount declared ``read_only: false`` takes it."""
    import redis

    from scheduler.spec import parse_job_spec
    from scheduler.store import Store
    from tests.scheduler.agent.test_startup import place_all, run_to_end

    share = tmp_path / "share"
    (share / "data" / "ro").mkdir(parents=True)
    (share / "data" / "rw").mkdir(parents=True)
    (share / "data" / "ro" / "in.txt").write_text("input\n")
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    job = f"ro-{uuid.uuid4().hex[:6]}"
    agent = container_agent(store, tmp_path, redis_url, (33100, 33199))
    place_all(
        store,
        parse_job_spec(
            {
                "name": job,
                "image": IMAGE,
                "mounts": [
                    {"source": "data/ro", "target": "/data"},
                    {"source": "data/rw", "target": "/out", "read_only": False},
                ],
                "roles": {
                    "w": {
                        "replicas": 1,
                        "resources": {"cpu": "500m", "memory": "128Mi"},
                        "command": "cat /data/in.txt; echo x 2>&1 > /data/new || echo refused;"
                        " echo y > /out/new && echo rw ok",
                    }
                },
            }
        ),
        "c1",
    )
    run_to_end(store, agent, job, timeout=90)
    log = (job_log_dir(share, job, store.get_job(job).uid) / "w-0.log").read_text()
    assert store.tasks(job)[0].state == "succeeded", log
    assert "input" in log and "Read-only file system" in log and "refused" in log, log
    assert "rw ok" in log, log
    assert not (share / "data" / "ro" / "new").exists()
    assert (share / "data" / "rw" / "new").read_text() == "y\n"
