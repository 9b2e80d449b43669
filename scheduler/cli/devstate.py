"""Endpoint and token of a running ``pasture dev up`` cluster, from its state file."""

from __future__ import annotations


def client_settings() -> dict | None:
    """``{"endpoint", "token"}`` of the running dev cluster, None when there is none."""
    try:
        from scheduler import dev
    except ImportError:
        return None
    state = dev.read_state()
    if not state:
        return None
    get = state.get if isinstance(state, dict) else lambda k: getattr(state, k, None)
    if not get("endpoint") or not get("token"):
        return None
    return {"endpoint": get("endpoint"), "token": get("token")}
