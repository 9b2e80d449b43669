"""Foreign job files end to end in process mode (real redis-server, loop, agents, API, sshd
and task processes): the document TEXT goes through the real submit path (the ``pasture``
CLI or ``POST /api/v1/jobs``), is translated there (scheduler/spec/formats/) and runs.

- the seed OpenPAI protocol v1 example of issue 12 (``mnist_024``) with its code pushed to
  the share by ``pasture data push`` over a real sshd: a stand-in ``tf_cnn_benchmarks.py``
  (no TensorFlow here) parses the real flags and leaves a mark per task;
- an OpenPAI v2 master/worker file with ``completion.minSucceededInstances: 1`` on the
  master ends when the master succeeds (the workers, which would run forever, are stopped);
- a Volcano ps/worker Job with ``TaskCompleted -> CompleteJob`` on the worker task ends when
  the workers complete;
- an OpenPAI v2 role with three named ports gets each in its variables, and MASTER_PORT
  and the host lists use the first declared (main) one.

The documents are modelled on files of tests/compat/corpus/ (named at each). One cluster
(2 nodes x 4 cores, 32 GiB and 4 fake GPUs each: the seed's workers ask 4 GPUs) serves
the module; every job is bounded by a timeout and the cluster, the sshd and their tasks
are stopped at the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from scheduler import dev
from tests.sshd import keygen, running_sshd

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PASTURE = str(Path(sys.executable).parent / "pasture")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compat-dev")
    c = dev.up(
        nodes=2,
        gpus_per_node=4,
        cpu_per_node=4,
        memory_per_node="32Gi",
        api=True,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=5,
        loop_interval_s=0.3,
        stop_grace_s=2,
        directory=directory,
    )
    yield c
    dev.down(directory)


@pytest.fixture(scope="module")
def api(cluster):
    with httpx.Client(
        base_url=cluster.endpoint,
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=30,
    ) as client:
        yield client


def submit_text(api, text: str, ctype: str = "application/yaml") -> dict:
    """POST the document text as a client sends it; returns the stored job."""
    r = api.post("/api/v1/jobs", content=text.encode(), headers={"content-type": ctype})
    assert r.status_code == 201, r.text
    return r.json()


def wait_job(api, name, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{name}").json()
        if job.get("state") in ("succeeded", "failed", "stopped"):
            return job
        time.sleep(0.3)
    api.post(f"/api/v1/jobs/{name}/stop")
    events = api.get(f"/api/v1/jobs/{name}/events").json()
    raise AssertionError(f"job {name} is {job.get('state')} after {timeout} s: {events}")


def wait_running(api, name, n, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{name}").json()
        if sum(t["state"] == "running" for t in job.get("tasks", [])) >= n:
            return job
        time.sleep(0.2)
    raise AssertionError(f"{name}: fewer than {n} tasks running: {job}")


def by_key(job: dict) -> dict[str, dict]:
    return {f"{t['role']}-{t['index']}": t for t in job["tasks"]}


def task_pids(cluster, name: str) -> dict[str, int]:
    """Each task's process id, from the handle its agent stored. Read with a pattern, not
    json.loads: the store keeps the first 512 characters of a handle, and a process
    handle with its cgroup paths can be longer (the pid comes first)."""
    out = {}
    for t in cluster.store().tasks(name):
        m = re.search(r'"pid": ([0-9]+)', t.handle or "")
        if m:
            out[t.key] = int(m.group(1))
    return out


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- a. the seed OpenPAI v1 example, code pushed to the share ------------------------------

# issue 12's seed (tests/compat/corpus/openpai-v1/seed-mnist_024.json) with codeDir on the
# share instead of HDFS (docs/compat.md, codeDir): everything else as written.
SEED = """\
{"jobName": "mnist_024", "image": "openpai/pai.example.tensorflow",
 "codeDir": "code/mnist",
 "taskRoles": [
  {"name": "ps_server", "taskNumber": 2, "cpuNumber": 2, "memoryMB": 8192, "gpuNumber": 0,
   "command": "python code/tf_cnn_benchmarks.py --ps_hosts=$PAI_TASK_ROLE_ps_server_HOST_LIST --worker_hosts=$PAI_TASK_ROLE_worker_HOST_LIST --job_name=ps"},
  {"name": "worker", "taskNumber": 2, "cpuNumber": 2, "memoryMB": 16384, "gpuNumber": 4,
   "command": "python code/tf_cnn_benchmarks.py --variable_update=parameter_server --data_dir=$PAI_DATA_DIR --ps_hosts=$PAI_TASK_ROLE_ps_server_HOST_LIST --worker_hosts=$PAI_TASK_ROLE_worker_HOST_LIST --job_name=worker"}]}
"""  # noqa: E501

# The stand-in for tensorflow/benchmarks' tf_cnn_benchmarks.py: its real flags, the host
# lists checked as TensorFlow's ClusterSpec needs them (host:port, one per task), a mark per
# task in $PAI_OUTPUT_DIR. A TF parameter server never returns (server.join()); the seed
# sets no minSucceededTaskCount, so OpenPAI v1's default (every task of the role must
# succeed, docs/compat.md) needs the ps to end: it serves until the workers' marks exist.
STAND_IN = '''\
"""Stand-in for tf_cnn_benchmarks.py (tests/integration/test_compat_process.py)."""
import argparse
import json
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--ps_hosts", required=True)
parser.add_argument("--worker_hosts", required=True)
parser.add_argument("--job_name", required=True, choices=["ps", "worker"])
parser.add_argument("--variable_update", default=None)
parser.add_argument("--data_dir", default=None)
args = parser.parse_args()


def host_list(flag, value):
    hosts = value.split(",")
    ok = len(hosts) == 2 and all(
        h.rpartition(":")[0] and h.rpartition(":")[2].isdigit() for h in hosts
    )
    if not ok:
        sys.exit(f"--{flag}: expected 2 host:port entries, got {value!r}")
    return hosts


ps, workers = host_list("ps_hosts", args.ps_hosts), host_list("worker_hosts", args.worker_hosts)
if args.job_name == "worker" and (args.variable_update != "parameter_server" or not args.data_dir):
    sys.exit(f"worker: --variable_update/--data_dir missing: {sys.argv}")
out = Path(os.environ["PAI_OUTPUT_DIR"])
index = int(os.environ["PAI_TASK_INDEX"])
mark = {
    "job_name": args.job_name,
    "role": os.environ["PAI_CURRENT_TASK_ROLE_NAME"],
    "index": index,
    "ps_hosts": ps,
    "worker_hosts": workers,
    "data_dir": args.data_dir,
    "gpus": os.environ["PAI_CURRENT_TASK_ROLE_GPU_COUNT"],
    "cwd": os.getcwd(),
}
tmp = out / f".{args.job_name}-{index}.tmp"
tmp.write_text(json.dumps(mark))
tmp.rename(out / f"{args.job_name}-{index}.json")
print(f"{args.job_name} {index}: ps {ps} workers {workers}", flush=True)
if args.job_name == "ps":
    deadline = time.monotonic() + 60
    while not all((out / f"worker-{i}.json").exists() for i in range(len(workers))):
        if time.monotonic() > deadline:
            sys.exit("ps: the workers did not finish within 60 s")
        time.sleep(0.2)
'''


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd with SFTP on loopback for ``pasture data push``: (port, key dir)."""
    d = tmp_path_factory.mktemp("compat-sshd")
    keygen(d / "user")
    with running_sshd(d, (d / "user.pub").read_text(), "Subsystem sftp internal-sftp\n") as port:
        yield port, d


def pasture(cluster, home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The ``pasture`` CLI as a user runs it, against the dev cluster's API."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")},
        "HOME": str(home),
        "PASTURE_CONFIG_HOME": str(home / "pasture"),
        "PASTURE_ENDPOINT": cluster.endpoint,
        "PASTURE_TOKEN": cluster.token,
        "COLUMNS": "200",
    }
    return subprocess.run(
        [PASTURE, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_seed_openpai_v1_example_runs_with_its_code_pushed_to_the_share(
    cluster, api, sshd, tmp_path
):
    port, keys = sshd
    code = tmp_path / "mnist"
    code.mkdir()
    (code / "tf_cnn_benchmarks.py").write_text(STAND_IN)
    r = pasture(
        cluster,
        tmp_path,
        "data",
        "push",
        str(code),
        "code/mnist",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--user",
        "root",
        "--key",
        str(keys / "user"),
        "--known-hosts",
        str(tmp_path / "known_hosts"),
        "--share-dir",
        cluster.share_dir,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    share = Path(cluster.share_dir)
    assert (share / "code/mnist/tf_cnn_benchmarks.py").read_text() == STAND_IN

    job_file = tmp_path / "mnist_024.json"
    job_file.write_text(SEED)
    r = pasture(cluster, tmp_path, "job", "submit", str(job_file), "--wait", "--timeout", "90")
    job = api.get("/api/v1/jobs/mnist-024").json()
    logs = {
        key: (share / f"jobs/mnist-024/logs/{key}.log").read_text()
        for key in ("ps_server-0", "ps_server-1", "worker-0", "worker-1")
        if (share / f"jobs/mnist-024/logs/{key}.log").exists()
    }
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\n{job}\n{logs}"
    assert "mnist_024" in r.stderr and "mnist-024" in r.stderr  # the name warning
    assert job["state"] == "succeeded" and job["reason"] == "all tasks succeeded", job

    tasks = by_key(job)

    def hosts(role: str) -> list[str]:
        ts = sorted((t for t in job["tasks"] if t["role"] == role), key=lambda t: t["index"])
        return [f"{t['address']}:{next(iter(t['ports'].values()))}" for t in ts]

    assert all(len(t["ports"]) == 1 for t in job["tasks"]), job["tasks"]
    out = share / "jobs/mnist-024/output"
    for role, job_name, gpus in (("ps_server", "ps", "0"), ("worker", "worker", "4")):
        for i in (0, 1):
            mark = json.loads((out / f"{job_name}-{i}.json").read_text())
            assert mark["role"] == role and mark["index"] == i, mark
            assert mark["ps_hosts"] == hosts("ps_server"), (mark, job["tasks"])
            assert mark["worker_hosts"] == hosts("worker"), (mark, job["tasks"])
            assert mark["gpus"] == gpus, mark
            # the command ran in its own working dir, the pushed code in ./code
            assert mark["cwd"] == str(share / f"jobs/mnist-024/work/{role}-{i}"), mark
            assert tasks[f"{role}-{i}"]["state"] == "succeeded"
    worker = json.loads((out / "worker-0.json").read_text())
    assert worker["data_dir"] == str(share)  # no dataDir: PAI_DATA_DIR is the share


# -- b. OpenPAI v2 master/worker, minSucceededInstances 1 on the master ---------------------

# Modelled on tests/compat/corpus/openpai-v2/cifar10-single-mul-DDP-nccl.yaml (microsoft/pai
# examples): protocol 2, a docker image prerequisite, per-role completion.
PAI_MASTER_WORKER = """\
protocolVersion: 2
name: pai-master-worker
type: job
jobRetryCount: 0
prerequisites:
  - type: dockerimage
    uri: 'openpai/standard:python_3.6-pytorch_1.2.0-gpu'
    name: docker_image_0
taskRoles:
  master:
    instances: 1
    completion:
      minSucceededInstances: 1
    taskRetryCount: 0
    dockerImage: docker_image_0
    resourcePerInstance:
      gpu: 0
      cpu: 1
      memoryMB: 512
    commands:
      - sleep 2
      - echo master done
  worker:
    instances: 2
    taskRetryCount: 0
    dockerImage: docker_image_0
    resourcePerInstance:
      gpu: 0
      cpu: 1
      memoryMB: 512
    commands:
      - echo worker $PAI_TASK_INDEX serves forever
      - sleep 1000
defaults:
  virtualCluster: default
"""


def test_openpai_v2_master_worker_ends_when_the_master_succeeds(cluster, api):
    submitted = submit_text(api, PAI_MASTER_WORKER)
    assert submitted["name"] == "pai-master-worker"
    wait_running(api, "pai-master-worker", 3)
    pids = task_pids(cluster, "pai-master-worker")
    job = wait_job(api, "pai-master-worker", timeout=60)
    assert job["state"] == "succeeded", job
    assert "1 of 1 task(s) of role master succeeded" in job["reason"], job
    states = {k: t["state"] for k, t in by_key(job).items()}
    assert states == {"master-0": "succeeded", "worker-0": "stopped", "worker-1": "stopped"}
    assert all(gone(pids[k]) for k in ("worker-0", "worker-1")), pids


# -- c. Volcano ps/worker, TaskCompleted -> CompleteJob on the worker task ------------------

# Modelled on tests/compat/corpus/volcano/tf-example-cpu.yaml (volcano-sh/volcano
# example/integrations/tensorflow): env and svc plugins, a ps that serves forever, workers
# that read the svc plugin's host files. Process tasks read them from
# $PASTURE_VOLCANO_HOSTS_DIR (pasture does not write the node's /etc/volcano).
VOLCANO_PS_WORKER = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: volcano-ps-worker
spec:
  minAvailable: 3
  schedulerName: volcano
  plugins:
    env: []
    svc: []
  policies:
    - event: PodEvicted
      action: RestartJob
  tasks:
    - replicas: 1
      name: ps
      template:
        spec:
          containers:
            - command:
                - sh
                - -c
                - |
                  echo "ps ${VK_TASK_INDEX} serves until the job completes";
                  sleep 1000
              image: volcanosh/example-tf-cpu:0.0.1
              name: tensorflow
              ports:
                - containerPort: 2222
                  name: tfjob-port
              resources:
                requests:
                  cpu: 500m
                  memory: 256Mi
          restartPolicy: OnFailure
    - replicas: 2
      name: worker
      policies:
        - event: TaskCompleted
          action: CompleteJob
      template:
        spec:
          containers:
            - command:
                - sh
                - -c
                - |
                  PS_HOST=`cat ${PASTURE_VOLCANO_HOSTS_DIR}/ps.host | tr "\\n" ","`;
                  WORKER_HOST=`cat ${PASTURE_VOLCANO_HOSTS_DIR}/worker.host | tr "\\n" ","`;
                  echo "worker ${VK_TASK_INDEX} of ${VC_WORKER_NUM}: ps ${PS_HOST} workers ${WORKER_HOST}" > ${PASTURE_JOB_DIR}/output/worker-${VC_TASK_INDEX};
                  sleep 2
              image: volcanosh/example-tf-cpu:0.0.1
              name: tensorflow
              ports:
                - containerPort: 2222
                  name: tfjob-port
              resources:
                requests:
                  cpu: 500m
                  memory: 256Mi
          restartPolicy: OnFailure
"""  # noqa: E501


def test_volcano_ps_worker_completes_when_the_workers_complete(cluster, api):
    submitted = submit_text(api, VOLCANO_PS_WORKER)
    assert any("schedulerName" in w for w in submitted.get("warnings", [])), submitted
    wait_running(api, "volcano-ps-worker", 3)
    pids = task_pids(cluster, "volcano-ps-worker")
    job = wait_job(api, "volcano-ps-worker", timeout=60)
    assert job["state"] == "succeeded", job
    assert "task_completed -> complete_job" in job["reason"], job
    states = {k: t["state"] for k, t in by_key(job).items()}
    assert states == {"ps-0": "stopped", "worker-0": "succeeded", "worker-1": "succeeded"}
    assert gone(pids["ps-0"])
    out = Path(cluster.share_dir) / "jobs/volcano-ps-worker/output"
    ps_addr = by_key(job)["ps-0"]["address"]
    for i in (0, 1):
        line = (out / f"worker-{i}").read_text().strip()
        assert line.startswith(f"worker {i} of 2: ps {ps_addr} workers "), line
        assert len(line.split(" workers ")[1].split(",")) == 2, line


# -- d. three named ports ------------------------------------------------------------------

# Modelled on tests/compat/corpus/openpai-v2/tensorboard_sample.yaml and the DDP examples
# (microsoft/pai): ports declared main, tensorboard, debug (sorted by name, debug would come
# first: the bug issue 12 names).
PAI_THREE_PORTS = """\
protocolVersion: 2
name: pai-three-ports
type: job
prerequisites:
  - type: dockerimage
    uri: 'openpai/standard:python_3.6-pytorch_1.2.0-gpu'
    name: docker_image_0
taskRoles:
  trainer:
    instances: 2
    dockerImage: docker_image_0
    resourcePerInstance:
      gpu: 0
      cpu: 1
      memoryMB: 512
      ports:
        main: 1
        tensorboard: 1
        debug: 1
    commands:
      - env > $PAI_OUTPUT_DIR/env-$PAI_TASK_INDEX.tmp
      - mv $PAI_OUTPUT_DIR/env-$PAI_TASK_INDEX.tmp $PAI_OUTPUT_DIR/env-$PAI_TASK_INDEX
"""


def test_three_named_ports_each_in_its_variables_and_main_is_master_port(cluster, api):
    submit_text(api, PAI_THREE_PORTS)
    job = wait_job(api, "pai-three-ports", timeout=60)
    assert job["state"] == "succeeded", job
    tasks = by_key(job)
    out = Path(cluster.share_dir) / "jobs/pai-three-ports/output"
    mains = [f"{tasks[f'trainer-{i}']['address']}:{tasks[f'trainer-{i}']['ports']['main']}"
             for i in (0, 1)]  # fmt: skip
    for i in (0, 1):
        env = dict(
            line.split("=", 1)
            for line in (out / f"env-{i}").read_text().splitlines()
            if "=" in line
        )
        ports = tasks[f"trainer-{i}"]["ports"]
        assert set(ports) == {"main", "tensorboard", "debug"}, ports
        assert len(set(ports.values())) == 3, ports
        for name, port in ports.items():
            assert env[f"PAI_CONTAINER_HOST_{name}_PORT_LIST"] == str(port), name
            assert env[f"PASTURE_PORT_{name.upper()}"] == str(port), name
            for j in (0, 1):  # every task sees every task's ports
                other = tasks[f"trainer-{j}"]["ports"][name]
                assert env[f"PAI_trainer_{j}_{name}_PORT"] == str(other), (name, j)
                assert env[f"PAI_PORT_LIST_trainer_{j}_{name}"] == str(other), (name, j)
        assert env["PAI_CURRENT_CONTAINER_PORT"] == env["PASTURE_TASK_PORT"] == str(ports["main"])
        assert env["MASTER_PORT"] == str(tasks["trainer-0"]["ports"]["main"])
        assert env["MASTER_ADDR"] == tasks["trainer-0"]["address"]
        assert env["PAI_TASK_ROLE_trainer_HOST_LIST"] == ",".join(mains)
        assert env["PASTURE_ROLE_TRAINER_HOSTS"] == ",".join(mains)


# -- e. Volcano's mpi and pytorch plugin guides, only their commands replaced -----------------

CORPUS = Path(__file__).resolve().parents[1] / "compat" / "corpus" / "volcano"


def with_commands(path: Path, commands: dict[str, str]) -> str:
    """The Volcano file's text with each named task's container command replaced by
    ``[/bin/sh, -c, SCRIPT]`` (everything else as written)."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    for task in doc["spec"]["tasks"]:
        container = task["template"]["spec"]["containers"][0]
        container["command"] = ["/bin/sh", "-c", commands[task["name"]]]
    return yaml.safe_dump(doc, sort_keys=False)


def test_volcano_mpi_plugin_guide_runs_with_mpi_host_as_volcano_sets_it(cluster, api):
    """docs/user-guide/how_to_use_mpi_plugin.md: minAvailable 1 over a master and two
    workers (a job-wide count: it starts, not "min_available 0" forever), MPI_HOST on the
    master only (the workers' hosts, comma-separated), ssh to each of them on the job's
    ssh port, and /etc/volcano/mpiworker.host readable in process mode."""
    master = (
        "pasture-ssh-barrier 30 || exit 5\n"
        'test -n "$MPI_HOST" || exit 2\n'
        'for h in $(echo "$MPI_HOST" | tr , " "); do ssh "$h" true || exit 3; done\n'
        'test "$(tr "\\n" , < /etc/volcano/mpiworker.host)" = "$MPI_HOST" || exit 4\n'
        'echo "$MPI_HOST" > "$PASTURE_JOB_DIR/mpi_host"\n'
    )
    worker = 'echo "${MPI_HOST-unset}" > "$PASTURE_JOB_DIR/worker-$VC_TASK_INDEX"; exec sleep 120'
    text = with_commands(
        CORPUS / "mpi-plugin-guide.yaml", {"mpimaster": master, "mpiworker": worker}
    )
    submit_text(api, text)
    job = wait_job(api, "lm-mpi-job", timeout=90)
    assert job["state"] == "succeeded", job  # TaskCompleted -> CompleteJob on the master
    job_dir = Path(cluster.share_dir) / "jobs" / "lm-mpi-job"
    hosts = (job_dir / "mpi_host").read_text().strip().split(",")
    workers = [t for t in job["tasks"] if t["role"] == "mpiworker"]
    assert len(hosts) == 2 == len(workers)
    assert sorted(hosts) == sorted(t["address"] for t in workers)
    assert (job_dir / "worker-0").read_text().strip() == "unset"  # master only


def test_volcano_pytorch_plugin_guide_gives_ranks_and_master_as_volcano(cluster, api):
    """docs/user-guide/how_to_use_pytorch_plugin.md (containers without a command: a
    stand-in given): the --master task is rank 0 and MASTER_ADDR, the workers 1 and 2,
    WORLD_SIZE 3."""
    mark = (
        'echo "$RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $PASTURE_TASK_ROLE"'
        ' > "$PASTURE_JOB_DIR/r-$RANK"'
    )
    master = (
        f"{mark}\n"
        'for i in $(seq 100); do [ -e "$PASTURE_JOB_DIR/r-2" ] && exit 0; sleep 0.2; done\n'
        "exit 1\n"
    )
    text = with_commands(
        CORPUS / "pytorch-plugin-guide.yaml",
        {"master": master, "worker": f"{mark}; exec sleep 120"},
    )
    submit_text(api, text)
    job = wait_job(api, "pytorch-job", timeout=90)
    assert job["state"] == "succeeded", job
    job_dir = Path(cluster.share_dir) / "jobs" / "pytorch-job"
    master_task = next(t for t in job["tasks"] if t["role"] == "master")
    marks = [(job_dir / f"r-{r}").read_text().split() for r in range(3)]
    assert {m[0] for m in marks} == {"0", "1", "2"} and {m[1] for m in marks} == {"3"}
    assert {m[2] for m in marks} == {master_task["address"]}
    assert len({m[3] for m in marks}) == 1
    assert [m[4] for m in marks] == ["master", "worker", "worker"]
