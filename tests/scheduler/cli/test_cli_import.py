"""`import scheduler.cli` stays light: no numpy, paramiko, simulator or httpx until used."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "paramiko", "scheduler.sim", "httpx", "scheduler.api", "redis")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_module():
    # every command's module (they are imported lazily: scheduler.cli.lazy), as
    # `pasture --help` loads them
    loaded = _loaded_after(
        "import typer.main\nfrom scheduler.cli import app\n"
        "root = typer.main.get_command(app)\n"
        "root.list_commands(None)\nroot.get_command(None, 'job').list_commands(None)"
    )
    assert (
        "scheduler.cli.jobs" in loaded and "scheduler.cli.jobreads" in loaded
    )  # the probe did import the CLI
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == []


def test_help_and_version_load_no_heavy_module():
    code = (
        "import sys\nfrom scheduler.cli import app\n"
        "for argv in (['--help'], ['job', '--help'], ['--version']):\n"
        "    try:\n        app(argv)\n    except SystemExit:\n        pass"
    )
    loaded = _loaded_after(code)
    assert [m for m in loaded if m.startswith(HEAVY)] == []


def test_the_dev_state_file_is_where_scheduler_dev_writes_it(monkeypatch, tmp_path):
    from scheduler import dev
    from scheduler.cli import devstate

    for value in (None, str(tmp_path / "dev")):
        if value is None:
            monkeypatch.delenv("PASTURE_DEV_DIR", raising=False)
        else:
            monkeypatch.setenv("PASTURE_DEV_DIR", value)
        assert devstate.state_file() == dev.state_dir() / dev.STATE_NAME


def test_the_schemas_the_client_parses_with_load_no_server():
    loaded = _loaded_after("import scheduler.api.schemas")
    server = ("fastapi", "starlette", "redis", "scheduler.api.app", "scheduler.services")
    assert "pydantic" in loaded
    assert [m for m in loaded if m.startswith(server)] == []
