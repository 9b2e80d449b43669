"""``pasture data push|pull`` (SFTP into the share) and ``pasture image push``."""

from __future__ import annotations

import functools
import posixpath
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar
from urllib.parse import urlparse

import typer

from scheduler.cli.output import (
    JOB_NOT_SUCCEEDED,
    UNAVAILABLE,
    USAGE,
    console,
    err_console,
    handle_errors,
)
from scheduler.cli.text import Table, esc, plain_text
from scheduler.units import format_bytes

if TYPE_CHECKING:
    import paramiko
    from rich.progress import Progress, TaskID

    from scheduler.cli.ssh import SshTarget

P = ParamSpec("P")
R = TypeVar("R")

data_app = typer.Typer(help="Copy data into and out of the cluster share.", no_args_is_help=True)
image_app = typer.Typer(help="Distribute container images to nodes.", no_args_is_help=True)

HostOpt = typer.Option(
    None, "--host", envvar="PASTURE_SSH_HOST", help="master host (default: the API endpoint's host)"
)
PortOpt = typer.Option(22, "--port", envvar="PASTURE_SSH_PORT", help="SSH port")
UserOpt = typer.Option("root", "--user", envvar="PASTURE_SSH_USER", help="SSH user")
KeyOpt = typer.Option(None, "--key", envvar="PASTURE_SSH_KEY", help="private key file")
KnownOpt = typer.Option(None, "--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)")
ShareOpt = typer.Option(
    "/srv/pasture/share",
    "--share-dir",
    envvar="PASTURE_SHARE_DIR",
    help="the share's path on the master",
)


def ssh_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Bad REMOTE paths -> usage error (2); SSH/SFTP failures -> message and exit 7."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        import paramiko  # here, not at import: `import scheduler.cli` stays fast

        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            err_console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(USAGE) from None
        except (paramiko.SSHException, OSError) as exc:
            err_console.print(f"[red]error (ssh):[/red] {type(exc).__name__}: {esc(exc)}")
            err_console.print(_why_ssh(kwargs), highlight=False)
            raise typer.Exit(UNAVAILABLE) from None

    return wrapper


def _why_ssh(options: dict[str, object]) -> str:
    """Why a data command went over SSH and how to change it (after an SSH failure)."""
    from scheduler.cli.config import ConfigError, load

    try:
        in_use = load()
        where = f"the cluster in use ({esc(in_use.source)}, {esc(in_use.endpoint)})"
    except ConfigError:
        where = "the cluster in use"
    host = options.get("host") or "the API endpoint's host"
    return (
        f"[yellow]note:[/yellow] data commands copy over SSH to {esc(host)} port"
        f" {esc(options.get('port', 22))} as {esc(options.get('user', 'root'))} because"
        f" {where} is not a running `pasture dev up` cluster (whose share is a local"
        " directory); --host/--port/--user/--key (or PASTURE_SSH_HOST, PASTURE_SSH_PORT,"
        " PASTURE_SSH_USER, PASTURE_SSH_KEY) choose the master, `pasture context list`"
        " shows which cluster is in use"
    )


def _progress() -> Progress:  # rich.progress, imported here (slow import)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _master(
    host: str | None, port: int, user: str, key: str | None, known: str | None
) -> SshTarget:
    from scheduler.cli import ssh  # loads paramiko (~0.5 s): on first use

    if host is None:
        from scheduler.cli.config import load

        endpoint = load().endpoint
        host = urlparse(endpoint).hostname
        if host is None:
            raise ValueError(f"--host: the API endpoint {endpoint!r} names no host; give --host")
    return ssh.SshTarget(host=host, port=port, user=user, key_file=key, known_hosts=known)


def _dev_share(host: str | None) -> Path | None:
    """The share directory of the running ``pasture dev up`` cluster when it is the
    cluster this command talks to (no ``--host`` given, and the client config comes from
    the dev cluster's state file or names its endpoint, as a ``pasture login`` to it
    does): its share is a local directory, so data commands copy files there instead of
    going over SSH. None otherwise."""
    if host is not None:
        return None
    import json

    from scheduler.cli import devstate
    from scheduler.cli.config import ConfigError, load

    try:
        config = load()
        state = json.loads(devstate.state_file().read_text())
    except (ConfigError, OSError, ValueError):
        return None
    dev_endpoint = state.get("endpoint") if isinstance(state, dict) else None
    if not config.source.startswith("pasture dev up") and (
        not dev_endpoint or config.endpoint.rstrip("/") != str(dev_endpoint).rstrip("/")
    ):
        return None
    share = state.get("share_dir") if isinstance(state, dict) else None
    return Path(share) if share and Path(share).is_dir() else None


def _copy_local(src: Path, dest: Path, local_is_file: bool) -> tuple[int, int]:
    """Copy a file or directory tree (symlinks copied as links, never followed out) to
    ``dest``; a file onto an existing directory lands inside it. Returns (files, bytes)."""
    if local_is_file:
        target = dest / src.name if dest.is_dir() else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
        return 1, src.stat().st_size
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def _local_files(local: Path) -> list[tuple[Path, str]]:
    """(file, path relative to ``local``'s parent-or-self) pairs to upload."""
    if local.is_file():
        return [(local, "")]
    return [(p, p.relative_to(local).as_posix()) for p in sorted(local.rglob("*")) if p.is_file()]


def share_destination(remote: str) -> str:
    """The share path ``data push`` writes REMOTE to: REMOTE itself, or for an HDFS path
    (``hdfs://nn:9000/a/code``, ``$PAI_DEFAULT_FS_URI/a/code``, as an OpenPAI v1
    ``codeDir`` names it) the share directory a translated job reads it from
    (``hdfs/a/code``, :func:`scheduler.spec.formats.common.hdfs_share_path`), printed.
    Raises typer.BadParameter for an HDFS path that maps to no share directory."""
    from scheduler.spec.formats.common import hdfs_share_path, is_hdfs

    if not is_hdfs(remote):
        return remote
    mapped = hdfs_share_path(remote)
    if mapped is None:
        raise typer.BadParameter(
            f"REMOTE: HDFS path {remote!r} maps to no share directory"
            " (expected hdfs://<name node>/<path> or $PAI_DEFAULT_FS_URI/<path>)"
        )
    console.print(f"HDFS path {remote} is the share's {mapped}", markup=False, highlight=False)
    return mapped


@data_app.command()
@handle_errors
@ssh_errors
def push(
    local: Path = typer.Argument(..., exists=True, help="local file or directory"),
    remote: str = typer.Argument(..., help="destination inside the share (e.g. datasets/mnist)"),
    host: str | None = HostOpt,
    port: int = PortOpt,
    user: str = UserOpt,
    key: str | None = KeyOpt,
    known_hosts: str | None = KnownOpt,
    share_dir: str = ShareOpt,
) -> None:
    """Upload LOCAL (file or directory, recursively) to REMOTE in the cluster share. Against
    a `pasture dev up` cluster (no --host, the client config from the dev cluster) the
    share is a local directory and the files are copied there; otherwise over SFTP to
    the master."""
    from scheduler.cli import ssh  # loads paramiko (~0.5 s): on first use

    remote = share_destination(remote)
    dev = _dev_share(host)
    if dev is not None:
        dest_dir = Path(ssh.remote_path(str(dev), remote))
        n, size = _copy_local(local, dest_dir, local.is_file())
        console.print(f"copied {n} file(s), {format_bytes(size)}B to {esc(dest_dir)} (dev cluster)")
        return
    dest = ssh.remote_path(share_dir, remote)
    files = _local_files(local)
    total = sum(f.stat().st_size for f, _ in files)
    with ssh.connect(_master(host, port, user, key, known_hosts)) as client:
        sftp = client.open_sftp()
        with _progress() as progress:
            bar = progress.add_task(f"push {local.name}", total=total)
            done = 0
            for path, rel in files:
                target = dest if not rel else posixpath.join(dest, rel)
                if local.is_file():
                    try:
                        if stat.S_ISDIR(sftp.stat(dest).st_mode or 0):
                            target = posixpath.join(dest, local.name)
                    except FileNotFoundError:
                        pass
                ssh.makedirs(sftp, posixpath.dirname(target))
                base = done
                sftp.put(
                    str(path),
                    target,
                    callback=functools.partial(_advance, progress, bar, base),
                )
                done += path.stat().st_size
            progress.update(bar, completed=total)
    console.print(f"pushed {len(files)} file(s), {format_bytes(total)}B to {esc(dest)}")


def _advance(progress: Progress, bar: TaskID, base: int, sent: int, _total: int) -> None:
    """An SFTP transfer callback: ``sent`` of this file's bytes after ``base`` earlier ones."""
    progress.update(bar, completed=base + sent)


def _remote_files(sftp: paramiko.SFTPClient, root: str) -> list[tuple[str, str, int]]:
    st = sftp.stat(root)
    if not stat.S_ISDIR(st.st_mode or 0):
        return [(root, "", st.st_size or 0)]
    out: list[tuple[str, str, int]] = []
    stack = [(root, "")]
    while stack:
        path, rel = stack.pop()
        for entry in sftp.listdir_attr(path):
            p, r = posixpath.join(path, entry.filename), posixpath.join(rel, entry.filename)
            if stat.S_ISDIR(entry.st_mode or 0):
                stack.append((p, r))
            else:
                out.append((p, r, entry.st_size or 0))
    return sorted(out)


@data_app.command()
@handle_errors
@ssh_errors
def pull(
    local: Path = typer.Argument(..., help="local destination file or directory"),
    remote: str = typer.Argument(..., help="source inside the share"),
    host: str | None = HostOpt,
    port: int = PortOpt,
    user: str = UserOpt,
    key: str | None = KeyOpt,
    known_hosts: str | None = KnownOpt,
    share_dir: str = ShareOpt,
) -> None:
    """Download REMOTE (file or directory) from the cluster share to LOCAL (a local copy
    against a `pasture dev up` cluster, as `data push`)."""
    from scheduler.cli import ssh  # loads paramiko (~0.5 s): on first use

    remote = share_destination(remote)
    dev = _dev_share(host)
    if dev is not None:
        source = Path(ssh.remote_path(str(dev), remote))
        if not source.exists():
            err_console.print(f"[red]error:[/red] {esc(source)} does not exist in the dev share")
            raise typer.Exit(5)
        target = local / source.name if local.is_dir() and source.is_file() else local
        n, size = _copy_local(source, target, source.is_file())
        console.print(f"copied {n} file(s), {format_bytes(size)}B to {esc(target)}")
        return
    src = ssh.remote_path(share_dir, remote)
    with ssh.connect(_master(host, port, user, key, known_hosts)) as client:
        sftp = client.open_sftp()
        try:
            files = _remote_files(sftp, src)
        except FileNotFoundError:
            err_console.print(f"[red]error:[/red] {esc(src)} does not exist on the master")
            raise typer.Exit(5) from None
        total = sum(size for _, _, size in files)
        with _progress() as progress:
            bar = progress.add_task(f"pull {posixpath.basename(src)}", total=total)
            done = 0
            for path, rel, size in files:
                target = (
                    local / rel
                    if rel
                    else (local / posixpath.basename(src) if local.is_dir() else local)
                )
                target.parent.mkdir(parents=True, exist_ok=True)
                base = done
                sftp.get(
                    path,
                    str(target),
                    callback=functools.partial(_advance, progress, bar, base),
                )
                done += size
            progress.update(bar, completed=total)
    console.print(f"pulled {len(files)} file(s), {format_bytes(total)}B to {esc(local)}")


def _inventory_nodes(path: Path) -> list[tuple[str, str, str | None]]:
    """(name, ansible_host, ansible_user) of the ``nodes`` group of an inventory file."""
    import yaml

    inv = yaml.safe_load(path.read_text()) or {}
    hosts = (((inv.get("all") or {}).get("children") or {}).get("nodes") or {}).get("hosts") or {}
    return [
        (name, (h or {}).get("ansible_host") or name, (h or {}).get("ansible_user"))
        for name, h in hosts.items()
    ]


def _container_cli(cli: str | None) -> str:
    for candidate in [cli] if cli else ["podman", "docker"]:
        if shutil.which(candidate):
            return candidate
    raise typer.BadParameter("no podman or docker on PATH", param_hint="--cli")


@image_app.command("push")
@handle_errors
def image_push(
    image: str = typer.Argument(..., help="local image, e.g. localhost/train:1"),
    inventory: Path | None = typer.Option(
        None, "--inventory", "-i", exists=True, help="Ansible inventory; default: pasture node list"
    ),
    cli: str | None = typer.Option(None, "--cli", help="podman or docker (default: found)"),
    remote_cli: str = typer.Option("podman", "--remote-cli", help="runtime on the nodes"),
    port: int = PortOpt,
    user: str = UserOpt,
    key: str | None = KeyOpt,
    known_hosts: str | None = KnownOpt,
) -> None:
    """Save IMAGE locally, then load it on every node over SSH (``podman load``)."""
    if inventory is not None:
        nodes = [(n, h, u or user) for n, h, u in _inventory_nodes(inventory)]
    else:
        from scheduler.cli.client import ApiClient
        from scheduler.cli.config import load

        api_nodes = ApiClient(load()).nodes()
        nodes = [(n.name, n.address or n.name, user) for n in api_nodes]
    if not nodes:
        err_console.print("[red]error:[/red] no nodes to push to")
        raise typer.Exit(JOB_NOT_SUCCEEDED)
    exe = _container_cli(cli)
    with tempfile.TemporaryDirectory(prefix="pasture-image-") as tmp:
        archive = Path(tmp) / "image.tar"
        with console.status(plain_text(f"{exe} save {image}")):
            proc = subprocess.run(
                [exe, "save", "-o", str(archive), image], capture_output=True, text=True
            )
        if proc.returncode != 0:
            why = esc(proc.stderr.strip())
            err_console.print(f"[red]error:[/red] {esc(exe)} save {esc(image)}: {why}")
            raise typer.Exit(JOB_NOT_SUCCEEDED)
        size = archive.stat().st_size
        results = []
        with _progress() as progress:
            for name, host, node_user in nodes:
                bar = progress.add_task(f"{name}", total=size)
                results.append(
                    (
                        name,
                        *_load_on(
                            archive,
                            host,
                            node_user,
                            port,
                            key,
                            known_hosts,
                            remote_cli,
                            progress,
                            bar,
                        ),
                    )
                )
    table = Table("node", "result")
    for name, ok, message in results:
        table.add_row(name, plain_text(message, "green" if ok else "red"))
    console.print(table)
    if not all(ok for _, ok, _ in results):
        raise typer.Exit(JOB_NOT_SUCCEEDED)


def _load_on(
    archive: Path,
    host: str,
    user: str,
    port: int,
    key: str | None,
    known_hosts: str | None,
    remote_cli: str,
    progress: Progress,
    bar: TaskID,
) -> tuple[bool, str]:
    """Stream ``archive`` into ``<remote_cli> load`` on one node; (ok, message)."""
    from scheduler.cli import ssh  # loads paramiko (~0.5 s): on first use

    try:
        target = ssh.SshTarget(
            host=host, port=port, user=user, key_file=key, known_hosts=known_hosts
        )
        with ssh.connect(target) as client:
            stdin, stdout, stderr = client.exec_command(f"{remote_cli} load")
            sent = 0
            with archive.open("rb") as f:
                while chunk := f.read(1 << 20):
                    stdin.write(chunk)
                    sent += len(chunk)
                    progress.update(bar, completed=sent)
            stdin.channel.shutdown_write()
            out = stdout.read().decode(errors="replace").strip()
            err = stderr.read().decode(errors="replace").strip()
            code = stdout.channel.recv_exit_status()
        if code != 0:
            return False, f"{remote_cli} load exited {code}: {err or out}"
        return True, out.splitlines()[-1] if out else "loaded"
    except (OSError, Exception) as exc:  # paramiko raises many kinds; report per node
        return False, f"{type(exc).__name__}: {exc}"
