"""Issue 37, first point: an OpenPAI v1 ``codeDir`` on HDFS is read from the share
directory ``hdfs/<path inside HDFS>``; ``pasture data push`` maps an HDFS destination by the
same rule, and a task fails at start with the exact push command while it is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scheduler.agent import startup
from scheduler.cli.data import share_destination
from scheduler.spec import SpecError, load_job
from scheduler.store import TaskRecord

CORPUS = Path(__file__).parent / "corpus"


def _prepare(spec, share: Path, tmp: Path) -> startup.Startup:
    me = TaskRecord("train_mnist", 0, 1, "n1", "127.0.0.1", {})
    return startup.prepare(
        job=spec.name,
        user="u",
        spec=spec,
        tasks=[me],
        me=me,
        node="n1",
        share=share,
        task_dir=tmp / "task",
        task_id=f"{spec.name}-train_mnist-0-a1",
        executor_kind="process",
    )


def test_a_v1_file_with_its_code_on_hdfs_runs_once_the_code_is_pushed(tmp_path):
    """microsoft/pai examples/tutorial/pytorch/mnist/pytorch-mnist.json, unchanged."""
    path = CORPUS / "openpai-v1/tutorial-pytorch-mnist.json"
    parsed = load_job(path.read_bytes(), as_json=True)
    (spec,) = parsed.specs
    assert spec.code_dir == "hdfs/tutorial/mnist/code"
    push = "`pasture data push ./code hdfs/tutorial/mnist/code`"
    assert any(w.startswith("OpenPAI v1 field codeDir:") and push in w for w in parsed.warnings)
    share = tmp_path / "share"
    share.mkdir()
    with pytest.raises(startup.StartupError) as info:
        _prepare(spec, share, tmp_path)
    assert push in str(info.value)

    # what the user runs: data push to the HDFS path the file names lands where the job reads
    dest = share_destination("$PAI_DEFAULT_FS_URI/tutorial/mnist/code")
    assert dest == spec.code_dir
    local = tmp_path / "code"
    local.mkdir()
    (local / "mnist.py").write_text("print('ok')\n")
    shutil.copytree(local, share / dest)
    role = spec.roles["train_mnist"].model_copy(update={"command": "cat code/mnist.py"})
    spec = spec.model_copy(update={"roles": {"train_mnist": role}})  # a stand-in command
    boot = _prepare(spec, share, tmp_path)
    assert boot.env["PAI_CODE_DIR"] == str(share / "hdfs/tutorial/mnist/code")
    out = subprocess.run(
        ["/bin/sh", "-c", boot.command],
        env={**os.environ, **boot.env},
        cwd=share,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (out.returncode, out.stdout) == (0, "print('ok')\n"), out.stderr


@pytest.mark.parametrize(
    ("given", "share_path"),
    [
        ("hdfs://10.0.0.1:9000/folder/mnist", "hdfs/folder/mnist"),
        ("hdfs://<ip address>:<port>/folder/mnist/", "hdfs/folder/mnist"),
        ("${PAI_DEFAULT_FS_URI}/a/./b", "hdfs/a/b"),
        ("webhdfs://nn/x", "hdfs/x"),
        ("datasets/mnist", "datasets/mnist"),
    ],
)
def test_data_push_maps_an_hdfs_destination_by_the_codedir_rule(given, share_path):
    assert share_destination(given) == share_path


@pytest.mark.parametrize(
    "code_dir", ["hdfs://nn:9000", "$PAI_DEFAULT_FS_URI/$PAI_USER_NAME/code", "hdfs://nn/a/../b"]
)
def test_an_hdfs_code_dir_with_no_share_path_is_refused_with_the_push_command(code_dir):
    role = {"name": "m", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 100, "command": "x"}
    doc = json.dumps({"jobName": "j", "image": "i", "codeDir": code_dir, "taskRoles": [role]})
    with pytest.raises(SpecError) as info:
        load_job(doc.encode(), as_json=True)
    (error,) = info.value.errors
    assert error["loc"] == "codeDir"
    assert "pasture data push" in error["msg"]
