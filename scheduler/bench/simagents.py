"""Simulated agents of many nodes in one process, reading and reporting as real agents do.

``python -m scheduler.bench.simagents --url URL --nodes N [--run-s S] [--node-cpu C]``
registers ``N`` nodes (``sim-0001``...), prints ``ready``, and until SIGTERM: on each
node's ``bindings`` notification reads that node's bound tasks
(:meth:`scheduler.store.Store.bound_tasks`, the agent's read), reports new ones
``running`` and, ``run_s`` seconds later, ``succeeded`` through the node's report stream
(:class:`scheduler.store.agent_store.NodeStore`, as a real agent); tasks whose desired
state became ``stop`` are reported ``stopped``. The reports of one pass (many nodes) go in
one pipeline: each is the single round trip a real agent sends. Heartbeats every
``heartbeat_s``.

The e2e benchmark runs it as its own process so that its CPU time is measured apart from
the API's, the loop's and Redis'.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.store.nodes import heartbeat_args

ExitCode = Callable[[str, Any], int]


class SimulatedAgents:
    """Agents of many simulated nodes in one thread, talking to the store like real ones.

    Args:
        store: a :class:`scheduler.store.Store` (its own client: this runs in a thread).
        nodes: list of :class:`scheduler.store.NodeRecord` to register.
        run_s: seconds between running and finished.
        exit_code: callable(job name, TaskRecord) -> exit code; default always 0.
        heartbeat_s: seconds between heartbeats.
        via_streams: report through each node's report stream (as agents with their own
            ACL user do; the loop applies them); False applies them directly
            (``Store.report_task``), for tests without a loop's report pass.
    """

    def __init__(
        self,
        store: Any,
        nodes: list[Any],
        run_s: float = 1.0,
        exit_code: ExitCode | None = None,
        heartbeat_s: float = 5.0,
        via_streams: bool = False,
    ) -> None:
        from scheduler.store.agent_store import NodeStore

        self.store = store
        self.nodes = nodes
        self.run_s = run_s
        self.exit_code = exit_code or (lambda job, task: 0)
        self.heartbeat_s = heartbeat_s
        self.node_stores = (
            {n.name: NodeStore(store.r, n.name, store.p) for n in nodes} if via_streams else {}
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due: dict[tuple[str, str, int], tuple[float, str, int]] = {}
        self.error: BaseException | None = None

    def start(self) -> SimulatedAgents:
        for n in self.nodes:
            self.store.register_node(n)
        self._thread = threading.Thread(target=self._run, name="simulated-agents", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> SimulatedAgents:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # surfaced by the caller through .error
            self.error = exc
            raise

    def _loop(self) -> None:
        store = self.store
        pubsub = store.r.pubsub(ignore_subscribe_messages=True)
        prefix = store.node_channel("")
        pubsub.psubscribe(prefix + "*")
        names = [n.name for n in self.nodes]
        mine = set(names)
        next_beat = time.monotonic() + self.heartbeat_s
        dirty: set[str] = set(names)
        try:
            while not self._stop.is_set():
                msg = pubsub.get_message(timeout=0.02)
                while msg is not None:
                    node = str(msg["channel"])[len(prefix) :]
                    if node in mine:
                        dirty.add(node)
                    msg = pubsub.get_message(timeout=0)
                pipe = store.r.pipeline(transaction=False)
                for node in sorted(dirty):
                    self._sync(node, pipe)
                dirty.clear()
                self._finish_due(pipe)
                if len(pipe):
                    pipe.execute()
                if time.monotonic() >= next_beat:
                    beats = store.r.pipeline(transaction=False)
                    for n in names:
                        store._heartbeat(
                            args=heartbeat_args(store.p, n, {"simulated": True}), client=beats
                        )
                    beats.execute()
                    next_beat = time.monotonic() + self.heartbeat_s
        finally:
            pubsub.close()

    def _report(
        self, pipe: Any, job: str, key: str, attempt: int, node: str, state: str, **kw: Any
    ) -> None:
        ns = self.node_stores.get(node)
        if ns is not None:
            ns.report_task(job, key, attempt, node, state, pipe=pipe, **kw)
        else:
            self.store._report(
                args=[
                    self.store.p,
                    job,
                    key,
                    attempt,
                    node,
                    state,
                    "" if kw.get("exit_code") is None else str(kw["exit_code"]),
                    kw.get("message", ""),
                    kw.get("handle", ""),
                    "",
                    "",
                ],
                client=pipe,
            )

    def _sync(self, node: str, pipe: Any) -> None:
        for (job, key), task in self.store.bound_tasks(node).items():
            if task.done:
                continue
            ident = (job, key, task.attempt)
            if task.desired == "stop":
                self._report(
                    pipe, job, key, task.attempt, node, "stopped", exit_code=143, message="stopped"
                )
                self._due.pop(ident, None)
            elif task.state == "scheduled" and task.desired == "run" and ident not in self._due:
                self._report(
                    pipe, job, key, task.attempt, node, "running", handle=f"sim-{job}-{key}"
                )
                code = self.exit_code(job, task)
                self._due[ident] = (time.monotonic() + self.run_s, node, code)

    def _finish_due(self, pipe: Any) -> None:
        now = time.monotonic()
        for ident, (due, node, code) in list(self._due.items()):
            if due <= now:
                job, key, attempt = ident
                state = "succeeded" if code == 0 else "failed"
                self._report(
                    pipe, job, key, attempt, node, state, exit_code=code, message=f"exited {code}"
                )
                del self._due[ident]


def simulated_nodes(n: int, cpu: int = 32, memory_gib: int = 128, gpu: int = 0) -> list[Any]:
    """``n`` NodeRecords named sim-0001... with the given capacity (cores, GiB, GPUs)."""
    from scheduler.store import NodeRecord

    return [
        NodeRecord(
            name=f"sim-{i:04d}",
            address=f"10.99.{i // 250}.{i % 250 + 1}",
            cpu_m=cpu * 1000,
            memory=memory_gib << 30,
            gpu=gpu,
            executor="simulated",
        )
        for i in range(1, n + 1)
    ]


def main(argv: list[str] | None = None) -> None:
    """Entry point (see the module docstring)."""
    import redis

    from scheduler.store import Store

    parser = argparse.ArgumentParser(prog="python -m scheduler.bench.simagents")
    parser.add_argument("--url", required=True, help="redis URL")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--node-cpu", type=int, default=32)
    parser.add_argument("--run-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    store = Store(redis.Redis.from_url(args.url, decode_responses=True))
    agents = SimulatedAgents(
        store, simulated_nodes(args.nodes, cpu=args.node_cpu), run_s=args.run_s, via_streams=True
    ).start()
    print("ready", flush=True)
    while not stop.is_set() and agents.error is None:
        stop.wait(0.2)
    agents.stop()
    if agents.error is not None:
        raise SystemExit(f"simulated agents failed: {agents.error!r}")


if __name__ == "__main__":
    main()
