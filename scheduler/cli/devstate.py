"""Endpoint and token of a running ``pasture dev up`` cluster, from its state file.

The file is the JSON that :func:`scheduler.dev.read_state` reads, at
``scheduler.dev.state_dir() / scheduler.dev.STATE_NAME``. It is read here without importing
:mod:`scheduler.dev` (which loads psutil): every API command reads it, and the CLI's
start-up budget is 0.3 s. tests/scheduler/cli/test_cli_import.py checks both agree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def state_file() -> Path:
    """``$PASTURE_DEV_DIR/state.json``, else ``~/.local/state/pasture/dev/state.json``."""
    env = os.environ.get("PASTURE_DEV_DIR")
    directory = Path(env) if env else Path.home() / ".local" / "state" / "pasture" / "dev"
    return directory / "state.json"


def client_settings() -> dict[str, Any] | None:
    """``{"endpoint", "token"}`` of the running dev cluster, None when there is none."""
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not state.get("endpoint") or not state.get("token"):
        return None
    return {"endpoint": state["endpoint"], "token": state["token"]}


def share_dir() -> Path | None:
    """The running dev cluster's share directory, None when there is none."""
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    share = state.get("share_dir") if isinstance(state, dict) else None
    return Path(share) if isinstance(share, str) and share else None
