"""Redis, the scheduler's only state, and its password: the one place where the aks stack
wires the Redis credential (Secret -> file in every pasture pod -> ``redis.password_file``
of scheduler.yaml and agent.yaml; env of the Redis server).

    Secret pasture-redis {redis-password}  ──mounted at /etc/pasture/secrets──> api, loop
                                           ──env REDIS_PASSWORD──> redis-server --requirepass
    Secret pasture-redis-agent {agent-password} ──mounted──> agents (ACL user pasture-agent)
                                           ──env AGENT_PASSWORD──> redis-server --user ...
    Service pasture-redis :6379 ── StatefulSet pasture-redis (1 replica, PVC for AOF data)
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from scheduler.settings import RedisSettings
from scheduler.store.acl import agent_rules
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


# The agents' Redis credential: one ACL user for every node (per-node credentials would need
# a Secret per node; docs/platforms.md says so), confined by scheduler/store/acl.py's rules
# for node "*", with a password derived from the admin one (sha256, not reversible). Agents
# mount only AGENT_REDIS_SECRET, never the admin password.
AGENT_USER = "pasture-agent"
AGENT_REDIS_SECRET = "pasture-redis-agent"
AGENT_PASSWORD_KEY = "agent-password"


def agent_redis_settings(namespace: str) -> RedisSettings:
    """``redis`` section of agent.yaml: the agents' own ACL user (see :data:`AGENT_USER`)."""
    return RedisSettings(
        url=redis_settings(namespace).url,
        username=AGENT_USER,
        password_file=Path(f"{SECRETS_DIR}/{AGENT_PASSWORD_KEY}"),
    )


def redis_password_secret(w: Workloads, password: pulumi.Input[str]) -> k8s.core.v1.Secret:
    """The Secret holding the Redis admin password (``password`` is a Pulumi secret), and the
    agents' Secret holding the password derived from it for :data:`AGENT_USER`."""
    agent_password = pulumi.Output.secret(password).apply(
        lambda pw: hashlib.sha256(f"{pw}:{AGENT_USER}".encode()).hexdigest()
    )
    k8s.core.v1.Secret(
        f"{w.prefix}-redis-agent-secret",
        metadata=w.meta(AGENT_REDIS_SECRET),
        string_data={AGENT_PASSWORD_KEY: agent_password},
        opts=w.opts,
    )
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
    agent_password_env = {
        "name": "AGENT_PASSWORD",
        "value_from": {"secret_key_ref": {"name": AGENT_REDIS_SECRET, "key": AGENT_PASSWORD_KEY}},
    }
    agent_user = ["--user", AGENT_USER, "reset", "on", ">$(AGENT_PASSWORD)"]
    container: dict[str, Any] = {
        "name": "redis",
        "image": cfg.redis_image,
        "args": [
            *["--requirepass", "$(REDIS_PASSWORD)", "--appendonly", "yes"],
            *[*agent_user, "resetchannels", *agent_rules("*")],
        ],
        "env": [password_env, agent_password_env],
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
