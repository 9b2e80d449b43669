"""End to end on the local podman cluster (tests/e2e/conftest.py): an MPI job's ``mpirun``
(Debian's Open MPI 4.1 in the task image) starts its ranks in two tasks on two node
containers over the job's own ssh (per-job key, an sshd in each task, the hostfile's one
line per host reaching the task's sshd; scheduler/agent/ssh.py).

The job is written in pasture's spec with ``mpi: true``, in the shape of OpenPAI's Horovod
example (a master that runs mpirun and a worker that only waits; the job completes when
the master does). Needs root podman and about 10 minutes on 2 cores.
"""

from __future__ import annotations

import re

import yaml

from tests.e2e.test_local_cluster import diagnosis, stop_unless_finished

RANK_RE = re.compile(r"^rank (\d) of (\d) on (\S+)$", re.M)

MPI_JOB = {
    "name": "mpi-e2e",
    "image": "localhost/pasture-examples:latest",
    "mpi": True,
    "roles": {
        # 1.5 cores each on 2-core nodes: the two tasks land on different nodes
        "master": {
            "resources": {"cpu": "1500m", "memory": "256Mi"},
            "command": [
                "pasture-ssh-barrier 180",
                "cat $PASTURE_MPI_HOSTFILE",
                "mpirun --hostfile $PASTURE_MPI_HOSTFILE -np 2"
                " --mca oob_tcp_if_include 10.77.2.0/24 --mca btl_tcp_if_include 10.77.2.0/24"
                " sh -c 'echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"
                ' on $(hostname -I | tr " " "\\n" | grep "^10\\.77\\.2\\.")\'',
            ],
        },
        "worker": {
            "resources": {"cpu": "1500m", "memory": "256Mi"},
            "command": "exec sleep 3600",
        },
    },
    "policies": {"completion": {"role": "master"}},
}


def test_mpirun_starts_ranks_in_two_node_containers_over_the_jobs_ssh(cluster):
    spec = cluster.tmp / "mpi-e2e.yaml"
    spec.write_text(yaml.safe_dump(MPI_JOB, sort_keys=False))
    try:
        cluster.cli.run(
            "job", "submit", str(spec), "--wait", "--timeout", "420", check=False, timeout=480
        )
        job = cluster.cli.json("job", "show", "mpi-e2e")["job"]
        log = cluster.cli.run(
            "job", "logs", "mpi-e2e", "--role", "master", "--index", "0", check=False
        ).stdout
        assert job["state"] == "succeeded", diagnosis(cluster, "mpi-e2e") + "\n" + log[-3000:]
    finally:
        stop_unless_finished(cluster, "mpi-e2e")
    placed = {t["role"]: t for t in job["tasks"]}
    assert placed["master"]["node"] != placed["worker"]["node"], job["tasks"]
    # one hostfile line per host, slots = that host's tasks
    assert re.search(r"^10\.77\.2\.\d+ slots=1\n10\.77\.2\.\d+ slots=1$", log, re.M), log
    ranks = {int(r): host for r, size, host in RANK_RE.findall(log) if size == "2"}
    assert set(ranks) == {0, 1}, log[-3000:]
    # rank 1 ran in the worker's node container, reached through its sshd
    assert ranks[0] != ranks[1], ranks
