"""The shell lines that send a container or pod task's output to its log on the share."""

import os
import subprocess

from scheduler.agent.executor import log_redirect


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)


def test_output_goes_after_what_the_log_holds(tmp_path):
    log = tmp_path / "logs dir" / "w-0.log"  # a space: the path must be quoted
    log.parent.mkdir()
    log.write_text("=== attempt 1 on n1 ===\nold line\n" * 500)
    before = log.read_text()
    res = run(f"{log_redirect(log)}\necho out; echo err >&2; echo more")
    assert res.returncode == 0, res.stderr
    assert res.stdout == res.stderr == ""
    assert log.read_text() == before + "out\nerr\nmore\n"


def test_a_missing_log_is_created(tmp_path):
    log = tmp_path / "w-0.log"
    assert run(f"{log_redirect(log)}\necho first").returncode == 0
    assert log.read_text() == "first\n"


def test_the_task_writes_through_a_read_write_descriptor(tmp_path):
    """Not write-only: libsmbclient (smbnetfs) cannot append through write-only handles."""
    log = tmp_path / "w-0.log"
    res = run(f"{log_redirect(log)}\ngrep '^flags' /proc/self/fdinfo/1")
    assert res.returncode == 0
    flags = int(log.read_text().split()[1], 8)
    assert flags & os.O_ACCMODE == os.O_RDWR


def test_an_unreadable_log_stops_the_task(tmp_path):
    log = tmp_path / "w-0.log"
    log.mkdir()  # opening a directory read-write fails
    res = run(f"{log_redirect(log)}\necho never")
    assert res.returncode != 0
    assert "never" not in res.stdout
