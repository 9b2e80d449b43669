"""A task's sshd accepts the job's key only from the job's tasks' addresses (issue 32,
"task sshd accepts only its own job's key and only from the job's own tasks' addresses
where the executor can enforce it"): the files the agent writes (startup.prepare, process
mode), run by a real OpenSSH sshd on loopback, tried with paramiko from a task's address
and from another address of this machine (127.0.0.0/8 is all loopback on Linux)."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import paramiko
import pytest

from scheduler import jobkey
from scheduler.agent import ssh, startup
from scheduler.dev import free_port
from scheduler.spec import parse_job_spec
from scheduler.store.records import TaskRecord
from tests.sshd import SSHD, serving

pytestmark = pytest.mark.skipif(not os.path.exists(SSHD), reason="sshd missing (openssh-server)")

SPEC = parse_job_spec(
    {"name": "ring", "ssh": True, "roles": {"w": {"replicas": 2, "command": "sleep 60"}}}
)


def _prepare(
    tmp_path: Path, kind: str, port: int, host_network: bool = True, exec_from: tuple = ()
) -> Path:
    """Task w-0 (on 127.0.0.1) of a job whose other task runs on 127.0.0.2: its ssh dir."""
    tasks = [
        TaskRecord("w", 0, 1, "n0", "127.0.0.1", {"main": 31000, "ssh": port}),
        TaskRecord("w", 1, 1, "n1", "127.0.0.2", {"main": 31000, "ssh": port + 1}),
    ]
    task_dir = tmp_path / "agent" / "tasks" / f"ring-w-0-{kind}"
    startup.prepare(
        job="ring",
        user="u",
        spec=SPEC,
        tasks=tasks,
        me=tasks[0],
        node="n0",
        share=tmp_path / "share",
        task_dir=task_dir,
        task_id=f"ring-w-0-{kind}",
        executor_kind=kind,
        ssh_key=KEY,
        host_network=host_network,
        exec_from=exec_from,
    )
    return task_dir / "ssh"


KEY = jobkey.generate()


def _sshd(d: Path, port: int):
    """The task's own sshd (the config the agent wrote in ``d``) on 127.0.0.1:``port``."""
    return serving(d / "sshd_config", port, d.parent / "sshd.log", "-o", "ListenAddress=127.0.0.1")


def _login_from(source: str, port: int) -> str:
    """Log in with the job's key from ``source``; the command's output, or the error."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        client.connect(
            "127.0.0.1",
            port,
            username="root",
            pkey=paramiko.ECDSAKey.from_private_key(io.StringIO(KEY)),
            sock=sock,
            allow_agent=False,
            look_for_keys=False,
            timeout=10,
        )
        _, out, _ = client.exec_command("echo in")
        return out.read().decode().strip()
    except paramiko.AuthenticationException as exc:
        return f"refused: {exc}"
    finally:
        client.close()


def test_the_task_sshd_takes_the_job_key_only_from_the_jobs_task_addresses(tmp_path):
    port = free_port()
    d = _prepare(tmp_path, "process", port)
    assert (d / "authorized_keys").read_text().startswith('from="127.0.0.1,127.0.0.2" ')
    with _sshd(d, port):
        assert _login_from("127.0.0.2", port) == "in"  # the job's other task
        assert _login_from("127.0.0.1", port) == "in"  # a task on the same node
        assert _login_from("127.0.0.3", port).startswith("refused")  # no task of the job


def test_the_networks_job_exec_comes_from_are_let_in_too(tmp_path):
    """Agent setting ``ssh_exec_from``: ``pasture job exec`` from a login network."""
    port = free_port()
    d = _prepare(tmp_path, "process", port, exec_from=("127.0.0.64/26",))
    assert 'from="127.0.0.1,127.0.0.2,127.0.0.64/26" ' in (d / "authorized_keys").read_text()
    with _sshd(d, port):
        assert _login_from("127.0.0.100", port) == "in"
        assert _login_from("127.0.0.3", port).startswith("refused")


def test_containers_off_the_host_network_and_pods_keep_the_key_alone(tmp_path):
    """Where the task's connections do not leave from its node's address, ``from=`` would
    refuse the job's own tasks: the key alone is the check there."""
    public = jobkey.public_line(KEY)
    for kind, host in (("kubernetes", True), ("container", False)):
        d = _prepare(tmp_path / kind, kind, 31001, host_network=host)
        assert (d / "authorized_keys").read_text() == public + "\n"
    d = _prepare(tmp_path / "ctr-host", "container", 31001, host_network=True)
    assert (d / "authorized_keys").read_text() == f'from="127.0.0.1,127.0.0.2" {public}\n'


def test_a_node_address_that_is_no_ip_is_resolved_or_refused():
    t = TaskRecord("w", 0, 1, "n0", "localhost", {"ssh": 1})
    assert "127.0.0.1" in ssh.allowed_sources([t])
    bad = TaskRecord("w", 0, 1, "n0", "no-such-host.invalid", {"ssh": 1})
    with pytest.raises(ValueError, match="neither an IP address nor a name that resolves"):
        ssh.allowed_sources([bad])
    with pytest.raises(ValueError):
        ssh.authorized_keys("ecdsa-sha2-nistp256 AAAA", ['1.2.3.4" command="sh'])
