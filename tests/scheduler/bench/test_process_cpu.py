"""The e2e benchmark's per-process CPU clock: all threads, finer than clock ticks."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from scheduler.bench.e2e import process_cpu_s

# A child that spins 0.2 s of CPU in two threads (one exits before we read), then waits.
_SPIN = """
import sys, threading, time
def spin():
    end = time.thread_time() + 0.1
    while time.thread_time() < end:
        pass
threads = [threading.Thread(target=spin) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("spun", flush=True)
sys.stdin.read()
"""


def test_reads_another_process_cpu_including_exited_threads():
    child = subprocess.Popen(
        [sys.executable, "-c", _SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        first = process_cpu_s(child.pid)
        assert first >= 0.2  # both threads' 0.1 s, though they have exited
        ticks = psutil.Process(child.pid).cpu_times()
        assert abs(first - (ticks.user + ticks.system)) < 0.05  # the same quantity
        time.sleep(0.05)
        assert process_cpu_s(child.pid) - first < 0.01  # a blocked process uses ~none
        assert abs(first * 100 - round(first * 100)) > 1e-6  # not in whole 10 ms ticks
    finally:
        child.kill()
        child.wait()


def test_a_process_gone_raises_oserror():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(OSError):
        process_cpu_s(child.pid)
