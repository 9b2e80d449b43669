"""The commented example job written by ``pasture template job``."""

JOB_TEMPLATE = """\
# pasture job spec. Submit with: pasture job submit job.yaml --wait
# Units: cpu in cores (2, 0.5) or millicores ("500m"); memory with K/M/G (10^3..) or
# Ki/Mi/Gi (2^10..) suffixes ("4Gi", "4096M"); gpu in whole devices.
name: hello-gang              # lowercase letters, digits and '-', unique in the cluster
vc: default                   # virtual cluster charged for the resources
priority: normal              # 0..100 or opportunistic|low|normal|high|critical
image: localhost/pasture-base:bookworm   # default image of every role (container executor)

roles:                        # task roles; declaration order is rank order (ps first)
  ps:
    replicas: 1               # tasks of this role
    resources: {cpu: 1, memory: 512Mi, gpu: 0}
    command: python3 -m scheduler.examples.hello_gang
    ports: [main]             # named ports; each task gets PASTURE_PORT_<NAME>
  worker:
    replicas: 2
    resources:
      cpu: 500m
      memory: 512Mi
      gpu: 0
      # gpu_model: A100       # only nodes with this GPU model
    command: python3 -m scheduler.examples.hello_gang
    # min_available: 2        # gang minimum (default: all replicas)
    # completion: {min_succeeded: 1}   # job succeeds once 1 worker succeeded
    # max_task_retries: 2     # restart a failed task alone up to 2 times
    # shm: 1Gi                # /dev/shm size
    # depends_on: [ps]        # start after every ps task is running
    # image: my/image:tag     # overrides the job's image
    # env: {LOG_LEVEL: info}
    # node_selector: {pool: gpu}

retry:
  max_attempts: 2             # failed attempts allowed before the job fails (1 = no retry)
  # retry_on_exit_codes: [1]  # only these exit codes are retried, or
  fail_on_exit_codes: [2]     # these exit codes fail the job at once
  # retry_on: [node_lost, nccl_error]  # only these failure classes (docs/operations.md)

policies:
  on_task_failure: restart_job   # restart_job (retry the whole gang) | fail_job
  # completion: {role: worker, when: all}   # succeed when all|any worker succeeded
  # on_events:                # Volcano-style rules, first match wins
  #   - {event: task_completed, action: complete_job, role: worker}

# mounts:                     # directories of the cluster share inside containers
#   - {source: datasets/mnist, target: /data}                    # read-only
#   - {source: results/mnist, target: /results, read_only: false}  # writable
env: {}                       # environment of every task
# mpi: true                   # write an MPI hostfile (PASTURE_MPI_HOSTFILE)
# ssh: true                   # ssh between the job's tasks (mpi implies it)
# code_dir: code/mnist        # share dir (pasture data push) copied to ./code
# ttl_after_finished: 86400   # delete the job's records a day after it ended
# checkpoint_interval_s: 1800 # the job saves its state every 30 min and loads it at
#                             # start (unset: a preemption loses the whole attempt)
# preemptible: false          # no waiting job preempts it (docs/jobs.md, preemption)
# secrets: [HF_TOKEN]         # values at submit: --secret HF_TOKEN=...; tasks read
#                             # $PASTURE_SECRET_HF_TOKEN (never stored in clear)
"""
