"""CLI start-up, ``job list`` and <TAB> latency against a real dev cluster (targets on an
idle machine: ``job list`` 0.3 s, a <TAB> 0.2 s).

Setup: ``scheduler.dev.up`` (redis-server, the API, the loop and ``--nodes`` agents as
local processes, state in a temp dir) and ``--jobs`` submitted jobs, so ``job list`` has
a page to fetch and render; the commands find the cluster as after ``pasture dev up``,
with no login file. Each command then runs ``--repeat`` times as a fresh process
(``python -m scheduler.cli ...``, exactly what the ``pasture`` script runs), with stdout
piped, and with ``PYTHONDONTWRITEBYTECODE=1`` set (as on machines where Python may not
write ``__pycache__``): a run reads only the bytecode the install compiled (``make venv``:
``uv sync --compile-bytecode``) and never writes any, so the figures are those of a fresh
install whatever earlier runs left. ``bytecode_compiled_share`` (the ``scheduler``
package) and ``bytecode_compiled_share_deps`` (the libraries ``job list`` imports) say how
much had current bytecode: near 0 when the install compiled none, and then every run
compiles every module it imports.

``complete_job_name`` is one <TAB> after ``pasture job show bench-cli-1``: the shell's
completion protocol (``_PASTURE_COMPLETE=complete_bash``, as the script that ``pasture
--install-completion`` installs runs it), which asks the API for job names.

Figures per command: the median, min and max wall-clock seconds, and the median CPU
seconds (user + sys) of the child, which grows much less than wall time when other work
shares the machine's cores (the min is the figure nearest an idle machine).
``python_startup`` is the bare interpreter (``python -c pass``), the floor under every
command. ``load_average_1m`` says how idle the machine was.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMANDS: dict[str, list[str]] = {
    "python_startup": ["-c", "pass"],
    "import_cli": ["-c", "import scheduler.cli"],
    "help": ["-m", "scheduler.cli", "--help"],
    "version": ["-m", "scheduler.cli", "--version"],
    "job_list": ["-m", "scheduler.cli", "job", "list"],
    "node_list": ["-m", "scheduler.cli", "node", "list"],
    # the console script's code, named `pasture` as the completion protocol needs
    "complete_job_name": [
        "-c",
        "import sys; sys.argv[0] = 'pasture'; from scheduler.cli import main; main()",
    ],
}

# the environment of a <TAB> (Typer's bash protocol), per command that is one
COMPLETION_ENV: dict[str, dict[str, str]] = {
    "complete_job_name": {
        "_PASTURE_COMPLETE": "complete_bash",
        "COMP_WORDS": "pasture job show bench-cli-1",
        "COMP_CWORD": "3",
    },
}

JOB = """\
name: bench-cli-{i}
roles:
  main:
    replicas: 1
    resources: {{cpu: 100m, memory: 64Mi}}
    command: "true"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=15, help="runs per command")
    parser.add_argument("--jobs", type=int, default=30, help="jobs submitted before timing")
    parser.add_argument("--nodes", type=int, default=2, help="dev cluster agents")


def _time(argv: list[str], env: dict[str, str], expect: str = "") -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; raises when the command fails or its
    output lacks ``expect`` (a <TAB> that found no names is no figure)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-500:]}")
    if expect not in proc.stdout:
        raise RuntimeError(f"{' '.join(argv)} printed no {expect!r}: {proc.stdout[-500:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


# the packages ``pasture job list`` imports (the CLI's own and its libraries')
DEPENDENCIES = ("typer", "click", "rich", "httpx", "httpcore", "pydantic", "anyio", "yaml")


def bytecode_share(packages: tuple[str, ...] = ("scheduler",)) -> float:
    """The share of the ``*.py`` files of ``packages`` whose bytecode for this
    interpreter exists and is not older than the source (0..1; 0 when none is found)."""
    import importlib.util

    sources: list[Path] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            sources += Path(spec.origin).parent.rglob("*.py")
    current = 0
    for src in sources:
        pyc = Path(importlib.util.cache_from_source(str(src)))
        if pyc.exists() and pyc.stat().st_mtime >= src.stat().st_mtime:
            current += 1
    return current / len(sources) if sources else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a dev cluster, time each command ``args.repeat`` times, stop the cluster.

    Returns ``{<command>_wall_median_s, <command>_wall_min_s, <command>_wall_max_s,
    <command>_cpu_median_s, ...,
    load_average_1m, bytecode_compiled_share (the scheduler package),
    bytecode_compiled_share_deps (:data:`DEPENDENCIES`), pythondontwritebytecode, jobs,
    repeat}``.
    """
    from scheduler import dev
    from scheduler.cli.client import ApiClient
    from scheduler.cli.config import ClientConfig

    state_dir = Path(tempfile.mkdtemp(prefix="pasture-bench-cli-"))
    cluster = dev.up(nodes=args.nodes, directory=state_dir)
    try:
        client = ApiClient(ClientConfig(cluster.endpoint, cluster.token))
        for i in range(args.jobs):
            client.submit(JOB.format(i=i).encode())
        client.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")}
        env.update(PASTURE_DEV_DIR=str(state_dir), COLUMNS="120", PYTHONDONTWRITEBYTECODE="1")
        # no login file (as before a first `pasture login`): the figures do not depend
        # on the one in $HOME (an older pasture wrote YAML, which costs PyYAML's import)
        env["PASTURE_CONFIG_HOME"] = str(state_dir / "no-login-file")
        result: dict[str, Any] = {}
        for name, argv in COMMANDS.items():
            command_env = {**env, **COMPLETION_ENV.get(name, {})}
            expect = "bench-cli-1" if name in COMPLETION_ENV else ""
            _time(argv, command_env, expect)  # warm the page cache; checks the answer
            runs = [_time(argv, command_env) for _ in range(args.repeat)]
            walls = [w for w, _ in runs]
            result[f"{name}_wall_median_s"] = round(statistics.median(walls), 3)
            result[f"{name}_wall_min_s"] = round(min(walls), 3)
            result[f"{name}_wall_max_s"] = round(max(walls), 3)
            result[f"{name}_cpu_median_s"] = round(statistics.median(c for _, c in runs), 3)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
        result["bytecode_compiled_share"] = round(bytecode_share(), 3)
        result["bytecode_compiled_share_deps"] = round(bytecode_share(DEPENDENCIES), 3)
        result["pythondontwritebytecode"] = 1
        result["jobs"] = args.jobs
        result["repeat"] = args.repeat
        return result
    finally:
        dev.down(state_dir)
        state_dir.rmdir() if state_dir.exists() and not any(state_dir.iterdir()) else None
