"""Where the CLI finds its API endpoint and token.

Order (first wins):
1. ``PASTURE_ENDPOINT`` / ``PASTURE_TOKEN`` / ``PASTURE_CA_CERT`` environment variables;
2. a context named by ``PASTURE_CONTEXT`` (or ``pasture --context NAME``) in the login file;
3. the newer choice of: the state file of a running ``pasture dev up`` cluster (no login
   needed; ``pasture dev down`` removes it) and the login file's current context, as last
   set by ``pasture context use NAME`` or ``pasture login`` (its ``current_since`` time).
   A dev cluster started after the context was chosen wins; ``pasture context use``
   after ``dev up`` makes the context win again. ``ClientConfig.source`` says which was
   used and why (``pasture context list`` prints it).

The login file ``config.yaml`` (mode 0600, in ``$PASTURE_CONFIG_HOME``, else
``$XDG_CONFIG_HOME/pasture``, else ``~/.config/pasture``) holds one entry per cluster:
``{current: NAME, contexts: {NAME: {endpoint, token, ca_cert?}}}``; ``pasture login
ENDPOINT --context NAME`` adds or replaces one and makes it current. A file of the older
single-cluster form ``{endpoint, token, ca_cert?}`` reads as one context, ``default``.

The CLI writes the login file as JSON, which is YAML too (any YAML reader, and an editor,
reads it as before), and reads JSON without importing PyYAML (~40 ms of every command's
start-up); a file that is not JSON (written by hand, or by an older ``pasture``) is read
as YAML, with libyaml's loader when PyYAML has it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


DEFAULT_CONTEXT = "default"

# ``pasture --context NAME`` for this invocation (set by the root command; None: use
# PASTURE_CONTEXT, the dev cluster or the current context).
context_override: str | None = None


def _write(data: dict[str, Any]) -> Path:
    """Write the login file with mode 0600 (created that way, never world-readable), as
    JSON (which is YAML: see the module docstring)."""
    import json

    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    os.chmod(path, 0o600)
    return path


def contexts() -> tuple[str | None, dict[str, dict[str, Any]]]:
    """``(current context name, {name: {endpoint, token, ca_cert?}})`` of the login file
    (``(None, {})`` when there is none).

    Raises:
        ConfigError: the file is unreadable or not a mapping.
    """
    path = config_path()
    if not path.is_file():
        return None, {}
    data = _from_file(path)
    if isinstance(data.get("contexts"), dict):
        return data.get("current"), dict(data["contexts"])
    if data.get("endpoint"):  # the single-cluster form
        return DEFAULT_CONTEXT, {DEFAULT_CONTEXT: data}
    return None, {}


def save_login(
    endpoint: str, token: str, ca_cert: str | None = None, context: str = DEFAULT_CONTEXT
) -> Path:
    """Add (or replace) ``context`` in the login file and make it current.

    Returns the path written.
    """
    _, known = contexts()
    entry = {"endpoint": endpoint.rstrip("/"), "token": token}
    if ca_cert:
        entry["ca_cert"] = str(Path(ca_cert).resolve())
    known[context] = entry
    return _write({"current": context, "current_since": time.time(), "contexts": known})


def use_context(name: str) -> Path:
    """Make ``name`` the current context.

    Raises:
        ConfigError: no context of that name (the message lists the known ones).
    """
    _, known = contexts()
    if name not in known:
        raise ConfigError(
            f"no context {name!r} in {config_path()}; known: {', '.join(sorted(known)) or '-'}"
            " (pasture login ENDPOINT --context NAME adds one)"
        )
    return _write({"current": name, "current_since": time.time(), "contexts": known})


def current_since() -> float:
    """When the login file's current context was last chosen (epoch seconds; 0 when the
    file predates this record or does not exist)."""
    path = config_path()
    if not path.is_file():
        return 0.0
    since = _from_file(path).get("current_since")
    return float(since) if isinstance(since, int | float) else 0.0


def _dev_started() -> float | None:
    """When the running dev cluster's state file was written (epoch seconds), or None."""
    from scheduler.cli import devstate

    try:
        return devstate.state_file().stat().st_mtime
    except OSError:
        return None


def _parse_yaml(text: str) -> Any:
    """``text`` as YAML: libyaml's safe loader when PyYAML was built with it, else
    PyYAML's own (the same documents; yaml.YAMLError on bad input)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, either way


def _from_file(path: Path) -> dict[str, Any]:
    import json

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)  # what the CLI writes; PyYAML is imported only if not
    except ValueError:
        import yaml

        try:
            data = _parse_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with endpoint and token")
    return data


def _from_dev_state() -> dict[str, Any]:
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
    data: dict[str, Any] = {}
    source = ""
    wanted = context_override or os.environ.get("PASTURE_CONTEXT")
    if wanted:
        current, known = contexts()
        if wanted not in known:
            raise ConfigError(
                f"PASTURE_CONTEXT / --context: no context {wanted!r} in {config_path()};"
                f" known: {', '.join(sorted(known)) or '-'}"
            )
        data, source = dict(known[wanted]), f"context {wanted}"
    else:
        current, known = contexts()
        dev = _from_dev_state()
        started = _dev_started() if dev else None
        chosen = current_since() if current in known else None
        if dev and (chosen is None or (started is not None and started >= chosen)):
            data = dev
            source = "pasture dev up" + (
                f" (started after context {current} was chosen; pasture context use"
                f" {current} to use it)"
                if current in known
                else ""
            )
        elif current in known:
            data, source = dict(known[current]), f"context {current}"
            if dev:
                source += " (chosen after pasture dev up started; the dev cluster still runs)"
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
