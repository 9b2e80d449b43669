"""Trace readers: generic CSV, Philly, openb; windows; errors that name the field."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.sim.scenario import traces_dir
from scheduler.sim.trace import (
    TraceError,
    TraceStats,
    parse_columns,
    read_csv,
    read_openb_pods,
    read_philly,
    select_window,
)

PHILLY = traces_dir() / "philly" / "philly_jobs.csv"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_generic_csv_seconds_sorts_and_skips(tmp_path: Path) -> None:
    f = write(
        tmp_path / "t.csv",
        "t,len,g,team\n30,100,2,b\n10,50,1,a\n20,5,0,a\n40,0,1,a\n10,7,4,\n",
    )
    stats = TraceStats()
    jobs = read_csv(f, parse_columns("submit=t,duration=len,gpus=g,vc=team"), "seconds", stats)
    assert [(j.submit_s, j.duration_s, j.gpus, j.vc) for j in jobs] == [
        (10.0, 50.0, 1, "a"),
        (10.0, 7.0, 4, "default"),
        (30.0, 100.0, 2, "b"),
    ]
    assert stats.rows == 5 and stats.kept == 3
    assert stats.skipped == {"no GPUs": 1, "non-positive duration": 1}
    assert jobs[0].cpu_m is None and jobs[0].checkpoint_s is None


def test_generic_csv_datetime_and_optional_columns(tmp_path: Path) -> None:
    f = write(
        tmp_path / "t.csv",
        "id,when,secs,n,cpu,mem,ck\nx,2024-01-02 03:04:05,60,1,4000,1024,600\n"
        "y,2024-01-02T03:04:06Z,60,1,4000,1024,\n",
    )
    cols = parse_columns(
        "submit=when,duration=secs,gpus=n,cpu=cpu,memory=mem,checkpoint=ck,name=id"
    )
    jobs = read_csv(f, cols, "datetime")
    expect = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert jobs[0].name == "x" and jobs[0].submit_s == expect
    assert jobs[1].submit_s == expect + 1
    assert jobs[0].cpu_m == 4000 and jobs[0].memory == 1024 * 1024 * 1024
    assert jobs[0].checkpoint_s == 600.0 and jobs[1].checkpoint_s is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("s,d,g\nabc,1,1\n", "column 's' must be a seconds time, got 'abc'"),
        ("s,d,g\n1,soon,1\n", "column 'd' must be a number of seconds, got 'soon'"),
        ("s,d,g\n1,1,1.5\n", "column 'g' must be a whole GPU count"),
    ],
)
def test_generic_csv_bad_values_name_row_and_column(tmp_path: Path, text: str, needle: str) -> None:
    f = write(tmp_path / "bad.csv", text)
    with pytest.raises(TraceError) as exc:
        read_csv(f, parse_columns("submit=s,duration=d,gpus=g"))
    assert needle in str(exc.value) and "row 2" in str(exc.value)


def test_column_mapping_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="missing gpus"):
        parse_columns("submit=a,duration=b")
    with pytest.raises(TraceError, match="unknown key 'size'"):
        parse_columns("submit=a,duration=b,gpus=c,size=d")
    with pytest.raises(TraceError, match="expected KEY=COLUMN"):
        parse_columns("submit,duration=b,gpus=c")
    f = write(tmp_path / "t.csv", "a,b\n1,2\n")
    with pytest.raises(TraceError, match=r"columns \['c'\] not in header"):
        read_csv(f, parse_columns("submit=a,duration=b,gpus=c"))
    with pytest.raises(TraceError, match="time-format"):
        read_csv(f, parse_columns("submit=a,duration=b,gpus=b"), "hours")


def test_openb_rule(tmp_path: Path) -> None:
    f = write(
        tmp_path / "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,12000,16384,1,460,,LS,Running,100,1100,150\n"
        "p1,6000,1024,0,0,,BE,Running,100,200,100\n"
        "p2,6000,1024,1,1000,,BE,Pending,100,200,\n"
        "p3,64000,8192,8,1000,,BE,Failed,50,80,60\n",
    )
    stats = TraceStats()
    jobs = read_openb_pods(f, stats)
    assert [(j.name, j.submit_s, j.duration_s, j.gpus, j.vc) for j in jobs] == [
        ("p3", 50.0, 20.0, 8, "BE"),
        ("p0", 100.0, 950.0, 1, "LS"),
    ]
    assert jobs[1].cpu_m == 12000 and jobs[1].memory == 16384 * 1024 * 1024
    assert stats.skipped == {"no GPUs": 1, "never scheduled": 1}


def test_select_window() -> None:
    from scheduler.sim.trace import TraceJob

    jobs = [TraceJob(f"j{i}", float(i), 1.0, 1) for i in range(10)]
    assert [j.name for j in select_window(jobs, 3, 4)] == ["j4", "j5", "j6"]
    assert len(select_window(jobs, None, 8)) == 2
    with pytest.raises(TraceError, match="--skip 10 leaves no jobs"):
        select_window(jobs, 3, 10)


@pytest.mark.skipif(not PHILLY.is_file(), reason="shared Philly trace not present")
def test_real_philly_head(tmp_path: Path) -> None:
    with PHILLY.open() as fh:
        head = [next(fh) for _ in range(201)]
    f = write(tmp_path / "head.csv", "".join(head))
    jobs = read_philly(f)
    rows = list(csv.DictReader(head))
    assert len(jobs) == 200
    by_time = sorted(rows, key=lambda r: r["timestamp"])
    first = jobs[0]
    assert first.duration_s == float(by_time[0]["duration"])
    assert first.gpus == int(by_time[0]["num_gpus"]) and first.vc == by_time[0]["cluster"]
    stamp = datetime.fromisoformat(by_time[0]["timestamp"]).replace(tzinfo=UTC).timestamp()
    assert first.submit_s == stamp
    assert all(a.submit_s <= b.submit_s for a, b in zip(jobs, jobs[1:], strict=False))
    # gpu_time = duration x GPUs in this trace: the reader's GPU count agrees with it
    gpu_time = {(r["timestamp"], r["duration"]): float(r["gpu_time"]) for r in rows}
    for j in jobs[:50]:
        when = datetime.fromtimestamp(j.submit_s, UTC).strftime("%Y-%m-%d %H:%M:%S")
        assert gpu_time[(when, f"{j.duration_s}")] == pytest.approx(j.gpus * j.duration_s)
