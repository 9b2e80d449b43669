"""Processes of the dev cluster and the tests: a private redis-server, spawning a component
in its own session with its log, waiting for it to come up, and stopping it by pid (with
its start time, so a reused pid is never signalled), and the API on a settings file. Used
by :mod:`scheduler.dev`, the benchmarks and the test fixtures."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil


class DevError(RuntimeError):
    """The dev cluster could not start / a component did not come up (message says which,
    with the tail of its log)."""


@dataclass
class Proc:
    """A started process: name, pid, create time (to never signal a recycled pid), argv,
    log file."""

    name: str
    pid: int
    create_time: float
    argv: list[str]
    log: str

    def process(self) -> psutil.Process | None:
        """The live process, None when it exited (or the pid was reused)."""
        try:
            p = psutil.Process(self.pid)
            if abs(p.create_time() - self.create_time) > 0.01 or p.status() == "zombie":
                return None
            return p
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self.process() is not None

    def signal(self, sig: int) -> None:
        p = self.process()
        if p is not None:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL."""
        p = self.process()
        if p is None:
            return
        try:
            p.terminate()
            p.wait(timeout)
        except psutil.TimeoutExpired:
            p.kill()
            p.wait(5)
        except psutil.Error:
            pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(
    data_dir: Path, config: Path | None = None, password: str | None = None
) -> Iterator[str]:
    """A private redis-server (from PATH) on a free port; yields its URL.

    Args:
        data_dir: its working directory (no persistence is configured).
        config: a configuration file to start from (e.g. one the redis role rendered);
            port, bind, dir and persistence are overridden on the command line.
        password: the default user's password, for the readiness PING.

    Raises:
        RuntimeError: redis-server is not on PATH or does not answer within 10 s.
    """
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server not found on PATH (apt-get install redis-server)")
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            exe,
            *([str(config)] if config is not None else []),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url, password=password).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(
                        f"redis-server did not answer within 10 s (exit {proc.poll()})"
                    ) from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def spawn(name: str, argv: list[str], base: Path) -> Proc:
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    env = dict(os.environ)
    env.pop("PASTURE_CONFIG", None)
    with open(log, "ab") as f:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=str(base),
        )
    return Proc(
        name=name,
        pid=p.pid,
        create_time=psutil.Process(p.pid).create_time(),
        argv=argv,
        log=str(log),
    )


def log_tail(path: str, n: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_up(what: str, check: Callable[[], object], proc: Proc | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001, S110 - not up yet
            pass
        if proc is not None and not proc.alive():
            raise DevError(f"{what} exited while starting; log {proc.log}:\n{log_tail(proc.log)}")
        time.sleep(0.1)
    log = f"; log {proc.log}:\n{log_tail(proc.log)}" if proc else ""
    raise DevError(f"{what} not up after {timeout:g} s{log}")


def start_api(config: Path, base: Path) -> Proc:
    """Start the API (``python -m scheduler.api --config config``) as its own process,
    logging to ``<base>/logs/api.log``; see :func:`wait_api` for readiness. The caller
    records the process before waiting, so that one that never comes up can be stopped."""
    return spawn("api", [sys.executable, "-m", "scheduler.api", "--config", str(config)], base)


def wait_api(proc: Proc, port: int, timeout: float) -> None:
    """Wait until the API of :func:`start_api` answers ``GET /healthz`` with 200 on
    ``http://127.0.0.1:<port>``.

    Raises:
        DevError: the API exited while starting, or did not answer within ``timeout``
            seconds (with the tail of its log).
    """
    import urllib.request

    def healthy() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)

    wait_up("the API", healthy, proc, timeout)


@contextlib.contextmanager
def api_server(config: Path, port: int, base: Path, timeout: float = 30.0) -> Iterator[Proc]:
    """The API as its own process, up, for the length of a ``with`` block
    (:func:`start_api` + :func:`wait_api`).

    Args:
        config: the settings file; its ``api.port`` must be ``port`` and ``api`` plain
            HTTP on 127.0.0.1 (the readiness check asks ``http://127.0.0.1:<port>/healthz``).
        port: the API's TCP port.
        base: the working directory; the log is ``<base>/logs/api.log``.
        timeout: seconds to wait for ``/healthz`` to answer 200.

    Yields:
        The started process (stopped, SIGTERM then SIGKILL, when the block ends).

    Raises:
        DevError: the API exited while starting, or did not answer within ``timeout``
            (with the tail of its log).
    """
    proc = start_api(config, base)
    try:
        wait_api(proc, port, timeout)
        yield proc
    finally:
        proc.stop(15)
