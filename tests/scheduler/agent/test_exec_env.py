"""The file a task writes for ``pasture job exec`` (issue 34 item 7): its variables and
directory, as ``sh`` reads them back, whatever characters they hold; its secrets never."""

from __future__ import annotations

import os
import subprocess

from scheduler.agent.ssh import exec_env_script, sshd_config
from scheduler.store.reports import _usage_arg


def test_the_task_writes_its_variables_and_directory_and_never_its_secrets(tmp_path):
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir()
    here = tmp_path / "it's a [dir] $HOME"
    here.mkdir()
    odd = "a 'b' \"c\" $d `e` \\f\nline two [/INST]"
    env = {"PATH": os.environ["PATH"], "ODD": odd, "PASTURE_SECRET_TOKEN": "s3cret"}
    subprocess.run(
        ["sh", "-c", exec_env_script(str(ssh_dir), ["TOKEN"])], cwd=here, env=env, check=True
    )
    written = (ssh_dir / "exec.env").read_text()
    assert "s3cret" not in written
    assert (ssh_dir / "exec.env").stat().st_mode & 0o777 == 0o600
    back = subprocess.run(
        [
            "sh",
            "-c",
            '. "$1"; printf "%s\\n---\\n%s" "$PWD" "$ODD"',
            "sh",
            str(ssh_dir / "exec.env"),
        ],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert back == f"{here}\n---\n{odd}"
    assert f"SetEnv PASTURE_EXEC_ENV={ssh_dir}/exec.env\n" in sshd_config(2222, str(ssh_dir))


def test_a_nodes_usage_figures_are_checked_before_they_are_kept():
    assert _usage_arg('{"cpu_s": 1.5, "max_rss": 1024}') == '{"cpu_s": 1.5, "max_rss": 1024}'
    assert _usage_arg('{"cpu_s": -1, "max_rss": true}') == ""
    assert _usage_arg('{"cpu_s": "1", "max_rss": 2048, "x": 1}') == '{"max_rss": 2048}'
    assert _usage_arg("not json") == "" and _usage_arg("[1]") == ""
    assert _usage_arg('{"cpu_s": 1}' + " " * 2000) == ""
