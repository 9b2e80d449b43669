"""Each tenant's Unix identity on the nodes: the user and group a VC's tasks run as.

A VC (virtual cluster) is a tenant, and a tenant's task is an attacker of every other
tenant (docs/ARCHITECTURE.md, "Tenancy where tasks run"), so the tasks of each VC run as a
Unix user of their own, whose job directories on the share are owned by it and closed to
the others: the kernel refuses what a mount would not hide.

Names and numbers are computed from the VC's name alone, so every node (the
``pasture_node`` role, ``pasture dev up``) makes the same user with the same uid without a
registry, and a share (NFS, SMB with unix extensions) sees one owner:

- user and group name: ``pasture-<vc>`` when the VC's name is a valid Debian user name of
  at most 24 characters (``[a-z0-9][a-z0-9_-]*``), else ``pasture-<up to 14 of its
  characters, lowercased, others as _>-<8 hex digits of its SHA-256>`` (<= 32 characters);
- uid = gid = :data:`UID_BASE` + slot * :data:`ID_RANGE`, slot = (first 8 bytes of SHA-256
  of the name) mod :data:`SLOTS`: the first id of a range of :data:`ID_RANGE` ids that
  belongs to the VC alone (:func:`id_range`), in [2^30, 2^31): above the ids ``useradd``
  and ``/etc/subuid`` hand out (Debian's defaults end at 600,100,000) and below 2^31
  (software that stores a uid in a signed int). A container task's user namespace maps
  its ids 0..65535 onto this range (:mod:`scheduler.agent.container`), so that its root is
  the VC's user on the host and no id of it is another VC's or a real system id. Two VCs
  of one list that land on one slot are refused by :func:`plan` (the message names both).

:func:`ensure` creates missing users (``groupadd``/``useradd``, no login shell, no home
on disk besides ``/var/lib/pasture/home/<user>``), idempotently; ``python -m
scheduler.tenants ensure VC...`` is what the roles run. Stdlib only.
"""

from __future__ import annotations

import argparse
import grp
import hashlib
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ID_RANGE = 65536
"""Ids (uids and gids) each VC owns, from its user's uid on: a container's 0..65535."""
UID_BASE = 2**30
"""First uid (and gid) of tenant users: the first id of slot 0's range."""
SLOTS = 2**30 // ID_RANGE
"""Number of VC ranges (16384); the last one ends at 2^31 - 1."""
UID_SPAN = SLOTS * ID_RANGE
"""Number of ids tenant users and their ranges are spread over (2^30)."""
HOME_BASE = Path("/var/lib/pasture/home")
"""Where tenant users' home directories are."""
PREFIX = "pasture-"
_PLAIN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}$")


class TenantError(RuntimeError):
    """A tenant user cannot be resolved or made; the message names the VC, the user and why."""


@dataclass(frozen=True)
class TenantUser:
    """The Unix identity of one VC's tasks: user name, uid, gid (same number), home."""

    vc: str
    name: str
    uid: int
    gid: int
    home: str


def user_name(vc: str) -> str:
    """The Unix user (and group) name of VC ``vc`` (rules: module docstring)."""
    if _PLAIN.fullmatch(vc):
        return PREFIX + vc
    part = re.sub(r"[^a-z0-9_-]", "_", vc.lower())[:14]
    return f"{PREFIX}{part}-{hashlib.sha256(vc.encode()).hexdigest()[:8]}"


def uid_of(vc: str) -> int:
    """The uid (= gid) of VC ``vc``'s user (rules: module docstring): a multiple of
    :data:`ID_RANGE` above :data:`UID_BASE`, the first id of :func:`id_range`."""
    digest = hashlib.sha256(vc.encode()).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % SLOTS * ID_RANGE


def id_range(vc: str) -> range:
    """The host ids (uids and gids alike) that belong to VC ``vc``: :data:`ID_RANGE` ids
    from :func:`uid_of` on. Ranges of two VCs are disjoint unless their uids are equal
    (which :func:`plan` refuses) and never reach a real system id or 2^31."""
    first = uid_of(vc)
    return range(first, first + ID_RANGE)


def planned(vc: str) -> TenantUser:
    """The user VC ``vc`` should have (name, numbers, home), whether it exists or not."""
    name = user_name(vc)
    return TenantUser(vc, name, uid_of(vc), uid_of(vc), str(HOME_BASE / name))


def plan(vcs: Iterable[str]) -> list[TenantUser]:
    """The users of ``vcs``, in order, each once.

    Raises:
        TenantError: two VCs map to one uid or one name (rename one of them).
    """
    out: dict[str, TenantUser] = {}
    for vc in vcs:
        out.setdefault(vc, planned(vc))
    seen: dict[int | str, str] = {}
    for u in out.values():
        for k in (u.uid, u.name):
            if k in seen and seen[k] != u.vc:
                raise TenantError(
                    f"VCs {seen[k]!r} and {u.vc!r} map to the same Unix user ({k});"
                    " rename one of them"
                )
            seen[k] = u.vc
    return list(out.values())


def resolve(vc: str) -> TenantUser:
    """The existing user of VC ``vc`` on this host.

    Raises:
        TenantError: no such user, or one with other numbers than planned (made by hand
            or by an older role): the message names the user and the fix.
    """
    want = planned(vc)
    try:
        pw = pwd.getpwnam(want.name)
    except KeyError:
        raise TenantError(
            f"VC {vc!r}: no Unix user {want.name!r} on this node; the pasture_node role"
            f" creates one per VC of the cluster's list (`python -m scheduler.tenants"
            f" ensure {vc}` as root does it by hand)"
        ) from None
    if pw.pw_uid != want.uid or pw.pw_gid != want.gid:
        raise TenantError(
            f"VC {vc!r}: Unix user {want.name!r} has uid:gid {pw.pw_uid}:{pw.pw_gid},"
            f" expected {want.uid}:{want.gid}; remove it and run the pasture_node role again"
        )
    return TenantUser(vc, want.name, pw.pw_uid, pw.pw_gid, pw.pw_dir)


def ensure(vcs: Sequence[str]) -> list[TenantUser]:
    """Create the group and user of each VC in ``vcs`` that this host lacks (as root).

    Returns the users, created or found. Raises TenantError when two VCs collide
    (:func:`plan`), a user exists with other numbers (:func:`resolve`), or
    ``groupadd``/``useradd`` fails (its message included).
    """
    return [u for u, _ in ensure_report(vcs)]


def ensure_report(vcs: Sequence[str]) -> list[tuple[TenantUser, bool]]:
    """:func:`ensure`, with whether each user was created now (True) or found."""
    out = []
    for u in plan(vcs):
        created = False
        try:
            grp.getgrnam(u.name)
        except KeyError:
            _run(["groupadd", "-g", str(u.gid), u.name])
        try:
            pwd.getpwnam(u.name)
        except KeyError:
            created = True
            HOME_BASE.mkdir(parents=True, exist_ok=True)
            # -l: no lastlog/faillog record (sparse files of uid * 292 bytes, 0.6 TB here)
            _run(
                [
                    "useradd", "-u", str(u.uid), "-g", str(u.gid), "-d", u.home,
                    "-m", "-l", "-s", "/bin/sh", "-c", f"pasture tenant {u.vc}", u.name,
                ]
            )  # fmt: skip
        resolve(u.vc)
        out.append((u, created))
    return out


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0 and "already exists" not in r.stderr:  # a concurrent ensure
        raise TenantError(f"{argv[0]} {argv[-1]}: {r.stderr.strip() or r.returncode}")


def main(argv: list[str] | None = None) -> int:
    """``python -m scheduler.tenants ensure VC...`` (root: make the users; prints
    ``created|present name uid gid home`` lines) or ``plan VC...`` (``name uid gid home``
    lines). Exit 1 with the reason on stderr."""
    ap = argparse.ArgumentParser(prog="python -m scheduler.tenants", description=__doc__)
    ap.add_argument("action", choices=["ensure", "plan"])
    ap.add_argument("vcs", nargs="+", metavar="VC")
    a = ap.parse_args(argv)
    try:
        if a.action == "ensure":
            for u, created in ensure_report(a.vcs):
                print("created" if created else "present", u.name, u.uid, u.gid, u.home)
        else:
            for u in plan(a.vcs):
                print(u.name, u.uid, u.gid, u.home)
    except TenantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def can_switch() -> bool:
    """Whether this process may run tasks as another user (effective uid 0)."""
    return os.geteuid() == 0


def reachable_by_others(path: str | os.PathLike[str]) -> bool:
    """Whether a user with no special rights may execute ``path`` (after links): every
    directory above it searchable by others (o+x) and the file itself o+rx. A dev
    cluster's tasks run the agent's interpreter (``python3 -m scheduler.examples...``),
    which an interpreter under ``/root`` (pyenv) is not."""
    p = Path(path).resolve()
    try:
        if p.stat().st_mode & 0o005 != 0o005:
            return False
        return all(d.stat().st_mode & 0o001 for d in p.parents)
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
