"""Settings files of the service (contract 2, see docs/internals/conventions.md).

``/etc/pasture/scheduler.yaml`` (master: API + loop) -> :class:`SchedulerSettings`;
``/etc/pasture/agent.yaml`` (each node) -> :class:`AgentSettings`. Load with
:func:`load_scheduler_settings` / :func:`load_agent_settings`; env overrides
``PASTURE_CONFIG`` (path), ``PASTURE_REDIS_URL``, ``PASTURE_REDIS_PASSWORD``.

Quantities in settings use the job spec's notation (cpu ``2`` / ``500m``, memory ``16Gi``)
and are converted to millicores / bytes on load. Unknown keys are errors (a typo in a
playbook variable should fail loudly, naming the key).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml
from limits import RateLimitItem, parse_many
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    ValidationError,
    field_validator,
    model_validator,
)

from scheduler.core.presets import get_preset
from scheduler.spec.quantity import parse_cpu, parse_memory

if TYPE_CHECKING:
    import redis

_Settings = TypeVar("_Settings", bound=BaseModel)


DEFAULT_AUTH_FAILURES = 20
"""Failed authentications per (address, presented token) within the window (api setting)."""
DEFAULT_AUTH_FAILURE_WINDOW_S = 60
DEFAULT_AUTH_FAILURES_PER_ADDRESS = 200
"""Failed authentications (any tokens) one client address may have within the window."""
DEFAULT_REQUEST_LIMIT = "1000 per 10 seconds"
"""Requests per token (api.request_limit), in the ``limits`` notation."""
DEFAULT_SUBMIT_LIMIT = "200 per 10 seconds"
"""Submit / batch / dry-run requests per token (api.submit_limit)."""
DEFAULT_TOKEN_TIME_LIMIT = "3 per 10 seconds"
"""Seconds of dashboard handler time per token (api.token_time_limit)."""
DEFAULT_TOKEN_CONCURRENCY = 1
"""Dashboard requests of one token handled at once per API process (api.token_concurrency)."""
DEFAULT_REFUSAL_HOLD_S = 1.0
"""Seconds a refused credential or address is held (api.refusal_hold_s)."""
DEFAULT_TOKEN_CACHE_S = 1.0
"""Seconds a verified token is trusted without reading Redis again (api.token_cache_s)."""
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest request body the API reads, bytes (api.max_body_bytes)."""


def parse_limit(text: str | None, field: str) -> list[RateLimitItem]:
    """The limits of ``text`` (``"1000 per 10 seconds;50/second"``; empty or None: none).

    Raises:
        ValueError: naming ``field``, what is expected and what was given.
    """
    if not text or not text.strip():
        return []
    try:
        return list(parse_many(text))
    except ValueError:
        raise ValueError(
            f"{field}: expected limits like '1000 per 10 seconds' (several separated by ';', "
            f"'' for none), got {text!r}"
        ) from None


class SettingsError(ValueError):
    """A settings file is missing, not YAML, or has a bad field (the message names it)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RedisSettings(_Model):
    """How to reach Redis. ``password_file`` wins over ``password`` when both are set.

    With ``sentinels`` set, the client asks those Redis Sentinels for the current primary
    of ``sentinel_master`` (the url then gives only the database number and TLS scheme)
    and asks again whenever a connection fails or the server it reached is no longer the
    primary, so agents, loop and API follow a failover by themselves (redis-py
    ``redis.sentinel.Sentinel``; docs/faults.md "Bounds").
    """

    url: str = "redis://127.0.0.1:6379/0"
    username: str | None = None
    password: str | None = None
    password_file: Path | None = None
    # ["host:port", ...] of Redis Sentinels; empty: connect to url directly
    sentinels: list[str] = Field(default_factory=list)
    # the master name the sentinels monitor (roles/redis redis_sentinel_master_name)
    sentinel_master: str = Field("pasture", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    # password of the sentinels themselves (requirepass of sentinel.conf); None: none
    sentinel_password_file: Path | None = None

    @field_validator("sentinels")
    @classmethod
    def _sentinels(cls, v: list[str]) -> list[str]:
        for addr in v:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"expected host:port with a port in 1-65535, got {addr!r}")
        return v

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``sentinels`` as (host, port) pairs."""
        return [
            (a.rpartition(":")[0].strip("[]"), int(a.rpartition(":")[2])) for a in self.sentinels
        ]

    def resolved_password(self) -> str | None:
        """The password: PASTURE_REDIS_PASSWORD, else password_file's content, else password.

        Raises SettingsError when password_file is set but unreadable.
        """
        env = os.environ.get("PASTURE_REDIS_PASSWORD")
        if env:
            return env
        if self.password_file is not None:
            try:
                return self.password_file.read_text().strip()
            except OSError as exc:
                raise SettingsError(
                    f"redis.password_file: cannot read {self.password_file}: {exc.strerror}"
                ) from exc
        return self.password

    def client(self, *, decode_responses: bool = True, **kwargs: Any) -> redis.Redis:
        """A redis-py client for these settings: on ``url``, or on the primary the
        ``sentinels`` name (``Sentinel.master_for``: rediscovered after a failover).
        ``kwargs`` go to the connection (socket timeouts, ...).

        Raises SettingsError when a password file is unreadable."""
        import redis

        if not self.sentinels:
            return redis.Redis.from_url(
                self.url,
                username=self.username,
                password=self.resolved_password(),
                decode_responses=decode_responses,
                **kwargs,
            )
        from urllib.parse import urlparse

        from redis.sentinel import Sentinel

        parsed = urlparse(self.url)
        db = int(parsed.path.strip("/") or 0) if parsed.path.strip("/").isdigit() else 0
        sentinel_kwargs: dict[str, Any] = {
            k: v for k, v in kwargs.items() if k in ("socket_timeout", "socket_connect_timeout")
        }
        if self.sentinel_password_file is not None:
            try:
                sentinel_kwargs["password"] = self.sentinel_password_file.read_text().strip()
            except OSError as exc:
                raise SettingsError(
                    f"redis.sentinel_password_file: cannot read {self.sentinel_password_file}: "
                    f"{exc.strerror}"
                ) from exc
        sentinel = Sentinel(
            self.sentinel_addresses(),
            sentinel_kwargs=sentinel_kwargs,
            ssl=parsed.scheme == "rediss",
        )
        return sentinel.master_for(
            self.sentinel_master,
            db=db,
            username=self.username,
            password=self.resolved_password(),
            decode_responses=decode_responses,
            **kwargs,
        )


class ResourceAmount(_Model):
    """cpu (millicores), memory (bytes), gpu (devices), parsed from spec notation."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, v: object) -> int:
        return 0 if v is None else parse_cpu(v)

    @field_validator("memory", mode="before")
    @classmethod
    def _mem(cls, v: object) -> int:
        return 0 if v is None else parse_memory(v)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must not be negative")
        return v


class VirtualClusterSettings(_Model):
    """One virtual cluster: guarantee, optional max, borrowing."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    guarantee: ResourceAmount = ResourceAmount()
    max: ResourceAmount | None = None
    can_borrow: bool = True


class NodeCredentialSettings(_Model):
    """``api.node_credentials``: the API hands Kubernetes agents their node's own Redis
    user in exchange for a pod-bound ServiceAccount token (scheduler/nodecred.py)."""

    namespace: str = Field(description="namespace of the agents' pods")
    service_account: str = "pasture-agent"
    daemonset_prefix: str = "pasture-agent-"
    secret_file: Path = Field(description="file with the secret node passwords derive from")


class ApiSettings(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8443, ge=0, le=65535)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0)
    # API tokens: lifetime of a new token unless given, and the longest allowed (days).
    token_ttl_days: float = Field(90.0, gt=0)
    token_max_ttl_days: float = Field(365.0, gt=0)
    # Failed authentications of one token allowed per client address and window before
    # that token (only) answers 429 from that address.
    auth_failures_per_window: int = Field(DEFAULT_AUTH_FAILURES, gt=0)
    auth_failure_window_s: int = Field(DEFAULT_AUTH_FAILURE_WINDOW_S, gt=0)
    # Failed authentications (any tokens, unknown dashboard sessions) allowed per client
    # address and window: beyond it, tokens from that address that this process has not
    # verified recently answer 429 without a lookup (a spray of distinct wrong tokens).
    auth_failures_per_address: int = Field(DEFAULT_AUTH_FAILURES_PER_ADDRESS, gt=0)
    # Dashboard requests of one token handled at once by an API process; the others wait
    # their turn (scheduler/api/fairness.py): one tenant's page flood takes that share.
    token_concurrency: int = Field(DEFAULT_TOKEN_CONCURRENCY, ge=1, le=64)
    # Seconds of dashboard handler time per token, in the `limits` notation ("3 per 10
    # seconds": 3 s, draining at 0.3 s a second; "" for none); over it: 429 with
    # Retry-After before the request is handled (scheduler/api/fairness.py).
    token_time_limit: str = DEFAULT_TOKEN_TIME_LIMIT
    # Seconds a refused (429) credential or address is held: its next requests answer 429
    # before the body, the routes or Redis are touched (scheduler/api/refusals.py); at
    # most the refusal's Retry-After; 0: off.
    refusal_hold_s: float = Field(DEFAULT_REFUSAL_HOLD_S, ge=0, le=60)
    # Requests per token, and submit / batch / dry-run requests per token (lower), in the
    # `limits` notation ("N per M seconds", several separated by ';'; "" for none); over
    # either answers 429 with Retry-After (scheduler/api/ratelimit.py, docs/api.md).
    request_limit: str = DEFAULT_REQUEST_LIMIT
    submit_limit: str = DEFAULT_SUBMIT_LIMIT
    # Seconds a verified token is trusted without reading Redis again (0: every request
    # reads it); a revocation from outside the API process takes effect within this.
    token_cache_s: float = Field(DEFAULT_TOKEN_CACHE_S, ge=0, le=60)
    # Per-node Redis users for Kubernetes agents (POST /api/v1/node-credentials); None: off.
    node_credentials: NodeCredentialSettings | None = None

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiSettings:
        parse_limit(self.request_limit, "api.request_limit")
        parse_limit(self.submit_limit, "api.submit_limit")
        parse_limit(self.token_time_limit, "api.token_time_limit")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("api.tls_cert and api.tls_key must be set together")
        if self.token_ttl_days > self.token_max_ttl_days:
            raise ValueError(
                f"api.token_ttl_days ({self.token_ttl_days:g}) must not exceed "
                f"api.token_max_ttl_days ({self.token_max_ttl_days:g})"
            )
        return self


class LoopSettings(_Model):
    interval_s: float = Field(1.0, gt=0)
    # observed silence (s) after which a node is lost (docs/faults.md "Bounds"); the loop
    # never declares it before the node's own fence, whatever this says
    heartbeat_timeout_s: float = Field(300.0, gt=0)
    # seconds after a peer's node went silent within which a task's own failure is charged
    # to nobody (its gang lost a member: NCCL/Gloo ranks exit when a peer vanishes;
    # scheduler/rules/lifecycle.py); PyTorch's default collective timeout is 600 s
    peer_loss_grace_s: float = Field(600.0, ge=0)
    max_free_requeues: int | None = Field(
        10,
        ge=0,
        description="attempts in a row that the infrastructure may end (node lost, fenced, "
        "agent restart; on Kubernetes evicted, node_shutdown, admission_rejected, "
        "not_started) and that are requeued without charging the retry budget; the next "
        "one fails the job with a reason naming the causes (scheduler/rules/lifecycle.py). "
        "Any other ending of an attempt starts the count again. None: no cap",
    )
    # the scheduling policy: a preset of scheduler.core.presets (checked here, so a typo
    # is refused when the file is read, naming loop.policy, not when the loop starts)
    policy: str = "pasture"
    finished_job_ttl_s: float | None = Field(
        None,
        ge=0,
        description="seconds a finished job's records are kept before the loop deletes them "
        "(a job's own ttl_after_finished wins); None keeps them until `pasture job delete`",
    )

    @field_validator("policy")
    @classmethod
    def _a_preset(cls, v: str) -> str:
        try:
            get_preset(v)
        except KeyError as exc:  # the presets' own message, listing the known names
            raise ValueError(exc.args[0]) from None
        return v


class SchedulerSettings(_Model):
    """``/etc/pasture/scheduler.yaml``."""

    cluster_name: str = "local"
    redis: RedisSettings = RedisSettings()
    share_dir: Path = Path("/srv/pasture/share")
    api: ApiSettings = ApiSettings()
    loop: LoopSettings = LoopSettings()
    virtual_clusters: list[VirtualClusterSettings] = Field(
        default_factory=lambda: [VirtualClusterSettings(name="default")]
    )
    # the Fernet key that seals job secrets at submit (scheduler/sealed.py, docs/api.md);
    # no file: jobs with secrets are refused
    secrets_key_file: Path = Path("/etc/pasture/secrets.key")
    # where a store upgrade (scheduler/store/migrate.py) writes its backup of the store
    # before it changes anything (mode 0600: token hashes and job specs)
    backup_dir: Path = Path("/var/lib/pasture/backups")


class NodeResourceOverrides(_Model):
    """Overrides of detected node resources; None keeps what the agent detects."""

    cpu: int | None = None
    memory: int | None = None
    gpu: int | None = Field(None, ge=0)
    gpu_model: str | None = None

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, v: object) -> int | None:
        return None if v is None else parse_cpu(v)

    @field_validator("memory", mode="before")
    @classmethod
    def _mem(cls, v: object) -> int | None:
        return None if v is None else parse_memory(v)


class AgentSettings(_Model):
    """``/etc/pasture/agent.yaml``."""

    node_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    address: str = "127.0.0.1"
    redis: RedisSettings = RedisSettings()
    share_dir: Path = Path("/mnt/pasture")
    executor: Literal["container", "process", "kubernetes"] = "container"
    container_cli: Literal["podman", "docker"] = "podman"
    task_network: str = "host"
    # whose Unix identity tasks run as (docs/runtime-env.md "Tenants' Unix users"): ``vc``,
    # the job's VC's user (scheduler/tenants.py; the agent must run as root, the
    # pasture_node role sets it), or ``agent``, the agent's own user (one identity for
    # every tenant: a node without tenant users, tests of single-tenant behaviour)
    task_users: Literal["vc", "agent"] = "agent"
    # networks (CIDR) from which a task's sshd also takes the job's key, besides the job's
    # own tasks' addresses: where `pasture job exec` runs (a login host, the admins'
    # network). Empty: exec works from the job's nodes only (docs/runtime-env.md, ssh)
    ssh_exec_from: list[IPvAnyNetwork] = Field(default_factory=list)
    heartbeat_interval_s: float = Field(5.0, gt=0)
    work_dir: Path = Path("/var/lib/pasture")
    port_range: tuple[int, int] = (20000, 29999)
    resources: NodeResourceOverrides = NodeResourceOverrides()
    labels: dict[str, str] = Field(default_factory=dict)
    # seconds between SIGTERM and SIGKILL when a task is stopped or preempted
    stop_grace_s: float = Field(10.0, ge=0)
    # seconds (agent clock) the agent may go without a renewing heartbeat before it kills
    # its own tasks (fencing, docs/faults.md); default 180 s (store outages up to 2 min
    # restart nothing), at least 3 x heartbeat_interval_s
    lease_s: float | None = Field(None, gt=0)

    # the cluster's secrets key (the same file as the master's): opens a job's sealed
    # secrets at task start-up (scheduler/sealed.py); no file: such tasks fail, saying so
    secrets_key_file: Path = Path("/etc/pasture/secrets.key")
    # operator's failure-diagnosis rules, tried before the shipped ones (docs/operations.md)
    diagnosis_rules: Path | None = None
    # replay NVML answers from this JSON recording instead of the driver (tests, drills of
    # the automatic cordon; scheduler/agent/gpu_health.py RecordedBackend)
    nvml_recording: Path | None = None

    @model_validator(mode="after")
    def _lease(self) -> AgentSettings:
        if self.lease_s is not None and self.lease_s <= self.heartbeat_interval_s:
            raise ValueError(
                f"lease_s must be longer than heartbeat_interval_s "
                f"({self.heartbeat_interval_s:g} s), got {self.lease_s:g}"
            )
        return self

    @property
    def lease(self) -> float:
        """The lease in seconds: ``lease_s``, else
        :data:`~scheduler.store.lease.DEFAULT_LEASE_S` (at least 3 heartbeat intervals)."""
        from scheduler.store.lease import default_lease_s

        return (
            self.lease_s if self.lease_s is not None else default_lease_s(self.heartbeat_interval_s)
        )

    @field_validator("port_range")
    @classmethod
    def _ports(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if not (1 <= lo <= hi <= 65535):
            raise ValueError(f"expected [low, high] with 1 <= low <= high <= 65535, got {list(v)}")
        return v


def _read(path: str | os.PathLike[str] | None, default: str) -> dict[str, Any]:
    p = Path(path or os.environ.get("PASTURE_CONFIG") or default)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {p}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise SettingsError(f"{p}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    url = os.environ.get("PASTURE_REDIS_URL")
    if url:
        data.setdefault("redis", {})
        data["redis"] = {**(data["redis"] or {}), "url": url}
    return data


def _validate(model: type[_Settings], data: dict[str, Any], source: str) -> _Settings:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            lines.append(f"  {loc}: {err['msg']} (given: {err.get('input')!r})")
        raise SettingsError(f"{source}: invalid settings:\n" + "\n".join(lines)) from exc


def load_scheduler_settings(path: str | os.PathLike[str] | None = None) -> SchedulerSettings:
    """Read scheduler settings from ``path`` (else PASTURE_CONFIG, else
    /etc/pasture/scheduler.yaml). Raises SettingsError naming the file and field."""
    data = _read(path, "/etc/pasture/scheduler.yaml")
    return _validate(SchedulerSettings, data, str(path or "scheduler settings"))


def load_agent_settings(path: str | os.PathLike[str] | None = None) -> AgentSettings:
    """Read agent settings from ``path`` (else PASTURE_CONFIG, else /etc/pasture/agent.yaml).
    Raises SettingsError naming the file and field."""
    data = _read(path, "/etc/pasture/agent.yaml")
    return _validate(AgentSettings, data, str(path or "agent settings"))


def main(argv: list[str] | None = None) -> int:
    """``python -m scheduler.settings {scheduler,agent} FILE``: check a settings file as the
    loop, the API or the agent would read it, without starting anything. The roles run it
    as the ``validate:`` of their settings templates, so a bad variable fails the play at
    that task, naming the field, and the file in force (and the running service) stay as
    they were. Returns 0 when the file is valid, 1 (the error on stderr) when not."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m scheduler.settings")
    parser.add_argument("kind", choices=("scheduler", "agent"), help="which settings file")
    parser.add_argument("file", help="the file to check")
    args = parser.parse_args(argv)
    load = load_scheduler_settings if args.kind == "scheduler" else load_agent_settings
    try:
        load(args.file)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
