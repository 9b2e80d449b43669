"""`pasture job validate` reads exactly what `job submit` reads (issue 26): every format, a
.json OpenPAI v1 file with comments as JSON5, the same checks and source-field messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from scheduler.cli.output import REJECTED
from scheduler.spec import SpecError, load_job

CORPUS = Path(__file__).resolve().parents[2] / "compat" / "corpus"


def test_a_json_file_with_comments_is_read_as_submit_reads_it(cli, tmp_path):
    src = CORPUS / "openpai-v1" / "tensorflow-mpi.json"
    text = src.read_text().replace('"$PAI_DEFAULT_FS_URI/path/tensorflow-mpi/code"', '"code/x"')
    path = tmp_path / "tf.json"
    path.write_text(text)
    r = cli("job", "validate", str(path), "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == load_job(text, as_json=True).spec.model_dump(mode="json")


def test_the_refusal_is_submits_and_names_the_source_field(cli, tmp_path):
    path = tmp_path / "job.yaml"
    shutil.copy(CORPUS / "volcano" / "ringsconfigmap-job.yaml", path)
    r = cli("job", "validate", str(path))
    assert r.exit_code == REJECTED
    assert "spec.plugins.ringsconfigmap" in r.output and "drop it" in r.output
    try:
        load_job(path.read_bytes())
    except SpecError as exc:
        assert exc.errors[0]["loc"] == "spec.plugins.ringsconfigmap"


def test_the_seed_with_its_code_on_hdfs_validates_with_the_push_command(cli, tmp_path):
    path = tmp_path / "seed.json"
    shutil.copy(CORPUS / "openpai-v1" / "seed-mnist_024.json", path)
    r = cli("job", "validate", str(path))
    assert r.exit_code == 0, r.output
    assert "warning: OpenPAI v1 field codeDir" in r.output
    assert "pasture data push ./mnist hdfs/folder/mnist" in " ".join(r.output.split())


def test_volcano_and_maro_schedules_validate_with_their_warnings(cli):
    r = cli("job", "validate", str(CORPUS / "volcano" / "mpi-example.yaml"))
    assert r.exit_code == 0, r.output
    assert "valid (volcano)" in r.output and "warning: Volcano field" in r.output
    r = cli(
        "job", "validate", str(CORPUS / "maro" / "grass_azure_start_schedule.yml"), "-o", "name"
    )
    assert r.exit_code == 0, r.output
    assert len(r.output.split()) > 1  # one job per schedule name


def test_help_lists_every_format(cli):
    r = cli("job", "validate", "--help")
    for name in ("OpenPAI", "v1", "v2", "MARO", "Volcano"):
        assert name in r.output
