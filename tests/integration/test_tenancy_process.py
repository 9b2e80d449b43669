"""Tenants where their tasks run, tried as a second tenant would (issue 32 items 2 and 4):
a real process-mode dev cluster (redis-server, API, loop, agent as local processes, run
as root so each VC's tasks run as its own Unix user) and the tasks' own OpenSSH sshd.

- Keys: alice keeps the key ``job exec`` gave her for ``train-1`` and deletes the job; bob
  (VC research) submits ``train-1``: the key that opened alice's task does not open bob's,
  no key lies on the share, and a task's key is gone from the node once its attempt ended.
- Unix identity: alice's task (VC default) runs as VC default's user and reads no byte of
  bob's job directory, log, ssh key, environment or command line (``/proc``), though it
  is told every path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from scheduler import dev, tenants
from scheduler.jobref import job_key
from scheduler.store.tokens import TokenStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = """\
name: train-1
vc: {vc}
ssh: true
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: sleep 120
"""

VCS = [
    {"name": "default", "guarantee": {"cpu": "1", "memory": "1Gi"}},
    {"name": "research", "guarantee": {"cpu": "1", "memory": "1Gi"}},
]


def _api(c, token: str, method: str, path: str, **kw):
    return httpx.request(
        method,
        f"{c.endpoint}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        **kw,
    )


def _access(c, token: str, name: str, timeout: float = 60) -> dict:
    """The exec answer of ``name``'s task main-0 once it runs."""
    deadline = time.monotonic() + timeout
    while True:
        r = _api(c, token, "POST", f"/jobs/{name}/tasks/main/0/exec")
        if r.status_code == 200:
            return r.json()
        if time.monotonic() > deadline:
            raise AssertionError(r.text)
        time.sleep(0.3)


def _ssh(access: dict, key: str, tmp: Path, user: str) -> subprocess.CompletedProcess:
    """``ssh`` into the task that ``access`` names with private key ``key``."""
    key_file = tmp / f"key-{time.monotonic_ns()}"
    key_file.write_text(key)
    key_file.chmod(0o600)
    return subprocess.run(
        [
            "ssh", "-i", str(key_file), "-p", str(access["port"]),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5", "-l", user, access["address"], "echo in",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _until_in(access: dict, key: str, tmp: Path, user: str) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + 30  # the task's sshd starts with it
    while True:
        r = _ssh(access, key, tmp, user)
        if r.returncode == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("redis-server") is None or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("needs redis-server and openssh-server (sshd)")
    if os.geteuid() != 0:
        pytest.skip("tenant users need root (scheduler/tenants.py)")
    directory = tmp_path_factory.mktemp("dev")
    c = dev.up(
        nodes=1,
        cpu_per_node=2,
        memory_per_node="2Gi",
        virtual_clusters=VCS,
        directory=directory,
        task_users="vc",  # these tasks run sh and ssh only: no interpreter to reach
    )
    try:
        yield c
    finally:
        dev.down(directory)


def test_a_deleted_jobs_key_does_not_open_the_next_job_of_that_name(cluster, tmp_path):
    c = cluster
    tokens = TokenStore(c.store().r)
    alice = tokens.create("alice", "user", ["default"])
    bob = tokens.create("bob", "user", ["research"])
    r = _api(c, alice, "POST", "/jobs", content=JOB.format(vc="default"))
    assert r.status_code == 201, r.text
    old = _access(c, alice, "train-1")
    # the key opens alice's own task (so a refusal below is the key's, not the door's)
    r = _until_in(old, old["key"], tmp_path, old.get("user") or "root")
    assert r.returncode == 0 and r.stdout.strip() == "in", r.stderr
    deadline = time.monotonic() + 30  # force: stop first, delete once it stopped
    while not _api(c, alice, "DELETE", "/jobs/train-1?force=true").json().get("deleted"):
        assert time.monotonic() < deadline, "train-1 was not deleted"
        time.sleep(0.3)

    r = _api(c, bob, "POST", "/jobs", content=JOB.format(vc="research"))
    assert r.status_code == 201, r.text
    new = _access(c, bob, "train-1")
    assert new["key"] != old["key"]
    user = new.get("user") or "root"
    assert _until_in(new, new["key"], tmp_path, user).returncode == 0  # bob's own key opens
    r = _ssh(new, old["key"], tmp_path, user)  # alice's kept key does not
    assert r.returncode == 255 and "in" not in r.stdout.split(), (r.stdout, r.stderr)

    # no private key lies anywhere on the share
    share = Path(c.share_dir)
    for path in share.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert b"PRIVATE KEY" not in path.read_bytes(), path
    # the key is on the node only while the attempt runs
    agent = yaml.safe_load(Path(c.agent_configs[0]).read_text())
    tasks = Path(agent["work_dir"]) / "tasks"
    held = [p for p in tasks.glob("*/ssh/id_job")]
    assert len(held) == 1 and held[0].read_text() == new["key"]
    assert (held[0].stat().st_mode & 0o777) == 0o600
    assert _api(c, bob, "POST", "/jobs/train-1/stop").status_code == 200
    deadline = time.monotonic() + 30
    while list(tasks.glob("*/ssh")):
        assert time.monotonic() < deadline, list(tasks.glob("*/ssh/*"))
        time.sleep(0.3)


BOB = """\
name: bob-job
vc: research
ssh: true
env: {{BOB_MARK: {mark}}}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: echo {mark} > "$PASTURE_JOB_DIR/secret.txt"; echo {mark}; sleep 120
"""

# alice's task: every read of bob's that the test names, each line "<what> <bytes read>";
# /proc: how many environments hold bob's mark, and (control) how many hold alice's own
ALICE = """\
name: alice-job
env: {{ALICE_MARK: alice-{own}}}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: |
      out="$PASTURE_JOB_DIR/attack"
      echo "uid $(id -u) gid $(id -g)" > "$out"
      for f in {paths}; do
        echo "file $f $(cat "$f" 2>/dev/null | wc -c)" >> "$out"
      done
      echo "list $(ls -A "$PASTURE_SHARE_DIR/jobs" 2>/dev/null | paste -sd, -)" >> "$out"
      echo "root $(ls -A "$PASTURE_SHARE_DIR" 2>/dev/null | paste -sd, -)" >> "$out"
      echo "tasks $(ls "$(dirname "$PASTURE_LEASE_FILE")/tasks" 2>/dev/null | wc -l)" >> "$out"
      n="$PASTURE_JOB_DIR/needle"
      echo {rev} | rev > "$n"  # bob's mark, in no command line or environment of alice's
      echo "proc-bob $(grep -lsF -f "$n" /proc/[0-9]*/environ 2>/dev/null | wc -l)" >> "$out"
      echo "cmdline-bob $(grep -lsF -f "$n" /proc/[0-9]*/cmdline 2>/dev/null | wc -l)" >> "$out"
      o={own}
      echo "proc-own $(grep -ls "alice-$o" /proc/[0-9]*/environ 2>/dev/null | wc -l)" >> "$out"
      echo done >> "$out"
"""


def _state(c, token: str, name: str, want: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = _api(c, token, "GET", f"/jobs/{name}").json()
        if job["state"] == want:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.3)


def test_a_tenants_task_reads_nothing_of_another_tenants_job(cluster):
    c = cluster
    assert c.task_users == "vc"  # run as root: each VC's tasks as its own Unix user
    tokens = TokenStore(c.store().r)
    alice = tokens.create("alice2", "user", ["default"])
    bob = tokens.create("bob2", "user", ["research"])
    mark = "bobsecret7f3a"
    r = _api(c, bob, "POST", "/jobs", content=BOB.format(mark=mark))
    assert r.status_code == 201, r.text
    job = _state(c, bob, "bob-job", "running")
    share = Path(c.share_dir)
    bob_dir = share / "jobs" / job_key("research", "bob-job")  # scheduler/jobref.py
    deadline = time.monotonic() + 30
    while not (bob_dir / "secret.txt").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    agent = yaml.safe_load(Path(c.agent_configs[0]).read_text())
    keys = list((Path(agent["work_dir"]) / "tasks").glob("bob-job*/ssh/id_job"))
    assert len(keys) == 1
    log = bob_dir / "logs" / job["uid"] / "main-0.log"
    (share / "root.txt").write_text("on the share root, readable by all users")
    paths = [
        bob_dir / "secret.txt",
        log,
        keys[0],
        keys[0].parent / "sshd_config",
        share / "root.txt",  # mode 0644: only the task's mount namespace hides it
    ]
    for p in paths:  # each holds something: a zero below is a refusal, not an empty file
        assert p.stat().st_size > 0, p
    bob_user = tenants.planned("research")
    assert (bob_dir.stat().st_uid, keys[0].stat().st_uid) == (bob_user.uid, bob_user.uid)

    r = _api(
        c, alice, "POST", "/jobs",
        content=ALICE.format(rev=mark[::-1], own=mark[::-1], paths=" ".join(str(p) for p in paths)),
    )  # fmt: skip
    assert r.status_code == 201, r.text
    _state(c, alice, "alice-job", "succeeded")
    lines = (share / "jobs" / "alice-job" / "attack").read_text().splitlines()
    assert lines[-1] == "done", lines
    got = dict(line.rsplit(" ", 1) for line in lines[1:-1])
    me = tenants.planned("default")
    assert lines[0] == f"uid {me.uid} gid {me.gid}"
    assert got.pop("proc-own") != "0", got  # the /proc probe finds what it may read
    assert got == {
        **{f"file {p}": "0" for p in paths},
        "list": "alice-job",  # its own mount namespace: the share shows its job only
        "root": "jobs",
        "tasks": "0",
        "proc-bob": "0",
        "cmdline-bob": "0",  # the command travels in the environment, not argv
    }
    _api(c, bob, "POST", "/jobs/bob-job/stop")
