"""Node agent and executors (process, container, kubernetes). Entry: :func:`run_forever`."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from scheduler.settings import AgentSettings, load_agent_settings


def run_forever(settings: AgentSettings, stop: threading.Event | None = None) -> None:
    """Entry point of ``pasture agent run``: run the agent until SIGTERM / SIGINT (or
    ``stop``)."""
    from scheduler.agent.agent import Agent

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    Agent(settings).run_forever(stop)


def main(argv: list[str] | None = None) -> None:
    """``python -m scheduler.agent --config /etc/pasture/agent.yaml``."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.agent")
    parser.add_argument("--config", default=None, help="agent settings file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run_forever(load_agent_settings(args.config))
