"""Read files on the cluster share on behalf of a user without following links out.

Tasks write to the share, so whatever lies beneath a job's directory may have been
planted by a task: a symbolic link to another job's log or to the master's secrets, a
hard link to such a file, a directory replaced by a link, a FIFO that blocks a reader.
Every open here resolves a *relative* path beneath a trusted root directory (the share
as mounted on the master) and refuses:

- a symbolic link anywhere below the root (``..`` and absolute paths are refused before
  anything is opened);
- a final component that is not a regular file (directory, FIFO, socket, device) when a
  file is wanted, or not a directory when a directory is wanted;
- a regular file with more than one hard link (``st_nlink > 1``): the agent writes each
  log as a fresh file with one link, so a second link can only have been made by a task
  (it may point at any file of the same file system the task could reach).

How: on Linux >= 5.6 one ``openat2(2)`` call with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (the kernel resolves the whole path and
fails with ``ELOOP``/``EXDEV`` on a link or an escape, with no race between check and
use); elsewhere, or where a seccomp filter refuses the system call (``ENOSYS``/``EPERM``),
a walk that opens one component at a time relative to the previous directory's file
descriptor with ``O_NOFOLLOW`` (``O_DIRECTORY`` for the directories), which is the same
guarantee on every POSIX system. Both open with ``O_NONBLOCK`` so that a FIFO cannot
block the caller, and check the result with ``fstat`` on the opened descriptor, never on
the path. On an SMB share mounted with ``mfsymlinks`` (the AKS stack), a link a task
creates is shown to the reader as a symbolic link, so the same checks refuse it.

Errors: :class:`UnsafePathError` (refused: a link, ``..``, not a regular file, hard
linked) and :class:`FileNotFoundError` (nothing there). Both are ``OSError``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

# linux/openat2.h
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
SYS_OPENAT2 = 437  # the same number on every Linux architecture (unified table, 5.6+)

_O_BASE = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnsafePathError(OSError):
    """A path beneath the share was refused: it is or passes through a link, leaves its
    root, is not the kind of file wanted, or is a hard-linked regular file."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc_syscall() -> Any:
    if os.uname().sysname != "Linux":
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_syscall = _libc_syscall()
#: whether openat2 is used; set False when the kernel (or a seccomp filter) lacks it.
#: Tests set it False to run the portable walk.
use_openat2 = _syscall is not None


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    """The components of ``rel``; refuses an absolute path, ``..``, ``.`` and NUL."""
    text = os.fspath(rel)
    if "\x00" in text:
        raise UnsafePathError(errno.EINVAL, "a NUL byte in the path", text)
    p = PurePosixPath(text)
    if p.is_absolute():
        raise UnsafePathError(
            errno.EXDEV, "an absolute path where one beneath the share is wanted", text
        )
    parts = [s for s in text.split("/") if s]
    if not parts or any(s in (".", "..") for s in parts):
        raise UnsafePathError(errno.EXDEV, "'.' or '..' in a path beneath the share", text)
    return parts


def _openat2(dir_fd: int, rel: str, flags: int, mode: int = 0) -> int:
    """fd of ``rel`` beneath ``dir_fd`` by openat2; raises OSError (ENOSYS: no openat2)."""
    assert _syscall is not None
    how = _OpenHow(flags=flags, mode=mode if flags & os.O_CREAT else 0, resolve=_RESOLVE)
    fd = _syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def _walk(dir_fd: int, parts: list[str], flags: int, mode: int = 0o644) -> int:
    """fd of ``parts`` beneath ``dir_fd``, one component at a time, never following a link."""
    fd = dir_fd
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            f = flags if last else _O_BASE | _O_DIRECTORY
            nfd = os.open(part, f | _O_NOFOLLOW, mode, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


def _refused(exc: OSError, rel: str) -> OSError:
    """The error to raise for ``exc`` met while opening ``rel``."""
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR, errno.EMLINK):
        return UnsafePathError(exc.errno, "refused: a link, or not beneath the share", rel)
    return exc


def open_beneath(
    root: str | os.PathLike[str],
    rel: str | os.PathLike[str],
    *,
    directory: bool = False,
    append: bool = False,
    mode: int = 0o644,
) -> int:
    """A file descriptor of ``root/rel`` that never followed a link below ``root``.

    Args:
        root: a trusted directory (the share on the master); opened as given.
        rel: a relative path beneath it (``jobs/<job>/logs/worker-0.log``).
        directory: want a directory (True) or a regular file with one link (False).
        append: open the file for appending (``O_RDWR | O_APPEND``), creating it with
            ``mode`` when missing: how a writer (the agent, for a task's log) keeps a
            task from redirecting its writes through a planted link.

    Returns:
        An fd (``O_RDONLY`` or, with ``append``, ``O_RDWR | O_APPEND | O_CREAT``, plus
        ``O_CLOEXEC | O_NONBLOCK``); the caller closes it.

    Raises:
        UnsafePathError: a link below ``root``, ``..``, an absolute path, the wrong kind
            of file, or a regular file with more than one hard link.
        FileNotFoundError: a component does not exist.
        OSError: any other failure (permissions).
    """
    global use_openat2
    parts = _parts(rel)
    flags = _O_BASE | (_O_DIRECTORY if directory else 0)
    if append and not directory:
        flags = (flags & ~os.O_RDONLY) | os.O_RDWR | os.O_APPEND | os.O_CREAT
    root_fd = os.open(os.fspath(root), _O_BASE | _O_DIRECTORY)
    try:
        fd = -1
        if use_openat2:
            try:
                fd = _openat2(root_fd, "/".join(parts), flags, mode)
            except OSError as exc:
                if exc.errno in (errno.ENOSYS, errno.EPERM):
                    use_openat2 = False  # no openat2 here: the walk from now on
                else:
                    raise _refused(exc, os.fspath(rel)) from None
        if fd < 0:
            try:
                fd = _walk(root_fd, parts, flags, mode)
            except OSError as exc:
                raise _refused(exc, os.fspath(rel)) from None
    finally:
        os.close(root_fd)
    try:
        st = os.fstat(fd)
        if directory and not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(errno.ENOTDIR, "not a directory", os.fspath(rel))
        if not directory:
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(errno.EINVAL, "not a regular file", os.fspath(rel))
            if st.st_nlink > 1:
                raise UnsafePathError(
                    errno.EMLINK, f"a regular file with {st.st_nlink} hard links", os.fspath(rel)
                )
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def open_file(root: str | os.PathLike[str], rel: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """``open_beneath`` as a binary file object (blocking reads), closed on exit."""
    fd = open_beneath(root, rel)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        yield f


def list_files(root: str | os.PathLike[str], rel: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """``[(name, size in bytes)]`` of the regular, singly linked files directly in the
    directory ``root/rel`` (opened as :func:`open_beneath` does); links, FIFOs,
    directories and hard-linked files are left out. A missing directory gives ``[]``.

    Raises:
        UnsafePathError: the directory itself is a link or lies behind one.
    """
    try:
        fd = open_beneath(root, rel, directory=True)
    except FileNotFoundError:
        return []
    out = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    out.append((entry.name, st.st_size))
    finally:
        os.close(fd)
    return sorted(out)


def relative(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` (both as given, not resolved). Raises UnsafePathError
    when ``path`` is not lexically beneath ``root``."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        raise UnsafePathError(errno.EXDEV, "not beneath the share", os.fspath(path)) from None


__all__ = [
    "UnsafePathError",
    "list_files",
    "open_beneath",
    "open_file",
    "relative",
    "use_openat2",
]
