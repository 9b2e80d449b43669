"""Stack configuration, read once into a typed, frozen, validated object.

Every key is declared in ``Pulumi.yaml`` (description and default) under the project
namespace ``pasture:``; the defaults below are the same values (a test compares them), so
the program behaves the same when run without the CLI filling in project defaults.

Keys are camelCase (Pulumi's convention); the objects inside list-valued keys use the
snake_case field names of the issue (``{name, vm_size, count, spot, disk_gb, labels}``).

    pulumi.Config("pasture") --read_raw()--> {key: str} --parse_config()--> StackConfig
                             --read_secrets()----------------------------> StackSecrets

A bad value raises :class:`ConfigError` whose message starts with ``pasture:<key>``, says
what was expected and what was given; ``__main__`` lets it stop the program.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from scheduler.k8s.taints import toleration

NAMESPACE = "pasture"
REDIS_NODES = 3
"""System nodes an aks stack needs: one per Redis pod (stacks/aks/redis.py anti-affinity)."""

DOCUMENTATION_RANGES: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = (
    (ipaddress.ip_network("192.0.2.0/24"), "RFC 5737 TEST-NET-1"),
    (ipaddress.ip_network("198.51.100.0/24"), "RFC 5737 TEST-NET-2"),
    (ipaddress.ip_network("203.0.113.0/24"), "RFC 5737 TEST-NET-3"),
    (ipaddress.ip_network("2001:db8::/32"), "RFC 3849 IPv6 documentation prefix"),
)
"""Address ranges reserved for examples (RFC 5737, RFC 3849): never a real client."""


def documentation_range(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """``"<range> (<RFC name>)"`` when ``net`` lies inside a documentation range, else None
    (a wider range such as ``0.0.0.0/0`` that merely contains one is not refused here)."""
    for doc, what in DOCUMENTATION_RANGES:
        if net.version == doc.version and net.subnet_of(doc):  # type: ignore[arg-type]
            return f"{doc} ({what})"
    return None


# Azure/Kubernetes/inventory-safe names: lower-case letters, digits, '-'.
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
# Azure Files share names: 3-63 chars, no leading/trailing/double dash.
_AZURE_FILE_SHARE = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$")
_SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp\d+|sk-\S+) [A-Za-z0-9+/=]+( .*)?$")


class ConfigError(ValueError):
    """A stack config value is wrong; the message names the key (``pasture:nodePools[0].count``)."""


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"expected a lower-case name of letters, digits and '-' (<= 32 chars), got {value!r}"
        )
    return value


class NodePool(_Item):
    """A group of identical VMs (azure platform).

    VM names are ``<pool>-<index>``: raising ``count`` adds the next indices, lowering it
    removes the highest ones, so existing VMs keep their names.

    Attributes:
        name: pool name (``gpu``); also the ``pool`` label of its nodes.
        vm_size: Azure VM size (``Standard_NC24ads_A100_v4``).
        count: number of VMs (>= 0).
        spot: Spot priority VMs (evicted with policy ``spot_eviction_policy``).
        spot_eviction_policy: ``Deallocate`` or ``Delete``.
        spot_max_price: USD per hour, -1 = up to the on-demand price.
        disk_gb: OS disk size in GiB.
        labels: extra node labels.
        cpu: cores of the VM size (what the scheduler may allocate).
        memory_mib: memory of the VM size in MiB.
        gpu_count: GPUs of the VM size.
        gpu_model: GPU model (``A100``), None without GPUs.
    """

    name: str
    vm_size: str = Field(min_length=1)
    count: int = Field(ge=0, le=1000)
    spot: bool = False
    spot_eviction_policy: Literal["Deallocate", "Delete"] = "Delete"
    spot_max_price: float = -1
    disk_gb: int = Field(default=128, ge=30, le=4095)
    labels: dict[str, str] = Field(default_factory=dict)
    cpu: int = Field(ge=1)
    memory_mib: int = Field(ge=512)
    gpu_count: int = Field(default=0, ge=0)
    gpu_model: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v)


class GpuPool(_Item):
    """An AKS user node pool for GPU tasks.

    Attributes:
        name: pool name (AKS: lower-case, <= 12 chars, starts with a letter).
        vm_size: Azure VM size.
        min_count / max_count: cluster autoscaler bounds (0 <= min <= max).
        count: initial node count (min_count <= count <= max_count).
        spot: Spot priority nodes.
        taints: node taints ``key=value:Effect``; tasks get a matching toleration.
        labels: node labels (``pool`` is added).
        cpu, memory_mib, gpu_count, gpu_model: what one node offers (documentation of the
            pool in the outputs; the agent on each node reports what it detects).
        upgrade_max_surge: AKS upgrade: extra nodes added while old ones drain (a count
            ``"1"`` or a percentage ``"33%"``).
        upgrade_drain_timeout_min: AKS upgrade: minutes AKS waits for a node's pods to
            leave before the upgrade fails (1-1440).
    """

    name: str
    vm_size: str = Field(min_length=1)
    min_count: int = Field(default=0, ge=0, le=1000)
    max_count: int = Field(default=4, ge=0, le=1000)
    count: int = Field(default=0, ge=0, le=1000)
    spot: bool = False
    disk_gb: int = Field(default=128, ge=30, le=2048)
    taints: tuple[str, ...] = ("nvidia.com/gpu=present:NoSchedule",)
    labels: dict[str, str] = Field(default_factory=dict)
    cpu: int = Field(default=24, ge=1)
    memory_mib: int = Field(default=225280, ge=512)
    gpu_count: int = Field(default=1, ge=0)
    gpu_model: str | None = "A100"
    upgrade_max_surge: str = Field(default="1", pattern=r"^([1-9][0-9]{0,2}|[1-9][0-9]?%|100%)$")
    upgrade_drain_timeout_min: int = Field(default=30, ge=1, le=1440)

    @field_validator("name")
    @classmethod
    def _aks_name(cls, v: str) -> str:
        if not re.match(r"^[a-z][a-z0-9]{0,11}$", v):
            raise ValueError(f"expected an AKS pool name (a-z0-9, <= 12 chars), got {v!r}")
        return v

    @field_validator("gpu_model")
    @classmethod
    def _gpu_model(cls, v: str | None) -> str | None:
        # It becomes the node label pasture/gpu-model (Kubernetes label value rules).
        if v is not None and not re.match(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$", v):
            raise ValueError(
                f"expected a GPU model usable as a node label value (letters, digits, "
                f"'-', '_', '.', <= 63 chars, like 'A100'), got {v!r}"
            )
        return v

    @field_validator("taints")
    @classmethod
    def _taints(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for t in v:
            toleration(t)  # the one taint parser; raises ValueError naming the taint
        return v

    @model_validator(mode="after")
    def _bounds(self) -> GpuPool:
        if not self.min_count <= self.count <= self.max_count:
            raise ValueError(
                f"expected min_count <= count <= max_count, got {self.min_count} <= "
                f"{self.count} <= {self.max_count}"
            )
        return self


class SystemPool(_Item):
    """The AKS system pool (runs Redis, the API, the loop)."""

    vm_size: str = "Standard_D4s_v5"
    count: int = Field(default=3, ge=1, le=100)
    disk_gb: int = Field(default=128, ge=30, le=2048)


class Image(_Item):
    """An Azure marketplace image reference."""

    publisher: str = "Debian"
    offer: str = "debian-12"
    sku: str = "12-gen2"
    version: str = "latest"


class OnpremHost(_Item):
    """An existing machine reached over SSH (onprem platform).

    Attributes:
        name: cluster name of the host (inventory hostname, scheduler node name).
        address: cluster-internal address.
        ssh_host: where to connect when it differs from ``address``.
        ssh_user: SSH login user.
        ssh_port: SSH port.
        labels: node labels (nodes only).
    """

    name: str
    address: str = Field(min_length=1)
    ssh_host: str | None = None
    ssh_user: str = "root"
    ssh_port: int = Field(default=22, ge=1, le=65535)
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v)


def _default_pools() -> tuple[NodePool, ...]:
    return (NodePool(name="cpu", vm_size="Standard_D4s_v5", count=2, cpu=4, memory_mib=16384),)


def _default_gpu_pools() -> tuple[GpuPool, ...]:
    return (GpuPool(name="gpu", vm_size="Standard_NC24ads_A100_v4"),)


class StackConfig(BaseModel):
    """Everything the programs read from ``pasture:*`` config (secrets excepted).

    See ``Pulumi.yaml`` for one line per key; units: sizes in GiB, memory in MiB.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    platform: Literal["azure", "aks", "onprem"] = "azure"
    cluster_name: str = "pasture"
    share_name: str = "pasture"
    api_port: int = Field(default=8443, ge=1, le=65535)
    allowed_cidrs: tuple[str, ...] = ()
    converge: bool = False
    converge_playbook: str = "playbooks/site.yml"
    converge_inventory: str = ""
    # azure
    location: str = "westeurope"
    resource_group_name: str = ""
    vnet_cidr: str = "10.10.0.0/16"
    subnet_cidr: str = "10.10.1.0/24"
    admin_user: str = "pasture"
    ssh_public_key: str = ""
    master_vm_size: str = "Standard_D4s_v5"
    master_disk_gb: int = Field(default=128, ge=30, le=4095)
    master_public_ip: bool = False
    image: Image = Field(default_factory=Image)
    node_pools: tuple[NodePool, ...] = Field(default_factory=_default_pools)
    # aks
    kubernetes_version: str = ""
    system_pool: SystemPool = Field(default_factory=SystemPool)
    gpu_pools: tuple[GpuPool, ...] = Field(default_factory=_default_gpu_pools)
    namespace: str = "pasture"
    pasture_image: str = ""  # "": built from the Containerfile and pushed (stacks/aks/image.py)
    pasture_image_base: str = "python:3.11-slim"
    redis_image: str = "redis:7.2"
    redis_storage_gb: int = Field(default=8, ge=1)
    device_plugin_image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    share_quota_gb: int = Field(default=100, ge=1, le=102400)
    acr_sku: Literal["Basic", "Standard", "Premium"] = "Basic"
    monitoring: bool = True  # aks: DCGM exporter + kube-prometheus-stack (stacks/aks/monitoring.py)
    dcgm_exporter_image: str = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    prometheus_chart_version: str = "66.2.1"
    alert_receivers: tuple[dict[str, Any], ...] = ()
    # onprem
    master: OnpremHost | None = None
    hosts: tuple[OnpremHost, ...] = ()
    ssh_known_hosts: str = "~/.ssh/known_hosts"
    api_endpoint: str = ""
    api_ca_file: str = ""
    drain_on_delete: bool = True
    drain_timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("master", mode="before")
    @classmethod
    def _unset_master(cls, v: Any) -> Any:
        return None if v == {} else v  # Pulumi.yaml's default: {} means "not set"

    @field_validator("cluster_name", "share_name", "namespace")
    @classmethod
    def _names(cls, v: str) -> str:
        return _check_name(v)

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        nets = tuple(ipaddress.ip_network(c, strict=True) for c in v)
        for net in nets:
            doc = documentation_range(net)
            if doc is not None:
                raise _KeyError(
                    "allowedCidrs",
                    f"{net} lies in {doc}, a documentation range no client has; expected "
                    "the address ranges your clients connect from, e.g. "
                    "pulumi config set --path 'pasture:allowedCidrs[0]' "
                    '"$(curl -s https://ifconfig.me)/32"',
                )
        return tuple(str(n) for n in nets)

    @field_validator("alert_receivers")
    @classmethod
    def _receivers(cls, v: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        names = [r.get("name") for r in v]
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name or name == "null":
                raise ValueError(
                    f"expected each receiver to have a name other than 'null' (the chart's "
                    f"own), got {name!r} at index {i}"
                )
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"expected unique receiver names, got {dupes} more than once")
        return v

    @field_validator("vnet_cidr", "subnet_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return str(ipaddress.ip_network(v, strict=True))

    @field_validator("ssh_public_key")
    @classmethod
    def _ssh_key(cls, v: str) -> str:
        v = v.strip()
        if v and not _SSH_KEY.match(v):
            raise ValueError(
                "expected an OpenSSH public key line ('ssh-ed25519 AAAA... comment'), "
                f"got {v[:30]!r}"
            )
        return v

    @field_validator("node_pools", "gpu_pools", "hosts")
    @classmethod
    def _unique(cls, v: tuple[Any, ...]) -> tuple[Any, ...]:
        names = [item.name for item in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"expected unique names, got {dupes} more than once")
        return v

    @model_validator(mode="after")
    def _platform_rules(self) -> StackConfig:
        if self.platform == "azure":
            if not self.ssh_public_key:
                raise _KeyError("sshPublicKey", "required for platform azure (SSH keys only)")
            vnet = ipaddress.ip_network(self.vnet_cidr)
            subnet = ipaddress.ip_network(self.subnet_cidr)
            if subnet.version != vnet.version or not subnet.subnet_of(vnet):
                raise _KeyError("subnetCidr", f"expected a subnet of vnetCidr {vnet}, got {subnet}")
            wanted = sum(p.count for p in self.node_pools) + 1
            if wanted > subnet.num_addresses - 5:  # Azure reserves 5 addresses per subnet
                raise _KeyError(
                    "subnetCidr",
                    f"{subnet} has room for {subnet.num_addresses - 5} VMs, "
                    f"the pools ask for {wanted}",
                )
        if self.platform == "onprem":
            if self.master is None:
                raise _KeyError("master", "required for platform onprem ({name, address})")
            names = [h.name for h in self.hosts]
            if self.master.name in names:
                raise _KeyError("hosts", f"{self.master.name!r} is also the master")
        if self.platform == "aks" and not _AZURE_FILE_SHARE.match(self.share_name):
            raise _KeyError(
                "shareName",
                "expected an Azure Files share name for platform aks (3-63 lower-case "
                f"letters, digits and single dashes), got {self.share_name!r}",
            )
        if self.platform == "aks" and self.system_pool.count < REDIS_NODES:
            raise _KeyError(
                "systemPool",
                f"expected count >= {REDIS_NODES} for platform aks (the three Redis pods "
                "with their sentinels need a node each to keep a majority when one node "
                f"goes), got count {self.system_pool.count}",
            )
        if self.converge and self.platform == "aks":
            raise _KeyError(
                "converge", "site.yml does not converge an aks cluster (Pulumi deploys it)"
            )
        if self.api_endpoint and not re.match(r"^https?://\S+$", self.api_endpoint):
            raise _KeyError("apiEndpoint", f"expected an http(s) URL, got {self.api_endpoint!r}")
        return self


class _KeyError(ValueError):
    """Cross-field rule broken; carries the key it is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# Keys whose values are JSON (objects or lists) in stack config.
STRUCTURED_KEYS = frozenset(
    to_camel(name)
    for name in (
        "allowed_cidrs",
        "alert_receivers",
        "image",
        "node_pools",
        "system_pool",
        "gpu_pools",
        "master",
        "hosts",
    )
)
CONFIG_KEYS: tuple[str, ...] = tuple(to_camel(name) for name in StackConfig.model_fields)
SECRET_KEYS: tuple[str, ...] = ("redisPassword", "sshPrivateKey", "apiToken")


def _loc_to_key(loc: tuple[Any, ...]) -> str:
    if not loc:
        return f"{NAMESPACE}:(config)"
    key = str(loc[0])
    for part in loc[1:]:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"{NAMESPACE}:{key}"


def parse_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validate raw config values into a :class:`StackConfig`.

    Args:
        raw: ``{camelCaseKey: value}``; values may be strings as Pulumi stores them (JSON
            text for list/object keys, ``"true"``/``"3"`` for scalars) or decoded values.
            Missing keys take the defaults. Secret keys are ignored here.

    Raises:
        ConfigError: unknown key, bad JSON, or a bad value; the message is
            ``pasture:<key>: <expected>, given <value>``.
    """
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECRET_KEYS or value is None:
            continue
        if key not in CONFIG_KEYS:
            raise ConfigError(
                f"{NAMESPACE}:{key}: unknown key (known: {', '.join(sorted(CONFIG_KEYS))})"
            )
        if key in STRUCTURED_KEYS and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{NAMESPACE}:{key}: expected JSON/YAML structure: {exc}"
                ) from None
        values[key] = value
    try:
        return StackConfig.model_validate(values)
    except ValidationError as exc:
        messages = []
        for err in exc.errors():
            ctx_error = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_error, _KeyError):
                messages.append(f"{NAMESPACE}:{ctx_error.key}: {ctx_error}")
                continue
            given = err.get("input")
            shown = "missing" if err["type"] == "missing" else repr(given)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            messages.append(f"{_loc_to_key(err['loc'])}: {err['msg']}, given {shown}")
        raise ConfigError("; ".join(messages)) from None


@dataclass(frozen=True)
class StackSecrets:
    """Secret config values as Pulumi secret outputs (never plain strings in the program).

    Attributes:
        redis_password: aks: password of the in-cluster Redis.
        ssh_private_key: onprem: PEM/OpenSSH private key used to reach the hosts.
        api_token: onprem: admin API token used to drain a node before it is removed; None
            when not set (removal then fails with a message saying to set it, unless
            ``drainOnDelete`` is false).
    """

    redis_password: Any = None
    ssh_private_key: Any = None
    api_token: Any = None


def read_raw(cfg: Any) -> dict[str, str | None]:
    """Read every declared non-secret key from a ``pulumi.Config`` as its raw string."""
    return {key: cfg.get(key) for key in CONFIG_KEYS}


def read_secrets(cfg: Any, config: StackConfig) -> StackSecrets:
    """Read the secrets the platform needs (``require_secret`` for the mandatory ones).

    Raises:
        pulumi.ConfigMissingError: a mandatory secret is not set (the error names the key).
    """
    if config.platform == "aks":
        return StackSecrets(redis_password=cfg.require_secret("redisPassword"))
    if config.platform == "onprem":
        return StackSecrets(
            ssh_private_key=cfg.require_secret("sshPrivateKey"),
            api_token=cfg.get_secret("apiToken"),
        )
    return StackSecrets()


def load(cfg: Any | None = None) -> tuple[StackConfig, StackSecrets]:
    """Read and validate the stack config once (``pulumi.Config("pasture")`` by default).

    Raises:
        ConfigError: a bad value (the message names the key).
        pulumi.ConfigMissingError: a mandatory secret is missing.
    """
    if cfg is None:
        import pulumi

        cfg = pulumi.Config(NAMESPACE)
    config = parse_config(read_raw(cfg))
    return config, read_secrets(cfg, config)
