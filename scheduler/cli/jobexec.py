"""``pasture job exec JOB TASK -- CMD...``: run a command in a running task, as
``kubectl exec`` does, through the task's own sshd.

The API hands the job's submitter (or an admin) the task's address, its sshd port and the
job attempt's key (``POST /api/v1/jobs/JOB/tasks/ROLE/INDEX/exec``,
:mod:`scheduler.services.jobexec`); the command then runs over SSH (paramiko) with that
key, accepting only that key as the host key. Only jobs with ``ssh: true`` (or ``mpi``)
have an sshd in their tasks. The command lands where the task's sshd runs: inside the
task's container (container and Kubernetes executors), or on the node in the task's cgroup
(process executor), so stop and fencing end it with the task. No stdin and no terminal are
forwarded; stdout and stderr stream back as they come, and the exit code is the command's.
The command runs in the task's environment (its ``PASTURE_*`` variables, the job's and
role's ``env``, its PATH; not its sealed secrets, which are never written to a file) and
working directory, as the task wrote them at its start (:data:`IN_TASK`).

Time to first output (``python -m scheduler.bench exec``; target under 1 s): one API
round trip over the standard library's HTTP client (:func:`fetch_access`: no httpx, no
pydantic), and, where the API says which user the task's sshd lets in and an OpenSSH
client is installed, that ``ssh`` with the job's key in a private temporary directory
and the job's key as the only known host key (:func:`run_openssh`: no paramiko import, one
handshake in C). Otherwise paramiko (:func:`run_remote`), trying the candidate user names
at once when the API does not know the right one.
"""

from __future__ import annotations

import getpass
import importlib
import io
import os
import queue
import select
import shlex
import sys
import threading
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any

import typer

from scheduler.cli.client import ApiError
from scheduler.cli.output import UNAVAILABLE, err_console

if TYPE_CHECKING:
    import paramiko

    from scheduler.cli.config import ClientConfig

CONNECT_TIMEOUT_S = 15.0
IN_TASK = 'f="${PASTURE_EXEC_ENV:-}"; if [ -n "$f" ] && [ -r "$f" ]; then . "$f"; fi; exec "$@"'
"""What the task's sshd runs for ``job exec``: source the task's variables and ``cd`` to
its directory (``$PASTURE_EXEC_ENV``, set by the task's sshd:
:func:`scheduler.agent.ssh.exec_env_script`), then the command, its words as given."""


def parse_task(task: str) -> tuple[str, int]:
    """``'worker-1'`` -> ``('worker', 1)`` (the ``role-index`` of ``pasture job logs``).

    Raises:
        typer.BadParameter: no ``-INDEX`` at the end.
    """
    role, _, index = task.rpartition("-")
    if not role or not index.isdigit():
        raise typer.BadParameter(f"TASK: expected ROLE-INDEX such as worker-0, got {task!r}")
    return role, int(index)


@dataclass(frozen=True, slots=True)
class ExecAccess:
    """The API's answer to ``POST /jobs/JOB/tasks/ROLE/INDEX/exec``
    (:class:`scheduler.api.schemas.ExecAccessOut`, read without pydantic): the task's
    ``address`` and sshd ``port``, the submission's private ``key`` (PEM), ``host_key``
    (its OpenSSH public line, the only host key to accept), ``user`` (the job's VC's
    Unix user) and ``login`` (the user its sshd accepts; "" when unknown)."""

    job: str
    role: str
    index: int
    attempt: int
    node: str
    address: str
    port: int
    key: str
    user: str = ""
    login: str = ""
    host_key: str = ""

    @classmethod
    def from_json(cls, data: Any, what: str) -> ExecAccess:
        """``data`` (decoded JSON) checked field by field.

        Raises:
            ApiError (status 0): not an object, or a field missing or of the wrong type
                (the message names the request and the fields).
        """
        if not isinstance(data, dict):
            raise ApiError(0, f"unexpected answer to {what}: not a JSON object")
        values: dict[str, Any] = {}
        wrong = []
        for f in fields(cls):
            kind = int if f.type == "int" else str
            if f.name not in data:
                if f.default is not MISSING:  # has a default
                    continue
                wrong.append(f"{f.name}: missing")
                continue
            v = data[f.name]
            if not isinstance(v, kind) or isinstance(v, bool):
                wrong.append(f"{f.name}: expected {kind.__name__}, got {type(v).__name__}")
            values[f.name] = v
        if wrong:
            raise ApiError(0, f"unexpected answer to {what} (ExecAccessOut): {'; '.join(wrong)}")
        return cls(**values)


def fetch_access(config: ClientConfig, name: str, role: str, index: int) -> ExecAccess:
    """``POST /api/v1/jobs/NAME/tasks/ROLE/INDEX/exec`` with the standard library's HTTP
    client (:func:`scheduler.cli.transport.send`, as :class:`scheduler.cli.client.ApiClient`
    sends its requests: no httpx, no response models).

    Raises:
        ApiError: the API's 4xx/5xx (its status and ``detail``), or status 0 when it
            cannot be reached or its answer is not what is expected.
    """
    import json
    import urllib.parse

    from scheduler.cli import transport

    q = urllib.parse.quote
    path = f"/api/v1/jobs/{q(name, safe='')}/tasks/{q(role, safe='')}/{int(index)}/exec"
    what = f"exec into {name} {role}-{index}"
    _, _, body = transport.send(config, "POST", path, headers={"Accept": "application/json"})
    try:
        data = json.loads(body)
    except ValueError:
        raise ApiError(0, f"unexpected answer to {what}: not JSON") from None
    return ExecAccess.from_json(data, what)


def run_openssh(access: ExecAccess, command: list[str], login: str | None) -> int | None:
    """Run ``command`` in the task with the OpenSSH client, as :func:`run_on` does over
    paramiko (:data:`IN_TASK`, ``SHLVL=1``, no stdin, no terminal; stdout and stderr
    straight to ours). None when that cannot be done here: no ``ssh`` on PATH, or the
    user to log in as (``login``, else ``access.login``) or the host key is unknown.

    The job's key is written to a private temporary directory (0700, the key 0600),
    removed afterwards; the only known host key is the job's (``HostKeyAlias``, no other
    known_hosts file, ``StrictHostKeyChecking yes``); the user's ssh config, agent and
    keys are not used (``-F /dev/null``, ``IdentitiesOnly``, ``IdentityAgent none``).

    Returns:
        the command's exit code; 7 after a message when ssh could not connect or log in
        (its exit 255 with an error logged, told apart from the command's own 255).
    """
    import shutil
    import subprocess
    import tempfile

    ssh = shutil.which("ssh")
    user = login or access.login
    if ssh is None or not user or not access.host_key:
        return None
    with tempfile.TemporaryDirectory(prefix="pasture-exec-") as tmp:
        key = os.path.join(tmp, "id_job")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(access.key)
        known = os.path.join(tmp, "known_hosts")
        with open(known, "w") as f:
            f.write(f"pasture-task {access.host_key.strip()}\n")
        errors = os.path.join(tmp, "ssh.err")
        argv = [ssh, "-F", "/dev/null", "-T", "-n", "-E", errors, "-i", key]
        for option in (
            "IdentitiesOnly=yes",
            "IdentityAgent=none",
            "BatchMode=yes",
            "StrictHostKeyChecking=yes",
            f"UserKnownHostsFile={known}",
            "GlobalKnownHostsFile=/dev/null",
            "HostKeyAlias=pasture-task",
            "CheckHostIP=no",
            f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}",
            "SetEnv=SHLVL=1",
            "LogLevel=ERROR",
        ):
            argv += ["-o", option]
        argv += ["-p", str(access.port), "-l", user, "--", access.address]
        argv.append(shlex.join(["sh", "-c", IN_TASK, "pasture-exec", *command]))
        code = subprocess.call(argv)  # noqa: S603 - fixed argv, the command one quoted word
        if code == 255:
            with open(errors, errors="replace") as f:
                why = f.read().strip()
            if why:  # ssh's own failure, not the command's exit 255
                err_console.print(
                    f"[red]error:[/red] cannot reach task {_esc(access.role)}-{access.index}"
                    f" of job {_esc(access.job)} at {_esc(access.address)}:{access.port}:"
                    f" {_esc(why)}"
                )
                return UNAVAILABLE
        return code


def _esc(text: str) -> str:
    from scheduler.cli.text import esc

    return esc(text)


def preload() -> threading.Thread:
    """Import paramiko (and its cryptography) in a thread while the caller waits for the
    API's answer: the import is most of exec's own CPU time, the round trip mostly
    waiting. Join the thread before using paramiko (:func:`connect` imports it again,
    which is then free)."""
    th = threading.Thread(target=importlib.import_module, args=("paramiko",), daemon=True)
    th.start()
    return th


def _login(access: ExecAccess, key: paramiko.PKey, name: str) -> paramiko.SSHClient:
    import paramiko

    client = paramiko.SSHClient()
    host = access.address if access.port == 22 else f"[{access.address}]:{access.port}"
    client.get_host_keys().add(host, key.get_name(), key)  # the job's key, nothing else
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            access.address,
            port=access.port,
            username=name,
            pkey=key,
            timeout=CONNECT_TIMEOUT_S,
            allow_agent=False,
            look_for_keys=False,
        )
    except BaseException:
        client.close()
        raise
    return client


def connect(access: ExecAccess, login: str | None) -> paramiko.SSHClient:
    """An SSH connection to the task behind ``access``, logged in with the job's key,
    accepting only that key as the host key.

    Logs in as ``login``, else as the name the API gave (``access.login``: the user the
    task's sshd accepts, as its node's agent registered it), with one connection. Only
    when neither is known (a container whose image decides, an agent that did not say)
    are the task's VC user (``access.user``, docs/runtime-env.md) and the local user name
    tried at once, each on its own connection (the server allows one user name per
    connection), the first that gets in kept.

    Raises:
        paramiko.SSHException, OSError: the task cannot be reached or refused the key
            (the error of the last name tried).
    """
    import paramiko

    key = paramiko.ECDSAKey.from_private_key(io.StringIO(access.key))
    if login or access.login:
        return _login(access, key, login or access.login)
    names = list(dict.fromkeys(n for n in (access.user, getpass.getuser()) if n))
    if len(names) == 1:
        return _login(access, key, names[0])
    # daemon threads: a slower attempt never holds up the command or the exit
    results: queue.Queue[tuple[paramiko.SSHClient | None, BaseException | None]] = queue.Queue()
    lock, taken = threading.Lock(), threading.Event()

    def attempt(name: str) -> None:
        try:
            client = _login(access, key, name)
        except BaseException as exc:  # handed to the caller's thread
            results.put((None, exc))
            return
        with lock:
            if taken.is_set():  # another name got in first
                client.close()
                return
            taken.set()
        results.put((client, None))

    for name in names:
        threading.Thread(target=attempt, args=(name,), daemon=True).start()
    error: BaseException | None = None
    for _ in names:
        got, exc = results.get()
        if got is not None:
            return got
        error = exc
    assert error is not None
    raise error


def run_on(client: paramiko.SSHClient, access: ExecAccess, command: list[str]) -> int:
    """Run ``command`` over the open connection ``client`` in the task's environment and
    directory (:data:`IN_TASK`); stdout and stderr stream to ours as they come. Returns
    its exit code.

    The session asks for ``SHLVL=1`` (the task's sshd accepts that one variable): bash,
    a login shell that sshd runs the command with, then does not read ``~/.bashrc``
    (bash reads it for a top-level command over ssh), which the task never read either
    and which may take most of a second (a ``pyenv init``).

    Raises:
        paramiko.SSHException, OSError: the connection broke.
    """
    import paramiko

    transport = client.get_transport()
    if transport is None:
        raise paramiko.SSHException("the connection closed right after login")
    channel = transport.open_session()
    channel.update_environment({"SHLVL": "1"})
    channel.exec_command(shlex.join(["sh", "-c", IN_TASK, "pasture-exec", *command]))
    channel.shutdown_write()
    out, err = sys.stdout.buffer, sys.stderr.buffer
    while True:
        if channel.recv_ready():
            out.write(channel.recv(65536))
            out.flush()
        if channel.recv_stderr_ready():
            err.write(channel.recv_stderr(65536))
            err.flush()
        if channel.exit_status_ready() and not (
            channel.recv_ready() or channel.recv_stderr_ready()
        ):
            break
        select.select([channel], [], [], 0.5)  # wakes on data, end or exit status
    return channel.recv_exit_status()


def run_remote(access: ExecAccess, command: list[str], login: str | None) -> int:
    """Run ``command`` in the task behind ``access`` (:func:`connect`, :func:`run_on`);
    its exit code (255 when the connection failed, after a message on stderr)."""
    import paramiko

    client: paramiko.SSHClient | None = None
    try:
        client = connect(access, login)
        return run_on(client, access, command)
    except (paramiko.SSHException, OSError) as exc:
        err_console.print(
            f"[red]error:[/red] cannot reach task {_esc(access.role)}-{access.index} of job"
            f" {_esc(access.job)} at {_esc(access.address)}:{access.port}: {_esc(str(exc))}"
        )
        return UNAVAILABLE
    finally:
        if client is not None:
            client.close()
