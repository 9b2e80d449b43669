"""What the onprem stack does to an existing host, as plain functions (no Pulumi).

- :data:`FACTS_SCRIPT` prints cpu cores, memory, GPUs (``nvidia-smi`` when present) and
  the OS; :func:`parse_facts_output` turns its output into :class:`HostFacts`, the values
  the inventory's ``pasture_node_*`` variables carry. The stack runs the script with
  pulumi-command's ``remote.Command`` (``stacks/onprem_host.py``); :func:`gather_facts`
  runs the same script with paramiko (tests, and a manual check of a host).
- :func:`known_host_key` reads a host's key from a known_hosts file: the ``hostKey`` that
  ``remote.Command`` verifies the host against.
- :func:`drain_node` asks the pasture API to drain the node before its host leaves the
  stack (``POST {api}/api/v1/nodes/{name}/drain`` with a bearer token); ``python -m
  stacks.drain`` (the delete command of each node's drain resource) calls it.

Tests run these against a real sshd and a real HTTP server.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import paramiko

# The facts, one section each (a `::<fact>` line, then its value), in one POSIX sh script
# so that one SSH session records them all. `nvidia-smi` is optional: no binary means no
# GPUs. `set -e`: a failing command fails the script (and the `pulumi up`) with its stderr.
FACT_SECTIONS = ("cpu", "memory_kib", "os", "gpus")
FACTS_SCRIPT = """set -e
echo ::cpu
nproc
echo ::memory_kib
awk '/^MemTotal:/ {print $2}' /proc/meminfo
echo ::os
(. /etc/os-release && printf '%s\\n' "$PRETTY_NAME")
echo ::gpus
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name --format=csv,noheader
fi
"""
# Host key types in the order pulumi-command's Go SSH client (golang.org/x/crypto/ssh)
# prefers them: with several keys of a host in known_hosts, the one it will be shown.
HOST_KEY_PREFERENCE = (
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-256",
    "rsa-sha2-512",
    "ssh-rsa",
    "ssh-ed25519",
)


class HostOpError(RuntimeError):
    """SSH or API operation on a host failed; the message names the host and the step."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach a host.

    Attributes:
        name: the host's cluster name (for messages).
        host: address or DNS name to connect to.
        port: SSH port.
        user: login user.
        private_key: private key text (OpenSSH or PEM; Ed25519, ECDSA or RSA).
        known_hosts: known_hosts file whose entry must match the host key; None disables
            verification (tests of throwaway hosts only, never the stack's default).
        timeout_s: connect and per-command timeout in seconds.
    """

    name: str
    host: str
    port: int
    user: str
    private_key: str
    known_hosts: str | None
    timeout_s: float = 20.0


@dataclass(frozen=True)
class HostFacts:
    """Facts recorded for a host.

    Attributes:
        cpu: online CPU cores. memory_mib: total memory in MiB. gpu_count: GPUs reported by
        nvidia-smi (0 without it). gpu_model: short model name (``A100``), None without
        GPUs. gpu_names: full names as nvidia-smi prints them. os: PRETTY_NAME of
        /etc/os-release.
    """

    cpu: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None
    gpu_names: tuple[str, ...]
    os: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpu_names"] = list(self.gpu_names)
        return d


def load_private_key(text: str) -> paramiko.PKey:
    """Parse a private key of any type paramiko supports.

    Raises:
        HostOpError: the text is not an unencrypted private key.
    """
    errors = []
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError) as exc:
            errors.append(f"{cls.__name__}: {exc}")
    raise HostOpError(
        "sshPrivateKey: not an unencrypted Ed25519/ECDSA/RSA key (" + "; ".join(errors) + ")"
    )


def connect(target: SshTarget) -> paramiko.SSHClient:
    """Open an SSH connection with key authentication only.

    Unknown or changed host keys are refused (RejectPolicy) unless ``known_hosts`` is None.

    Raises:
        HostOpError: cannot connect, the host key is unknown/changed, or the key is refused.
    """
    client = paramiko.SSHClient()
    if target.known_hosts is None:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    else:
        path = Path(target.known_hosts).expanduser()
        if path.exists():
            client.load_host_keys(str(path))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            target.host,
            port=target.port,
            username=target.user,
            pkey=load_private_key(target.private_key),
            timeout=target.timeout_s,
            banner_timeout=target.timeout_s,
            auth_timeout=target.timeout_s,
            allow_agent=False,
            look_for_keys=False,
        )
    except (paramiko.SSHException, OSError) as exc:
        client.close()
        raise HostOpError(
            f"host {target.name}: SSH to {target.user}@{target.host}:{target.port} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return client


def run(client: paramiko.SSHClient, command: str, *, name: str, timeout_s: float) -> str:
    """Run a shell command; returns stdout. Raises HostOpError on a non-zero exit."""
    _, stdout, stderr = client.exec_command(command, timeout=timeout_s)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    status = stdout.channel.recv_exit_status()
    if status != 0:
        raise HostOpError(
            f"host {name}: `{command}` exited {status}: {err.strip()[:300] or out.strip()[:300]}"
        )
    return out


def gpu_model(name: str) -> str:
    """Short GPU model from an nvidia-smi name: ``NVIDIA A100-SXM4-80GB`` -> ``A100``,
    ``Tesla V100-PCIE-16GB`` -> ``V100``, ``NVIDIA GeForce RTX 4090`` -> ``RTX4090``,
    ``NVIDIA H100 80GB HBM3`` -> ``H100``."""
    words = name.strip().split()
    words = [w for w in words if w not in ("NVIDIA", "Tesla", "GeForce", "Quadro")]
    if not words:
        return name.strip()
    if words[0] == "RTX" and len(words) > 1:
        return "RTX" + words[1].split("-")[0]
    return words[0].split("-")[0]


def parse_facts(raw: dict[str, str]) -> HostFacts:
    """Facts from the outputs of the fact commands.

    Raises:
        HostOpError: a value is not what the command prints (names the fact).
    """
    try:
        cpu = int(raw["cpu"].strip())
    except ValueError:
        raise HostOpError(f"fact cpu: expected an integer from nproc, got {raw['cpu']!r}") from None
    try:
        memory_mib = int(raw["memory_kib"].strip()) // 1024
    except ValueError:
        raise HostOpError(
            f"fact memory: expected KiB from /proc/meminfo, got {raw['memory_kib']!r}"
        ) from None
    names = tuple(line.strip() for line in raw["gpus"].splitlines() if line.strip())
    models = sorted({gpu_model(n) for n in names})
    return HostFacts(
        cpu=cpu,
        memory_mib=memory_mib,
        gpu_count=len(names),
        gpu_model=models[0] if len(models) == 1 else ("mixed" if models else None),
        gpu_names=names,
        os=raw["os"].strip(),
    )


def parse_facts_output(stdout: str) -> HostFacts:
    """Facts from the output of :data:`FACTS_SCRIPT` (``::<fact>`` lines, then values).

    Raises:
        HostOpError: a section is missing, or a value is not what its command prints
            (names the fact).
    """
    raw: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("::") and line[2:].strip() in FACT_SECTIONS:
            current = raw.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line)
    missing = [s for s in FACT_SECTIONS if s not in raw]
    if missing:
        raise HostOpError(
            f"facts: the script's output has no section {missing} (got {stdout[:200]!r})"
        )
    return parse_facts({k: "\n".join(v) for k, v in raw.items()})


def gather_facts(target: SshTarget) -> HostFacts:
    """Connect to a host, run :data:`FACTS_SCRIPT` and parse its output.

    Raises:
        HostOpError: the connection or the script failed (names the host), or its output
            does not parse (names the fact).
    """
    client = connect(target)
    try:
        out = run(client, FACTS_SCRIPT, name=target.name, timeout_s=target.timeout_s)
    finally:
        client.close()
    return parse_facts_output(out)


def known_host_key(known_hosts: str, host: str, port: int, *, name: str) -> str:
    """The key ``host:port`` has in a known_hosts file, as ``"<type> <base64>"`` (the
    form of pulumi-command's ``connection.hostKey``). Hashed entries are matched too. With
    several key types, the one the Go SSH client negotiates first
    (:data:`HOST_KEY_PREFERENCE`).

    Args:
        known_hosts: path of the file (``~`` expanded).
        host: address or DNS name the connection uses.
        port: SSH port (entries for a port other than 22 are ``[host]:port``).
        name: the host's cluster name, for the message.

    Raises:
        HostOpError: the file is missing or has no key for ``host:port`` (the message
            says how to add one).
    """
    path = Path(known_hosts).expanduser()
    lookup = host if port == 22 else f"[{host}]:{port}"
    add = f"ssh-keyscan {'-p ' + str(port) + ' ' if port != 22 else ''}{host} >> {known_hosts}"
    if not path.is_file():
        raise HostOpError(
            f"host {name}: pasture:sshKnownHosts {known_hosts} does not exist; host keys are "
            f"always verified: check the host's key fingerprint, then `{add}`"
        )
    keys = paramiko.HostKeys(str(path)).lookup(lookup)
    if not keys:
        raise HostOpError(
            f"host {name}: no key for {lookup} in {known_hosts} (pasture:sshKnownHosts); "
            f"check the host's key fingerprint, then `{add}`"
        )
    ranked = sorted(
        keys.keys(),
        key=lambda t: HOST_KEY_PREFERENCE.index(t) if t in HOST_KEY_PREFERENCE else 99,
    )
    key = keys[ranked[0]]
    return f"{key.get_name()} {key.get_base64()}"


@dataclass(frozen=True)
class DrainResult:
    """Outcome of a drain request: ``state`` is the node's state after the call
    (``draining``) or ``not-registered`` when the scheduler never knew the node."""

    node: str
    state: str


def drain_node(
    api_endpoint: str,
    token: str,
    node: str,
    *,
    timeout_s: float = 30.0,
    verify: bool | str = True,
    transport: httpx.BaseTransport | None = None,
) -> DrainResult:
    """Drain a node through the pasture API before its host is removed.

    ``POST {api_endpoint}/api/v1/nodes/{node}/drain`` with ``Authorization: Bearer
    <token>`` (an admin or agent token). The scheduler cordons the node and moves its
    tasks off; a node the scheduler does not know (404: never joined) has nothing to drain.

    Args:
        api_endpoint: ``https://master:8443``.
        token: API token.
        node: node name.
        timeout_s: HTTP timeout in seconds.
        verify: TLS verification: True (system CAs), False, or a CA bundle path.

    Raises:
        HostOpError: the token is refused (401/403), the API answers another error, or it
            cannot be reached; the message says which.
    """
    url = f"{api_endpoint.rstrip('/')}/api/v1/nodes/{node}/drain"
    try:
        with httpx.Client(timeout=timeout_s, verify=verify, transport=transport) as http:
            resp = http.post(url, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise HostOpError(f"drain {node}: cannot reach {url}: {exc}") from None
    if resp.status_code == 404:
        return DrainResult(node=node, state="not-registered")
    if resp.status_code in (401, 403):
        raise HostOpError(
            f"drain {node}: the API refused the token ({resp.status_code}); set pasture:apiToken "
            "to an admin or agent token"
        )
    if resp.status_code >= 400:
        raise HostOpError(f"drain {node}: {url} answered {resp.status_code}: {resp.text[:300]}")
    state = str(resp.json().get("state", ""))
    return DrainResult(node=node, state=state)


def known_hosts_line(host: str, port: int, key: paramiko.PKey) -> str:
    """A known_hosts line for ``host:port`` (``[host]:port`` when port != 22)."""
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key.get_name()} {key.get_base64()}"
