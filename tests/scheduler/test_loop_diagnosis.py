"""The loop acts on the agent's failure diagnosis: retry.retry_on retries only the named
classes, and the diagnosis is in the job's reason and events (real redis-server, real
core; the agent's report is played by the test with real diagnoses of recorded logs)."""

from pathlib import Path

from scheduler.rules.diagnosis import diagnose, read_tail
from scheduler.store import TaskState
from tests.scheduler.test_loop import env, submit  # noqa: F401

FIXTURES = Path(__file__).parents[1] / "fixtures" / "diagnosis"


def fail(store, job, fixture):
    d = diagnose(1, read_tail(FIXTURES / fixture)).to_dict()
    for t in store.tasks(job):
        store.report_task(
            job, t.key, t.attempt, t.node, TaskState.FAILED, 1, "exited with code 1", diagnosis=d
        )
    return d


def test_retry_on_retries_only_the_named_classes(env):  # noqa: F811
    store, loop = env
    retry = {"max_attempts": 3, "retry_on": ["node_lost", "nccl_error"]}
    submit(store, "ddp", roles={"w": {"command": "x"}}, retry=retry)
    submit(store, "big", roles={"w": {"command": "x"}}, retry=retry)
    loop.cycle()
    fail(store, "ddp", "torch_nccl_system_error.log")
    fail(store, "big", "torch_cuda_oom.log")
    loop.cycle()
    loop.cycle()
    ddp, big = store.get_job("ddp"), store.get_job("big")
    assert ddp.state in ("queued", "scheduled") and ddp.attempt == 2 and ddp.failures == 1
    assert big.state == "failed" and big.attempt == 1
    assert (
        "[cuda_oom: CUDA out of memory: CUDA out of memory. Tried to allocate 496.00 MiB"
        in big.reason
    )
    assert "exit code 1 is not retried" in big.reason
    assert any("[nccl_error: NCCL / network error:" in e["reason"] for e in store.events("ddp"))
    # the task record keeps the diagnosis of the failed attempt
    (t,) = store.tasks("big")
    assert t.diagnosis["kind"] == "cuda_oom" and t.diagnosis["retry"] is False


def test_lost_tasks_get_the_node_lost_class(env):  # noqa: F811
    store, loop = env
    submit(store, "j", roles={"w": {"command": "x"}}, retry={"max_attempts": 2})
    loop.cycle()
    node = store.tasks("j")[0].node
    store.set_node_state(node, "lost", "test")
    loop.cycle()
    loop.cycle()
    job = store.get_job("j")
    assert job.attempt == 2
    assert any("[node_lost: the task's node was lost" in e["reason"] for e in store.events("j"))
