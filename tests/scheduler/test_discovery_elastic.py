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
        assert env["PET_RDZV_CONF"].split(",")[0] == "is_host=true"
    env = task_env("e", SPEC, [W0, W2, EV], W2, "/s")
    assert env["PET_RDZV_ENDPOINT"] == "10.0.0.1:20000"
    assert env["PET_RDZV_CONF"].split(",")[0] == "is_host=false"


def test_a_replica_stopped_by_a_shrink_leaves_the_rendezvous_within_seconds():
    """issue 36: torchrun drops a participant whose keep-alive is older than
    keep_alive_interval x keep_alive_max_attempt (torch's defaults 5 s x 3 = 15 s kept the
    survivors from re-forming and failed a regrow soon after a shrink); pasture sets both."""
    for me in (W0, W2):
        conf = dict(
            kv.split("=")
            for kv in task_env("e", SPEC, [W0, W2], me, "/s")["PET_RDZV_CONF"].split(",")
        )
        window = int(conf["keep_alive_interval"]) * int(conf["keep_alive_max_attempt"])
        assert window <= 5
        assert int(conf["keep_alive_max_attempt"]) >= 3  # a loaded node may miss a beat or two


def test_other_roles_get_no_rendezvous():
    env = task_env("e", SPEC, [W0, W2, EV], EV, "/s")
    assert not any(k.startswith("PET_") for k in env)


def test_every_rendezvous_round_publishes_its_master_so_a_regrown_replica_can_join():
    """issue 36: with torch's shared rendezvous store, rank 0 publishes MASTER_ADDR/PORT
    only in its first round; a replica regrown into a later round waited for them until
    it failed. pasture sets torch's opt-out on every replica of an elastic role."""
    for me in (W0, W2):
        assert task_env("e", SPEC, [W0, W2], me, "/s")["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in task_env("e", SPEC, [W0, W2, EV], EV, "/s")
