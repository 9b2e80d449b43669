"""A real OpenSSH server on loopback for tests (own host key, config and authorized keys in
a temp dir), shared by the CLI's SFTP tests and the on-prem stack's host tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.dev import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def keygen(path: Path) -> None:
    """An ed25519 key pair without passphrase at ``path`` and ``path.pub``."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30
    )


@contextlib.contextmanager
def running_sshd(d: Path, authorized_keys: str, extra_config: str = "") -> Iterator[int]:
    """Run sshd on 127.0.0.1:<free port> with its files in ``d``; yields the port.

    ``authorized_keys`` is the text of the authorized_keys file; ``extra_config`` lines are
    appended to sshd_config (e.g. ``Subsystem sftp internal-sftp``). Fails the test when
    sshd is missing or does not accept connections within 15 s (with its log).
    """
    if not os.path.exists(SSHD):
        pytest.fail("sshd missing: apt-get install -y openssh-server")
    keygen(d / "host_key")
    (d / "authorized_keys").write_text(authorized_keys)
    port = free_port()
    (d / "sshd_config").write_text(
        f"""ListenAddress 127.0.0.1
Port {port}
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
{extra_config}"""
    )
    with serving(d / "sshd_config", port, d / "sshd.log"):
        yield port


@contextlib.contextmanager
def serving(config: Path, port: int, log: Path, *options: str) -> Iterator[None]:
    """Run ``sshd -D -f config`` (``options`` added, e.g. ``-o ListenAddress=...``), its
    log in ``log``, until the context ends; fails the test with the log when it does not
    accept connections on 127.0.0.1:``port`` within 15 s."""
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    with log.open("w") as out:
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config), *options], stdout=subprocess.DEVNULL, stderr=out
        )
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(log.read_text())
                    time.sleep(0.05)
            yield
        finally:
            proc.terminate()
            proc.wait(10)
