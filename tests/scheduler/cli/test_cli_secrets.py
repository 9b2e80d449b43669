"""``--secret`` / ``--secrets-file`` parsing and merging (scheduler/cli/jobsecrets.py); the
end-to-end path is tests/integration/test_secrets_process.py."""

from __future__ import annotations

import pytest
import typer

from scheduler.cli.jobsecrets import attach, read_secrets


def test_file_lines_then_options_win_and_values_are_verbatim(tmp_path):
    f = tmp_path / "s.env"
    f.write_text("# comment\n\nA=one=two \nB= spaced\n")
    assert read_secrets(["B=opt"], f) == {"A": "one=two ", "B": "opt"}
    assert read_secrets(None, f)["B"] == " spaced"


def test_a_line_without_name_is_refused_without_its_value(tmp_path):
    f = tmp_path / "s.env"
    f.write_text("A=ok\nhunter2-value\n")
    with pytest.raises(typer.BadParameter) as info:
        read_secrets(None, f)
    assert "line 2" in str(info.value.param_hint) and "hunter2" not in str(info.value)
    with pytest.raises(typer.BadParameter):
        read_secrets(["=x"], None)


def test_attach_fills_declared_names_and_refuses_others():
    body = {"name": "j", "secrets": ["A", "B"]}
    out = attach(body, {"A": "file"}, {"B": "given"})
    assert out["secrets"] == {"A": "file", "B": "given"}
    assert attach(body, {}, {})["secrets"] == {"A": None, "B": None}  # the API names A
    with pytest.raises(typer.BadParameter, match="NOPE"):
        attach(body, {}, {"NOPE": "x"})
    assert attach({"name": "j"}, {}, {}) == {"name": "j"}
