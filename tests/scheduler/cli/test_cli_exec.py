"""``pasture job exec JOB TASK -- CMD`` against a real process-mode cluster
(``scheduler.dev``: redis-server, API, loop, one agent as local processes; the task's own
OpenSSH sshd): the command runs in the task's place, its output and exit code come back,
and only the job's submitter (or an admin) of a job with ssh gets in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scheduler import dev
from scheduler.store.tokens import TokenStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SSH_JOB = """\
name: {name}
ssh: {ssh}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: echo started > "$PASTURE_JOB_DIR/marker-$PASTURE_TASK_INDEX"; sleep 120
"""


def _api(c, token: str, method: str, path: str, **kw):
    return httpx.request(
        method,
        f"{c.endpoint}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        **kw,
    )


def _running(c, token: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = _api(c, token, "GET", f"/jobs/{name}").json()
        tasks = job.get("tasks") or []
        if job["state"] == "running" and tasks and tasks[0]["state"] == "running":
            return
        time.sleep(0.3)
    raise AssertionError(f"job {name} is {job['state']}")


def _pasture(c, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PASTURE_ENDPOINT": c.endpoint,
        "PASTURE_TOKEN": token,
    }
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("redis-server") is None or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("needs redis-server and openssh-server (sshd)")
    directory = tmp_path_factory.mktemp("dev")
    c = dev.up(nodes=1, cpu_per_node=2, memory_per_node="2Gi", directory=directory)
    try:
        yield c
    finally:
        dev.down(directory)


def test_exec_runs_in_the_task_and_returns_its_exit_code(cluster):
    c = cluster
    tokens = TokenStore(c.store().r)
    alice = tokens.create("alice", "user", ["default"])
    carol = tokens.create("carol", "user", ["default"])  # same VC, not the submitter
    for name, ssh in (("with-ssh", "true"), ("no-ssh", "false")):
        r = _api(c, alice, "POST", "/jobs", content=SSH_JOB.format(name=name, ssh=ssh))
        assert r.status_code == 201, r.text
    _running(c, alice, "with-ssh")
    _running(c, alice, "no-ssh")

    deadline = time.monotonic() + 60
    while True:  # the task's sshd starts with it: wait until it listens
        r = _pasture(c, alice, "job", "exec", "with-ssh", "main-0", "--", "true")
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stderr
    # the command runs where the task runs: it reads the file the task wrote; its
    # stdout, stderr and exit code come back apart
    marker = f"{c.share_dir}/jobs/with-ssh/marker-0"
    r = _pasture(
        c, alice, "job", "exec", "with-ssh", "main-0", "--",
        "sh", "-c", f"cat {marker}; echo err >&2; exit 3",
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == "started" and r.stderr.strip() == "err"
    # arguments arrive as given, not re-split by a shell
    r = _pasture(c, alice, "job", "exec", "with-ssh", "main-0", "--", "echo", "a  b", "$HOME")
    assert r.returncode == 0 and r.stdout == "a  b $HOME\n", r.stderr
    # an admin may; a user of the same VC who did not submit it may not; another VC's
    # user does not see the job; a job without ssh has no door
    assert _pasture(c, c.token, "job", "exec", "with-ssh", "main-0", "--", "true").returncode == 0
    r = _pasture(c, carol, "job", "exec", "with-ssh", "main-0", "--", "true")
    assert r.returncode == 4 and "only its submitter or an admin" in r.stderr
    r = _pasture(c, alice, "job", "exec", "no-ssh", "main-0", "--", "true")
    assert r.returncode == 6 and "ssh: true" in r.stderr
    r = _pasture(c, alice, "job", "exec", "with-ssh", "main-7", "--", "true")
    assert r.returncode == 5
    r = _pasture(c, alice, "job", "exec", "with-ssh", "main", "--", "true")
    assert r.returncode == 2 and "ROLE-INDEX" in r.stderr
    # the key is handed out in a POST answer only to those allowed
    assert _api(c, carol, "POST", "/jobs/with-ssh/tasks/main/0/exec").status_code == 403
    ok = _api(c, alice, "POST", "/jobs/with-ssh/tasks/main/0/exec").json()
    assert ok["key"].startswith("-----BEGIN") and ok["port"] > 0
    # the job's tasks can write its directory: a key planted where keys lay on the share
    # before (as a task would plant it) is never read; the answer is the submission's key
    planted = f"{c.share_dir}/jobs/with-ssh/.ssh/attempt-1.key"
    os.makedirs(os.path.dirname(planted), exist_ok=True)
    with open(planted, "w") as f:
        f.write("-----BEGIN EC PRIVATE KEY-----\nplanted\n-----END EC PRIVATE KEY-----\n")
    again = _api(c, alice, "POST", "/jobs/with-ssh/tasks/main/0/exec").json()
    assert again["key"] == ok["key"] and "planted" not in again["key"]
    for name in ("with-ssh", "no-ssh"):
        _api(c, alice, "POST", f"/jobs/{name}/stop")


ENV_JOB = """\
name: {name}
ssh: true
env: {{MY_SETTING: "a 'quoted' value"}}
secrets: {{TOKEN: s3cret-value}}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    env: {{ROLE_SETTING: "2"}}
    working_dir: {workdir}
    command: env > "$PASTURE_JOB_DIR/task-env"; pwd > "$PASTURE_JOB_DIR/task-pwd"; sleep 120
"""


def _vars(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_exec_runs_in_the_tasks_environment_and_directory(cluster, tmp_path):
    """Issue 34 item 7: the task's PASTURE_* variables, the job's and role's env and its
    working directory; never its sealed secrets (not written to the node's disk)."""
    c = cluster
    tokens = TokenStore(c.store().r)
    alice = tokens.create("alice-env", "user", ["default"])
    workdir = tmp_path / "it's a dir"
    workdir.mkdir()
    workdir.chmod(0o777)
    spec = ENV_JOB.format(name="env-ssh", workdir=json.dumps(str(workdir)))
    r = _api(c, alice, "POST", "/jobs", content=spec)
    assert r.status_code == 201, r.text
    _running(c, alice, "env-ssh")
    log = Path(c.share_dir) / "jobs" / "env-ssh"
    task_env = Path(c.share_dir) / "jobs" / "env-ssh" / "task-env"
    deadline = time.monotonic() + 60
    while True:  # the task's sshd starts with it: wait until it listens
        r = _pasture(c, alice, "job", "exec", "env-ssh", "main-0", "--", "env")
        if (r.returncode == 0 and task_env.exists()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    logs = "".join(p.read_text() for p in log.rglob("*.log"))
    assert r.returncode == 0, (r.stderr, _api(c, alice, "GET", "/jobs/env-ssh").json(), logs)
    mine, theirs = _vars(r.stdout), _vars(task_env.read_text())
    pasture = {k: v for k, v in theirs.items() if k.startswith("PASTURE_")}
    secret = {k for k in pasture if k.startswith("PASTURE_SECRET_")}
    assert secret == {"PASTURE_SECRET_TOKEN"}
    assert len(pasture) >= 16
    for k, v in pasture.items():
        if k not in secret:
            assert mine.get(k) == v, k
    assert "PASTURE_SECRET_TOKEN" not in mine and "s3cret-value" not in r.stdout
    assert mine["MY_SETTING"] == "a 'quoted' value" and mine["ROLE_SETTING"] == "2"
    r = _pasture(c, alice, "job", "exec", "env-ssh", "main-0", "--", "pwd")
    assert r.returncode == 0 and r.stdout.strip() == str(workdir), r.stderr
    # nothing on the node's disk holds the secret
    for f in Path(c.base_dir).rglob("exec.env"):
        assert "s3cret-value" not in f.read_text()
    _api(c, alice, "POST", "/jobs/env-ssh/stop")


def test_exec_logs_in_once_as_the_user_the_api_names(cluster):
    """The API says which user the task's sshd lets in (its node's agent registered it)
    and the job's host key; `job exec` then makes one SSH connection, as that user (the
    task's sshd log shows one client port per exec, no refused user name)."""
    import pwd
    import re

    from scheduler import jobkey

    c = cluster
    alice = TokenStore(c.store().r).create("alice-once", "user", ["default"])
    r = _api(c, alice, "POST", "/jobs", content=SSH_JOB.format(name="once", ssh="true"))
    assert r.status_code == 201, r.text
    _running(c, alice, "once")
    access = _api(c, alice, "POST", "/jobs/once/tasks/main/0/exec").json()
    assert access["login"] == pwd.getpwuid(os.geteuid()).pw_name  # tasks run as the agent
    assert access["host_key"] == jobkey.public_line(access["key"])
    deadline = time.monotonic() + 60
    while True:  # the task's sshd starts with it: wait until it listens
        r = _pasture(c, alice, "job", "exec", "once", "main-0", "--", "true")
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stderr
    logs = [p for p in Path(c.base_dir).rglob("sshd.log") if "once" in str(p)]
    assert len(logs) == 1, logs
    time.sleep(0.5)
    seen = len(logs[0].read_text().splitlines())
    r = _pasture(c, alice, "job", "exec", "once", "main-0", "--", "echo", "[red]hi[/red]")
    assert r.returncode == 0 and r.stdout == "[red]hi[/red]\n", r.stderr
    time.sleep(1.0)  # a second connection, had there been one, has been logged by now
    new = logs[0].read_text().splitlines()[seen:]
    ports = {m.group(1) for line in new if (m := re.search(r"from \S+ port (\d+)", line))}
    assert len(ports) == 1, new
    assert not [line for line in new if "nvalid user" in line or "Failed" in line], new
    _api(c, alice, "POST", "/jobs/once/stop")
