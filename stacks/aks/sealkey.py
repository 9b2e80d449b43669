"""The cluster's secrets key on aks: the Fernet key that seals job secrets at submit (the
API) and opens them at a task's start-up (the agents), see scheduler/sealed.py and
docs/api.md "Job secrets".

    redisPassword (stack secret) --HKDF-SHA256--> Secret pasture-secrets-key {secrets.key}
        ──mounted read-only at /etc/pasture/key──> api container, agent DaemonSets
                                                   (secrets_key_file of both settings)

The key is derived, not stored in the stack config: HKDF-SHA256 (RFC 5869, from
``cryptography``) of the Redis admin password with info ``pasture secrets key v1``, so
it is stable across ``pulumi up`` and needs no new config key. Changing
``redisPassword`` therefore changes the key: jobs sealed before no longer open (their
tasks fail with the reason); resubmit them with their values.

The agents (kubernetes executor) put a task's opened values in a per-task Kubernetes
Secret, never in the pod spec (scheduler/agent/k8s_secrets.py); their Role may create and
delete Secrets in the namespace (stacks/aks/agents.py). Not deployed here (no cluster on
the test machine): checked under Pulumi mocks in tests/stacks/test_aks.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from stacks.aks.common import Workloads

KEY_SECRET = "pasture-secrets-key"
KEY_NAME = "secrets.key"
KEY_DIR = "/etc/pasture/key"
KEY_FILE = Path(KEY_DIR) / KEY_NAME
"""``secrets_key_file`` of scheduler.yaml and agent.yaml on aks."""
KEY_VOLUME = "secrets-key"
_INFO = b"pasture secrets key v1"


def derive_key(password: str) -> str:
    """The Fernet key (32 bytes in URL-safe base64, 44 characters) derived from the Redis
    admin password ``password`` (HKDF-SHA256, no salt, info ``pasture secrets key v1``)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(password.encode())).decode()


def secrets_key_secret(w: Workloads, password: pulumi.Input[str]) -> k8s.core.v1.Secret:
    """Secret ``pasture-secrets-key`` with the key derived from ``password`` (a Pulumi
    secret; the derived value stays one)."""
    key = pulumi.Output.secret(pulumi.Output.from_input(password).apply(derive_key))
    return k8s.core.v1.Secret(
        f"{w.prefix}-secrets-key",
        metadata=w.meta(KEY_SECRET),
        string_data={KEY_NAME: key},
        opts=w.opts,
    )


def key_volume() -> dict[str, Any]:
    """The pod volume of the key Secret (files 0400: read by the container's root)."""
    return {"name": KEY_VOLUME, "secret": {"secret_name": KEY_SECRET, "default_mode": 0o400}}


def key_mount() -> dict[str, Any]:
    """The container mount of :func:`key_volume` at :data:`KEY_DIR`."""
    return {"name": KEY_VOLUME, "mount_path": KEY_DIR, "read_only": True}
