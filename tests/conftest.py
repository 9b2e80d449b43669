"""Shared fixtures: a real redis-server on a free port in a temp dir; a session-end check
that no process a test started (directly or through a dev cluster's agents) is left; and the
groups that keep tests correct when pytest-xdist runs them on several workers.

Parallel runs (``make test-python``: ``-n N --dist loadgroup``, issue 33): tests with the
same ``xdist_group`` run on one worker, one after another; the rest go to any worker.
- A test that uses a module- or class-scoped fixture (a dev cluster, a Pulumi program, a
  built image, a browser) is grouped with its module, so that fixture is set up once, as in
  a serial run, not once per worker (:func:`pytest_collection_modifyitems`).
- Tests that run containers with the real podman and the base image are marked
  ``xdist_group("podman")`` in their files: one at a time, as before.
- Tests marked ``serial`` (chaos and fault rounds whose leases are scaled down to seconds;
  schemathesis' items, which share one node id) are left out of the parallel run and run
  after it, alone (``make test-python``).
Each worker is its own session: it starts its own redis-server and its leftover check
(:func:`no_leftover_processes`) looks only for the processes of that worker's tests.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator

# The CLI's Rich consoles fix their width from COLUMNS when they are created (at import):
# pytest-xdist workers start with COLUMNS=80 and LINES=24 in their environment, which would
# pin every CLI test's output to 80 columns whatever the test sets. Without them the width
# is read when output is written, as in a serial run (the CLI tests set COLUMNS themselves).
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

import psutil  # noqa: E402
import pytest  # noqa: E402

from scheduler.dev import redis_server as redis_server_process  # noqa: E402

# Every process started during the session inherits this variable (the process executor
# drops only PASTURE_* and REDIS* from a task's environment), so leftovers can be found
# even after they were re-parented to init.
MARK = "PYTEST_PASTURE_SESSION"
LEFTOVER_GRACE_S = 20.0
"""Seconds a leftover may take to exit by itself at session end (a task's lease watchdog
kills it when its agent's lease, 3 heartbeats of the test's agent, runs out)."""


# Container runtime helpers that outlive the CLI call that started them by design (podman's
# pause process, per-container monitors, network helpers): not the tests' processes.
RUNTIME_HELPERS = frozenset(
    {"conmon", "catatonit", "podman", "aardvark-dns", "slirp4netns", "pasta", "rootlessport"}
)


def _marked(mark: str) -> list[psutil.Process]:
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["pid", "status", "name"]):
        if p.info["pid"] == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if p.info["name"] in RUNTIME_HELPERS:
            continue
        try:
            if p.environ().get(MARK) == mark:
                out.append(p)
        except psutil.Error:
            continue
    return out


_SHARED_SCOPES = frozenset({"module", "class", "package"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group (``xdist_group``) each test that uses a module-, class- or package-scoped
    fixture with the other tests of its module, unless the test names a group itself.

    Runs before pytest-xdist turns the marks into the node ids its ``loadgroup`` scheduler
    reads (``tryfirst``); without ``-n`` the mark changes nothing.

    First, tests that share a node id stop the run unless marked ``serial``: pytest-xdist
    schedules by id, so of schemathesis' items (one per API operation, all with their
    function's id) only one ran under ``-n`` (:class:`pytest.UsageError`)."""
    _unique_node_ids(items)
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs}
        if scopes & _SHARED_SCOPES:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _unique_node_ids(items: list[pytest.Item]) -> None:
    counts = Counter(item.nodeid for item in items if item.get_closest_marker("serial") is None)
    shared = sorted(n for n, c in counts.items() if c > 1)
    if shared:
        raise pytest.UsageError(
            f"tests share node ids, so pytest-xdist would run one of each: {shared}; "
            "mark them serial (make test-python runs those without xdist)"
        )


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Fail the session when a process started by a test outlives the session (after
    :data:`LEFTOVER_GRACE_S`); the leftovers are killed and named in the error."""
    mark = os.environ.setdefault(MARK, uuid.uuid4().hex)
    yield
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = _marked(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _marked(mark)
    if not left:
        return
    names = []
    for p in left:
        try:
            names.append(f"{p.pid}: {' '.join(p.cmdline())[:160]}")
            p.kill()
        except psutil.Error:
            continue
    if names:
        pytest.fail("processes left running by the tests (killed now):\n" + "\n".join(names))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real redis-server private to this test session (flushed per test: use
    ``redis_url``)."""
    with redis_server_process(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture()
def redis_url(redis_server: str) -> str:
    """The session's redis-server, flushed before the test."""
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    return redis_server
