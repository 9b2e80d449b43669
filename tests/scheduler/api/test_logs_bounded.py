"""Task logs are served in bounded memory: byte ranges, tails and whole 400 MB files are
streamed, never loaded (real uvicorn, real redis-server, a real 400 MB sparse file)."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from live import job_yaml

from scheduler.logpaths import job_log_dir

pytestmark = pytest.mark.integration

BIG = 400 << 20  # bytes
BOUND = 64 << 20  # the RSS rise allowed while serving it


def _log(env, job: str, role: str = "ps", index: int = 0):
    d = job_log_dir(env.share, job, env.store.get_job(job).uid)
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{role}-{index}.log"


class PeakRss:
    """The process's highest RSS (bytes) while the block runs, sampled every 5 ms (the
    API runs in this process, under uvicorn in a thread)."""

    def __enter__(self):
        self.proc = psutil.Process()
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    @property
    def rise(self) -> int:
        return self.peak - self.start


@pytest.fixture()
def big_log(api, http):
    """A 400 MB task log: a sparse hole of zeros ended by a newline, then 1000 numbered
    lines."""
    _, env = api
    http(env.alice).post("/api/v1/jobs", content=job_yaml("big"))
    path = _log(env, "big")
    tail = "".join(f"line {i}\n" for i in range(1000)).encode()
    with path.open("wb") as f:
        f.truncate(BIG - len(tail) - 1)
        f.seek(BIG - len(tail) - 1)
        f.write(b"\n" + tail)
    yield path, tail
    path.unlink()


def test_a_400_mb_log_streams_in_bounded_memory(api, http, big_log):
    _, env = api
    path, tail = big_log
    c = http(env.alice)
    got, last = 0, b""
    with PeakRss() as rss, c.stream("GET", "/api/v1/jobs/big/logs") as r:
        assert r.status_code == 200
        assert int(r.headers["x-log-size"]) == BIG
        for chunk in r.iter_bytes():
            got += len(chunk)
            last = (last + chunk)[-len(tail) :]
    assert got == BIG
    assert last == tail
    assert rss.rise < BOUND, f"RSS rose {rss.rise >> 20} MiB serving a {BIG >> 20} MiB log"


def test_tail_and_range_of_a_400_mb_log(api, http, big_log):
    _, env = api
    path, tail = big_log
    c = http(env.alice)
    with PeakRss() as rss:
        r = c.get("/api/v1/jobs/big/logs", params={"tail": 3})
        assert r.text == "line 997\nline 998\nline 999\n"
        r = c.get("/api/v1/jobs/big/logs", params={"tail": 1000})
        assert r.content == tail
        with c.stream("GET", "/api/v1/jobs/big/logs", params={"tail": 1001}) as r:
            assert sum(len(b) for b in r.iter_bytes()) == BIG  # the hole is one long line
        r = c.get("/api/v1/jobs/big/logs", params={"offset": BIG - 9, "limit": 5})
        assert r.content == b"line "
        r = c.get("/api/v1/jobs/big/logs", params={"offset": 1000, "limit": 4096})
        assert r.content == b"\0" * 4096
    assert rss.rise < BOUND, f"RSS rose {rss.rise >> 20} MiB"


def test_tail_range_and_follow_on_a_small_log(api, http):
    _, env = api
    c = http(env.alice)
    c.post("/api/v1/jobs", content=job_yaml("sm"))
    path = _log(env, "sm")
    path.write_bytes(b"one\ntwo\nthree")  # the last line has no newline yet
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 0}).text == ""
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 1}).text == "three"
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 2}).text == "two\nthree"
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 99}).text == "one\ntwo\nthree"
    assert c.get("/api/v1/jobs/sm/logs", params={"offset": 4, "limit": 3}).text == "two"
    assert c.get("/api/v1/jobs/sm/logs", params={"limit": 0}).text == ""
    # tail starts no earlier than offset: the last lines not seen yet
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 3, "offset": 5}).text == "wo\nthree"
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": 1, "offset": 2}).text == "three"
    assert c.get("/api/v1/jobs/sm/logs", params={"tail": -1}).status_code == 422
    env.store.transition("sm", "stopped", "test ends it")
    r = c.get("/api/v1/jobs/sm/logs", params={"follow": True, "tail": 1})
    assert r.text == "three"
    r = c.get("/api/v1/jobs/sm/logs", params={"follow": True, "limit": 6})
    assert r.text == "one\ntw"
