"""ssh between a job's tasks: the job's key pair, each task's sshd and client config.

Wiring (one job attempt; every agent computes the same files from the same inputs):

- Key pair: the submission's own (one per job uid, ECDSA P-256, PEM), made by the store
  when the job is stored and read from this node's launch record
  (:mod:`scheduler.jobkey`); it never lies on the share, and no file the agent did not
  write for this task is ever read as a key. The same key is every task's host key and
  client identity, so clients check the server's host key against it
  (``StrictHostKeyChecking yes`` with a known_hosts line ``* <public key>``): only the
  job's own tasks are trusted. A job deleted and submitted again gets a new key.
- The sshd accepts the key only from the job's tasks' addresses (``from=`` in
  ``authorized_keys``) where a task's connections leave from its node's address (process
  executor, containers on the host network); on Kubernetes and container networks other
  than the host's, any address (the key alone). Another tenant's task on the same node
  shares that address: there the key (never readable by another user) is what refuses it.
- Per task, in a directory private to the task on the node (``<work_dir>/tasks/<id>/ssh``,
  0700 and owned by the task's user, mounted at ``/run/pasture/ssh`` in containers; the
  agent removes it when the attempt ends): the key (0600), ``authorized_keys``,
  ``known_hosts``, ``sshd_config``, ``config`` (host aliases), ``bin/ssh``
  (``ssh -F config``, first on the task's PATH) and ``bin/pasture-ssh-barrier``.
- sshd listens on the task's ``ssh`` port (:func:`scheduler.spec.facts.port_names` adds
  one to every role of a job that asks for ssh) and runs in the foreground in the task's
  process group; the start-up script kills it when the command ends. The sessions it forks
  for processes started over ssh (MPI ranks) leave that process group and session, but not
  the task's cgroup, which the task's shell joined before starting sshd (process executor,
  :mod:`scheduler.agent.cgroup`; ``UsePAM no``, so no PAM module moves them to a login
  session): stop and fencing kill them with the task.
- Host aliases, one ``Host`` block per task: ``<role>-<index>`` (and the role's shell name,
  ``worker_gpu-0``, when the role has other characters), with HostName, Port, IdentityFile,
  known_hosts; plus one block per host address pointing at the first of the job's tasks
  on that host, so the MPI hostfile's ``<address> slots=n`` lines reach an sshd. No
  ``User``: ssh logs in as the local user, who is the user every task of the job runs as.

The task's own ``~/.ssh/config`` is written only in containers (a process-mode task shares
the node's home directory, and OpenSSH reads ``~`` from the passwd entry, not $HOME), hence
the ``bin/ssh`` wrapper on PATH in both modes.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler import jobkey
from scheduler.rules.discovery import ordered_tasks, shell_name
from scheduler.spec.model import JobSpec
from scheduler.spec.secrets import env_name as secret_env
from scheduler.store.records import TaskRecord

KEY_NAME = "id_job"
EXEC_ENV_FILE = "exec.env"
"""The task's variables and working directory as ``sh`` lines, for ``pasture job exec``."""
EXEC_ENV_VAR = "PASTURE_EXEC_ENV"
"""Set by the task's sshd in every session it opens: the path of :data:`EXEC_ENV_FILE`."""


def job_key(private_pem: str) -> tuple[str, str]:
    """The submission's key pair from the private key of its launch record.

    Returns:
        (private key in PEM, public key line ``ecdsa-sha2-nistp256 AAAA...``).
    Raises:
        ValueError: no key (a job stored before keys were made per submission: resubmit
            it) or not a key (:func:`scheduler.jobkey.public_line`).
    """
    if not private_pem:
        raise ValueError(
            "this job asks for ssh but its launch record holds no key (stored before keys"
            " were made per submission); resubmit the job"
        )
    return private_pem, jobkey.public_line(private_pem)


def aliases(job: str, t: TaskRecord) -> list[str]:
    """Host aliases of task ``t``: ``<role>-<index>``, its shell-name form when different
    and ``<job>-<role>-<index>`` (Volcano's pod name)."""
    names = [f"{t.role}-{t.index}", f"{shell_name(t.role)}-{t.index}", f"{job}-{t.role}-{t.index}"]
    return list(dict.fromkeys(names))


def client_config(job: str, spec: JobSpec, tasks: Sequence[TaskRecord], task_dir: str) -> str:
    """The ``ssh -F`` config of every task of the job (shape: module docstring).

    Args:
        task_dir: the per-task ssh directory as the task sees it.
    """
    common = (
        f"  IdentityFile {task_dir}/{KEY_NAME}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {task_dir}/known_hosts\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n"
        "  CheckHostIP no\n"
        "  BatchMode yes\n"
        "  LogLevel ERROR\n"
    )
    out = [f"# ssh aliases of job {job} (written by the pasture agent)\n"]
    first_on_host: dict[str, TaskRecord] = {}
    for t in ordered_tasks(spec, tasks):
        if "ssh" not in t.ports:
            continue
        first_on_host.setdefault(t.address, t)
        out.append(
            f"Host {' '.join(aliases(job, t))}\n  HostName {t.address}\n"
            f"  Port {t.ports['ssh']}\n{common}"
        )
    for address, t in first_on_host.items():
        out.append(f"Host {address}\n  HostName {address}\n  Port {t.ports['ssh']}\n{common}")
    return "\n".join(out)


def sshd_config(port: int, task_dir: str) -> str:
    """The task's sshd configuration: key-only login with the job key on ``port``."""
    return (
        f"Port {port}\n"
        f"HostKey {task_dir}/{KEY_NAME}\n"
        f"AuthorizedKeysFile {task_dir}/authorized_keys\n"
        f"PidFile {task_dir}/sshd.pid\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "StrictModes no\n"
        "UsePAM no\n"
        "PrintMotd no\n"
        "Subsystem sftp internal-sftp\n"
        # `pasture job exec` starts from the task's variables and directory (exec_env_script)
        f"SetEnv {EXEC_ENV_VAR}={task_dir}/{EXEC_ENV_FILE}\n"
        # and may ask for SHLVL=1, so bash skips ~/.bashrc, as the task's own shell did
        "AcceptEnv SHLVL\n"
    )


# prints `cd -- '<the shell's directory>'` with each ' written '\'' (sed's \\ is one \)
_CD_LINE = r""" printf "cd -- '%s'\n" "$(pwd | sed "s/'/'\\\\''/g")" """


def exec_env_script(task_dir: str, secrets: Sequence[str] = ()) -> str:
    """A start-up line (``/bin/sh``, run after the task's ``cd``) that writes the task's
    exported variables and its working directory to ``<task_dir>/exec.env`` (mode 0600,
    replaced atomically): ``export NAME='value'`` lines (the shell's ``export -p``, which
    quotes every value), then ``cd -- '<dir>'``. ``pasture job exec`` sources it before
    the command (:data:`EXEC_ENV_VAR`), so the command runs as the task does: its
    ``PASTURE_*`` variables, the job's and role's ``env``, its PATH, its directory.

    The job's sealed secrets (``PASTURE_SECRET_<NAME>`` for each of ``secrets``) are
    unset first: a secret's value is never written to a file on the node, and exec (the
    job's submitter, or an admin looking in) is not handed it.
    """
    d = shlex.quote(task_dir)
    unset = " ".join(secret_env(n) for n in secrets)
    return (
        "# what `pasture job exec` starts from: the task's variables (no secret) and directory\n"
        + f"( umask 077; {{ {f'unset {unset}; ' if unset else ''}export -p;"
        + _CD_LINE
        + f"; }} > {d}/{EXEC_ENV_FILE}.tmp && mv -f {d}/{EXEC_ENV_FILE}.tmp {d}/{EXEC_ENV_FILE} )"
    )


def allowed_sources(tasks: Sequence[TaskRecord]) -> list[str]:
    """The addresses the job's tasks connect from: each task's node address (a name
    resolved to its IP addresses, since sshd matches ``from=`` against the client's IP
    without DNS), sorted, for the ``from=`` option of ``authorized_keys``. Only right
    where a task's connections leave from its node's address (process executor, containers
    on the host network).

    Raises:
        ValueError: an address that is neither an IP address nor a name that resolves.
    """
    out: set[str] = set()
    for t in tasks:
        try:
            out.add(str(ipaddress.ip_address(t.address)))
        except ValueError:
            try:
                infos = socket.getaddrinfo(t.address, None, proto=socket.IPPROTO_TCP)
            except (OSError, UnicodeError):
                raise ValueError(
                    f"task {t.role}-{t.index}'s node address {t.address!r} is neither an IP"
                    " address nor a name that resolves; ssh cannot be limited to the job's"
                    " tasks"
                ) from None
            out.update(str(ipaddress.ip_address(i[4][0])) for i in infos)
    return sorted(out)


def authorized_keys(public: str, sources: Sequence[str] | None) -> str:
    """The task sshd's ``authorized_keys``: the job's public key, with ``from="<addresses>"``
    when ``sources`` is given (sshd then refuses the key from any other address, so a key
    that leaked opens no task from elsewhere; sshd(8) "AUTHORIZED_KEYS FILE FORMAT").
    ``sources`` are IP addresses (:func:`allowed_sources`) or networks in CIDR form (where
    ``pasture job exec`` may connect from); anything else raises ValueError.
    """
    if sources is None:
        return public + "\n"
    checked = [
        str(ipaddress.ip_network(a, strict=False)) if "/" in a else str(ipaddress.ip_address(a))
        for a in sources
    ]
    if not checked:
        raise ValueError("no address to accept the job's key from")
    return f'from="{",".join(checked)}" {public}\n'


def _wrapper(task_dir: str) -> str:
    cfg = shlex.quote(f"{task_dir}/config")
    return (
        "#!/bin/sh\n# ssh with the job's host aliases (pasture)\n"
        "for d in /usr/bin /bin /usr/local/bin; do\n"
        f'  [ -x "$d/ssh" ] && exec "$d/ssh" -F {cfg} "$@"\n'
        "done\n"
        'echo "pasture: no ssh client in this image (install openssh-client)" >&2\n'
        "exit 127\n"
    )


def _barrier(task_dir: str, hosts: Sequence[str]) -> str:
    ssh = shlex.quote(f"{task_dir}/bin/ssh")
    return (
        "#!/bin/sh\n# pasture-ssh-barrier [TIMEOUT_S]: wait until every other task of the job\n"
        "# accepts ssh (OpenPAI's sshbarrier). Exit 1 when one is not reachable in time.\n"
        "deadline=$(( $(date +%s) + ${1:-300} ))\n"
        'self="${PASTURE_TASK_ROLE}-${PASTURE_TASK_INDEX}"\n'
        f"for h in {' '.join(shlex.quote(h) for h in hosts)}; do\n"
        '  [ "$h" = "$self" ] && continue\n'
        f'  until {ssh} -o ConnectTimeout=5 "$h" true 2>/dev/null; do\n'
        '    if [ "$(date +%s)" -ge "$deadline" ]; then\n'
        '      echo "pasture-ssh-barrier: $h is not reachable over ssh" >&2; exit 1\n'
        "    fi\n"
        "    sleep 1\n"
        "  done\n"
        "done\n"
    )


def write_task_files(
    dest: Path,
    job: str,
    spec: JobSpec,
    tasks: Sequence[TaskRecord],
    me: TaskRecord,
    key: tuple[str, str],
    task_dir: str,
    owner: tuple[int, int] | None = None,
    sources: Sequence[str] | None = None,
) -> None:
    """Write task ``me``'s ssh directory at ``dest`` on the node (seen as ``task_dir``
    by the task): a fresh directory (whatever was at ``dest`` is removed first, never
    read), mode 0700, every file created exclusively.

    Args:
        owner: (uid, gid) the directory and its files belong to: the task's user, so its
            sshd and ssh can read the key that no other user can (None: the agent's).
        sources: the IP addresses the sshd accepts the job's key from (the job's tasks'
            addresses, :func:`allowed_sources`); None: any address (where the executor's
            network hides the tasks' own addresses).
    Raises:
        OSError: the node's work dir is not writable.
        ValueError: a source that is not an IP address.
    """
    private, public = key
    keys_text = authorized_keys(public, sources)
    remove_task_files(dest)
    dest.mkdir(mode=0o700, parents=True)
    os.chmod(dest, 0o700)
    (dest / "bin").mkdir(mode=0o755)
    files = {
        KEY_NAME: (private, 0o600),
        f"{KEY_NAME}.pub": (public + "\n", 0o644),
        "authorized_keys": (keys_text, 0o600),
        "known_hosts": (f"* {public}\n", 0o644),
        "sshd_config": (sshd_config(me.ports["ssh"], task_dir), 0o600),
        "config": (client_config(job, spec, tasks, task_dir), 0o644),
        "bin/ssh": (_wrapper(task_dir), 0o755),
        "bin/pasture-ssh-barrier": (
            _barrier(task_dir, [f"{t.role}-{t.index}" for t in ordered_tasks(spec, tasks)]),
            0o755,
        ),
    }
    for name, (text, mode) in files.items():
        path = dest / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), mode)
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            f.write(text)
    if owner is not None:
        os.chown(dest / "bin", *owner)
        os.chown(dest, *owner)


def remove_task_files(dest: Path) -> None:
    """Remove a task's ssh directory (the key with it) when its attempt ends; a link
    planted in its place is removed, never followed. Raises OSError when it cannot be."""
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


def ssh_env(
    spec: JobSpec, tasks: Sequence[TaskRecord], me: TaskRecord, task_dir: str
) -> dict[str, Any]:
    """Variables of a task with ssh: PASTURE_SSH_DIR / _PORT / _CONFIG / _HOSTS, and Open
    MPI's (run as root allowed, ssh = the wrapper, no tree spawn: remote daemons do not
    have the wrapper on PATH)."""
    ranked = ordered_tasks(spec, tasks)
    return {
        "PASTURE_SSH_DIR": task_dir,
        "PASTURE_SSH_PORT": str(me.ports["ssh"]),
        "PASTURE_SSH_CONFIG": f"{task_dir}/config",
        "PASTURE_SSH_HOSTS": ",".join(f"{t.role}-{t.index}" for t in ranked),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_plm_rsh_agent": f"{task_dir}/bin/ssh",
        "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
    }


USER_SSHD_RE = re.compile(
    r"(?:^|[;&|(`])\s*(?:exec\s+)?(?:/usr(?:/local)?)?(?:/s?bin/)?sshd(?=\s|;|&|\)|$)", re.M
)
"""A command that starts its own sshd (Volcano's MPI examples: ``/usr/sbin/sshd -D``)."""


def starts_own_sshd(command: str) -> bool:
    """Whether ``command`` runs sshd itself (see :func:`sshd_script`)."""
    return bool(USER_SSHD_RE.search(command))


def sshd_script(
    task_dir: str, *, required: bool, in_container: bool, user_sshd: bool = False
) -> str:
    """Shell lines (``/bin/sh``) that start the task's sshd in the background before its
    command, stop it when the script exits and put the wrapper first on PATH.

    Args:
        required: the job asked for ssh explicitly: no sshd in the image fails the task
            (exit 127); otherwise (``mpi`` only) a warning line is logged.
        in_container: the task has a filesystem of its own: also write ``~/.ssh/config``.
        user_sshd: the command starts sshd itself (:func:`starts_own_sshd`). In a
            container the job's sshd_config is then installed as ``/etc/ssh/sshd_config``
            and no second sshd is started, so the command's own ``sshd`` serves the job's
            port and key (a second one could not bind the port). In process mode the
            node's ``/etc/ssh`` is not touched and pasture's sshd starts as usual.
    """
    d = shlex.quote(task_dir)
    missing = (
        'echo "pasture: this job asks for ssh but the image has no sshd'
        ' (install openssh-server)" >&2'
    )
    lines = [f'export PATH={d}/bin:"$PATH"', "mkdir -p /run/sshd 2>/dev/null"]
    if in_container and user_sshd:
        lines += [
            "# the command starts its own sshd: make it the job's",
            f"mkdir -p /etc/ssh && cp {d}/sshd_config /etc/ssh/sshd_config",
        ]
    else:
        lines += [
            "_pasture_sshd=$(command -v sshd 2>/dev/null || ls /usr/sbin/sshd 2>/dev/null)",
            'if [ -n "$_pasture_sshd" ]; then',
            f'  "$_pasture_sshd" -D -e -f {d}/sshd_config 2>>{d}/sshd.log &',
            "  _pasture_sshd_pid=$!",
            "  trap 'kill $_pasture_sshd_pid 2>/dev/null' EXIT",
            "else",
            f"  {missing}",
            "  exit 127" if required else "  :",
            "fi",
        ]
    if in_container:
        lines += [
            'mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh"',
            f'[ -e "$HOME/.ssh/config" ] || cp {d}/config "$HOME/.ssh/config"',
        ]
    return "\n".join(lines)
