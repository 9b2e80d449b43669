"""Fixtures for the stack tests; the mocks and ``build_stack`` live in tests/stacks/mocks.py."""

from __future__ import annotations

import threading
import time

import paramiko
import pytest
import uvicorn
from fastapi import FastAPI, Header, HTTPException

from scheduler.dev import free_port
from stacks import hostops
from tests.sshd import keygen
from tests.stacks.mocks import SSH_KEY


@pytest.fixture
def ssh_key() -> str:
    return SSH_KEY


# The onprem test hosts and the SSH endpoints the stack connects to (test_onprem.py).
ONPREM_HOSTS = {
    "master": ("192.168.10.10", 22),
    "gpu-1": ("192.168.10.11", 2222),
    "gpu-2": ("192.168.10.12", 2222),
    "cpu-1": ("192.168.10.13", 2222),
}


@pytest.fixture(scope="session")
def known_hosts(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """A known_hosts file with an ECDSA key for each onprem test host (an Ed25519 one
    too for the master); yields (path, {host: "<type> <base64>" of the ECDSA key})."""
    d = tmp_path_factory.mktemp("known_hosts")
    keys, lines = {}, []
    for name, (address, port) in ONPREM_HOSTS.items():
        key = paramiko.ECDSAKey.generate()
        keys[name] = f"{key.get_name()} {key.get_base64()}"
        lines.append(hostops.known_hosts_line(address, port, key))
    ed = d / "ed"
    keygen(ed)
    lines.append(
        f"192.168.10.10 {(d / 'ed.pub').read_text().split()[0]} "
        + (d / "ed.pub").read_text().split()[1]
    )
    path = d / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    return str(path), keys


# --- a real HTTP server with the drain route's contract ---------------------------------

TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def api():
    """uvicorn + FastAPI with the drain route's contract; yields (endpoint, calls)."""
    app = FastAPI()
    calls: list[tuple[str, str]] = []
    nodes = {n: "ready" for n in ("node-1", "gpu-1", "gpu-2", "cpu-1")}

    @app.post("/api/v1/nodes/{name}/{action}")
    def node_action(name: str, action: str, authorization: str = Header("")) -> dict:
        calls.append((name, action))
        if authorization != f"Bearer {TOKEN}":
            raise HTTPException(403, "admin or agent token required")
        if name not in nodes:
            raise HTTPException(404, f"node {name!r} not found")
        nodes[name] = "draining"
        return {"name": name, "state": nodes[name]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", calls
    server.should_exit = True
    thread.join(timeout=10)
