"""A task's start-up (agent/startup.py, agent/ssh.py) with the process executor, real
processes, a real redis-server and the machine's OpenSSH sshd: the environment a real
OpenPAI PyTorch DDP example reads, ssh between two tasks by their host aliases, code_dir."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis
import yaml

from scheduler.agent import startup
from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.logpaths import job_log_dir
from scheduler.spec import parse_job_spec
from scheduler.spec.model import JobSpec
from scheduler.store import Store, TaskRecord
from scheduler.store.snapshot import commit_payload, take_snapshot
from tests.scheduler.agent.test_agent import make_agent, until
from tests.sshd import SSHD

DATA = Path(__file__).parent / "data" / "openpai"


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def place_all(store: Store, spec: JobSpec, node: str = "n1") -> None:
    """Queue ``spec`` and commit every task of it on ``node`` (the loop's commit path)."""
    store.create_job(spec)
    store.transition(spec.name, "queued", "queued")
    snap, ctx = take_snapshot(store)
    job = next(j for j in snap.pending if j.name == spec.name)
    placements = tuple(
        TaskPlacement(r.name, i, node, r.resources) for r in job.roles for i in range(r.replicas)
    )
    ok, why = store.commit(
        ctx.version, commit_payload(Decision(binds=(Bind(spec.name, placements),)), ctx)
    )
    assert ok, why


def run_to_end(store, agent, job: str, timeout: float = 60.0):
    def finished():
        agent.reconcile()
        tasks = store.tasks(job)
        return tasks if tasks and all(t.done for t in tasks) else None

    return {t.key: t for t in until(finished, timeout=timeout)}


def read_env(path: Path) -> dict[str, str]:
    """An ``env -0`` dump as a dict."""
    items = path.read_bytes().split(b"\0")
    return dict(i.decode().split("=", 1) for i in items if b"=" in i)


def test_the_openpai_ddp_example_finds_every_variable_it_reads(store, tmp_path, redis_url):
    # The real job file and the real script it runs (tests/.../data/openpai/SOURCE.md).
    script = (DATA / "cifar10-single-mul-DDP-nccl-gloo.py.txt").read_text()
    reads = set(re.findall(r"os\.environ\['([A-Za-z0-9_]+)'\]", script))
    assert {"PAI_HOST_IP_worker_0", "PAI_worker_0_SynPort_PORT", "PAI_TASK_INDEX"} <= reads
    job = yaml.safe_load((DATA / "cifar10-single-mul-DDP-gloo.yaml").read_text())
    role = job["taskRoles"]["worker"]
    spec = parse_job_spec(
        {
            "name": "ddp",
            "roles": {
                "worker": {  # the job's role, instances and ports; a command that dumps env
                    "replicas": role["instances"],
                    "ports": list(role["resourcePerInstance"]["ports"]),
                    "resources": {"cpu": 1, "memory": "256Mi"},
                    "command": 'env -0 > "$PASTURE_JOB_DIR/env-$PAI_TASK_INDEX"',
                }
            },
        }
    )
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place_all(store, spec)
    tasks = run_to_end(store, agent, "ddp")
    assert all(t.state == "succeeded" for t in tasks.values()), tasks
    for index in (0, 1):
        env = read_env(tmp_path / "share/jobs/ddp" / f"env-{index}")
        missing = sorted(v for v in reads - {"MASTER_ADDR", "MASTER_PORT"} if v not in env)
        assert not missing, f"task worker-{index} lacks {missing}"
        assert env["PAI_TASK_INDEX"] == str(index)
        assert env["PAI_HOST_IP_worker_0"] == "127.0.0.1"
        assert env["PAI_worker_0_SynPort_PORT"] == str(tasks["worker-0"].ports["SynPort"])
        # what the script then sets itself is also what pasture's MASTER_* say
        assert env["MASTER_PORT"] == env["PAI_worker_0_SynPort_PORT"]


def test_three_named_ports_reach_the_task_in_their_variables(store, tmp_path, redis_url):
    spec = parse_job_spec(
        {
            "name": "ports",
            "roles": {
                "main-role": {
                    "ports": ["main", "tensorboard", "debug"],
                    "resources": {"cpu": 1, "memory": "256Mi"},
                    "command": 'env -0 > "$PASTURE_JOB_DIR/env"',
                }
            },
        }
    )
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place_all(store, spec)
    task = run_to_end(store, agent, "ports")["main-role-0"]
    env = read_env(tmp_path / "share/jobs/ports/env")
    for name in ("main", "tensorboard", "debug"):
        port = str(task.ports[name])
        assert env[f"PASTURE_PORT_{name.upper()}"] == port
        # "main-role" is not a shell name: /bin/sh (dash) drops such variables, so the
        # role's shell-name alias is what reaches the command
        assert env[f"PAI_PORT_LIST_main_role_0_{name}"] == port
        assert env[f"PAI_main_role_0_{name}_PORT"] == port
        assert env[f"PAI_CONTAINER_HOST_{name}_PORT_LIST"] == port
    assert env["MASTER_PORT"] == env["PASTURE_TASK_PORT"] == str(task.ports["main"])
    assert env["PASTURE_ROLE_MAIN_ROLE_HOSTS"] == f"127.0.0.1:{task.ports['main']}"


@pytest.mark.skipif(not os.path.exists(SSHD), reason="needs openssh-server (sshd)")
def test_tasks_reach_each_other_over_ssh_by_alias(store, tmp_path, redis_url):
    """Two tasks of an mpi job, each with its own sshd: a-0 runs ``ssh b-0 hostname`` and
    ``ssh <address>`` (the hostfile's form) through the job's key and host aliases."""
    spec = parse_job_spec(
        {
            "name": "sshjob",
            "mpi": True,
            "roles": {
                "a": {
                    "resources": {"cpu": 1, "memory": "256Mi"},
                    "command": (
                        "pasture-ssh-barrier 60\n"
                        'ssh b-0 hostname > "$PASTURE_JOB_DIR/hostname" || exit 10\n'
                        'ssh b-0 \'echo "$SSH_CONNECTION"\' > "$PASTURE_JOB_DIR/conn" || exit 11\n'
                        "ssh 127.0.0.1 true || exit 12\n"
                        'touch "$PASTURE_JOB_DIR/done"'
                    ),
                },
                "b": {
                    "resources": {"cpu": 1, "memory": "256Mi"},
                    "command": (
                        'for i in $(seq 600); do [ -e "$PASTURE_JOB_DIR/done" ] && exit 0;'
                        " sleep 0.1; done; exit 9"
                    ),
                },
            },
        }
    )
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place_all(store, spec)
    tasks = run_to_end(store, agent, "sshjob", timeout=90)
    job_dir = tmp_path / "share/jobs/sshjob"
    log_dir = job_log_dir(tmp_path / "share", "sshjob", store.get_job("sshjob").uid)
    logs = {k: (log_dir / f"{k}.log").read_text() for k in tasks}
    assert {k: t.state for k, t in tasks.items()} == {"a-0": "succeeded", "b-0": "succeeded"}, logs
    assert (job_dir / "hostname").read_text().strip() == subprocess.check_output(
        ["hostname"], text=True
    ).strip()
    # the connection ended at b-0's sshd, on the port the discovery environment names
    assert (job_dir / "conn").read_text().split()[3] == str(tasks["b-0"].ports["ssh"])
    # the submission's key never lay on the share, and left the node with the attempt
    assert not (job_dir / ".ssh").exists()
    assert not list((tmp_path / "work-n1" / "tasks").glob("*/ssh"))
    # each task's sshd was stopped with its command: nothing listens on the ports any more
    for t in tasks.values():
        out = subprocess.run(["ss", "-ltnH", f"sport = :{t.ports['ssh']}"], capture_output=True)
        assert out.stdout.strip() == b"", out.stdout


def _me(spec: JobSpec) -> TaskRecord:
    return TaskRecord("w", 0, 1, "n1", "127.0.0.1", {"main": 31000})


def test_code_dir_is_copied_to_code_in_a_fresh_working_directory(tmp_path):
    """OpenPAI's codeDir arrives as ./code: the examples' commands say ``python code/x.py``."""
    share = tmp_path / "share"
    code = share / "code" / "mnist"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "train.sh").write_text('echo "trained in $(pwd)"\n')
    spec = JobSpec.model_validate(
        {
            "name": "seed",
            "code_dir": "code/mnist",
            "roles": {"w": {"command": "sh code/pkg/train.sh; ls $PAI_CODE_DIR > listing"}},
        }
    )
    work = share / "jobs/seed/work/w-0"
    work.mkdir(parents=True)
    (work / "stale-from-attempt-0").write_text("x")
    me = _me(spec)
    boot = startup.prepare(
        job="seed",
        user="u",
        spec=spec,
        tasks=[me],
        me=me,
        node="n1",
        share=share,
        task_dir=tmp_path / "task",
        task_id="seed-w-0-a1",
        executor_kind="process",
    )
    assert boot.env["PAI_CODE_DIR"] == str(code)
    assert boot.env["PAI_WORK_DIR"] == boot.env["PASTURE_WORK_DIR"] == str(work)
    out = subprocess.run(
        ["/bin/sh", "-c", boot.command],
        env={**os.environ, **boot.env},
        cwd=share,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"trained in {work}"
    assert (work / "listing").read_text().split() == ["pkg"]
    assert (work / "code/pkg/train.sh").read_text() == (code / "pkg/train.sh").read_text()
    assert not (work / "stale-from-attempt-0").exists()  # each attempt starts fresh


@pytest.mark.parametrize(
    ("code_dir", "words"),
    [("code/missing", "pasture data push"), ("../outside", "outside the cluster share")],
)
def test_a_bad_code_dir_fails_the_start_with_a_reason(tmp_path, code_dir, words):
    share = tmp_path / "share"
    share.mkdir()
    doc = {"name": "seed", "code_dir": code_dir, "roles": {"w": {"command": "true"}}}
    if ".." in code_dir:
        # the spec refuses it at submit; start-up checks again for records stored before
        with pytest.raises(ValueError, match="code_dir"):
            JobSpec.model_validate(doc)
        spec = JobSpec.model_validate({**doc, "code_dir": None}).model_copy(
            update={"code_dir": code_dir}
        )
    else:
        spec = JobSpec.model_validate(doc)
    me = _me(spec)
    with pytest.raises(startup.StartupError, match=words):
        startup.prepare(
            job="seed",
            user="u",
            spec=spec,
            tasks=[me],
            me=me,
            node="n1",
            share=share,
            task_dir=tmp_path / "task",
            task_id="t",
            executor_kind="process",
        )


def test_user_env_wins_over_foreign_aliases_but_not_over_pasture_variables(tmp_path):
    spec = parse_job_spec(
        {
            "name": "envs",
            "env": {"JOB_NAME": "mine", "PASTURE_TASK_INDEX": "7"},
            "roles": {"w": {"command": "true", "env": {"VC_TASK_INDEX": "x"}}},
        }
    )
    me = _me(spec)
    boot = startup.prepare(
        job="envs",
        user="u",
        spec=spec,
        tasks=[me],
        me=me,
        node="n1",
        share=tmp_path,
        task_dir=tmp_path / "task",
        task_id="t",
        executor_kind="process",
    )
    assert boot.env["JOB_NAME"] == "mine" and boot.env["VC_TASK_INDEX"] == "x"
    assert boot.env["PASTURE_TASK_INDEX"] == "0"
    assert boot.command == "true"  # no ssh, no code_dir: the command as given


BASE_IMAGE = "localhost/pasture-base:bookworm"


@pytest.mark.skipif(
    shutil.which("podman") is None
    or subprocess.run(["podman", "image", "exists", BASE_IMAGE], check=False).returncode != 0,
    reason=f"podman or {BASE_IMAGE} missing (scripts/build-base-image.sh)",
)
@pytest.mark.xdist_group("podman")
def test_container_tasks_reach_each_other_over_ssh_and_see_volcano_hosts(
    store, tmp_path, redis_url
):
    """The same with the container executor (host network, the base image's sshd): the ssh
    directory is mounted at /run/pasture/ssh, ~/.ssh/config is written in the container, and
    the Volcano host files are at /etc/volcano."""
    spec = parse_job_spec(
        {
            "name": "rt-ssh-ctr",
            "image": BASE_IMAGE,
            "mpi": True,
            "roles": {
                "a": {
                    "resources": {"cpu": "500m", "memory": "256Mi"},
                    "command": (
                        "pasture-ssh-barrier 60\n"
                        '/usr/bin/ssh b-0 \'echo "$SSH_CONNECTION"\' > "$PASTURE_JOB_DIR/conn"'
                        " || exit 11\n"
                        'cat /etc/volcano/b.host > "$PASTURE_JOB_DIR/b.host" || exit 12\n'
                        'touch "$PASTURE_JOB_DIR/done"'
                    ),
                },
                "b": {
                    "resources": {"cpu": "500m", "memory": "256Mi"},
                    "command": (
                        'for i in $(seq 600); do [ -e "$PASTURE_JOB_DIR/done" ] && exit 0;'
                        " sleep 0.1; done; exit 9"
                    ),
                },
            },
        }
    )
    agent = make_agent(store, tmp_path, redis_url, executor="container")
    agent.register()
    place_all(store, spec)
    try:
        tasks = run_to_end(store, agent, "rt-ssh-ctr", timeout=120)
    finally:
        subprocess.run(
            ["podman", "rm", "-f", "--filter", "label=pasture.job=rt-ssh-ctr"],
            capture_output=True,
            check=False,
        )
    job_dir = tmp_path / "share/jobs/rt-ssh-ctr"
    log_dir = job_log_dir(tmp_path / "share", "rt-ssh-ctr", store.get_job("rt-ssh-ctr").uid)
    logs = {k: (log_dir / f"{k}.log").read_text() for k in tasks}
    assert {k: t.state for k, t in tasks.items()} == {"a-0": "succeeded", "b-0": "succeeded"}, logs
    # plain /usr/bin/ssh (no wrapper) found the alias in the container's ~/.ssh/config
    assert (job_dir / "conn").read_text().split()[3] == str(tasks["b-0"].ports["ssh"])
    assert (job_dir / "b.host").read_text() == "127.0.0.1"


@pytest.mark.skipif(
    shutil.which("podman") is None
    or subprocess.run(["podman", "image", "exists", BASE_IMAGE], check=False).returncode != 0,
    reason=f"podman or {BASE_IMAGE} missing (scripts/build-base-image.sh)",
)
@pytest.mark.xdist_group("podman")
def test_volcano_mpi_commands_that_start_their_own_sshd_serve_the_jobs_ssh(
    store, tmp_path, redis_url
):
    """Volcano's MPI example starts sshd itself (``/usr/sbin/sshd -D`` in the worker): in a
    container that sshd gets the job's sshd_config (task port, job key), pasture starts no
    second one, and the master reaches each worker by the addresses in
    /etc/volcano/mpiworker.host and by alias."""
    vjob = next(yaml.safe_load_all((DATA.parent / "volcano" / "mpi-example.yaml").read_text()))
    master_cmd, worker_cmd = (
        t["template"]["spec"]["containers"][0]["command"][2] for t in vjob["spec"]["tasks"]
    )
    first_lines = "".join(master_cmd.splitlines(keepends=True)[:2])
    assert "/usr/sbin/sshd -D" in worker_cmd
    spec = parse_job_spec(
        {
            "name": "rt-vc-mpi",
            "image": BASE_IMAGE,
            "mpi": True,
            "roles": {
                "mpimaster": {
                    "resources": {"cpu": "250m", "memory": "128Mi"},
                    "command": (
                        "pasture-ssh-barrier 60 || exit 10\n"
                        + first_lines
                        + 'for h in $(echo "$MPI_HOST" | tr "," " ") mpiworker-1; do'
                        " /usr/bin/ssh \"$h\" 'echo $SSH_CONNECTION' || exit 11; done"
                        ' > "$PASTURE_JOB_DIR/conns"'
                    ),
                },
                "mpiworker": {
                    "replicas": 2,
                    "resources": {"cpu": "250m", "memory": "128Mi"},
                    "command": worker_cmd,
                },
            },
        }
    )
    agent = make_agent(store, tmp_path, redis_url, executor="container")
    agent.register()
    place_all(store, spec)
    try:

        def master_done():
            agent.reconcile()
            return store.task("rt-vc-mpi", "mpimaster-0").done

        until(master_done, timeout=120)
        # the master completed the job (Volcano: TaskCompleted -> CompleteJob): stop workers
        workers = [t for t in store.tasks("rt-vc-mpi") if t.role == "mpiworker"]
        for t in workers:
            t.desired = "stop"
        store.update_tasks("rt-vc-mpi", workers)
        tasks = run_to_end(store, agent, "rt-vc-mpi", timeout=120)
    finally:
        subprocess.run(
            ["podman", "rm", "-f", "--filter", "label=pasture.job=rt-vc-mpi"],
            capture_output=True,
            check=False,
        )
    job_dir = tmp_path / "share/jobs/rt-vc-mpi"
    log_dir = job_log_dir(tmp_path / "share", "rt-vc-mpi", store.get_job("rt-vc-mpi").uid)
    log = (log_dir / "mpimaster-0.log").read_text()
    assert tasks["mpimaster-0"].state == "succeeded", log
    # workers ran until stopped: their own sshd -D did not fail on the port
    assert {tasks[k].state for k in ("mpiworker-0", "mpiworker-1")} == {"stopped"}
    ports = [line.split()[3] for line in (job_dir / "conns").read_text().splitlines()]
    w0, w1 = (str(tasks[f"mpiworker-{i}"].ports["ssh"]) for i in (0, 1))
    # both host-file lines are 127.0.0.1: the address reaches the first task there (the
    # master's own sshd); the alias reaches worker 1's sshd
    m = str(tasks["mpimaster-0"].ports["ssh"])
    assert ports == [m, m, w1], (ports, m, w0, w1)
    assert (job_dir / "volcano-1" / "mpiworker.host").read_text() == "127.0.0.1\n127.0.0.1"
    # pasture started no sshd of its own in the workers (its log file would exist)
    for key in ("mpiworker-0", "mpiworker-1"):
        assert not list((tmp_path / "work-n1/tasks").glob(f"rt-vc-mpi-{key}-a1/ssh/sshd.log"))
