"""The container executor's ``run`` arguments for a task of a VC (no podman needed):
issue 32's user namespaces, whose root is the VC's user on the host."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scheduler import tenants
from scheduler.agent.container import ContainerExecutor
from scheduler.agent.executor import ExecutorError, TaskLaunch


def launch(tmp_path: Path, user: tenants.TenantUser | None) -> TaskLaunch:
    return TaskLaunch(
        task_id="t-1",
        job="j",
        role="w",
        index=0,
        attempt=1,
        node="n",
        command="true",
        image="localhost/pasture-base:bookworm",
        env={"PASTURE_JOB_DIR": str(tmp_path / "share/jobs/j")},
        cpu_m=500,
        memory=2**28,
        gpus=[],
        log_path=tmp_path / "share/jobs/j/logs/w-0.log",
        share_dir=tmp_path / "share",
        state_dir=tmp_path / "state",
        user=user,
    )


def opts(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


@pytest.mark.parametrize("vc", ["default", "research", "Team.A"])
def test_a_vcs_task_runs_as_root_of_a_namespace_on_its_vcs_own_ids(tmp_path, vc):
    """Container ids 0..65535 are the VC's host ids from its uid on (root inside is the
    VC's user outside), as one contiguous range per map (podman then mounts the image
    idmapped); the command runs as that root whatever the image's USER."""
    user = tenants.planned(vc)
    argv = ContainerExecutor().argv(launch(tmp_path, user), "/env")
    assert opts(argv, "--uidmap") == [f"0:{user.uid}:65536"]
    assert opts(argv, "--gidmap") == [f"0:{user.gid}:65536"]
    assert opts(argv, "--user") == ["0:0"]
    assert "no-new-privileges" in opts(argv, "--security-opt")
    assert "--passwd-entry" not in argv
    host = tenants.id_range(vc)
    assert host.start == user.uid and host[-1] == user.uid + 65535


def test_a_task_without_a_vc_user_gets_no_namespace(tmp_path):
    argv = ContainerExecutor().argv(launch(tmp_path, None), "/env")
    assert not {"--uidmap", "--gidmap", "--user"} & set(argv)


@pytest.mark.parametrize("field", ["uid", "gid"])
def test_a_user_whose_numbers_are_not_its_vcs_range_is_refused(tmp_path, field):
    """A user made by hand (or by an older role) would map the container onto ids that
    may be another VC's or the system's: the launch fails naming the user and the fix."""
    from scheduler.agent.container import user_namespace_args

    user = tenants.planned("research")
    odd = dataclasses.replace(user, **{field: 3_237_786})
    with pytest.raises(ExecutorError, match=rf"'pasture-research'.*{field} 3237786.*pasture_node"):
        ContainerExecutor().argv(launch(tmp_path, odd), "/env")
    with pytest.raises(ExecutorError):
        user_namespace_args(dataclasses.replace(user, uid=user.uid + 1, gid=user.gid + 1))
