"""sharefs on a real directory, through openat2 and through the portable O_NOFOLLOW walk:
a file planted as a symbolic link, a hard link, a FIFO, behind a linked directory, or
named with '..' is refused; a plain file beneath the root is read."""

from __future__ import annotations

import os

import pytest

from scheduler import sharefs


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch):
    if request.param == "openat2" and not sharefs.use_openat2:
        pytest.skip("no openat2 on this kernel")
    monkeypatch.setattr(sharefs, "use_openat2", request.param == "openat2")
    return request.param


@pytest.fixture()
def share(tmp_path):
    root = tmp_path / "share"
    mine, theirs = root / "jobs" / "mine" / "logs", root / "jobs" / "theirs" / "logs"
    mine.mkdir(parents=True)
    theirs.mkdir(parents=True)
    (mine / "w-0.log").write_text("mine\n")
    (theirs / "w-0.log").write_text("THEIRS\n")
    secret = tmp_path / "secret.key"
    secret.write_text("KEY\n")
    os.symlink(theirs / "w-0.log", mine / "abs-0.log")
    os.symlink("../../theirs/logs/w-0.log", mine / "rel-0.log")
    os.symlink(secret, mine / "key-0.log")
    os.link(theirs / "w-0.log", mine / "hard-0.log")
    os.mkfifo(mine / "fifo-0.log")
    os.symlink(theirs, root / "jobs" / "mine" / "linked")
    return root


def test_a_plain_file_is_read(mode, share):
    with sharefs.open_file(share, "jobs/mine/logs/w-0.log") as f:
        assert f.read() == b"mine\n"


@pytest.mark.parametrize(
    "rel",
    [
        "jobs/mine/logs/abs-0.log",
        "jobs/mine/logs/rel-0.log",
        "jobs/mine/logs/key-0.log",
        "jobs/mine/logs/hard-0.log",
        "jobs/mine/logs/fifo-0.log",
        "jobs/mine/linked/w-0.log",
        "jobs/mine/../theirs/logs/w-0.log",
        "jobs/mine/logs/./w-0.log",
        "/etc/passwd",
        "jobs/mine/logs",  # a directory where a file is wanted
    ],
)
def test_planted_paths_are_refused(mode, share, rel):
    with pytest.raises(sharefs.UnsafePathError):
        sharefs.open_beneath(share, rel)


def test_missing_is_not_found_and_listing_skips_links(mode, share):
    with pytest.raises(FileNotFoundError):
        sharefs.open_beneath(share, "jobs/mine/logs/nope-0.log")
    assert sharefs.list_files(share, "jobs/mine/logs") == [("w-0.log", 5)]
    assert sharefs.list_files(share, "jobs/ghost/logs") == []
    with pytest.raises(sharefs.UnsafePathError):
        sharefs.list_files(share, "jobs/mine/linked")
    # the linked file's target itself is fine to read where it lives (one link again
    # once the planted hard link is gone)
    os.unlink(share / "jobs" / "mine" / "logs" / "hard-0.log")
    with sharefs.open_file(share, "jobs/theirs/logs/w-0.log") as f:
        assert f.read() == b"THEIRS\n"


def test_append_creates_and_appends_but_never_through_a_link(mode, share, tmp_path):
    def append(rel: str, data: bytes) -> None:
        fd = sharefs.open_beneath(share, rel, append=True)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    append("jobs/mine/logs/new-0.log", b"one\n")
    append("jobs/mine/logs/new-0.log", b"two\n")
    assert (share / "jobs" / "mine" / "logs" / "new-0.log").read_bytes() == b"one\ntwo\n"
    target = tmp_path / "authorized_keys"
    os.symlink(target, share / "jobs" / "mine" / "logs" / "dangling-0.log")
    for rel in (
        "jobs/mine/logs/key-0.log",
        "jobs/mine/logs/dangling-0.log",
        "jobs/mine/logs/hard-0.log",
        "jobs/mine/linked/w-0.log",
    ):
        with pytest.raises(sharefs.UnsafePathError):
            append(rel, b"evil\n")
    assert not target.exists()
    assert (tmp_path / "secret.key").read_text() == "KEY\n"
    assert (share / "jobs" / "theirs" / "logs" / "w-0.log").read_text() == "THEIRS\n"
