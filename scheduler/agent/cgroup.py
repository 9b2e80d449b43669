"""A cgroup per task for the process executor: its resident-memory limit and the unit that
stop and fencing kill.

A task's memory is limited the way a container runtime does it, never by address space
(a CUDA process reserves ~17 GiB of virtual memory at start and an NCCL one ~300 GB, so
RLIMIT_AS or ``ulimit -v`` breaks every GPU job; ``../shared/gpu/``): the task runs in a
cgroup of its own whose memory limit is the task's memory request, counted on resident
pages (page cache included, as in containers), no swap beyond it:

- cgroup v2 (``/sys/fs/cgroup/cgroup.controllers`` exists): ``memory.max`` and
  ``memory.swap.max`` = 0 in ``<agent's cgroup>/pasture/<task>``; needs the memory
  controller in the agent's ``cgroup.subtree_control``: either it is already enabled
  there (a cgroup delegated with it, e.g. systemd ``Delegate=memory``; a container
  runtime's cgroup with ``--cgroupns=private`` gives its container none, since that
  cgroup holds the container's processes), or the agent's cgroup is the hierarchy's true
  root, the only cgroup the kernel lets enable a controller while it holds processes (the
  no-internal-process rule, Documentation/admin-guide/cgroup-v2.rst, applies to the root
  of a cgroup namespace as to any non-root cgroup: enabling there fails with EBUSY; a
  namespaced agent would have to move its own processes into a leaf first, which this
  module does not do). The same directory is the kill unit (``cgroup.kill``, Linux >=
  5.14).
- cgroup v1 (or hybrid, as on the build machine and CI): ``memory.limit_in_bytes`` and,
  where swap accounting exists, ``memory.memsw.limit_in_bytes`` (the same value) in
  ``<memory mount>/<agent's memory cgroup>/pasture/<task>``; the kill unit is the unified
  (v2) hierarchy's ``<unified mount>/<agent's cgroup>/pasture/<task>`` when it has
  ``cgroup.kill``, else the memory cgroup itself (its ``cgroup.procs``, SIGKILLed until
  empty).

A task's shell joins its cgroups before the command runs (``echo 0 > .../cgroup.procs``), so
every process it starts is in them: ``setsid`` children, daemons, and the sessions the
task's own sshd forks for processes started over the job's ssh (MPI ranks). The lease
watchdog (the task's leader) stays outside, so its few MiB do not count against the task.

With systemd as PID 1 the executor uses ``systemd-run --scope`` instead (systemd owns the
cgroup tree there and only a transient unit is a supported way to get a limited cgroup
without ``Delegate=``; see :mod:`scheduler.agent.process`). Where neither can be had,
:func:`detect` says why, the node reports ``pasture.io/memory-limit: none`` and no limit is
pretended. Every function here raises :class:`CgroupError` (an OSError) on a failed write.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent import watchdog

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "pasture"
"""Name of the directory, under the agent's own cgroup, that holds the task cgroups."""


class CgroupError(OSError):
    """A task cgroup could not be made, limited, joined or read."""


@dataclass(frozen=True)
class CgroupSupport:
    """What this host lets the agent do with task cgroups (:func:`detect`).

    Attributes:
        memory: ``cgroup-v2``, ``cgroup-v1`` or ``none`` (no memory limit is enforced).
        memory_parent: directory under which task memory cgroups are made (None: none).
        kill_parent: directory under which the task's kill cgroup is made, when it is not
            the memory cgroup (the unified hierarchy beside v1 memory); None otherwise.
        reason: why ``memory`` is ``none`` (empty otherwise).
    """

    memory: str
    memory_parent: Path | None
    kill_parent: Path | None
    reason: str = ""

    @property
    def kill(self) -> str:
        """The kill unit: ``cgroup`` (every process in the task's cgroups) or
        ``process-tree`` (process group, session, descendants, environment marker)."""
        return "cgroup" if self.memory_parent or self.kill_parent else "process-tree"


def _own_paths(text: str) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) of this process from ``/proc/self/cgroup``'s text."""
    v2: str | None = None
    mem: str | None = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            mem = path
    return v2, mem


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise CgroupError(f"cannot write {text.strip()!r} to {path}: {exc}") from exc


def _probe(parent: Path, limit_file: str | None, need: str | None = None) -> None:
    """Make ``parent`` and a probe child in it (with a memory limit written when
    ``limit_file`` is given; the child must have the file ``need``), then remove the
    probe. Raises CgroupError."""
    try:
        parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}-{secrets.token_hex(3)}"
        probe.mkdir()
    except OSError as exc:
        raise CgroupError(f"cannot make a cgroup in {parent}: {exc}") from exc
    try:
        if need and not (probe / need).exists():
            raise CgroupError(f"cgroups in {parent} have no {need}")
        if limit_file:
            _write(probe / limit_file, str(1 << 40))
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _enable_memory(own: Path, parent: Path) -> None:
    """cgroup v2: the memory controller for the children of ``parent`` (a child of the
    agent's cgroup ``own``). Raises CgroupError naming what is missing."""
    if "memory" not in (own / "cgroup.controllers").read_text().split():
        raise CgroupError(f"the memory controller is not available in {own}")
    if "memory" not in (own / "cgroup.subtree_control").read_text().split():
        # refused (EBUSY) unless `own` is the hierarchy's true root (a cgroup namespace's
        # root is not): a cgroup with processes may not give controllers to its children
        # (cgroup v2's no-internal-process rule)
        _write(own / "cgroup.subtree_control", "+memory")
    parent.mkdir(exist_ok=True)
    if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
        _write(parent / "cgroup.subtree_control", "+memory")


def detect(root: Path = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> CgroupSupport:
    """Find where this agent can make task cgroups, by trying (a probe cgroup is made,
    limited and removed). Never raises: what does not work is ``none`` with the reason."""
    try:
        v2, mem = _own_paths(Path(proc_cgroup).read_text())
    except OSError as exc:
        return CgroupSupport("none", None, None, f"cannot read {proc_cgroup}: {exc}")
    unified = root if (root / "cgroup.controllers").exists() else root / "unified"
    kill_parent: Path | None = None
    if v2 is not None and (unified / "cgroup.procs").exists():
        try:  # cgroup.kill: Linux >= 5.14 (not in a hierarchy's root directory)
            kill_parent = unified / v2.lstrip("/") / PARENT
            _probe(kill_parent, None, "cgroup.kill")
        except CgroupError:
            kill_parent = None
    reasons: list[str] = []
    if unified == root and v2 is not None:  # pure cgroup v2
        own = root / v2.lstrip("/")
        try:
            _enable_memory(own, own / PARENT)
            _probe(own / PARENT, "memory.max")
            return CgroupSupport("cgroup-v2", own / PARENT, None)
        except (CgroupError, OSError) as exc:
            reasons.append(f"cgroup v2 memory: {exc}")
    if mem is not None and (root / "memory").is_dir():
        parent = root / "memory" / mem.lstrip("/") / PARENT
        try:
            _probe(parent, "memory.limit_in_bytes")
            return CgroupSupport("cgroup-v1", parent, kill_parent)
        except CgroupError as exc:
            reasons.append(f"cgroup v1 memory: {exc}")
    if not reasons:
        reasons.append(f"no memory cgroup hierarchy under {root}")
    return CgroupSupport("none", None, kill_parent, "; ".join(reasons))


def create(support: CgroupSupport, name: str, memory: int) -> list[str]:
    """Make the cgroups of one task (``<parent>/<name>-<random>``) and limit its memory to
    ``memory`` bytes where ``support`` allows. Returns the directories, memory cgroup first
    (empty when there is no cgroup at all). Raises CgroupError (what was made is removed)."""
    suffix = secrets.token_hex(4)
    made: list[str] = []
    try:
        if support.memory_parent is not None:
            d = support.memory_parent / f"{name}-{suffix}"
            d.mkdir()
            made.append(str(d))
            if support.memory == "cgroup-v2":
                _write(d / "memory.max", str(memory))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            else:
                _write(d / "memory.limit_in_bytes", str(memory))
                if (d / "memory.memsw.limit_in_bytes").exists():
                    _write(d / "memory.memsw.limit_in_bytes", str(memory))
        if support.kill_parent is not None and support.kill_parent != support.memory_parent:
            d = support.kill_parent / f"{name}-{suffix}"
            d.mkdir()
            made.append(str(d))
    except OSError as exc:
        remove(made)
        if isinstance(exc, CgroupError):
            raise
        raise CgroupError(f"cannot make the task's cgroup: {exc}") from exc
    return made


def join_script(dirs: list[str]) -> str:
    """Shell lines (``/bin/sh``) that move the shell running them into ``dirs`` (exit 125
    with a message when a cgroup cannot be joined); empty without cgroups."""
    lines: list[str] = []
    for d in dirs:
        procs = f"{d}/cgroup.procs".replace("'", "'\\''")
        lines.append(
            f"echo 0 > '{procs}' || {{ echo 'pasture: cannot join the task cgroup {d}' >&2;"
            " exit 125; }"
        )
    return "\n".join(lines)


def oom_killed(dirs: list[str]) -> bool:
    """Whether the kernel's OOM killer killed a process of the task's memory cgroup:
    ``oom_kill`` in ``memory.events`` (v2) or ``memory.oom_control`` (v1, Linux >= 4.13)."""
    for d in dirs:
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (Path(d) / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                    return True
    return False


def remove(dirs: list[str], wait_s: float = 5.0) -> None:
    """Kill what is left in the task's cgroups (bounded by ``wait_s``) and remove them;
    directories already gone are fine. Raises CgroupError when one stays busy."""
    if not dirs:
        return
    watchdog.kill_task(dirs, 0, None, wait_s)
    for d in reversed(dirs):
        with contextlib.suppress(FileNotFoundError):
            try:
                os.rmdir(d)
            except OSError as exc:
                raise CgroupError(f"cannot remove cgroup {d}: {exc}") from exc


def kernel_oom_killed(cgroup_pattern: str) -> bool:
    """Whether the kernel log (``dmesg``; root or ``kernel.dmesg_restrict=0``) has an
    ``oom-kill:`` line with the regex ``cgroup_pattern`` after ``oom_memcg=`` (a
    container's ``libpod-<id>``, a systemd scope's ``pasture-<task>.scope``). Reads the
    last 5,000 lines; False when unreadable."""
    try:
        out = subprocess.run(
            ["dmesg"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    rx = re.compile(r"oom-kill:.*\boom_memcg=\S*" + cgroup_pattern)
    return any(rx.search(line) for line in out.splitlines()[-5000:])
