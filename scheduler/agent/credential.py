"""The agent's side of the per-node credential exchange (:mod:`scheduler.nodecred`): send
the pod's projected ServiceAccount token to the API, write the node's Redis password.

``python -m scheduler.agent.credential --url URL --token-file FILE --password-file OUT``
posts ``{"token": <FILE's text>}`` to ``URL`` (``.../api/v1/node-credentials``), writes the
password to ``OUT`` (mode 0600, replaced atomically) and prints the Redis user name
(``node-<node>``). Exits 1 with the API's reason when refused or unreachable: on AKS the
agent container's start script runs it before the agent (stacks/aks/agents.py), so the
kubelet restarts the container, with its back-off, until it succeeds. Run at every start,
it also re-creates the node's ACL user after a Redis restart lost it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import httpx


class CredentialError(RuntimeError):
    """The exchange failed (the message says how)."""


def fetch(url: str, token: str, timeout_s: float = 10.0) -> dict[str, str]:
    """``{"node", "username", "password"}`` from the API for ``token``.

    Raises:
        CredentialError: unreachable API, or any answer but 200 (with its detail).
    """
    try:
        res = httpx.post(url, json={"token": token}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise CredentialError(f"cannot reach {url}: {exc}") from None
    if res.status_code != 200:
        try:
            detail = res.json().get("detail")
        except ValueError:
            detail = res.text[:300]
        raise CredentialError(f"{url} answered {res.status_code}: {detail}")
    body = res.json()
    return {k: str(body[k]) for k in ("node", "username", "password")}


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only, replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m scheduler.agent.credential")
    p.add_argument("--url", required=True, help="the API's /api/v1/node-credentials URL")
    p.add_argument("--token-file", required=True, type=Path, help="projected SA token")
    p.add_argument("--password-file", required=True, type=Path, help="where to write it")
    args = p.parse_args(argv)
    try:
        token = args.token_file.read_text().strip()
        cred = fetch(args.url, token)
    except (OSError, CredentialError) as exc:
        print(f"node credential: {exc}", file=sys.stderr)
        return 1
    write_secret(args.password_file, cred["password"])
    print(cred["username"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
