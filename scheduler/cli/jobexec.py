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
"""

from __future__ import annotations

import getpass
import importlib
import io
import queue
import select
import shlex
import sys
import threading
from typing import TYPE_CHECKING

import typer

from scheduler.cli.output import UNAVAILABLE, err_console

if TYPE_CHECKING:
    import paramiko

    from scheduler.api.schemas import ExecAccessOut

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


def preload() -> threading.Thread:
    """Import paramiko (and its cryptography) in a thread while the caller waits for the
    API's answer: the import is most of exec's own CPU time, the round trip mostly
    waiting. Join the thread before using paramiko (:func:`connect` imports it again,
    which is then free)."""
    th = threading.Thread(target=importlib.import_module, args=("paramiko",), daemon=True)
    th.start()
    return th


def _login(access: ExecAccessOut, key: paramiko.PKey, name: str) -> paramiko.SSHClient:
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


def connect(access: ExecAccessOut, login: str | None) -> paramiko.SSHClient:
    """An SSH connection to the task behind ``access``, logged in with the job's key,
    accepting only that key as the host key.

    Logs in as ``login``, else as the task's user (``access.user``: its VC's Unix user,
    docs/runtime-env.md) or the local user name (a node that runs tasks as the agent's
    user): both are tried at once, each on its own connection (the server allows one user
    name per connection), and the first that gets in is kept, so a refused name costs no
    second handshake in a row.

    Raises:
        paramiko.SSHException, OSError: the task cannot be reached or refused the key
            (the error of the last name tried).
    """
    import paramiko

    key = paramiko.ECDSAKey.from_private_key(io.StringIO(access.key))
    names = (
        [login] if login else list(dict.fromkeys(n for n in (access.user, getpass.getuser()) if n))
    )
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


def run_on(client: paramiko.SSHClient, access: ExecAccessOut, command: list[str]) -> int:
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


def run_remote(access: ExecAccessOut, command: list[str], login: str | None) -> int:
    """Run ``command`` in the task behind ``access`` (:func:`connect`, :func:`run_on`);
    its exit code (255 when the connection failed, after a message on stderr)."""
    import paramiko

    client: paramiko.SSHClient | None = None
    try:
        client = connect(access, login)
        return run_on(client, access, command)
    except (paramiko.SSHException, OSError) as exc:
        err_console.print(
            f"[red]error:[/red] cannot reach task {access.role}-{access.index} of job"
            f" {access.job} at {access.address}:{access.port}: {exc}"
        )
        return UNAVAILABLE
    finally:
        if client is not None:
            client.close()
