"""Where the CLI finds its API endpoint and token.

Order (first wins):
1. ``PASTURE_ENDPOINT`` / ``PASTURE_TOKEN`` / ``PASTURE_CA_CERT`` environment variables;
2. the state file of a running ``pasture dev up`` cluster (no login needed; ``pasture dev
   down`` removes it, and the login file applies again);
3. the login file ``config.yaml`` written by ``pasture login`` (mode 0600) in
   ``$PASTURE_CONFIG_HOME``, else ``$XDG_CONFIG_HOME/pasture``, else ``~/.config/pasture``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """No endpoint is configured, or the config file is unreadable."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Endpoint (``https://host:port``), bearer token and optional CA bundle path."""

    endpoint: str
    token: str
    ca_cert: str | None = None
    source: str = ""


def config_dir() -> Path:
    """The directory of ``config.yaml`` (see module docstring)."""
    if os.environ.get("PASTURE_CONFIG_HOME"):
        return Path(os.environ["PASTURE_CONFIG_HOME"])
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "pasture"


def config_path() -> Path:
    return config_dir() / "config.yaml"


def save_login(endpoint: str, token: str, ca_cert: str | None = None) -> Path:
    """Write the login file with mode 0600 (created that way, never world-readable).

    Returns the path written.
    """
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    import yaml

    data = {"endpoint": endpoint.rstrip("/"), "token": token}
    if ca_cert:
        data["ca_cert"] = str(Path(ca_cert).resolve())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    os.chmod(path, 0o600)
    return path


def _from_file(path: Path) -> dict:
    import yaml  # here: a dev cluster or the environment need no YAML parser

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with endpoint and token")
    return data


def _from_dev_state() -> dict:
    try:
        from scheduler.cli import devstate
    except ImportError:
        return {}
    return devstate.client_settings() or {}


def load() -> ClientConfig:
    """The effective client config.

    Raises:
        ConfigError: no endpoint/token anywhere (run ``pasture login`` or ``pasture dev up``).
    """
    data: dict = {}
    source = ""
    path = config_path()
    if dev := _from_dev_state():
        data, source = dev, "pasture dev up"
    elif path.is_file():
        data, source = _from_file(path), str(path)
    env = {
        "endpoint": os.environ.get("PASTURE_ENDPOINT"),
        "token": os.environ.get("PASTURE_TOKEN"),
        "ca_cert": os.environ.get("PASTURE_CA_CERT"),
    }
    for key, value in env.items():
        if value:
            data[key] = value
            source = source or "environment"
    if not data.get("endpoint") or not data.get("token"):
        raise ConfigError(
            "no API endpoint/token: run 'pasture login ENDPOINT --token TOKEN' "
            "or 'pasture dev up', or set PASTURE_ENDPOINT and PASTURE_TOKEN"
        )
    return ClientConfig(
        endpoint=str(data["endpoint"]).rstrip("/"),
        token=str(data["token"]),
        ca_cert=data.get("ca_cert") or None,
        source=source,
    )
