"""End to end on the local podman cluster (tests/e2e/conftest.py): a Volcano MPI job file's
``mpiexec`` (Debian's Open MPI 4.1 in the task image) starts its ranks in two tasks on two
node containers over the job's own ssh (per-job key, the job's sshd_config served by the
``sshd`` the command starts itself, host addresses from ``/etc/volcano/<task>.host``;
scheduler/agent/ssh.py, scheduler/agent/startup.py).

The job is Volcano's own MPI example (volcano-sh/volcano ``example/integrations/mpi/
mpi-example.yaml``, Apache-2.0; the copy in tests/compat/corpus/volcano/mpi-example.yaml),
submitted as a ``batch.volcano.sh/v1alpha1`` document with its ``plugins: {ssh, svc}``,
its ``TaskCompleted -> CompleteJob`` policy on the master and its shell lines. Changed for
this cluster: the image (``localhost/pasture-examples``: openmpi-bin and openssh-server,
no ``mpi_hello_world``, so each rank echoes its rank and node address), resource requests
(1.5 cores per worker on 2-core nodes: the two workers land on different nodes), Open MPI's
interface selection (the node containers have several networks) and a
``pasture-ssh-barrier`` before ``mpiexec`` (Volcano restarts a master that was too early;
the barrier waits instead). Needs root podman and about 10 minutes on 2 cores.
"""

from __future__ import annotations

import re

from tests.e2e.test_local_cluster import diagnosis, stop_unless_finished

RANK_RE = re.compile(r"^rank (\d) of (\d) on (\S+)$", re.M)

VOLCANO_MPI_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: mpi-e2e
spec:
  minAvailable: 3
  schedulerName: volcano
  plugins:
    ssh: []
    svc: []
  tasks:
    - replicas: 1
      name: mpimaster
      policies:
        - event: TaskCompleted
          action: CompleteJob
      template:
        spec:
          containers:
            - command:
                - /bin/sh
                - -c
                - |
                  MPI_HOST=`cat /etc/volcano/mpiworker.host | tr "\\n" ","`;
                  mkdir -p /var/run/sshd; /usr/sbin/sshd;
                  pasture-ssh-barrier 180;
                  echo "hosts: ${MPI_HOST}";
                  mpiexec --allow-run-as-root --host ${MPI_HOST} -np 2 \\
                    --mca oob_tcp_if_include 10.77.2.0/24 --mca btl_tcp_if_include 10.77.2.0/24 \\
                    sh -c 'echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE \\
                      on $(hostname -I | tr " " "\\n" | grep "^10\\.77\\.2\\.")';
              image: localhost/pasture-examples:latest
              name: mpimaster
              ports:
                - containerPort: 22
                  name: mpijob-port
              resources:
                requests:
                  cpu: 500m
                  memory: 256Mi
              workingDir: /home
          restartPolicy: OnFailure
    - replicas: 2
      name: mpiworker
      template:
        spec:
          containers:
            - command:
                - /bin/sh
                - -c
                - |
                  mkdir -p /var/run/sshd; /usr/sbin/sshd -D;
              image: localhost/pasture-examples:latest
              name: mpiworker
              ports:
                - containerPort: 22
                  name: mpijob-port
              resources:
                requests:
                  cpu: 1500m
                  memory: 256Mi
              workingDir: /home
          restartPolicy: OnFailure
"""


def test_volcano_mpi_job_runs_mpiexec_across_two_node_containers_over_the_jobs_ssh(cluster):
    spec = cluster.tmp / "mpi-e2e.yaml"
    # the cluster's own subnet (PASTURE_E2E_SUBNET) for Open MPI's interface selection
    prefix = cluster.subnet.split("/")[0].rsplit(".", 1)[0]
    spec.write_text(
        VOLCANO_MPI_JOB.replace("10.77.2.0/24", cluster.subnet).replace(
            "10\\.77\\.2\\.", prefix.replace(".", "\\.") + "\\."
        )
    )
    try:
        cluster.cli.run(
            "job", "submit", str(spec), "--wait", "--timeout", "420", check=False, timeout=480
        )
        job = cluster.cli.json("job", "show", "mpi-e2e")["job"]
        log = cluster.cli.run(
            "job", "logs", "mpi-e2e", "--role", "mpimaster", "--index", "0", check=False
        ).stdout
        assert job["state"] == "succeeded", diagnosis(cluster, "mpi-e2e") + "\n" + log[-3000:]
    finally:
        stop_unless_finished(cluster, "mpi-e2e")
    assert "task_completed -> complete_job" in job["reason"], job
    nodes = {f"{t['role']}-{t['index']}": t["node"] for t in job["tasks"]}
    assert nodes["mpiworker-0"] != nodes["mpiworker-1"], job["tasks"]
    states = {f"{t['role']}-{t['index']}": t["state"] for t in job["tasks"]}
    # the workers' sshd -D never ends: the master's completion stopped them
    assert states == {
        "mpimaster-0": "succeeded",
        "mpiworker-0": "stopped",
        "mpiworker-1": "stopped",
    }, states
    # /etc/volcano/mpiworker.host named both workers' addresses
    hosts = re.search(r"^hosts: (\S+)$", log, re.M)
    assert hosts and len(hosts.group(1).strip(",").split(",")) == 2, log[-3000:]
    ranks = {int(r): host for r, size, host in RANK_RE.findall(log) if size == "2"}
    assert set(ranks) == {0, 1}, log[-3000:]
    # the ranks ran on two node containers, rank 1 reached through the job's ssh
    assert ranks[0] != ranks[1], ranks
