"""``python -m stacks.drain``: the delete command of each onprem node's drain resource.

pulumi-command runs it (``local.Command``, ``stacks/onprem_host.py``) when the node's host
leaves the stack config, or is replaced, BEFORE the host's facts resource is deleted. The
environment comes from the resource's stored inputs (the values of the last ``pulumi up``
that created or updated it):

    PASTURE_DRAIN_NODE        node name
    PASTURE_DRAIN_ON_DELETE   "true" | "false" (pasture:drainOnDelete)
    PASTURE_API_ENDPOINT      https://master:8443
    PASTURE_API_TOKEN         admin or agent token (pasture:apiToken); may be empty
    PASTURE_API_CA_FILE       CA bundle; empty = system CAs
    PASTURE_DRAIN_TIMEOUT_S   HTTP timeout of the drain request, seconds

Exit status 0: drained, not registered (never joined) or draining off. Non-zero: nothing
was drained; Pulumi then keeps the host in the stack and the message says what to fix.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from stacks import hostops

ENV_KEYS = (
    "PASTURE_DRAIN_NODE",
    "PASTURE_DRAIN_ON_DELETE",
    "PASTURE_API_ENDPOINT",
    "PASTURE_API_TOKEN",
    "PASTURE_API_CA_FILE",
    "PASTURE_DRAIN_TIMEOUT_S",
)


def drain_from_env(env: Mapping[str, str], drain=hostops.drain_node) -> hostops.DrainResult | None:
    """Drain the node the environment names (see the module docstring).

    Returns:
        The drain result, or None when draining is off.

    Raises:
        hostops.HostOpError: a variable is missing, no token is set while draining is on,
            or the API refuses or cannot be reached.
    """
    missing = [k for k in ("PASTURE_DRAIN_NODE", "PASTURE_API_ENDPOINT") if not env.get(k)]
    if missing:
        raise hostops.HostOpError(f"drain: environment variables {missing} are not set")
    node = env["PASTURE_DRAIN_NODE"]
    if env.get("PASTURE_DRAIN_ON_DELETE", "true").lower() == "false":
        return None
    token = env.get("PASTURE_API_TOKEN", "")
    if not token:
        raise hostops.HostOpError(
            f"cannot remove {node}: draining needs pasture:apiToken (set it with "
            "`pulumi config set --secret apiToken ...` and run `pulumi up`), or set "
            "pasture:drainOnDelete false"
        )
    return drain(
        env["PASTURE_API_ENDPOINT"],
        token,
        node,
        timeout_s=float(env.get("PASTURE_DRAIN_TIMEOUT_S") or 30.0),
        verify=env.get("PASTURE_API_CA_FILE") or True,
    )


def main() -> int:
    """Entry point; prints the outcome, or the error on stderr (exit status 1)."""
    try:
        result = drain_from_env(os.environ)
    except hostops.HostOpError as exc:
        print(f"pasture drain: {exc}", file=sys.stderr)
        return 1
    node = os.environ.get("PASTURE_DRAIN_NODE")
    print(
        f"{node}: not drained (pasture:drainOnDelete is false)"
        if result is None
        else f"{result.node}: {result.state}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
