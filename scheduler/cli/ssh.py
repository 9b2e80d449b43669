"""SSH connections (paramiko) for ``data push|pull`` and ``image push``.

Host keys follow OpenSSH's ``StrictHostKeyChecking=accept-new``: a host seen for the
first time is added to the known-hosts file; a host whose key changed is refused
(paramiko raises ``BadHostKeyException``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

import paramiko


@dataclass(frozen=True, slots=True)
class SshTarget:
    """Where to connect: host, port, user, optional private key file, known-hosts file."""

    host: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = None


def connect(target: SshTarget, timeout: float = 15.0) -> paramiko.SSHClient:
    """An authenticated SSHClient (key file, else ssh-agent and ~/.ssh default keys).

    Raises:
        paramiko.SSHException, OSError: cannot connect or authenticate; host key changed.
    """
    client = paramiko.SSHClient()
    known = Path(target.known_hosts or Path.home() / ".ssh" / "known_hosts")
    if known.is_file():
        client.load_host_keys(str(known))
    else:
        known.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        known.touch(mode=0o600)
        client.load_host_keys(str(known))
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(
        target.host,
        port=target.port,
        username=target.user,
        key_filename=target.key_file,
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
    )
    return client


def remote_path(share_dir: str, remote: str) -> str:
    """``remote`` inside the share on the master (relative, or absolute under share_dir).

    Raises:
        ValueError: the path leaves the share (``..``) or is absolute elsewhere.
    """
    share = posixpath.normpath(share_dir)
    joined = posixpath.normpath(posixpath.join(share, remote))  # absolute remote wins
    if joined != share and not joined.startswith(share + "/"):
        raise ValueError(f"REMOTE: expected a path inside the share {share}, got {remote!r}")
    return joined


def makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """``mkdir -p`` over SFTP."""
    parts = []
    while path not in ("", "/"):
        try:
            sftp.stat(path)
            break
        except FileNotFoundError:
            parts.append(path)
            path = posixpath.dirname(path)
    for p in reversed(parts):
        sftp.mkdir(p)
