"""torchrun's elastic rendezvous variables for elastic roles (issue 29)."""

from scheduler.rules.discovery import task_env
from scheduler.spec import parse_job_spec
from scheduler.store import TaskRecord

SPEC = parse_job_spec(
    {
        "name": "e",
        "roles": {
            "worker": {"replicas": {"min": 1, "max": 3}, "command": "x"},
            "eval": {"replicas": 1, "command": "x"},
        },
    }
)
W0 = TaskRecord("worker", 0, 1, "n1", "10.0.0.1", {"main": 20000})
W2 = TaskRecord("worker", 2, 1, "n2", "10.0.0.2", {"main": 20007})
EV = TaskRecord("eval", 0, 1, "n2", "10.0.0.2", {"main": 20008})


def test_elastic_tasks_rendezvous_at_replica_zero_whatever_else_runs():
    for tasks in ([W0, W2, EV], [W0, EV]):  # grown to 2 workers, shrunk back to 1
        env = task_env("e", SPEC, tasks, W0, "/s")
        assert env["PET_NNODES"] == "1:3"
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_RDZV_ID"] == "e-1"
        assert env["PET_RDZV_ENDPOINT"] == "10.0.0.1:20000"
        assert env["PET_RDZV_CONF"] == "is_host=true"
    env = task_env("e", SPEC, [W0, W2, EV], W2, "/s")
    assert env["PET_RDZV_ENDPOINT"] == "10.0.0.1:20000"
    assert env["PET_RDZV_CONF"] == "is_host=false"


def test_other_roles_get_no_rendezvous():
    env = task_env("e", SPEC, [W0, W2, EV], EV, "/s")
    assert not any(k.startswith("PET_") for k in env)
