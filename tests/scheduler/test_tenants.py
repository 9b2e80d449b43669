"""Tenants' Unix identities (scheduler/tenants.py): the same name and uid on every node
from the VC's name alone, valid user names for every VC name the spec accepts, and a VC
list whose users collide is refused."""

from __future__ import annotations

import re

import pytest

from scheduler import tenants

DEBIAN_NAME = re.compile(r"^[a-z_][a-z0-9_-]*[$]?$")


@pytest.mark.parametrize(
    "vc", ["default", "research", "Team.A", "a" * 63, "x_y-z", "UPPER", "9lives", "a.b"]
)
def test_every_vc_name_gets_a_valid_user_name_and_a_uid_in_the_range(vc):
    u = tenants.planned(vc)
    assert DEBIAN_NAME.fullmatch(u.name) and len(u.name) <= 32, u.name
    assert tenants.UID_BASE <= u.uid < tenants.UID_BASE + tenants.UID_SPAN
    assert u == tenants.planned(vc)  # a pure function of the name: every node agrees


def test_names_that_differ_only_in_case_or_dots_get_different_users():
    names = {tenants.user_name(v) for v in ("team.a", "team_a", "Team_a", "TEAM.A")}
    assert len(names) == 4
    assert tenants.user_name("default") == "pasture-default"


def test_a_list_whose_users_collide_is_refused_naming_both(monkeypatch):
    monkeypatch.setattr(tenants, "uid_of", lambda vc: tenants.UID_BASE)
    with pytest.raises(tenants.TenantError, match="'a' and 'b' map to the same Unix user"):
        tenants.plan(["a", "b"])


def test_a_missing_user_is_named_with_the_fix():
    with pytest.raises(tenants.TenantError, match="no Unix user 'pasture-no-such-vc-q9'"):
        tenants.resolve("no-such-vc-q9")


def test_an_interpreter_other_users_cannot_reach_is_said_so(tmp_path):
    """A dev cluster runs tenants' tasks as other users only when they can execute its
    interpreter (a pyenv under /root cannot be)."""
    import os
    import tempfile

    d = tempfile.mkdtemp(dir="/tmp")  # /tmp is o+x; mkdtemp makes 0700
    exe = os.path.join(d, "python3")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(exe, 0o755)
    try:
        assert not tenants.reachable_by_others(exe)  # its directory is 0700
        os.chmod(d, 0o755)
        assert tenants.reachable_by_others(exe)
        os.chmod(exe, 0o750)
        assert not tenants.reachable_by_others(exe)
    finally:
        os.unlink(exe)
        os.rmdir(d)


def test_an_agent_that_cannot_run_tasks_as_tenants_refuses_to_start(tmp_path):
    """task_users: vc on an executor that cannot switch users is a settings error at
    start, not tasks silently run as one identity."""
    from scheduler.agent.agent import Agent
    from scheduler.agent.executor import ExecutorError
    from scheduler.agent.process import ProcessExecutor
    from scheduler.settings import AgentSettings

    class Pods(ProcessExecutor):  # (kubernetes pods run as tenants: runAsUser)
        kind = "slurm"  # an executor kind that cannot switch users

    settings = AgentSettings.model_validate(
        {"node_name": "n1", "work_dir": str(tmp_path), "task_users": "vc"}
    )
    with pytest.raises(ExecutorError, match="task_users: vc is not supported by the slurm"):
        Agent(settings, store=object(), executor=Pods(limits="none"))  # type: ignore[arg-type]


def test_the_private_share_keeps_only_the_outermost_visible_paths():
    from scheduler.agent.executor import ExecutorError
    from scheduler.agent.process import private_share

    script = private_share("/mnt/s", ["/mnt/s/jobs/a", "/mnt/s/jobs/a/code", "/mnt/s/teams/x"])
    assert script.count("mount --bind") == 2  # the code dir is inside the job dir
    assert "mount -t tmpfs -o mode=0755 pasture-share /mnt/s" in script
    assert "'/mnt/s/jobs/a; rm -rf x'" in private_share("/mnt/s", ["/mnt/s/jobs/a; rm -rf x"])
    assert private_share("/mnt/s", ["/mnt/s/jobs/a", "/mnt/s"]) == ""  # a job mounting it all
    with pytest.raises(ExecutorError, match="outside the share"):
        private_share("/mnt/s", ["/mnt/sx/jobs/a"])


def test_dev_up_chooses_tenant_users_only_where_tasks_can_run_and_says_why_not(monkeypatch):
    from scheduler import dev

    monkeypatch.setattr(tenants, "can_switch", lambda: True)
    monkeypatch.setattr(tenants, "reachable_by_others", lambda path: True)
    assert dev.tenant_mode(None) == ("vc", "")
    monkeypatch.setattr(tenants, "reachable_by_others", lambda path: False)
    users, why = dev.tenant_mode(None)
    assert users == "agent" and "not executable by other users" in why
    assert dev.tenant_mode("vc") == ("vc", "")  # asked for: tasks that need no interpreter
    monkeypatch.setattr(tenants, "can_switch", lambda: False)
    assert dev.tenant_mode(None) == ("agent", "not run as root, so no tenant users can be made")
    with pytest.raises(dev.DevError, match="task_users vc needs root"):
        dev.tenant_mode("vc")


VC_NAMES = ["default", "research", "Team.A", "a" * 63, "x_y-z", "UPPER", "9lives", "a.b", "prod"]


def test_each_vc_owns_a_range_of_65536_host_ids_from_its_uid_that_no_one_else_has():
    """Issue 32, containers in user namespaces: a VC's container ids 0..65535 are host ids
    of its own: its uid is the first of a range of 65536, ranges of different VCs are
    disjoint, and every range lies above the ids useradd and /etc/subuid hand out
    (Debian: up to 600,100,000) and below 2^31 (a uid in a signed int)."""
    ranges = {vc: tenants.id_range(vc) for vc in VC_NAMES}
    for vc, r in ranges.items():
        assert r.start == tenants.uid_of(vc) == tenants.planned(vc).gid
        assert len(r) == 65536 and r.step == 1
        assert r.start > 600_100_000 and r[-1] < 2**31, (vc, r)
    uids = sorted(r.start for r in ranges.values())
    assert len(set(uids)) == len(uids)
    for lo, hi in zip(uids, uids[1:], strict=False):
        assert lo + 65536 <= hi  # disjoint
    # every slot is reachable and ends inside the space (the last slot ends at 2^31 - 1)
    last = tenants.UID_BASE + (tenants.SLOTS - 1) * tenants.ID_RANGE
    assert last + tenants.ID_RANGE - 1 == 2**31 - 1
