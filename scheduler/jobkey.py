"""A job submission's ssh key: made once per submission (job uid), never on the share.

The store makes the key when it stores a job with ssh (``ssh: true`` or ``mpi: true``):
the hash field ``ssh_key`` of ``job:<job>`` (never part of the record's answers), copied
into each node's launch record by the commit that binds a task there, so only the nodes
that run the job's tasks read it. The agent writes it into the per-task directory of each
task (0600, owned by the task's user; :mod:`scheduler.agent.ssh`) and removes it when the
attempt ends; ``job exec`` hands it to the job's submitter (:mod:`scheduler.services.jobexec`).
A job deleted and submitted again under the same name gets a new uid, hence a new key:
a key kept from the old job opens nothing of the new one.

The key is ECDSA P-256 (``ecdsa-sha2-nistp256``, what OpenSSH and paramiko both read) in
PEM ("BEGIN EC PRIVATE KEY"), made with ``cryptography``. It is every task's host key and
client identity, so a client checks the server against it too.

Stdlib and ``cryptography`` only: the store imports it.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

MAX_KEY_BYTES = 16 * 1024
"""A job key is ~230 bytes of PEM; anything larger is not one."""


def generate() -> str:
    """A new private key in PEM (ECDSA P-256, traditional OpenSSL "EC PRIVATE KEY")."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def public_line(private_pem: str) -> str:
    """The OpenSSH public key line (``ecdsa-sha2-nistp256 AAAA...``) of ``private_pem``.

    Raises:
        ValueError: ``private_pem`` is not an unencrypted ECDSA P-256 private key in PEM
            (the message never holds the text).
    """
    if len(private_pem) > MAX_KEY_BYTES:
        raise ValueError(f"job key: {len(private_pem)} bytes, not a key")
    try:
        key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("job key: not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("job key: not an ECDSA P-256 key")
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
