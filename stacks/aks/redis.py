"""Redis, the scheduler's only state, and its password: the one place where the aks stack
wires the Redis credential (Secret -> file in every pasture pod -> ``redis.password_file``
of scheduler.yaml and agent.yaml; env of the Redis server).

    Secret pasture-redis {redis-password}  ──mounted at /etc/pasture/secrets──> api, loop
                                           ──env REDIS_PASSWORD──> redis-server --requirepass
    headless Service pasture-redis :6379 :26379
      └─ StatefulSet pasture-redis, 3 pods (PVC each for the AOF): redis-server (pod 0 the
         first primary, the others its replicas) + a Redis Sentinel each (native sidecar;
         quorum 2): a primary silent for 5 s is replaced by a replica within seconds

Each pod requests what it needs (:data:`REDIS_RESOURCES`, :data:`SENTINEL_RESOURCES`),
has readiness and liveness probes (:func:`redis_probe`, :func:`sentinel_probe`), lands on
a node of its own (required pod anti-affinity on the hostname; config asks for at least
three system nodes), and a PodDisruptionBudget (``maxUnavailable: 1``) lets a drain take
only one at a time, so two sentinels (the quorum) always remain.

Clients (API, loop, agents) are given the three sentinels (``redis.sentinels``) and
follow the primary they name (redis-py ``Sentinel.master_for``, scheduler/settings.py). A
restarted pod asks the sentinels for the primary first and starts as its replica, so an
old primary never comes back as a second one. Sentinels answer clients anonymously with
read-only commands only (``SENTINEL MASTERS`` ...); they talk to each other as user
``sentinel`` with the Redis password. Replication is asynchronous: writes the old primary
acknowledged in its last moment may be lost in a failover (docs/faults.md "Bounds").

The node users the API creates at run time (``ACL SETUSER``, scheduler/nodecred.py) are
not replicated: after a failover the new primary refuses the agents' credentials; each
agent exits after 3 refusals in a row (scheduler/agent/agent.py ``_refused``), kubelet
restarts its container, whose start exchanges the pod's token again and so re-creates the
node's user on the new primary; the restarted agent adopts its task pods within its
lease. Not run on a cluster (none here): Pulumi mocks only.

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
REDIS_SERVERS = 3  # a primary and two replicas, each pod with a sentinel (quorum 2)
SENTINEL_PORT = 26379
SENTINEL_MASTER = "pasture"
SENTINEL_DOWN_AFTER_MS = 5000
SENTINEL_FAILOVER_TIMEOUT_MS = 60000
PASSWORD_KEY = "redis-password"
SECRETS_DIR = "/etc/pasture/secrets"
PASSWORD_FILE = f"{SECRETS_DIR}/{PASSWORD_KEY}"
REDIS_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
SENTINEL_RESOURCES = {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}


def redis_probe(port: int = 6379, *, live: bool) -> list[str]:
    """Exec probe of the redis container (password from ``$REDIS_PASSWORD``): ready when
    it answers PONG; alive when it answers at all (a replica still loading or cut off from
    its primary is alive, restarting it would not help)."""
    replies = "PONG|LOADING|MASTERDOWN" if live else "PONG"
    return [
        "sh",
        "-c",
        f'redis-cli -p {port} --no-auth-warning -a "$REDIS_PASSWORD" ping 2>&1 '
        f"| grep -qE '^({replies})'",
    ]


def sentinel_probe(port: int = SENTINEL_PORT) -> list[str]:
    """Exec probe of the sentinel sidecar: it answers PING (anonymous, read-only user)."""
    return ["sh", "-c", f"redis-cli -p {port} ping 2>&1 | grep -q '^PONG'"]


def server_host(namespace: str, i: int) -> str:
    """DNS name of Redis pod ``i`` (the headless Service's per-pod record)."""
    return f"{REDIS_NAME}-{i}.{REDIS_NAME}.{namespace}.svc.cluster.local"


def sentinel_addresses(namespace: str) -> list[str]:
    """``host:port`` of every sentinel (one per Redis pod)."""
    return [f"{server_host(namespace, i)}:{SENTINEL_PORT}" for i in range(REDIS_SERVERS)]


def redis_settings(namespace: str) -> RedisSettings:
    """``redis`` section of scheduler.yaml: the primary the sentinels name (database 0),
    the password read from the mounted Secret."""
    return RedisSettings(
        url=f"redis://{REDIS_NAME}.{namespace}.svc:6379/0",
        password_file=Path(PASSWORD_FILE),
        sentinels=sentinel_addresses(namespace),
        sentinel_master=SENTINEL_MASTER,
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
        sentinels=sentinel_addresses(namespace),
        sentinel_master=SENTINEL_MASTER,
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


def _server_script(namespace: str) -> str:
    """The redis container's start: ask the sentinels for the primary; none answers (the
    first start) -> pod 0 is the primary; then start as the primary or as its replica
    (``"$@"``: the container's args)."""
    sentinels = " ".join(server_host(namespace, i) for i in range(REDIS_SERVERS))
    first = server_host(namespace, 0)
    return f"""set -eu
me="$(hostname).{REDIS_NAME}.{namespace}.svc.cluster.local"
primary=""
for s in {sentinels}; do
  primary="$(redis-cli -h "$s" -p {SENTINEL_PORT} --raw SENTINEL get-master-addr-by-name \\
    {SENTINEL_MASTER} 2>/dev/null | head -n 1 || true)"
  [ -n "$primary" ] && break
done
case "$primary:$(hostname)" in
  :*-0) primary="$me" ;;
  :*) primary="{first}" ;;
esac
set -- "$@" --masterauth "$REDIS_PASSWORD" --replica-announce-ip "$me"
if [ "$primary" != "$me" ]; then
  exec redis-server "$@" --replicaof "$primary" 6379
fi
exec redis-server "$@"
"""


def _sentinel_script(namespace: str) -> str:
    """The sentinel sidecar's start: write its config once (monitoring pod 0, the first
    primary; the file then follows failovers: sentinels rewrite it), then run it."""
    first = server_host(namespace, 0)
    readonly = (
        "+ping +hello +auth +client|setname +sentinel|masters +sentinel|master "
        "+sentinel|get-master-addr-by-name +sentinel|sentinels +sentinel|replicas"
    )
    lines = [
        f"port {SENTINEL_PORT}",
        "dir /data/sentinel",
        "sentinel resolve-hostnames yes",
        "sentinel announce-hostnames yes",
        "sentinel announce-ip $me",
        f"sentinel monitor {SENTINEL_MASTER} {first} 6379 2",
        f"sentinel auth-pass {SENTINEL_MASTER} $REDIS_PASSWORD",
        f"sentinel down-after-milliseconds {SENTINEL_MASTER} {SENTINEL_DOWN_AFTER_MS}",
        f"sentinel failover-timeout {SENTINEL_MASTER} {SENTINEL_FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {SENTINEL_MASTER} 1",
        "sentinel sentinel-user sentinel",
        "sentinel sentinel-pass $REDIS_PASSWORD",
        f"user default on nopass -@all {readonly}",
        "user sentinel on >$REDIS_PASSWORD allchannels +@all",
    ]
    body = "\n".join(f'  echo "{line}"' for line in lines)
    return f"""set -eu
me="$(hostname).{REDIS_NAME}.{namespace}.svc.cluster.local"
conf=/data/sentinel/sentinel.conf
mkdir -p /data/sentinel
if [ ! -s "$conf" ]; then
  {{
{body}
  }} > "$conf"
fi
exec redis-server "$conf" --sentinel
"""


def redis_server(w: Workloads, cfg: StackConfig) -> k8s.apps.v1.StatefulSet:
    """Headless Service + StatefulSet of :data:`REDIS_SERVERS` Redis pods, each with a
    sentinel (system nodes, one per node, append-only file on a PVC of ``redisStorageGb``
    each; see the module docstring for the failover) + their PodDisruptionBudget."""
    labels = app_labels(REDIS_NAME)
    k8s.core.v1.Service(
        f"{w.prefix}-redis-svc",
        metadata=w.meta(REDIS_NAME),
        spec={
            "cluster_ip": "None",  # per-pod DNS records: clients go where sentinels say
            "publish_not_ready_addresses": True,  # a starting pod finds the sentinels
            "selector": labels,
            "ports": [
                {"name": "redis", "port": 6379, "target_port": 6379},
                {"name": "sentinel", "port": SENTINEL_PORT, "target_port": SENTINEL_PORT},
            ],
        },
        opts=w.opts,
    )
    password_env = {
        "name": "REDIS_PASSWORD",
        "value_from": {"secret_key_ref": {"name": REDIS_NAME, "key": PASSWORD_KEY}},
    }
    container: dict[str, Any] = {
        "name": "redis",
        "image": cfg.redis_image,
        "command": ["sh", "-c", _server_script(w.namespace), "redis-server"],
        "args": ["--requirepass", "$(REDIS_PASSWORD)", "--appendonly", "yes"],
        "env": [password_env],
        "ports": [{"container_port": 6379, "name": "redis"}],
        "volume_mounts": [{"name": "data", "mount_path": "/data"}],
        "resources": REDIS_RESOURCES,
        "readiness_probe": {
            "exec": {"command": redis_probe(live=False)},
            "period_seconds": 5,
            "timeout_seconds": 3,
        },
        "liveness_probe": {
            "exec": {"command": redis_probe(live=True)},
            "initial_delay_seconds": 30,
            "period_seconds": 15,
            "timeout_seconds": 5,
            "failure_threshold": 4,
        },
    }
    sentinel: dict[str, Any] = {
        "name": "sentinel",
        "image": cfg.redis_image,
        "restart_policy": "Always",  # a native sidecar (Kubernetes >= 1.29)
        "command": ["sh", "-c", _sentinel_script(w.namespace)],
        "env": [password_env],
        "ports": [{"container_port": SENTINEL_PORT, "name": "sentinel"}],
        "volume_mounts": [{"name": "data", "mount_path": "/data"}],
        "resources": SENTINEL_RESOURCES,
        "readiness_probe": {
            "exec": {"command": sentinel_probe()},
            "period_seconds": 5,
            "timeout_seconds": 3,
        },
        "liveness_probe": {
            "exec": {"command": sentinel_probe()},
            "initial_delay_seconds": 30,
            "period_seconds": 15,
            "timeout_seconds": 5,
            "failure_threshold": 4,
        },
    }
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "access_modes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{cfg.redis_storage_gb}Gi"}},
        },
    }
    k8s.policy.v1.PodDisruptionBudget(
        f"{w.prefix}-redis-pdb",
        metadata=w.meta(REDIS_NAME),
        spec={"max_unavailable": 1, "selector": {"match_labels": labels}},
        opts=w.opts,
    )
    return k8s.apps.v1.StatefulSet(
        f"{w.prefix}-redis",
        metadata=w.meta(REDIS_NAME),
        spec={
            "service_name": REDIS_NAME,
            "replicas": REDIS_SERVERS,
            "pod_management_policy": "Parallel",  # sentinels of all pods start together
            "selector": {"match_labels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "node_selector": SYSTEM_NODES,
                    # one pod per node: a node lost takes one sentinel, two keep the quorum
                    "affinity": {
                        "pod_anti_affinity": {
                            "required_during_scheduling_ignored_during_execution": [
                                {
                                    "label_selector": {"match_labels": labels},
                                    "topology_key": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "init_containers": [sentinel],
                    "containers": [container],
                },
            },
            "volume_claim_templates": [claim],
        },
        opts=w.opts,
    )
