"""Redis ACL users of node agents: what a node's credential may read and write.

The model (Redis 7 ACL v2 key permissions and selectors; docs/ansible.md "Credentials"):

```
 user node-<name>   commands: only those NodeStore sends (no DEL, no KEYS, no admin)
   read-write  pasture:node:<name>            its node record (registration, heartbeat)
               pasture:node:<name>:usage      its usage history
               pasture:node:<name>:reports    its report stream (task states, registration)
               pasture:node:<name>:wake       its wake-ups (BLPOP; pushed by the commit)
   read        pasture:node:<name>:tasks      its bindings (written by the loop's commit)
               pasture:node:<name>:launch:*   launch records of the jobs bound to it (spec,
                                              user, sealed secrets: written by the commit)
               pasture:job:*:tasks            task records (desired state; the peers'
                                              addresses and ports for discovery)
   selectors   (+sadd ~pasture:nodes ~pasture:reports:pending)  may add, never remove, a
                                              node name (to the nodes / nodes-with-reports sets)
               (+hincrby +hincrbyfloat +expire ~pasture:usage:cluster:*)  usage sums
   channels    pasture:notify:node:<name>, pasture:notify:loop
```

Nothing else: no job record (``pasture:job:<job>``: spec, user, sealed secrets, attempts)
or event list, no token, ledger, version, VC or other node's key. A node changes another
record only through its report stream, which the loop applies when the ledger binds the
task to that node (:mod:`scheduler.store.reports`).

The same rules are rendered by the redis role (``roles/redis/templates/pasture.conf.j2``;
tests/scheduler/store/test_node_acl.py checks both agree) and applied by ``pasture dev up``.
Node passwords derive from one secret: ``sha256("<secret>:<node>")`` hex, so the master
and each node compute them without storing one per node (:func:`node_password`).
"""

from __future__ import annotations

import hashlib
import re

import redis

from scheduler.store.store import DEFAULT_PREFIX

# Commands a NodeStore sends (reads, its writes, pub/sub, the heartbeat script, the
# connection handshake of redis-py). Kept in one place for the role's template test.
AGENT_COMMANDS = (
    "ping",
    "echo",
    "time",
    "client|setname",
    "hget",
    "hgetall",
    "hmget",
    "hset",
    "smembers",
    "sismember",
    "exists",
    "rpush",
    "ltrim",
    "expire",
    "lrange",
    "xadd",
    "blpop",
    "publish",
    "subscribe",
    "unsubscribe",
    "multi",
    "exec",
    "discard",
    "evalsha",
    "script|load",
)

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # as AgentSettings.node_name
SHARED_NODE = "*"  # node glob of the one shared agent user (AKS DaemonSet)


def node_user(node: str) -> str:
    """The ACL user name of ``node``'s agent: ``node-<node>``."""
    _check_node(node)
    return f"node-{node}"


def node_password(secret: str, node: str) -> str:
    """``node``'s Redis password: hex ``sha256("<secret>:<node>")`` (64 characters).

    The redis role computes the same with ``(secret ~ ':' ~ node) | hash('sha256')``.
    Raises ValueError for an empty secret or a bad node name.
    """
    if not secret:
        raise ValueError("node_password: the secret must not be empty")
    _check_node(node)
    return hashlib.sha256(f"{secret}:{node}".encode()).hexdigest()


def agent_rules(node: str, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """ACL rules (Redis 7 syntax, after ``reset on <password> resetchannels``) of the
    agent of ``node``; ``node="*"`` gives the shared agent user (every node's keys).

    Raises ValueError for a node name with glob characters (names are ``[A-Za-z0-9_.-]``).
    """
    if node != SHARED_NODE:
        _check_node(node)
    own = f"{prefix}node:{node}"
    return [
        "-@all",
        *(f"+{c}" for c in AGENT_COMMANDS),
        f"%RW~{own}",
        f"%RW~{own}:usage",
        f"%RW~{own}:reports",
        f"%RW~{own}:wake",
        f"%R~{own}:tasks",
        f"%R~{own}:launch:*",
        f"%R~{prefix}job:*:tasks",
        f"&{prefix}notify:node:{node}",
        f"&{prefix}notify:loop",
        f"(+sadd ~{prefix}nodes ~{prefix}reports:pending)",
        f"(+hincrby +hincrbyfloat +expire ~{prefix}usage:cluster:*)",
    ]


def password_sha256(password: str) -> str:
    """Hex SHA-256 of ``password``, the form ACL rules store (``#<hex>``)."""
    return hashlib.sha256(password.encode()).hexdigest()


def _user_args(password: str, node: str, prefix: str) -> list[str]:
    return [
        "reset",
        "on",
        f"#{password_sha256(password)}",
        "resetchannels",
        *agent_rules(node, prefix),
    ]


def user_directive(user: str, password: str, node: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The ``user ...`` line of a Redis configuration file for ``node``'s agent (what the
    redis role renders; ``pasture dev up`` writes it too). Only the password's SHA-256
    appears."""
    return " ".join(["user", user, *_user_args(password, node, prefix)])


def set_agent_user(
    client: redis.Redis, user: str, password: str, node: str, prefix: str = DEFAULT_PREFIX
) -> None:
    """Create or replace the ACL user ``user`` for ``node``'s agent on a running Redis
    (``ACL SETUSER``; the caller must be allowed ``ACL``). Only the password's SHA-256 is
    sent."""
    client.execute_command("ACL", "SETUSER", user, *_user_args(password, node, prefix))


def _check_node(node: str) -> None:
    if not isinstance(node, str) or not NODE_NAME.fullmatch(node):
        raise ValueError(
            f"node name must match {NODE_NAME.pattern} (no glob characters), got {node!r}"
        )
