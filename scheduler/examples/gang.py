"""Reading a task's place in its gang from the discovery environment.

The agent gives every task the variables listed in docs/internals/conventions.md
("Discovery environment of a task"); this module turns them into a :class:`TaskEnv` so that
the example programs never parse strings themselves. Standard library only: the examples
run in task images that carry numpy and scikit-learn but not the scheduler's dependencies.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field


class DiscoveryError(ValueError):
    """A discovery variable is missing or malformed (the message names the variable)."""


def role_key(role: str) -> str:
    """Role name as it appears in variable names: upper case, non-alphanumerics -> ``_``."""
    return re.sub(r"[^A-Za-z0-9]", "_", role).upper()


def _require(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if value is None or value == "":
        raise DiscoveryError(
            f"{name} is not set: this program expects the pasture discovery environment "
            "(run it as a task of a pasture job, or set the variables by hand)"
        )
    return value


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = _require(environ, name)
    try:
        return int(raw)
    except ValueError:
        raise DiscoveryError(f"{name} must be an integer, got {raw!r}") from None


def parse_hosts(name: str, raw: str) -> list[tuple[str, int]]:
    """Parse ``host:port,host:port`` into ``[(host, port), ...]``.

    Raises:
        DiscoveryError: an entry without ``:`` or with a non-integer port (names ``name``).
    """
    hosts: list[tuple[str, int]] = []
    for entry in raw.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise DiscoveryError(f"{name}: expected host:port entries, got {entry!r} in {raw!r}")
        hosts.append((host, int(port)))
    return hosts


@dataclass(frozen=True)
class TaskEnv:
    """One task's identity and its gang's addresses.

    Attributes:
        job_name: ``PASTURE_JOB_NAME``.
        role: this task's role (``PASTURE_TASK_ROLE``), as written in the job spec.
        index: this task's index within its role, 0-based.
        attempt: the job's attempt counter (1 on the first run).
        roles: role names in declaration order (``PASTURE_ROLES``).
        hosts: role -> ``[(host, port)]`` by task index (each task's first port).
        task_host, task_port: where this task listens (bind ``0.0.0.0:task_port``).
        job_dir: ``PASTURE_JOB_DIR`` (the job's directory on the cluster share) or None.
    """

    job_name: str
    role: str
    index: int
    attempt: int
    roles: tuple[str, ...]
    hosts: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    task_host: str = "127.0.0.1"
    task_port: int = 0
    job_dir: str | None = None

    def replicas(self, role: str) -> int:
        """Number of tasks of ``role`` (0 for a role the job does not have)."""
        return len(self.hosts.get(role, []))

    def address(self, role: str, index: int = 0) -> tuple[str, int]:
        """``(host, port)`` of task ``index`` of ``role``.

        Raises:
            DiscoveryError: the job has no such role or index.
        """
        if role not in self.hosts:
            raise DiscoveryError(f"the job has no role {role!r}; roles are {list(self.roles)}")
        if not 0 <= index < len(self.hosts[role]):
            raise DiscoveryError(
                f"role {role!r} has {len(self.hosts[role])} tasks, no index {index}"
            )
        return self.hosts[role][index]

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> TaskEnv:
        """Build from ``os.environ`` (or the given mapping).

        Raises:
            DiscoveryError: a required variable is missing or malformed, or a role's host
                list disagrees with its ``PASTURE_ROLE_<ROLE>_REPLICAS``.
        """
        env = os.environ if environ is None else environ
        roles = tuple(r for r in _require(env, "PASTURE_ROLES").split(",") if r)
        hosts: dict[str, list[tuple[str, int]]] = {}
        for role in roles:
            name = f"PASTURE_ROLE_{role_key(role)}_HOSTS"
            hosts[role] = parse_hosts(name, _require(env, name))
            replicas_name = f"PASTURE_ROLE_{role_key(role)}_REPLICAS"
            if replicas_name in env and _int(env, replicas_name) != len(hosts[role]):
                raise DiscoveryError(
                    f"{replicas_name}={env[replicas_name]} but {name} lists "
                    f"{len(hosts[role])} addresses"
                )
        role = _require(env, "PASTURE_TASK_ROLE")
        if role not in hosts:
            raise DiscoveryError(f"PASTURE_TASK_ROLE={role!r} is not in PASTURE_ROLES={roles}")
        index = _int(env, "PASTURE_TASK_INDEX")
        host, port = hosts[role][index] if index < len(hosts[role]) else ("127.0.0.1", 0)
        return cls(
            job_name=env.get("PASTURE_JOB_NAME", "local"),
            role=role,
            index=index,
            attempt=int(env.get("PASTURE_ATTEMPT", "1") or 1),
            roles=roles,
            hosts=hosts,
            task_host=env.get("PASTURE_TASK_HOST", host),
            task_port=_int(env, "PASTURE_TASK_PORT") if "PASTURE_TASK_PORT" in env else port,
            job_dir=env.get("PASTURE_JOB_DIR") or None,
        )


def local_gang_env(
    roles: Mapping[str, list[int]], job_name: str = "local", job_dir: str | None = None
) -> dict[str, dict[str, str]]:
    """Discovery environments for a gang on 127.0.0.1 (for tests and running by hand).

    Args:
        roles: role -> the ports of its tasks, in declaration order.
        job_name: ``PASTURE_JOB_NAME``.
        job_dir: ``PASTURE_JOB_DIR`` (omitted when None).

    Returns:
        ``"<role>-<index>"`` -> the variables of that task (only the discovery ones; merge
        them into a copy of ``os.environ``).
    """
    common = {
        "PASTURE_JOB_NAME": job_name,
        "PASTURE_ROLES": ",".join(roles),
        "PASTURE_ATTEMPT": "1",
    }
    for role, ports in roles.items():
        key = role_key(role)
        common[f"PASTURE_ROLE_{key}_REPLICAS"] = str(len(ports))
        common[f"PASTURE_ROLE_{key}_HOSTS"] = ",".join(f"127.0.0.1:{p}" for p in ports)
    if job_dir is not None:
        common["PASTURE_JOB_DIR"] = job_dir
    out: dict[str, dict[str, str]] = {}
    for role, ports in roles.items():
        for index, port in enumerate(ports):
            out[f"{role}-{index}"] = {
                **common,
                "PASTURE_TASK_ROLE": role,
                "PASTURE_TASK_INDEX": str(index),
                "PASTURE_TASK_HOST": "127.0.0.1",
                "PASTURE_TASK_PORT": str(port),
            }
    return out
