"""The failure classifier on real failure logs: failures produced here by real processes
(Python exception, missing command, not executable, signals, the process executor's memory
limit) and PyTorch outputs recorded on GPU machines (tests/fixtures/diagnosis/SOURCES.md).
The container OOM kill and the agent round trip are in tests/scheduler/agent/."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.rules.diagnosis import (
    TAIL_BYTES,
    RulesError,
    diagnose,
    diagnose_report,
    diagnose_task,
    diagnosis_text,
    load_rules,
    parse_rules,
    read_tail,
    rules_for,
)
from scheduler.spec.model import RetrySpec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "diagnosis"


def run(tmp_path: Path, script: str, **kw) -> tuple[int, str]:
    """Run ``script`` with /bin/sh as the process executor would, output to a log file;
    returns (exit code as a shell reports it, log path)."""
    log = tmp_path / "task.log"
    with open(log, "ab") as f:
        p = subprocess.run(["/bin/sh", "-c", script], stdout=f, stderr=subprocess.STDOUT, **kw)
    return p.returncode if p.returncode >= 0 else 128 - p.returncode, str(log)


def test_real_python_exception_gives_the_last_traceback_line(tmp_path):
    code, log = run(
        tmp_path,
        f"{sys.executable} -c \"import json; json.loads('{{not json')\"",
    )
    d = diagnose(code, read_tail(log))
    assert code == 1
    assert d.kind == "python_exception" and d.retry is False
    assert d.summary.startswith("Python exception: json.decoder.JSONDecodeError: Expecting")


def test_chained_exceptions_report_the_last_one(tmp_path):
    prog = (
        "try:\n    {}['k']\nexcept KeyError as e:\n    raise RuntimeError('config broken') from e"
    )
    code, log = run(tmp_path, f'{sys.executable} -c "{prog}"')
    d = diagnose(code, read_tail(log))
    assert d.kind == "python_exception"
    assert d.summary == "Python exception: RuntimeError: config broken"


def test_real_missing_command(tmp_path):
    code, log = run(tmp_path, "echo starting; no-such-program-pasture --flag")
    d = diagnose(code, read_tail(log))
    assert code == 127
    assert d.kind == "command_not_found" and not d.retry
    assert "no-such-program-pasture" in d.summary


def test_real_not_executable(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    code, log = run(tmp_path, str(script))
    d = diagnose(code, read_tail(log))
    assert code == 126
    assert d.kind == "not_executable" and "Permission denied" in d.summary


def test_real_missing_file_without_traceback(tmp_path):
    code, log = run(tmp_path, "cat /no/such/dataset.csv")
    d = diagnose(code, read_tail(log))
    assert code == 1
    assert d.kind == "file_missing" and "/no/such/dataset.csv" in d.summary


@pytest.mark.parametrize(
    "sig, kind, retry", [("TERM", "signal", True), ("SEGV", "program_crash", False)]
)
def test_real_signal_deaths(tmp_path, sig, kind, retry):
    code, log = run(tmp_path, f"echo working; kill -{sig} $$")
    d = diagnose(code, read_tail(log))
    assert code > 128
    assert (d.kind, d.retry) == (kind, retry)
    assert f"SIG{sig}" in d.summary


def test_real_memory_limit_of_the_process_executor(tmp_path):
    """The process executor limits a task's resident memory by its cgroup: past the limit
    the kernel's OOM killer ends it (exit 137) and the cgroup's oom_kill count is the
    executor's evidence. No address-space limit, so a MemoryError is just a Python error."""
    import dataclasses

    from scheduler.agent.cgroup import detect
    from scheduler.agent.process import ProcessExecutor
    from tests.scheduler.agent.test_process_executor import launch, wait_exit

    if (why := detect()).memory == "none":
        pytest.skip(f"no writable memory cgroup for tasks on this machine: {why.reason}")
    ex = ProcessExecutor(limits="cgroup")
    la = launch(tmp_path, f"echo working; {sys.executable} -c 'b = bytearray(512 * 2**20)'")
    h = ex.start(dataclasses.replace(la, memory=128 * 2**20))
    code = wait_exit(ex, h, timeout=60)
    evidence = ex.evidence(h)
    ex.cleanup(h)
    d = diagnose(code, read_tail(la.log_path), evidence=evidence)
    assert code == 137 and evidence == {"memory_limit": why.memory, "oom_killed": True}
    assert d.kind == "oom_killed" and d.retry is False
    assert "OOM killer" in d.summary
    # without the evidence the same exit is a signal death, not a memory diagnosis
    assert diagnose(code, read_tail(la.log_path)).kind != "oom_killed"
    # a MemoryError without an OOM kill is the program's own error
    assert diagnose(1, "MemoryError", evidence={"memory_limit": why.memory}).kind != "oom_killed"


@pytest.mark.parametrize(
    "fixture, kind, retry, needle",
    [
        ("torch_cuda_oom.log", "cuda_oom", False, "Tried to allocate 496.00 MiB"),
        ("torch_cuda_oom_runtimeerror.log", "cuda_oom", False, "Tried to allocate 92.00 MiB"),
        ("torch_nccl_system_error.log", "nccl_error", True, "ncclSystemError"),
        ("torch_nccl_watchdog_timeout.log", "nccl_error", True, "OpType=ALLREDUCE"),
    ],
)
def test_recorded_pytorch_failures(fixture, kind, retry, needle):
    d = diagnose(1, read_tail(FIXTURES / fixture))
    assert (d.kind, d.retry) == (kind, retry)
    assert needle in d.summary


def test_container_oom_evidence_wins_over_the_exit_code():
    assert diagnose(137, "", evidence={"oom_killed": True}).kind == "oom_killed"
    assert diagnose(137, "", evidence={"oom_killed": False}).kind == "signal"


def test_node_lost_preempted_and_stopped_records():
    lost = {"state": "lost", "exit_code": None, "message": "node n3 lost"}
    assert diagnose_task(lost).kind == "node_lost"
    pre = {"state": "stopped", "exit_code": 143, "message": "stopped (preempted by job big)"}
    assert diagnose_task(pre).kind == "preempted"
    user = {"state": "stopped", "exit_code": 143, "message": "stopped (stop requested)"}
    assert diagnose_task(user) is None
    assert diagnose_task({"state": "succeeded", "exit_code": 0}) is None
    stored = {"state": "failed", "diagnosis": {"kind": "cuda_oom", "summary": "s", "retry": False}}
    assert diagnose_task(stored).kind == "cuda_oom"
    assert diagnosis_text(stored) == "cuda_oom: s (retry will not help)"


def test_start_failure_from_the_message():
    d = diagnose(None, "", message="could not start: podman run failed: Error: image not known")
    assert d.kind == "image_missing" and not d.retry


def test_the_tail_is_bounded(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "w") as f:
        f.write("Traceback (most recent call last):\nValueError: early\n")
        f.write("x" * (2 * TAIL_BYTES) + "\n")
    tail = read_tail(log)
    assert len(tail.encode()) <= TAIL_BYTES and "ValueError" not in tail
    assert diagnose(1, tail).kind == "exit_code"
    assert read_tail(tmp_path / "missing.log") == ""


def test_operator_rules_come_first_and_reach_the_report(tmp_path):
    extra = tmp_path / "rules.yaml"
    extra.write_text(
        "version: 1\nrules:\n"
        "  - kind: dataloader_killed\n"
        "    summary: 'a DataLoader worker died: {detail}'\n"
        "    retry: true\n"
        "    match:\n"
        "      - log: '(?P<detail>DataLoader worker \\(pid \\d+\\) is killed by signal: \\w+)'\n"
    )
    log = tmp_path / "t.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.\n"
    )
    d = diagnose_report(log, 1, "exited with code 1", None, extra)
    assert d["kind"] == "dataloader_killed" and d["retry"] is True
    assert (
        d["summary"]
        == "a DataLoader worker died: DataLoader worker (pid 4242) is killed by signal: Killed"
    )
    # shipped rules alone: a Python exception
    assert diagnose_report(log, 1)["kind"] == "python_exception"
    assert [r.kind for r in rules_for(str(extra))][0] == "dataloader_killed"


def test_a_broken_operator_file_falls_back_to_the_shipped_rules(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - kind: x\n    retry: true\n    match: [{log: '(unclosed'}]\n")
    with pytest.raises(RulesError, match=r"rules\[0\]\.match\[0\]\.log: not a valid regex"):
        load_rules(bad)
    assert diagnose_report(None, 127)["kind"] == "command_not_found"
    assert diagnose_report(None, 127, extra_rules=bad)["kind"] == "command_not_found"


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"rules": [{"kind": "Bad-Name", "retry": True, "match": [{"exit_codes": [1]}]}]}, "kind"),
        ({"rules": [{"kind": "a", "retry": "yes", "match": [{"exit_codes": [1]}]}]}, "retry"),
        ({"rules": [{"kind": "a", "retry": True, "match": []}]}, "match"),
        ({"rules": [{"kind": "a", "retry": True, "match": [{"exit_code": 1}]}]}, "exit_code"),
        ({"rules": [{"kind": "a", "retry": True, "match": [{"exit_codes": "1"}]}]}, "exit_codes"),
        ({"rules": [{"kind": "a", "retry": True, "match": [{"exit_code_range": [1]}]}]}, "range"),
        ({"rule": []}, "rules"),
    ],
)
def test_malformed_rules_name_the_field(doc, field):
    with pytest.raises(RulesError, match=field):
        parse_rules(doc, "x.yaml")


def test_every_shipped_rule_is_reachable():
    """Each shipped class is produced by some input (no dead rules)."""
    kinds = {r.kind for r in rules_for()}
    seen = {
        diagnose(None, "", state="lost").kind,
        diagnose(143, "", state="stopped", message="preempted").kind,
        diagnose(137, "", evidence={"oom_killed": True}).kind,
        diagnose(1, read_tail(FIXTURES / "torch_cuda_oom.log")).kind,
        diagnose(1, read_tail(FIXTURES / "torch_nccl_system_error.log")).kind,
        diagnose(1, "RuntimeError: CUDA error: uncorrectable ECC error encountered").kind,
        diagnose(125, "Error: docker.io/library/nope: image not known").kind,
        diagnose(127, "").kind,
        diagnose(126, "").kind,
        diagnose(126, "pasture: working_dir /data/x does not exist").kind,
        diagnose(1, "Traceback (most recent call last):\nKeyError: 'x'").kind,
        diagnose(2, "python3: can't open file '/x.py': [Errno 2] No such file or directory").kind,
        diagnose(139, "").kind,
        diagnose(143, "").kind,
        diagnose(None, "", message="cannot write to the cluster share at /mnt: EIO").kind,
        diagnose(None, "", message="could not start: code_dir 'c': no such directory").kind,
        diagnose(125, "", evidence={"k8s_reason": "Pending", "k8s_not_running": True}).kind,
        diagnose(3, "").kind,
        # the kubernetes executor's evidence (tests/scheduler/agent/test_kubernetes_start.py)
        *(
            diagnose(125, "", evidence={"k8s_reason": r}).kind
            for r in (
                "ImagePullBackOff",
                "InvalidImageName",
                "CreateContainerConfigError",
                "Evicted",
                "UnexpectedAdmissionError",
                "TerminationByKubelet",
                "OutOfcpu",
            )
        ),
    }
    assert seen == kinds


def test_retry_on_acts_on_the_class():
    r = RetrySpec(max_attempts=3, retry_on=["node_lost", "nccl_error"])
    assert r.retryable(1, "nccl_error") and not r.retryable(1, "cuda_oom")
    assert r.retryable(None, None)  # infrastructure failures always retry
    assert not r.retryable(1, None)
    both = RetrySpec(max_attempts=3, retry_on=["nccl_error"], retry_on_exit_codes=[42])
    assert both.retryable(42, "exit_code") and not both.retryable(1, "exit_code")
    # without retry_on, the class does not matter (exit-code rules as before)
    assert RetrySpec(max_attempts=2).retryable(1, "cuda_oom")


def test_read_tail_reads_no_link_or_fifo_a_task_planted(tmp_path):
    logs = tmp_path / "share" / "jobs" / "j" / "logs"
    logs.mkdir(parents=True)
    secret = tmp_path / "agent.password"
    secret.write_text("CUDA out of memory SECRET\n")
    (logs / "w-0.log").write_text("plain\n")
    assert read_tail(logs / "w-0.log") == "plain\n"
    os.symlink(secret, logs / "w-1.log")
    os.link(secret, logs / "w-2.log")
    os.mkfifo(logs / "w-3.log")  # would block an agent that opened it for reading
    for i in (1, 2, 3):
        assert read_tail(logs / f"w-{i}.log") == ""
    os.symlink(tmp_path, tmp_path / "share" / "jobs" / "k")  # a linked job directory
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "w-0.log").write_text("other\n")
    assert read_tail(tmp_path / "share" / "jobs" / "k" / "logs" / "w-0.log") == ""
