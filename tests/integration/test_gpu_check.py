"""scripts/gpu-check.sh (scheduler/gpu_check/) without a GPU: its comparison logic on the
figures the H200 run measured (../shared/gpu/), its hard step limits, and the script itself
on a real process-mode cluster replaying the H200's recorded NVML answers: cluster start,
NVML detection, the queueing check on the replayed GPU, the JSON summary, and every check
that needs a device skipped with its reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from scheduler import gpu_check
from scheduler.gpu_check import (
    Skip,
    Summary,
    compare_gpu_metrics,
    parse_nvidia_smi,
    pasture_gpu_figures,
    run_step,
)

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "nvml" / "h200_recorded.json"
MIB = 1 << 20
GPU_CHECKS = ("one_gpu_job", "metrics", "nccl_world1", "nccl_world2", "torch_ddp")

# /metrics of the H200 run while job A ran (pasture at 641b20a: NVML v1 memory)
METRICS_V1 = f"""\
# HELP pasture_gpu_utilisation_ratio GPU utilisation.
# TYPE pasture_gpu_utilisation_ratio gauge
pasture_gpu_utilisation_ratio{{gpu="0",node="dev-node-0"}} 0.99
# HELP pasture_gpu_memory_used_bytes GPU memory in use (NVML), bytes.
# TYPE pasture_gpu_memory_used_bytes gauge
pasture_gpu_memory_used_bytes{{gpu="0",node="dev-node-0"}} {1935540224.0}
pasture_gpu_memory_used_bytes{{gpu="0",node="other"}} 0.0
"""


def test_h200_memory_figures_v1_differ_from_nvidia_smi_v2_match():
    smi = parse_nvidia_smi("0, 99, 1231\n")
    assert smi == {0: {"util_percent": 99.0, "memory_used_mib": 1231.0}}
    ours = pasture_gpu_figures(METRICS_V1, "dev-node-0")
    assert ours == {0: {"util_percent": 99.0, "memory_used_mib": 1935540224 / MIB}}  # 1845.9
    problems = compare_gpu_metrics(ours, smi)
    assert problems == [
        "GPU 0 memory_used_mib: pasture 1846 MiB, nvidia-smi 1231 MiB (tolerance 64 MiB)"
    ]
    # the v2 figure (what the agent reports now) matches; utilisation moves a little
    v2 = {0: {"util_percent": 100.0, "memory_used_mib": 1231.0}}
    assert compare_gpu_metrics(v2, smi) == []
    assert compare_gpu_metrics({}, smi) == ["GPUs differ: pasture [], nvidia-smi [0]"]
    with pytest.raises(ValueError, match="expected 'index, util %, MiB'"):
        parse_nvidia_smi("0, 99")


def test_each_step_has_a_hard_limit_and_skips_and_failures_say_why():
    summary = Summary("none", "2026-11-26T00:00:00Z")
    t0 = time.monotonic()
    hung = run_step(summary, "hung", lambda: time.sleep(30) or {}, timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    assert (hung.status, hung.reason) == ("fail", "step ran past its limit of 0.5 s")

    def skipped() -> dict[str, object]:
        raise Skip("no GPU")

    def broken() -> dict[str, object]:
        raise AssertionError("CUDA_VISIBLE_DEVICES='0'")

    run_step(summary, "skipped", skipped, 5)
    run_step(summary, "broken", broken, 5)
    run_step(summary, "fine", lambda: {"x": 1}, 5)
    out = summary.to_dict()
    assert out["passed"] is False
    assert out["failed_checks"] == ["hung", "broken"]
    assert out["skipped_checks"] == ["skipped"]
    assert out["checks"]["skipped"]["reason"] == "no GPU"
    assert out["checks"]["fine"] == {
        "status": "pass",
        "seconds": 0.0,
        "reason": "",
        "details": {"x": 1},
    }


def _run_script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")}
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--out", str(out), "--step-timeout", "90", *args],
        cwd=REPO,
        env={**env, "PASTURE_GPU_CHECK_LIMIT": "400"},
        capture_output=True,
        text=True,
        timeout=450,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_script_on_a_replayed_h200(tmp_path):
    proc, summary = _run_script(tmp_path, "--nvml-recording", str(H200))
    checks = summary["checks"]
    assert summary["mode"] == "replay" and summary["gpus"]["model"] == "NVIDIA H200"
    assert checks["nvml"]["status"] == "pass"
    assert checks["cluster"]["status"] == "pass", checks["cluster"]
    assert checks["cluster"]["details"]["gpu"] == 1
    assert checks["queueing"]["status"] == "pass", checks["queueing"]
    assert "needs 1 GPU" in checks["queueing"]["details"]["pending_reason"]
    assert checks["queueing"]["details"]["started_after_release_s"] >= 0
    for name in GPU_CHECKS:
        assert checks[name] == {
            "status": "skip",
            "seconds": 0.0,
            "reason": "replayed NVML answers: no device to run on",
            "details": {},
        }, name
    # the process executor isolates a 0-GPU task (issue 24)
    zero = checks["zero_gpu_job"]
    assert zero["status"] == "pass", zero
    assert zero["details"]["CUDA_VISIBLE_DEVICES"] == ""
    assert zero["details"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # issue 35 item 12: the check asserts the task's memory limit equals its request
    assert zero["details"]["memory_limit_bytes"] == 1 << 30
    assert summary["passed"] and summary["failed_checks"] == [], summary["failed_checks"]
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_script_without_a_gpu_skips_the_gpu_checks_naming_why(tmp_path):
    if gpu_check.detect(None)[0] != "none":
        pytest.skip("this host has a GPU")
    proc, summary = _run_script(tmp_path)
    checks = summary["checks"]
    assert summary["mode"] == "none"
    assert summary["gpus"] == {"count": 0, "model": None, "models": {}, "heterogeneous": False}
    assert checks["cluster"]["status"] == "pass" and checks["cluster"]["details"]["gpu"] == 0
    assert checks["zero_gpu_job"]["status"] == "pass", checks["zero_gpu_job"]
    assert summary["passed"] and proc.returncode == 0, proc.stdout[-3000:]
    why = "no NVIDIA GPU on this host (NVML found none)"
    assert checks["nvml"]["reason"] == why
    assert checks["queueing"]["reason"].startswith(why)
    for name in ("nvml", "queueing", *GPU_CHECKS):
        assert checks[name]["status"] == "skip", name
    require = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--require-gpu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert require.returncode == 2 and "no GPU here" in require.stderr


def test_metrics_of_a_replayed_h200_match_what_nvidia_smi_showed(tmp_path):
    """The whole path of the metrics check: the agent reads NVML (the H200's recording with
    the utilisation and both memory answers of the run's job A added), its heartbeat, the
    API's /metrics, and the comparison with nvidia-smi's line of that moment."""
    from scheduler.agent.resources import NVML_MEMORY_V2

    recording = json.loads(H200.read_text())
    total = 143771 * MIB
    recording["devices"][0].update(
        {
            "nvmlDeviceGetUtilizationRates": {"gpu": 99, "memory": 35},
            "nvmlDeviceGetMemoryInfo": {"total": total, "free": 0, "used": 1935540224},
            f"nvmlDeviceGetMemoryInfo/{NVML_MEMORY_V2}": {
                "version": NVML_MEMORY_V2,
                "total": total,
                "reserved": 615 * MIB,
                "free": total - 1846 * MIB,
                "used": 1231 * MIB,
            },
        }
    )
    path = tmp_path / "h200-busy.json"
    path.write_text(json.dumps(recording))
    h = gpu_check.Harness(tmp_path, path)
    try:
        h.up(timeout_s=60)
        deadline = time.monotonic() + 30
        while not (ours := pasture_gpu_figures(h.client.request("GET", "/metrics"), h.node)):
            assert time.monotonic() < deadline, "no per-GPU metrics after 30 s"
            time.sleep(0.5)
    finally:
        h.down()
    assert ours == {0: {"util_percent": 99.0, "memory_used_mib": 1231.0}}
    assert compare_gpu_metrics(ours, parse_nvidia_smi("0, 99, 1231")) == []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_killed_at_its_limit_the_script_writes_its_summary_and_stops_redis(tmp_path):
    """Issue 35 item 12: killed at its limit the script wrote no JSON and a SIGTERM during
    its cleanup left redis-server running. Here the limit's SIGTERM lands while the
    queueing check holds the (replayed) GPU, and a second SIGTERM follows during cleanup."""
    out = tmp_path / "summary.json"
    log = tmp_path / "stdout.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PASTURE_")}
    args = ["--out", str(out), "--step-timeout", "200", "--hold", "300"]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "scripts/gpu-check.sh", *args, "--nvml-recording", str(H200)],
            cwd=REPO,
            env={**env, "PASTURE_GPU_CHECK_LIMIT": "400"},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        while not (out.exists() and "cluster" in json.loads(out.read_text())["checks"]):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        cluster = json.loads(out.read_text())["checks"]["cluster"]
        assert cluster["status"] == "pass", cluster
        work = Path(re.search(r"work dir (\S+)", log.read_text()).group(1))
        pids = json.loads((work / "dev" / "state.json").read_text())["_procs"]
        redis = pids["redis"]["pid"]
        assert _alive(redis)
        time.sleep(2)  # the queueing check's holder runs now
        proc.terminate()  # what `timeout` sends at the limit (bash exec'd it: same pid)
        time.sleep(0.3)
        if proc.poll() is None:
            proc.terminate()  # a second one, during the cleanup
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(out.read_text())
    assert summary["interrupted"] == "SIGTERM", log.read_text()[-2000:]
    assert summary["passed"] is False and proc.returncode == 128 + 15
    assert summary["checks"]["cluster"]["status"] == "pass"
    assert not work.exists()
    deadline = time.monotonic() + 10
    while any(_alive(p["pid"]) for p in pids.values()):
        left = {k: p["pid"] for k, p in pids.items() if _alive(p["pid"])}
        assert time.monotonic() < deadline, f"processes of the run still running: {left}"
        time.sleep(0.2)


def test_the_script_refuses_an_interpreter_that_cannot_import_scheduler(tmp_path):
    """Issue 35 item 12: a torch interpreter without pasture failed every task with a
    misleading message; the script now checks it first, from outside the repository."""
    bare = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--out", str(tmp_path / "s.json")],
        cwd=REPO,
        env={**os.environ, "PASTURE_GPU_CHECK_PYTHON": str(bare / "bin" / "python")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot import scheduler outside the repository" in proc.stderr
    assert "pip install -e ." in proc.stderr


def test_metrics_check_needs_utilisation_to_rise_under_its_load():
    """Issue 35 item 12: the metrics check passed comparing an idle GPU with an idle GPU
    when its load job had failed; the rise over idle is now its precondition."""
    idle = {0: {"util_percent": 0.0, "memory_used_mib": 0.0}, 1: {"util_percent": 3.0}}
    still_idle = {0: {"util_percent": 2.0}, 1: {"util_percent": 4.0}}
    gpu, problems = gpu_check.utilisation_rise(idle, still_idle)
    assert problems and "did not rise under load" in problems[0]
    loaded = {0: {"util_percent": 1.0}, 1: {"util_percent": 99.0}}
    assert gpu_check.utilisation_rise(idle, loaded) == (1, [])
    assert gpu_check.utilisation_rise(idle, {})[1] == [
        "no GPU utilisation was measured during the load"
    ]


def test_a_task_reads_its_own_cgroup_memory_limit(tmp_path):
    """The probe behind the memory-limit precondition, on v2 and v1 layouts."""
    v2 = tmp_path / "pasture" / "t1"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("1073741824\n")
    assert gpu_check.memory_limit_bytes("0::/pasture/t1\n", tmp_path) == 1 << 30
    (v2 / "memory.max").write_text("max\n")
    assert gpu_check.memory_limit_bytes("0::/pasture/t1\n", tmp_path) is None
    v1 = tmp_path / "memory" / "a" / "pasture" / "t2"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(16 << 30))
    text = "12:memory:/a/pasture/t2\n1:name=systemd:/\n0::/x\n"
    assert gpu_check.memory_limit_bytes(text, tmp_path) == 16 << 30
    with pytest.raises(gpu_check.CheckFailed, match="memory limit is None bytes"):
        gpu_check.check_memory_limit({"memory_limit_bytes": None}, 1 << 30)


def test_mixed_gpus_are_reported_per_index(tmp_path):
    """Issue 35 item 12: detection reported only GPU 0's model; a host with an H200 and an
    L4 (a recording of the H200's answers plus a second device) is reported per index."""
    h200 = json.loads(H200.read_text())
    second = {**h200["devices"][0], "nvmlDeviceGetName": "NVIDIA L4"}
    recording = tmp_path / "mixed.json"
    recording.write_text(json.dumps({"devices": [h200["devices"][0], second]}))
    mode, gpus = gpu_check.detect(recording)
    assert mode == "replay" and gpus["count"] == 2
    assert gpus["models"] == {"0": "NVIDIA H200", "1": "NVIDIA L4"}
    # a node of mixed models has no one model (a job asking for a model gets only it)
    assert gpus["heterogeneous"] is True and gpus["model"] is None
    _, same = gpu_check.detect(H200)
    assert same["models"] == {"0": "NVIDIA H200"} and same["heterogeneous"] is False
