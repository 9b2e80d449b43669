"""Which user ``pasture job exec`` logs in as (scheduler/services/jobexec.py task_login):
the user the task's sshd accepts, from what its node's agent registered."""

from __future__ import annotations

import pytest

from scheduler.services.jobexec import task_login
from scheduler.store import NodeRecord


def node(executor: str, task_users: str, login: str = "") -> NodeRecord:
    return NodeRecord(
        name="n",
        address="10.0.0.1",
        cpu_m=1000,
        memory=2**30,
        executor=executor,
        task_users=task_users,
        task_login=login,
    )


def test_a_container_of_a_vc_is_entered_as_root_of_its_namespace():
    """Container tasks with task_users: vc run as root of their VC's user namespace (root
    inside is the VC's user on the node), and the image has no user of the VC's name."""
    assert task_login(node("container", "vc"), "pasture-default") == "root"


@pytest.mark.parametrize("executor", ["process", "kubernetes"])
def test_processes_and_pods_of_a_vc_are_entered_as_the_vcs_user(executor):
    assert task_login(node(executor, "vc"), "pasture-default") == "pasture-default"


def test_tasks_run_as_the_agent_are_entered_as_the_user_it_registered():
    assert task_login(node("process", "agent", "svc"), "pasture-default") == "svc"
    assert task_login(node("container", "agent"), "pasture-default") == ""
    assert task_login(None, "pasture-default") == ""
