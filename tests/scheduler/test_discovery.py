from scheduler.rules.discovery import (
    local_volcano_paths,
    main_port,
    mpi_hostfile,
    shell_name,
    task_env,
    volcano_host_files,
)
from scheduler.spec import parse_job_spec
from scheduler.spec.facts import port_names
from scheduler.spec.model import env_name
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
    TaskRecord("worker-gpu", 1, 2, "n2", "10.0.0.2", {"main": 20001, "ssh": 20011}),
    TaskRecord("ps", 0, 2, "n1", "10.0.0.1", {"grpc": 20005, "main": 20000, "ssh": 20010}),
    TaskRecord("worker-gpu", 0, 2, "n1", "10.0.0.1", {"ssh": 20012, "main": 20002}),
]


def test_role_env_names():
    assert env_name("worker-gpu.a") == "WORKER_GPU_A"
    assert shell_name("worker-gpu.a") == "worker_gpu_a"


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


def test_mpi_hostfile_has_one_line_per_host_with_its_task_count():
    # two tasks on 10.0.0.1 (ps-0, worker-gpu-0): ONE line, slots=2 (Open MPI 4.1 refuses
    # a host listed twice); hosts in the rank order of their first task
    assert mpi_hostfile(SPEC, TASKS) == "10.0.0.1 slots=2\n10.0.0.2 slots=1\n"
    three_on_one = [TaskRecord("w", i, 1, "n1", "10.0.0.9", {"main": 1 + i}) for i in range(3)]
    spec = parse_job_spec({"name": "k", "roles": {"w": {"replicas": 3, "command": "x"}}})
    assert mpi_hostfile(spec, three_on_one) == "10.0.0.9 slots=3\n"


def _two_port_roles(ports):
    spec = parse_job_spec(
        {"name": "p", "roles": {"m": {"replicas": 1, "command": "x", "ports": ports}}}
    )
    # the store does not keep the mapping's order: give it reversed
    rec = TaskRecord(
        "m",
        0,
        1,
        "n1",
        "10.0.0.1",
        dict(reversed(list(zip(ports, [31, 32, 33][: len(ports)], strict=True)))),
    )
    return spec, rec


def test_first_declared_port_is_the_main_port_whatever_the_record_order():
    spec, rec = _two_port_roles(["http", "ssh"])
    env = task_env("p", spec, [rec], rec, "/s")
    assert env["PASTURE_ROLE_M_HOSTS"] == "10.0.0.1:31"  # http, not ssh
    assert env["PAI_TASK_ROLE_m_HOST_LIST"] == "10.0.0.1:31"
    assert env["PAI_CURRENT_CONTAINER_PORT"] == env["PASTURE_TASK_PORT"] == "31"
    assert env["PAI_CONTAINER_SSH_PORT"] == "32"
    spec, rec = _two_port_roles(["main", "tensorboard", "debug"])
    env = task_env("p", spec, [rec], rec, "/s")
    assert env["MASTER_PORT"] == "31" and main_port(spec, rec) == 31


def test_a_role_with_three_named_ports_gets_each_in_its_variables():
    spec, rec = _two_port_roles(["main", "tensorboard", "debug"])
    env = task_env("p", spec, [rec], rec, "/s")
    for name, port in (("main", "31"), ("tensorboard", "32"), ("debug", "33")):
        assert env[f"PAI_PORT_LIST_m_0_{name}"] == port
        assert env[f"PAI_m_0_{name}_PORT"] == port
        assert env[f"PAI_CONTAINER_HOST_{name}_PORT_LIST"] == port
        assert env[f"PASTURE_PORT_{name.upper()}"] == port


def test_ssh_adds_an_ssh_port_after_the_declared_ones():
    spec = parse_job_spec(
        {"name": "s", "mpi": True, "roles": {"a": {"command": "x", "ports": ["http"]}}}
    )
    assert port_names(spec, "a") == ["http", "ssh"]
    plain = parse_job_spec({"name": "s", "roles": {"a": {"command": "x"}}})
    assert port_names(plain, "a") == ["main"]


def test_role_names_with_dashes_get_shell_safe_aliases():
    env = task_env("j", SPEC, TASKS, TASKS[0], "/share")
    # OpenPAI names keep the role as written, plus a shell-usable copy
    assert env["PAI_TASK_ROLE_worker_gpu_HOST_LIST"] == env["PAI_TASK_ROLE_worker-gpu_HOST_LIST"]
    assert env["PAI_HOST_IP_worker_gpu_1"] == "10.0.0.2"
    assert env["PAI_worker_gpu_0_main_PORT"] == "20002"
    # Volcano: '-' -> '_', upper-cased for variables, as written for host files
    assert env["VC_WORKER_GPU_HOSTS"] == "10.0.0.1,10.0.0.2"
    assert env["VC_WORKER_GPU_NUM"] == "2" and env["VC_PS_NUM"] == "1"
    assert volcano_host_files(SPEC, TASKS) == {
        "ps.host": "10.0.0.1",
        "worker_gpu.host": "10.0.0.1\n10.0.0.2",
    }


def test_openpai_maro_and_volcano_identity_variables():
    env = task_env("j", SPEC, TASKS, TASKS[0], "/share", user="alice", container_name="task-x")
    assert env["PAI_USER_NAME"] == env["PAI_USERNAME"] == "alice"
    assert env["PAI_JOB_NAME"] == "j"
    assert env["PAI_TASK_ROLE_COUNT"] == env["PAI_TASK_ROLES_NUM"] == "2"
    assert env["PAI_TASKS_NUM"] == "3"
    assert env["PAI_TASK_INDEX"] == env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1"
    assert env["PAI_TASK_ROLE_NO"] == "1"
    # protocol v1's host lists by role number
    assert env["PAI_TASK_ROLE_0_HOST_LIST"] == "10.0.0.1:20000"
    assert env["PAI_TASK_ROLE_1_HOST_LIST"] == "10.0.0.1:20002,10.0.0.2:20001"
    assert env["PAI_CURRENT_CONTAINER_IP"] == "10.0.0.2"
    assert env["PAI_RESOURCE_ps"] == "0,1,1024,64"
    assert env["PAI_MIN_FAILED_TASK_COUNT_ps"] == "1"
    assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_ps"] == "-1"
    assert env["PAI_OUTPUT_DIR"] == "/share/jobs/j/output"
    assert env["PAI_WORK_DIR"] == env["PAI_CODE_DIR"] == "/share/jobs/j"
    assert (env["VC_TASK_INDEX"], env["VK_TASK_INDEX"]) == ("1", "1")
    assert env["JOB_NAME"] == "j" and env["COMPONENT_TYPE"] == "worker-gpu"
    assert env["COMPONENT_INDEX"] == "1" and env["CONTAINER_NAME"] == "task-x"
    assert env["NODE_NAME"] == "n2"


def test_completion_policy_shows_in_min_succeeded():
    spec = parse_job_spec(
        {
            "name": "c",
            "policies": {"completion": {"role": "master", "when": "any"}},
            "roles": {"master": {"command": "x"}, "worker": {"replicas": 2, "command": "x"}},
        }
    )
    tasks = [
        TaskRecord("master", 0, 1, "n1", "10.0.0.1", {"main": 1}),
        TaskRecord("worker", 0, 1, "n1", "10.0.0.1", {"main": 2}),
    ]
    env = task_env("c", spec, tasks, tasks[1], "/s")
    assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_master"] == "1"
    assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"] == "-1"
    assert env["PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT"] == "-1"


def test_ranks_follow_the_spec_so_a_late_replica_never_takes_an_early_tasks_rank():
    """ps: 2, worker: 2 with a gang of ps-0, worker-0, worker-1 (min_available): the late
    ps-1 is rank 1 and the early worker-0 rank 2, whoever is placed first."""
    spec = parse_job_spec(
        {
            "name": "late",
            "roles": {
                "ps": {"replicas": 2, "command": "x", "min_available": 1},
                "worker": {"replicas": 2, "command": "x"},
            },
        }
    )
    early = [
        TaskRecord("ps", 0, 1, "n1", "10.0.0.1", {"main": 20000}),
        TaskRecord("worker", 0, 1, "n1", "10.0.0.1", {"main": 20001}),
        TaskRecord("worker", 1, 1, "n2", "10.0.0.2", {"main": 20002}),
    ]
    late = TaskRecord("ps", 1, 1, "n2", "10.0.0.2", {"main": 20003})
    ranks = {
        (t.role, t.index): task_env("late", spec, tasks, t, "/share")["RANK"]
        for tasks in (early, [*early, late])
        for t in tasks
    }
    assert ranks == {("ps", 0): "0", ("ps", 1): "1", ("worker", 0): "2", ("worker", 1): "3"}
    sizes = {task_env("late", spec, early, t, "/share")["WORLD_SIZE"] for t in early}
    assert sizes == {"4"}  # every declared replica, early or late


def test_mpi_host_is_set_on_the_master_as_volcano_mpi_plugin_sets_it():
    """volcano-sh/volcano mpi.go: MPI_HOST on the --master task's pods only, the --worker
    task's hosts comma-separated (addresses here: no cluster DNS)."""
    spec = parse_job_spec(
        {**SPEC.model_dump(), "mpi_host": {"master": "ps", "worker": "worker-gpu"}}
    )
    master = task_env("j", spec, TASKS, TASKS[1], "/share")
    assert master["MPI_HOST"] == "10.0.0.1,10.0.0.2"  # rank order, one per task
    assert "MPI_HOST" not in task_env("j", spec, TASKS, TASKS[0], "/share")
    assert "MPI_HOST" not in task_env("j", SPEC, TASKS, TASKS[1], "/share")


def test_process_tasks_read_the_volcano_host_files_where_they_are():
    cmd = "PS=`cat /etc/volcano/ps.host | tr '\\n' ','`; python -c 'open(\"/etc/volcano/w.host\")'"
    out = local_volcano_paths(cmd, "/share/jobs/j/volcano-1")
    assert out == (
        "PS=`cat /share/jobs/j/volcano-1/ps.host | tr '\\n' ','`; "
        "python -c 'open(\"/share/jobs/j/volcano-1/w.host\")'"
    )
    assert local_volcano_paths(cmd, "/etc/volcano") == cmd
    assert local_volcano_paths("echo /etc/volcanos", "/x") == "echo /etc/volcanos"


def test_a_declared_checkpoint_interval_is_in_every_tasks_env():
    def env_of(extra: dict) -> dict[str, str]:
        spec = parse_job_spec({"name": "c", "roles": {"w": {"command": "x"}}, **extra})
        return task_env(
            "c",
            spec,
            [TaskRecord("w", 0, 1, "n1", "10.0.0.1", {"main": 1})],
            TaskRecord("w", 0, 1, "n1", "10.0.0.1", {"main": 1}),
            "/share",
        )

    assert env_of({"checkpoint_interval_s": 1800})["PASTURE_CHECKPOINT_INTERVAL_S"] == "1800"
    assert env_of({"checkpoint_interval_s": 90.5})["PASTURE_CHECKPOINT_INTERVAL_S"] == "90.5"
    assert "PASTURE_CHECKPOINT_INTERVAL_S" not in env_of({})
