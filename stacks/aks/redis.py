"""Redis, the scheduler's only state, and its password: the one place where the aks stack
wires the Redis credential (Secret -> file in every pasture pod -> ``redis.password_file``
of scheduler.yaml and agent.yaml; env of the Redis server).

    Secret pasture-redis {redis-password}  ──mounted at /etc/pasture/secrets──> api, loop
                                           ──env REDIS_PASSWORD──> redis-server --requirepass
    Service pasture-redis :6379 ── StatefulSet pasture-redis (1 replica, PVC for AOF data)

Agents mount no Redis secret: each gets its own node's ACL user ``node-<node>`` from the
API at start, in exchange for its pod's ServiceAccount token (scheduler/nodecred.py,
stacks/aks/nodecred.py), so a stolen agent credential impersonates one node only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from scheduler.settings import RedisSettings
from scheduler.store.acl import node_user
from stacks.aks.common import SYSTEM_NODES, Workloads, app_labels
from stacks.config import StackConfig

REDIS_NAME = "pasture-redis"  # Secret, Service and StatefulSet
PASSWORD_KEY = "redis-password"
SECRETS_DIR = "/etc/pasture/secrets"
PASSWORD_FILE = f"{SECRETS_DIR}/{PASSWORD_KEY}"


def redis_settings(namespace: str) -> RedisSettings:
    """``redis`` section of scheduler.yaml: the in-cluster Service, the password read from
    the mounted Secret."""
    return RedisSettings(
        url=f"redis://{REDIS_NAME}.{namespace}.svc:6379/0", password_file=Path(PASSWORD_FILE)
    )


NODE_PASSWORD_FILE = Path("/run/pasture/node-password")
"""Where an agent's start script writes its node's Redis password (an in-memory emptyDir)."""


def agent_redis_settings(namespace: str, node: str) -> RedisSettings:
    """``redis`` section of agent.yaml: ``node``'s own ACL user (``node`` may be the
    template's placeholder), its password fetched at start (:data:`NODE_PASSWORD_FILE`)."""
    return RedisSettings(
        url=redis_settings(namespace).url,
        username=node_user(node),
        password_file=NODE_PASSWORD_FILE,
    )


def redis_password_secret(w: Workloads, password: pulumi.Input[str]) -> k8s.core.v1.Secret:
    """The Secret holding the Redis admin password (``password`` is a Pulumi secret); the
    API derives the node passwords from it (:func:`scheduler.store.acl.node_password`)."""
    return k8s.core.v1.Secret(
        f"{w.prefix}-redis-secret",
        metadata=w.meta(REDIS_NAME),
        string_data={PASSWORD_KEY: password},
        opts=w.opts,
    )


def redis_server(w: Workloads, cfg: StackConfig) -> k8s.apps.v1.StatefulSet:
    """Service + StatefulSet of the Redis server (system nodes, append-only file on a PVC
    of ``redisStorageGb``)."""
    labels = app_labels(REDIS_NAME)
    k8s.core.v1.Service(
        f"{w.prefix}-redis-svc",
        metadata=w.meta(REDIS_NAME),
        spec={"selector": labels, "ports": [{"name": "redis", "port": 6379, "target_port": 6379}]},
        opts=w.opts,
    )
    password_env = {
        "name": "REDIS_PASSWORD",
        "value_from": {"secret_key_ref": {"name": REDIS_NAME, "key": PASSWORD_KEY}},
    }
    container: dict[str, Any] = {
        "name": "redis",
        "image": cfg.redis_image,
        "args": ["--requirepass", "$(REDIS_PASSWORD)", "--appendonly", "yes"],
        "env": [password_env],
        "ports": [{"container_port": 6379, "name": "redis"}],
        "volume_mounts": [{"name": "data", "mount_path": "/data"}],
    }
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "access_modes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{cfg.redis_storage_gb}Gi"}},
        },
    }
    return k8s.apps.v1.StatefulSet(
        f"{w.prefix}-redis",
        metadata=w.meta(REDIS_NAME),
        spec={
            "service_name": REDIS_NAME,
            "replicas": 1,
            "selector": {"match_labels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"node_selector": SYSTEM_NODES, "containers": [container]},
            },
            "volume_claim_templates": [claim],
        },
        opts=w.opts,
    )
