"""The CLI end to end on a small generic CSV: JSON shape, plot, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from scheduler.sim.cli import app

POLICY_KEYS = {
    "jct_mean_s",
    "jct_p50_s",
    "jct_p99_s",
    "queue_mean_s",
    "makespan_s",
    "gpu_alloc_frac",
    "preemptions",
    "decision_ms_mean",
}


def trace(tmp_path: Path) -> Path:
    rows = ["start,secs,gpu,team"]
    for i in range(40):
        rows.append(f"{i * 60},{300 + (i * 37) % 900},{[1, 1, 2, 4, 8][i % 5]},{'xy'[i % 2]}")
    f = tmp_path / "t.csv"
    f.write_text("\n".join(rows) + "\n")
    return f


def test_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "cdf.png"
    result = CliRunner().invoke(
        app,
        [
            "--trace-format",
            "csv",
            "--trace",
            str(trace(tmp_path)),
            "--columns",
            "submit=start,duration=secs,gpus=gpu,vc=team",
            "--load",
            "0.9",
            "--gpus-per-node",
            "8",
            "--policies",
            "fifo,pasture",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"trace", "jobs", "gpus", "load", "policies", "lower_bound"}
    assert out["jobs"] == 40 and out["gpus"] % 8 == 0
    assert set(out["policies"]) == {"fifo", "pasture"}
    for m in out["policies"].values():
        assert set(m) == POLICY_KEYS
        assert m["jct_mean_s"] >= out["lower_bound"]["jct_mean_s"]
    assert set(out["lower_bound"]) == {"jct_mean_s", "makespan_s"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_flags_are_named(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "--trace-format",
            "csv",
            "--trace",
            str(trace(tmp_path)),
            "--columns",
            "submit=start,duration=secs",
            "--load",
            "0.5",
        ],
    )
    assert r.exit_code == 2 and "missing gpus" in r.output
    r = CliRunner().invoke(app, ["--policies", "fifo,lottery"])
    assert r.exit_code == 2 and "unknown ['lottery']" in r.output


# trace text is data: brackets, backslashes and control characters a CSV cell can hold
_CELL = st.text(alphabet=st.sampled_from(list("[]/\\ab:=%{}()'\x1b\x07")), min_size=1, max_size=12)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(vc=_CELL, policy=_CELL)
def test_trace_and_flag_text_is_printed_as_data_never_as_markup(
    tmp_path: Path, vc: str, policy: str
):
    """A VC name from the trace and a policy name from the command line reach the tables
    and the error as text: before, ``[/data]`` in either raised Rich's MarkupError."""
    rows = ["start,secs,gpu,team"] + [
        f"{i * 60},600,1,{vc if i % 2 else 'plain'}" for i in range(6)
    ]
    f = tmp_path / "t.csv"
    f.write_text("\n".join(rows) + "\n")
    r = CliRunner().invoke(
        app,
        [
            "--trace-format",
            "csv",
            "--trace",
            str(f),
            "--columns",
            "submit=start,duration=secs,gpus=gpu,vc=team",
            "--nodes",
            "1",
            "--policies",
            "fifo",
        ],
    )
    assert r.exit_code == 0, r.output
    assert re.search(r"│ plain +│", r.output)  # the VC table, one row per VC
    if vc.isprintable():
        assert vc in r.output
    r = CliRunner().invoke(app, ["--policies", policy])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit)
    if policy.isprintable():
        assert f"unknown [{policy!r}]" in r.output
