"""Hello, gang: every task of a job finds the others through the discovery environment.

Task 0 of the first declared role (the ps in ``examples/jobs/hello-gang.yaml``) listens on its
port; every other task connects to it over TCP (retrying while it starts), says hello with its
role, index and host, and gets an answer naming how many peers the hub heard from. Exits 0
when the whole gang said hello, non-zero (with the reason on stderr) otherwise.

Run as a task: ``python3 -m scheduler.examples.hello_gang``.
"""

from __future__ import annotations

import argparse
import socket
import sys

from scheduler.examples import wire
from scheduler.examples.gang import DiscoveryError, TaskEnv


def run_hub(env: TaskEnv, timeout_s: float) -> int:
    """Accept one hello from every other task of the gang and answer each.

    Returns:
        Exit code (0 on success).
    """
    peers = sum(env.replicas(r) for r in env.roles) - 1
    with wire.listen(env.task_port) as server:
        print(
            f"{env.role}-{env.index}: listening on {env.task_host}:{env.task_port}, "
            f"waiting for {peers} peers",
            flush=True,
        )
        conns = wire.accept(server, peers, timeout_s)
    heard = []
    for conn in conns:
        meta, _ = wire.recv(conn)
        heard.append(f"{meta['role']}-{meta['index']}@{meta['host']}")
        print(f"{env.role}-{env.index}: hello from {heard[-1]}", flush=True)
    for conn in conns:
        wire.send(conn, {"from": f"{env.role}-{env.index}", "peers": len(heard)})
        conn.close()
    print(f"{env.role}-{env.index}: the gang of {peers + 1} is complete: {', '.join(heard)}")
    return 0


def run_peer(env: TaskEnv, timeout_s: float) -> int:
    """Connect to the hub, say hello, print its answer.

    Returns:
        Exit code (0 on success).
    """
    hub_role = env.roles[0]
    address = env.address(hub_role, 0)
    print(
        f"{env.role}-{env.index}: connecting to {hub_role}-0 at {address[0]}:{address[1]}",
        flush=True,
    )
    with wire.connect(address, timeout_s) as sock:
        wire.send(sock, {"role": env.role, "index": env.index, "host": socket.gethostname()})
        sock.settimeout(timeout_s)
        meta, _ = wire.recv(sock)
    print(f"{env.role}-{env.index}: {meta['from']} answered; it heard from {meta['peers']} peers")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the gang to assemble (default 120)",
    )
    args = parser.parse_args(argv)
    try:
        env = TaskEnv.from_environ()
        is_hub = env.role == env.roles[0] and env.index == 0
        return run_hub(env, args.timeout) if is_hub else run_peer(env, args.timeout)
    except (DiscoveryError, TimeoutError, ConnectionError) as exc:
        print(f"hello_gang: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
