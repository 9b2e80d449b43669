from scheduler.discovery import env_name, mpi_hostfile, task_env
from scheduler.spec import parse_job_spec
from scheduler.store import TaskRecord

SPEC = parse_job_spec(
    {
        "name": "j",
        "mpi": True,
        "roles": {
            "ps": {"replicas": 1, "command": "x", "ports": ["main", "grpc"]},
            "worker-gpu": {"replicas": 2, "command": "x"},
        },
    }
)
TASKS = [  # deliberately out of order
    TaskRecord("worker-gpu", 1, 2, "n2", "10.0.0.2", {"main": 20001}),
    TaskRecord("ps", 0, 2, "n1", "10.0.0.1", {"main": 20000, "grpc": 20005}),
    TaskRecord("worker-gpu", 0, 2, "n1", "10.0.0.1", {"main": 20002}),
]


def test_role_env_names():
    assert env_name("worker-gpu.a") == "WORKER_GPU_A"


def test_env_of_a_worker():
    env = task_env("j", SPEC, TASKS, TASKS[2], "/share", hostfile="/share/jobs/j/hostfile-2")
    assert env["PASTURE_ROLES"] == "ps,worker-gpu"
    assert env["PASTURE_ROLE_WORKER_GPU_HOSTS"] == "10.0.0.1:20002,10.0.0.2:20001"
    assert env["PASTURE_ROLE_PS_HOSTS"] == "10.0.0.1:20000"
    assert env["PASTURE_ROLE_WORKER_GPU_REPLICAS"] == "2"
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"]) == ("3", "1", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "20000")
    assert (env["PASTURE_TASK_HOST"], env["PASTURE_TASK_PORT"]) == ("10.0.0.1", "20002")
    assert env["PASTURE_PORT_MAIN"] == "20002"
    assert env["PASTURE_ATTEMPT"] == "2"
    assert env["PAI_TASK_ROLE_worker-gpu_HOST_LIST"] == env["PASTURE_ROLE_WORKER_GPU_HOSTS"]
    assert env["PAI_TASK_ROLE_TASK_COUNT_worker-gpu"] == "2"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker-gpu"
    assert env["PAI_PORT_LIST_ps_0_grpc"] == "20005"
    assert env["PAI_HOST_IP_worker-gpu_1"] == "10.0.0.2"
    assert env["PASTURE_JOB_DIR"] == "/share/jobs/j"
    assert env["PASTURE_MPI_HOSTFILE"] == "/share/jobs/j/hostfile-2"


def test_ps_is_rank_zero_and_gets_named_ports():
    env = task_env("j", SPEC, TASKS, TASKS[1], "/share")
    assert env["RANK"] == "0" and env["PASTURE_PORT_GRPC"] == "20005"
    assert "PASTURE_MPI_HOSTFILE" not in env  # no path given


def test_mpi_hostfile_in_rank_order():
    assert mpi_hostfile(SPEC, TASKS) == "10.0.0.1 slots=1\n10.0.0.1 slots=1\n10.0.0.2 slots=1\n"
