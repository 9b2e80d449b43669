"""Process mode (MARO's process mode): a whole cluster as local processes.

``up(nodes=2)`` starts, each as its own process (own session, logs in ``<base>/logs/``)::

    redis-server (from PATH, port free at start, data in <base>/redis; a password for
                  the default user in <base>/redis.password and one ACL user per node,
                  ``node-<name>``, as the redis role creates them: scheduler/store/acl.py)
    python -m scheduler.api  --config <base>/scheduler.yaml   (endpoint http://127.0.0.1:<port>)
    python -m scheduler.loop --config <base>/scheduler.yaml
    python -m scheduler.agent --config <base>/agent-<i>.yaml   x nodes (executor: process,
                                                                address 127.0.0.1, share
                                                                <base>/share)

creates an admin token, and writes the state file ``<state dir>/state.json`` (endpoint,
token, pids, paths) that ``down()`` and the CLI read. The state dir is ``PASTURE_DEV_DIR``
or ``~/.local/state/pasture/dev``; the cluster's data lives in a temp dir removed by
``down()``.

GPUs: by default the first node (``dev-node-0``) detects this host's GPUs by NVML, as an
agent on a real node does (count, model, per-GPU metrics and health), and the other nodes
announce none, so that each GPU is scheduled once. ``gpus_per_node=N`` pins every node to N
GPUs instead (0: none even on a GPU host); on a host without NVIDIA driver those are fake
GPUs (model ``dev-fake``), only numbers for the scheduler, with CUDA_VISIBLE_DEVICES still
set for the tasks. ``nvml_recording`` makes the first node replay recorded NVML answers
(tests/fixtures/nvml/) instead of asking the driver: its GPUs are the recording's.

Tenants: run as root, ``up`` makes each VC's Unix user (:mod:`scheduler.tenants`) and
the agents run every task as its VC's user, as the node role sets it up. Run as another
user it cannot, nor when this interpreter is not executable by other users (a pyenv under
``/root``: tasks run ``python3`` from the agent's directory); every tenant's tasks then run
as this user (``task_users: agent``; ``pasture dev up`` says so and why).

All nodes share this machine's CPUs and memory; each node announces what ``cpu_per_node``
/ ``memory_per_node`` say (default: the whole machine), so the dev cluster overcommits.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import yaml

from scheduler import tenants
from scheduler.devproc import (  # noqa: F401 - free_port and redis_server: public here too
    DevError,
    Proc,
    free_port,
    log_tail,
    redis_server,
    spawn,
    start_api,
    wait_api,
    wait_up,
)
from scheduler.sealed import generate_key

if TYPE_CHECKING:
    from scheduler.store import Store

STATE_NAME = "state.json"


def state_dir() -> Path:
    """Where the state file lives (``PASTURE_DEV_DIR`` or ``~/.local/state/pasture/dev``)."""
    env = os.environ.get("PASTURE_DEV_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "pasture" / "dev"


@dataclass
class DevCluster:
    """A running dev cluster (what ``state.json`` holds).

    Attributes:
        endpoint: API base URL ("" when started without the API).
        token: admin token for the API.
        redis_url: Redis of the cluster. base_dir: its data. share_dir: the share.
        redis_password_file: the password of its ``default`` user (0600, in base_dir);
            each agent logs in as its own ACL user ``node-<name>`` (scheduler/store/acl.py).
        scheduler_config: scheduler.yaml path. agent_configs: one agent.yaml per node.
        _procs: started processes by name (redis, api, loop, agent-0...); private so that
            printing the public fields as JSON works; ``pids`` shows them.
        nodes: node names. gpus: GPUs each node announces (devices; detected or pinned).
        task_users: whose Unix identity tasks run as: ``vc`` (each VC's own user, made by
            :func:`scheduler.tenants.ensure`) or ``agent`` (this user, for every tenant);
            ``task_users_why`` says why ``agent`` was chosen.
    """

    endpoint: str
    token: str
    redis_url: str
    base_dir: str
    share_dir: str
    scheduler_config: str
    agent_configs: list[str]
    nodes: list[str]
    redis_password_file: str = ""
    gpus: list[int] = field(default_factory=list)
    task_users: str = "agent"
    task_users_why: str = ""
    _procs: dict[str, Proc] = field(default_factory=dict)
    _state_dir: str = ""

    @property
    def pids(self) -> dict[str, int]:
        """``{component: pid}``."""
        return {k: p.pid for k, p in self._procs.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DevCluster:
        procs = {k: Proc(**v) for k, v in d.get("_procs", {}).items()}
        return cls(**{**d, "_procs": procs})

    def save(self, directory: Path | None = None) -> None:
        directory = directory or state_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / STATE_NAME
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        os.chmod(tmp, 0o600)  # holds the admin token
        os.replace(tmp, path)

    def store(self) -> Store:  # scheduler.store, imported lazily
        """A Store on this cluster's Redis."""
        import redis

        from scheduler.store import Store

        return Store(
            redis.Redis.from_url(
                self.redis_url, password=self.redis_password(), decode_responses=True
            )
        )

    def redis_password(self) -> str | None:
        """The ``default`` user's password (None for a cluster started without one)."""
        if not self.redis_password_file:
            return None
        return Path(self.redis_password_file).read_text().strip()

    # ---- components (used by tests: kill the loop, kill an agent, restart) -----------
    def start_loop(self) -> Proc:
        """(Re)start the scheduling loop."""
        proc = spawn(
            "loop",
            [sys.executable, "-m", "scheduler.loop", "--config", self.scheduler_config],
            Path(self.base_dir),
        )
        self._procs["loop"] = proc
        self._resave()
        return proc

    def start_redis(self) -> Proc:
        """(Re)start redis-server with the argv it was first started with (same port and
        data dir: the AOF brings the data back)."""
        proc = spawn("redis", self._procs["redis"].argv, Path(self.base_dir))
        self._procs["redis"] = proc
        self._resave()
        return proc

    def start_agent(self, i: int) -> Proc:
        """(Re)start agent ``i``."""
        proc = spawn(
            f"agent-{i}",
            [sys.executable, "-m", "scheduler.agent", "--config", self.agent_configs[i]],
            Path(self.base_dir),
        )
        self._procs[f"agent-{i}"] = proc
        self._resave()
        return proc

    def _resave(self) -> None:
        """Record a (re)started component in the state file, so that ``down`` stops the
        process running now, not the one it replaced (a restarted loop used to leak)."""
        if self._state_dir and (Path(self._state_dir) / STATE_NAME).exists():
            self.save(Path(self._state_dir))

    def kill(self, name: str) -> None:
        """SIGKILL one component (e.g. ``loop``, ``agent-1``) as a crash would."""
        proc = self._procs[name]
        p = proc.process()
        if p is not None:
            p.kill()
            p.wait(5)


def read_state(directory: Path | None = None) -> dict[str, Any] | None:
    """The running dev cluster's state (``{endpoint, token, ...}``), None when none."""
    path = (directory or state_dir()) / STATE_NAME
    try:
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    except (OSError, ValueError):
        return None


def host_gpus(nvml_recording: Path | None = None) -> tuple[int, str | None]:
    """(count, model of GPU 0) of this host by NVML, or of an NVML recording replayed;
    (0, None) without an NVIDIA driver."""
    from scheduler.agent.resources import detect_gpus, gpus_of

    if nvml_recording is not None:
        from scheduler.agent.gpu_health import RecordedBackend

        return gpus_of(RecordedBackend(nvml_recording))
    return detect_gpus()


def node_gpus(nodes: int, gpus_per_node: int | None, detected: int) -> list[int]:
    """GPUs each of ``nodes`` nodes announces: ``gpus_per_node`` each when pinned, else
    the ``detected`` ones on the first node and none on the others."""
    if gpus_per_node is not None:
        return [gpus_per_node] * nodes
    return [detected] + [0] * (nodes - 1)


def tenant_mode(asked: str | None) -> tuple[str, str]:
    """``(task_users, why)`` of a dev cluster: ``asked`` when given (``vc`` without root
    raises DevError), else ``vc`` when this process is root and its interpreter is
    executable by other users, else ``agent`` with the reason (for ``dev up`` to print).

    Raises:
        DevError: ``asked`` is neither vc, agent nor None, or vc without root.
    """
    if asked not in (None, "vc", "agent"):
        raise DevError(f"task_users must be vc or agent, got {asked!r}")
    if asked == "vc" and not tenants.can_switch():
        raise DevError("task_users vc needs root: the agents start tasks as other users")
    if asked is not None:
        return asked, "" if asked == "vc" else "task_users agent was asked for"
    if not tenants.can_switch():
        return "agent", "not run as root, so no tenant users can be made"
    if not tenants.reachable_by_others(sys.executable):
        return "agent", (
            f"this interpreter ({Path(sys.executable).resolve()}) is not executable by other"
            " users, and tasks run it"
        )
    return "vc", ""


def up(
    nodes: int = 2,
    gpus_per_node: int | None = None,
    *,
    cpu_per_node: str | int | None = None,
    memory_per_node: str | int | None = None,
    api: bool = True,
    heartbeat_interval_s: float = 1.0,
    heartbeat_timeout_s: float = 10.0,
    loop_interval_s: float = 0.5,
    stop_grace_s: float = 3.0,
    virtual_clusters: list[dict[str, Any]] | None = None,
    directory: Path | None = None,
    timeout_s: float = 30.0,
    nvml_recording: Path | None = None,
    task_users: str | None = None,
) -> DevCluster:
    """Start a dev cluster (see the module docstring) and return it.

    Args:
        nodes: number of agents (>= 1).
        gpus_per_node: GPUs each node announces (>= 0); None (default): the first node
            detects this host's GPUs by NVML, the others announce none.
        nvml_recording: the first node replays these NVML answers (a JSON recording,
            tests/fixtures/nvml/README.md) instead of asking the driver.
        cpu_per_node / memory_per_node: node capacity in spec notation (default: detected).
        api: start the API (False for backend-only tests).
        heartbeat_*, loop_interval_s, stop_grace_s: seconds.
        virtual_clusters: VC settings dicts (default: one ``default`` VC guaranteed the
            whole cluster).
        directory: state dir (default :func:`state_dir`).
        task_users: ``vc`` (each VC's tasks as its own Unix user, made here; needs root),
            ``agent`` (every task as this user), None: ``vc`` when run as root and this
            interpreter is executable by other users (tasks run it), else ``agent``
            (:func:`tenant_mode`).
    Raises:
        DevError: a cluster is already running there, redis-server is not on PATH, or a
            component did not come up (with its log tail). What started is stopped again.
    """
    if nodes < 1:
        raise DevError(f"nodes must be at least 1, got {nodes}")
    if gpus_per_node is not None and gpus_per_node < 0:
        raise DevError(f"gpus_per_node must be at least 0 (or None: detect), got {gpus_per_node}")
    if nvml_recording is not None:  # the agents run in the cluster's own directory
        nvml_recording = Path(nvml_recording).resolve()
    users, why = tenant_mode(task_users)
    directory = directory or state_dir()
    old = read_state(directory)
    if old and any(Proc(**p).alive() for p in old.get("_procs", {}).values()):
        raise DevError(
            f"a dev cluster is running (state {directory / STATE_NAME}); run "
            "'pasture dev down' first"
        )
    redis_exe = shutil.which("redis-server")
    if redis_exe is None:
        raise DevError("redis-server not found on PATH (apt-get install redis-server)")
    base = Path(tempfile.mkdtemp(prefix="pasture-dev-"))
    share = base / "share"
    share.mkdir()
    if users == "vc":  # tenants' tasks reach the share and their task directories
        os.chmod(base, 0o711)
    (base / "redis").mkdir()
    cluster = DevCluster(
        endpoint="",
        token="",
        redis_url="",
        base_dir=str(base),
        share_dir=str(share),
        scheduler_config=str(base / "scheduler.yaml"),
        agent_configs=[],
        nodes=[],
        _state_dir=str(directory),
        task_users=users,
        task_users_why=why,
    )
    try:
        _up(
            cluster,
            redis_exe,
            nodes,
            gpus_per_node,
            cpu_per_node,
            memory_per_node,
            api,
            heartbeat_interval_s,
            heartbeat_timeout_s,
            loop_interval_s,
            stop_grace_s,
            virtual_clusters,
            timeout_s,
            directory,
            nvml_recording,
        )
    except BaseException:
        _stop_all(cluster)
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster


def _up(
    cluster: DevCluster,
    redis_exe: str,
    nodes: int,
    gpus_per_node: int | None,
    cpu: Any,
    memory: Any,
    api: bool,
    hb_interval: float,
    hb_timeout: float,
    loop_interval: float,
    grace: float,
    vcs: list[dict[str, Any]] | None,
    timeout: float,
    directory: Path,
    nvml_recording: Path | None,
) -> None:
    import redis

    from scheduler.store.acl import node_password, node_user, user_directive

    base = Path(cluster.base_dir)
    port = free_port()
    names = [f"dev-node-{i}" for i in range(nodes)]
    detected, _ = host_gpus(nvml_recording)
    cluster.gpus = node_gpus(nodes, gpus_per_node, detected)
    # Redis with a password and one ACL user per node, as the redis role sets it up; the
    # secrets live only in 0600 files of this cluster's directory, never on a command line
    password, agent_secret = secrets.token_hex(24), secrets.token_hex(24)
    cluster.redis_password_file = str(base / "redis.password")
    _secret_file(Path(cluster.redis_password_file), password)
    conf = [f"requirepass {password}"]
    conf += [user_directive(node_user(n), node_password(agent_secret, n), n) for n in names]
    _secret_file(base / "redis" / "pasture.conf", "\n".join(conf))
    cluster._procs["redis"] = spawn(
        "redis",
        [
            redis_exe,
            str(base / "redis" / "pasture.conf"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(base / "redis"),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--protected-mode",
            "no",
        ],
        base,
    )
    cluster.redis_url = f"redis://127.0.0.1:{port}/0"
    cluster.save(directory)
    client = redis.Redis.from_url(cluster.redis_url, password=password, decode_responses=True)
    wait_up("redis-server", client.ping, cluster._procs["redis"], timeout)

    api_port = free_port()
    key_file = base / "secrets.key"  # seals job secrets; kept across ups, as the data is
    if not key_file.exists():
        _secret_file(key_file, generate_key().decode())
    vc_list: list[dict[str, Any]] = vcs or [
        {
            "name": "default",
            "guarantee": {
                "cpu": f"{nodes * (_cpu(cpu) or (psutil.cpu_count() or 1) * 1000)}m",
                "memory": nodes * (_mem(memory) or psutil.virtual_memory().total),
                "gpu": sum(cluster.gpus),
            },
        }
    ]
    settings = {
        "cluster_name": "dev",
        "redis": {"url": cluster.redis_url, "password_file": cluster.redis_password_file},
        "share_dir": cluster.share_dir,
        "secrets_key_file": str(key_file),
        "backup_dir": str(Path(cluster.base_dir) / "backups"),  # a store upgrade's backup
        "api": {"host": "127.0.0.1", "port": api_port},
        "loop": {
            "interval_s": loop_interval,
            "heartbeat_timeout_s": hb_timeout,
        },
        "virtual_clusters": vc_list,
    }
    Path(cluster.scheduler_config).write_text(yaml.safe_dump(settings))
    if cluster.task_users == "vc":  # each VC's tasks as its own Unix user, as on real nodes
        tenants.ensure([str(vc["name"]) for vc in vc_list])

    if api:
        from scheduler.store.tokens import TokenStore

        cluster.token = TokenStore(client).create("dev-admin", "admin") or ""
    cluster.start_loop()
    cluster.save(directory)
    if api:
        proc = cluster._procs["api"] = start_api(Path(cluster.scheduler_config), base)
        cluster.endpoint = f"http://127.0.0.1:{api_port}"
        cluster.save(directory)  # recorded before the wait: `dev down` stops a stuck one
        wait_api(proc, api_port, timeout)

    # disjoint port ranges: all nodes share 127.0.0.1
    first = _task_port_base(nodes)
    for i, name in enumerate(names):
        password_file = base / "agents" / f"{name}.password"
        _secret_file(password_file, node_password(agent_secret, name))
        agent = {
            "node_name": name,
            "address": "127.0.0.1",
            "redis": {
                "url": cluster.redis_url,
                "username": node_user(name),
                "password_file": str(password_file),
            },
            "share_dir": cluster.share_dir,
            "secrets_key_file": str(key_file),
            "executor": "process",
            "task_users": cluster.task_users,
            "heartbeat_interval_s": hb_interval,
            # short on purpose (fast local runs): production agents default to 180 s
            "lease_s": 3 * hb_interval,
            "work_dir": str(base / "agents" / name),
            "port_range": [first + 200 * i, first + 200 * i + 199],
            "resources": {
                "cpu": cpu,
                "memory": memory,
                # None: the agent detects its GPUs (NVML or the recording), as on a real node
                "gpu": None if gpus_per_node is None and i == 0 else cluster.gpus[i],
                "gpu_model": "dev-fake" if cluster.gpus[i] and not detected else None,
            },
            "labels": {"dev": "true"},
            "stop_grace_s": grace,
        }
        if nvml_recording is not None and i == 0:
            agent["nvml_recording"] = str(nvml_recording)
        path = base / f"agent-{i}.yaml"
        path.write_text(yaml.safe_dump(agent))
        cluster.agent_configs.append(str(path))
        cluster.nodes.append(name)
        cluster.start_agent(i)
    cluster.save(directory)
    store = cluster.store()
    wait_up(
        f"{nodes} agent(s)",
        lambda: {n.name for n in store.list_nodes() if n.state == "ready"} >= set(cluster.nodes),
        None,
        timeout,
    )


def _secret_file(path: Path, content: str) -> None:
    """Write ``content`` to ``path`` readable by this user only (0600 from creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content + "\n")


def _task_port_base(nodes: int) -> int:
    """First port of the nodes' task port ranges (200 ports per node, all on 127.0.0.1):
    below the kernel's ephemeral range, so that no client connection of this machine can
    hold a task's port (a task then fails to bind: EADDRINUSE), at a random offset so that
    two dev clusters rarely overlap."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    top = low - 200 * nodes
    if top <= 10000:  # too many nodes to fit below it: take the low ports
        return 10000
    return random.randrange(10000, top, 100)


def _cpu(cpu: Any) -> int | None:
    if cpu is None:
        return None
    from scheduler.spec.quantity import parse_cpu

    return parse_cpu(cpu)


def _mem(memory: Any) -> int | None:
    if memory is None:
        return None
    from scheduler.spec.quantity import parse_memory

    return parse_memory(memory)


def _stop_tasks(cluster: DevCluster) -> None:
    """Stop task process groups the agents left (agents leave tasks for adoption)."""
    from scheduler.agent.process import ProcessExecutor

    ex = ProcessExecutor(limits="none")
    for cfg in cluster.agent_configs:
        try:
            work = Path(yaml.safe_load(Path(cfg).read_text())["work_dir"])
            tasks = json.loads((work / "agent-state.json").read_text()).get("tasks", [])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for t in tasks:
            ex.stop(t["handle"], grace_s=2.0)


def _stop_all(cluster: DevCluster) -> None:
    for name in sorted(cluster._procs):
        if name.startswith("agent-"):
            cluster._procs[name].stop()
    _stop_tasks(cluster)
    for name in ("loop", "api", "redis"):
        if name in cluster._procs:
            cluster._procs[name].stop()


def down(directory: Path | None = None, keep_data: bool = False) -> bool:
    """Stop every process of the dev cluster (agents, their tasks, loop, API, Redis) and
    remove its state file and data (unless ``keep_data``). False when none was running."""
    directory = directory or state_dir()
    state = read_state(directory)
    if state is None:
        return False
    cluster = DevCluster.from_dict(state)
    _stop_all(cluster)
    (directory / STATE_NAME).unlink(missing_ok=True)
    if not keep_data:
        shutil.rmtree(cluster.base_dir, ignore_errors=True)
    return True


__all__ = ["DevCluster", "DevError", "down", "read_state", "state_dir", "up"]
