"""`pasture` imports only what the command it runs needs (issue 34 item 4: start-up).

Behaviour, not timing (the figures: ``python -m scheduler.bench cli``): which modules a
fresh ``pasture`` process has loaded when it exits, read from ``sys.modules`` at exit.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import typer.main
import yaml
from live import job_yaml

from scheduler.cli import app

PASTURE = str(Path(sys.executable).parent / "pasture")

# the command modules a `pasture job ...` command that reads jobs never needs
OTHER_COMMANDS = (
    "scheduler.cli.data",
    "scheduler.cli.cluster",
    "scheduler.cli.server",
    "scheduler.cli.tokens",
    "scheduler.cli.backup",
    "scheduler.cli.dev",
    "scheduler.cli.login",
    "scheduler.cli.schedules",
    "scheduler.cli.jobs",
    "scheduler.cli.jobspec",
    "scheduler.cli.jobsubmit",
    "scheduler.cli.usage",
)


def _pasture_modules(
    args: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``pasture ARGS`` as the console script does; (the process, its modules at exit)."""
    probe = (
        "import atexit, json, sys\n"
        "def report():\n"
        "    sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
        "atexit.register(report)\n"
        f"sys.argv = ['pasture', *{args!r}]\n"
        "from scheduler.cli import main\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("MODULES ")][-1]
    return proc, set(json.loads(line.removeprefix("MODULES ")))


def test_job_list_imports_the_job_reading_commands_only(isolated_config):
    proc, loaded = _pasture_modules(["job", "list"], dict(os.environ))
    assert proc.returncode == 3  # not configured: the command itself ran
    assert "scheduler.cli.jobreads" in loaded
    assert sorted(loaded.intersection(OTHER_COMMANDS)) == []
    # its options (--limit, -o, --interval, ...) were coerced without Typer's pydantic
    # adapters (scheduler/cli/coercion.py); no client made, so no response models either
    assert sorted(m for m in loaded if m.startswith(("pydantic", "typer._adapters"))) == []


def test_root_help_loads_no_client_and_no_yaml(isolated_config):
    proc, loaded = _pasture_modules(["--help"], dict(os.environ))
    assert proc.returncode == 0 and "job" in proc.stdout
    heavy = ("httpx", "httpcore", "yaml", "pydantic", "scheduler.api", "paramiko")
    assert sorted(m for m in loaded if m.startswith(heavy)) == []


def test_every_command_is_in_its_lazy_table():
    """A command a module registers but no table names still runs (every module is
    loaded for an unknown name), only slowly: each is in the table of its group, with
    the module that defines it."""
    from scheduler.cli import RootCommands
    from scheduler.cli.jobgroup import JobCommands

    root = typer.main.get_command(app)
    names = root.list_commands(None)
    assert names == list(RootCommands.order)  # --help's order, every one loaded
    job = root.get_command(None, "job")
    for info in job.app.registered_commands:
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        module, attribute = JobCommands.lazy[name]
        assert attribute is None and info.callback.__module__ == module, name
    for module, attribute in JobCommands.lazy.values():
        if attribute is not None:
            assert getattr(importlib.import_module(module), attribute) is not None
    assert set(job.list_commands(None)) == set(JobCommands.lazy)


def test_a_mistyped_command_still_gets_its_suggestion(cli):
    r = cli("job", "lst")
    assert r.exit_code == 2 and "Did you mean 'list'?" in r.output
    r = cli("nope", "list")
    assert r.exit_code == 2 and "Did you mean 'node'?" in r.output


def test_name_completion_reads_raw_json_without_httpx_or_models(logged_in, cli, tmp_path):
    for name in ("hello-one", "hello-two", "other"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(job_yaml(name))
        assert cli("job", "submit", str(spec)).exit_code == 0
    env = {
        **os.environ,
        "_PASTURE_COMPLETE": "complete_bash",
        "COMP_WORDS": "pasture job show hel",
        "COMP_CWORD": "3",
    }
    proc, loaded = _pasture_modules([], env)
    assert proc.stdout.split() == ["hello-one", "hello-two"]
    heavy = ("httpx", "httpcore", "anyio", "scheduler.api", "yaml", "pydantic", "typer._adapters")
    assert sorted(m for m in loaded if m.startswith(heavy)) == []
    assert sorted(loaded.intersection(OTHER_COMMANDS)) == []


def test_one_shot_commands_ask_the_api_without_httpx(logged_in, cli, tmp_path):
    """``job list``, ``job show`` and ``node list`` make their requests with the standard
    library (scheduler/cli/transport.py) and print what they printed over httpx."""
    spec = tmp_path / "one.yaml"
    spec.write_text(job_yaml("one-shot"))
    assert cli("job", "submit", str(spec)).exit_code == 0
    for args, expect in [
        (["job", "list", "-o", "name"], "one-shot"),
        (["job", "show", "one-shot", "-o", "json"], '"name": "one-shot"'),
        (["node", "list", "-o", "name"], ""),
        (["job", "show", "no-such-job"], "not found"),
    ]:
        proc, loaded = _pasture_modules(args, dict(os.environ))
        assert expect in proc.stdout + proc.stderr, args
        assert proc.returncode == (5 if "no-such-job" in args else 0), (args, proc.stderr)
        assert cli(*args).output.strip() in proc.stdout + proc.stderr, args  # same words
        heavy = ("httpx", "httpcore", "anyio", "h11")
        assert sorted(m for m in loaded if m.startswith(heavy)) == [], args


def test_the_login_file_is_json_and_read_without_pyyaml(api, cli, isolated_config):
    url, env = api
    assert cli("login", url, "--token", env.admin).exit_code == 0
    path = isolated_config / "pasture-config" / "config.yaml"
    saved = json.loads(path.read_text())
    assert yaml.safe_load(path.read_text()) == saved  # still YAML for any YAML reader
    assert saved["contexts"]["default"] == {"endpoint": url, "token": env.admin}
    proc, loaded = _pasture_modules(["vc", "list", "-o", "name"], dict(os.environ))
    assert proc.returncode == 0 and proc.stdout.split() == ["default", "research"]
    assert sorted(m for m in loaded if m.startswith("yaml")) == []


def test_a_hand_written_yaml_login_file_still_reads(api, cli, isolated_config):
    url, env = api
    path = isolated_config / "pasture-config" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        f"# mine\ncurrent: lab\ncontexts:\n  lab:\n    endpoint: {url}\n    token: {env.admin}\n"
    )
    assert cli("vc", "list", "-o", "name").output.split() == ["default", "research"]
    path.write_text("current: [lab\n")
    r = cli("vc", "list")
    assert r.exit_code == 3 and "cannot read" in r.output


def test_the_client_builds_its_models_without_pydantic_plugin_lookup(isolated_config):
    """pydantic reads every installed distribution's entry points for its plugins when
    it builds a process's first model; the CLI switches that off while it imports the
    API's models only, and leaves the environment as it found it."""
    probe = (
        "import os\n"
        "from scheduler.cli.client import ApiClient\n"
        "from scheduler.cli.config import ClientConfig\n"
        "ApiClient(ClientConfig('http://127.0.0.1:9', 't')).close()\n"
        "import scheduler.api.schemas\n"  # as each method does before parsing
        "import pydantic.plugin._loader as loader\n"
        "print(loader._plugins, os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["None", "None"]  # never looked up; the variable unset again
    env["PYDANTIC_DISABLE_PLUGINS"] = "logfire"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split()[-1] == "logfire"  # the user's own setting is kept
