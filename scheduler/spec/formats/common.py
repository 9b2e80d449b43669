"""Helpers shared by the format translators: the error they raise, the warning list they
fill, and field walkers that refuse what a format documents but pasture cannot honour.

A translator turns a parsed document into a plain dict in the pasture spec's shape (the
caller validates it with :class:`scheduler.spec.model.JobSpec`, so pasture's own limits
apply to every format) and a list of warnings for fields accepted but meaningless here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class TranslateError(ValueError):
    """A field of a foreign job file cannot be honoured.

    Attributes:
        loc: dotted path of the field in the source document (``taskRoles.worker.shmMB``).
        message: what is wrong, starting with the format's name.
        given: the offending value (never a secret's value).
    """

    def __init__(self, loc: str, message: str, given: object = None) -> None:
        super().__init__(f"{loc}: {message}")
        self.loc = loc
        self.message = message
        self.given = given


@dataclass
class Context:
    """One translation: the format's display name and the warnings gathered so far."""

    fmt: str
    warnings: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)

    def origin(self, pasture: str, source: str) -> None:
        """Record that the translated field ``pasture`` (a dotted path, e.g.
        ``roles.worker`` or ``roles.worker.image``) came from ``source`` in the file
        (``spec.tasks[1]``, ``taskRoles.worker.dockerImage``): errors found when the
        translation is validated then name ``source`` (:func:`source_loc`)."""
        self.origins[pasture] = source

    def origins_under(self, pasture: str, source: str, fields: dict[str, str]) -> None:
        """:meth:`origin` for ``pasture`` itself and each ``{pasture sub-path: source
        sub-path}`` of ``fields`` below it (``{"replicas": "taskNumber"}``)."""
        self.origins[pasture] = source
        for sub, src in fields.items():
            self.origins[f"{pasture}.{sub}"] = f"{source}.{src}" if src else source

    def refuse(self, loc: str, why: str, given: object = None) -> TranslateError:
        """The error for a field that cannot be honoured (raise it)."""
        return TranslateError(loc, f"{self.fmt} field {loc}: {why}", given)

    def warn(self, loc: str, why: str) -> None:
        """Record that ``loc`` was accepted but has no effect here."""
        self.warnings.append(f"{self.fmt} field {loc}: {why}")

    def mapping(self, value: object, loc: str) -> dict[str, Any]:
        """``value`` as a dict ({} for None); refuses anything else."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.refuse(loc, f"expected a mapping, got {type(value).__name__}", value)
        return value

    def sequence(self, value: object, loc: str) -> list[Any]:
        """``value`` as a list ([] for None); refuses anything else."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.refuse(loc, f"expected a list, got {type(value).__name__}", value)
        return value

    def check_fields(
        self,
        d: dict[str, Any],
        loc: str,
        *,
        honoured: Iterable[str],
        ignored: dict[str, str] | None = None,
        refused: dict[str, str] | None = None,
    ) -> None:
        """Walk the keys of ``d``: honoured ones pass, ``ignored`` ones (key -> why it means
        nothing here) give a warning when set, ``refused`` ones (key -> why and what to do
        instead) and unknown ones are refused by name."""
        known = set(honoured)
        ignored = ignored or {}
        refused = refused or {}
        for key, value in d.items():
            path = f"{loc}.{key}" if loc else str(key)
            if key in known:
                continue
            if key in ignored:
                if value not in (None, "", [], {}):
                    self.warn(path, ignored[key])
                continue
            if key in refused:
                raise self.refuse(path, refused[key], value)
            expected = sorted(known | set(ignored) | set(refused))
            raise self.refuse(path, f"unknown field; expected one of {expected}", value)


def job_name(name: object, ctx: Context, loc: str) -> str:
    """A foreign job name as a pasture name (DNS label: ``mnist_024`` -> ``mnist-024``);
    warns when it had to change. Refuses a missing or empty name."""
    if not isinstance(name, str) or not name.strip():
        raise ctx.refuse(loc, "expected a job name", name)
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    if not out:
        raise ctx.refuse(loc, "no letter or digit in the job name", name)
    if out != name:
        ctx.warn(loc, f"job name {name!r} is {out!r} here (lowercase letters, digits, '-')")
    return out


def as_int(value: object, ctx: Context, loc: str, *, minimum: int | None = None) -> int:
    """An integer field (bools and fractions refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if (
            isinstance(value, float)
            and value.is_integer()
            and abs(value) < 2**53
            or isinstance(value, str)
            and re.fullmatch(r"-?[0-9]{1,12}", value.strip())
        ):
            value = int(value)
        else:
            raise ctx.refuse(loc, f"expected a whole number, got {value!r}", value)
    if minimum is not None and value < minimum:
        raise ctx.refuse(loc, f"expected at least {minimum}, got {value}", value)
    return value


_HDFS = re.compile(r"^(hdfs://|webhdfs://|\$\{?PAI_DEFAULT_FS_URI\}?)", re.IGNORECASE)


def is_hdfs(path: str) -> bool:
    """Whether a path names HDFS (``hdfs://...`` or OpenPAI's ``$PAI_DEFAULT_FS_URI/...``)."""
    return bool(_HDFS.match(path.strip()))


HDFS_SHARE_DIR = "hdfs"
"""The share directory under which HDFS paths are read (see :func:`hdfs_share_path`)."""

_HDFS_PREFIX = re.compile(
    r"^(?:(?:web)?hdfs://[^/]*|\$\{?PAI_DEFAULT_FS_URI\}?)(?P<path>/.*)?$", re.IGNORECASE
)


def hdfs_share_path(path: str) -> str | None:
    """The cluster-share directory that stands for an HDFS path: ``hdfs/`` followed by the
    path inside HDFS, the scheme and the name node dropped
    (``hdfs://10.0.0.1:9000/folder/mnist`` and ``$PAI_DEFAULT_FS_URI/folder/mnist`` ->
    ``hdfs/folder/mnist``). ``pasture data push`` applies the same rule to an HDFS
    destination, so the files pushed there are the ones the job reads. None when ``path``
    is not HDFS or has no such directory (the name node alone, ``..``, another ``$``
    variable, ``:`` or ``,``, which a share path cannot hold)."""
    m = _HDFS_PREFIX.match(path.strip())
    if not m or not m.group("path"):
        return None
    parts = [p for p in m.group("path").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    rel = "/".join([HDFS_SHARE_DIR, *parts])
    if any(c in rel for c in "$:,") or any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return None
    return rel


def code_dir(value: object, ctx: Context, loc: str, job: str = "") -> str:
    """A ``codeDir``: a directory of the cluster share (as given to ``pasture data push``),
    copied into each task's working directory as ``./code``. An HDFS directory is read
    from the share directory :func:`hdfs_share_path` gives (a warning names the push
    command; the task fails at start with that command while the directory is missing).
    Refuses URLs and HDFS paths that map to no share path, saying what to push and what
    to write with the file's own directory name
    (``http://host/a/mnist`` -> ``pasture data push ./mnist code/mnist``)."""
    if not isinstance(value, str) or not value.strip():
        raise ctx.refuse(loc, "expected a directory of the cluster share", value)
    path = value.strip()
    if is_hdfs(path):
        mapped = hdfs_share_path(path)
        if mapped is not None:
            base = mapped.rsplit("/", 1)[-1]
            ctx.warn(
                loc,
                f"HDFS directory {path} is read from the cluster share's {mapped}: push the"
                f" code there with `pasture data push {shlex.quote('./' + base)}"
                f" {shlex.quote(mapped)}` before the job"
                " starts (a task fails at start with that command while it is missing)",
            )
            return mapped
    if is_hdfs(path) or "://" in path:
        base = push_name(path)
        # OpenPAI's examples end in .../<project>/code: name the share directory after
        # the job then, not code/code
        remote = f"code/{job}" if base == "code" and job else f"code/{base}"
        how = (
            f"push the code with `pasture data push ./{base} {remote}` and set "
            f"{loc} to {remote} (a path inside the share)"
        )
        if is_hdfs(path):
            raise ctx.refuse(
                loc,
                "pasture has the cluster share, not HDFS, and this path maps to no share"
                f" directory (hdfs/<path inside HDFS>): {how}",
                value,
            )
        raise ctx.refuse(loc, f"URLs are not fetched; {how}", value)
    return path.removeprefix("./")


def push_name(path: str) -> str:
    """The last directory name of a URL or path, as a share directory name for the
    how-to of a refusal (``hdfs://h:9000/a/mnist/`` -> ``mnist``; ``code`` when none)."""
    rest = path.split("://", 1)[-1].rstrip("/")
    if "/" not in rest:  # a host alone
        return "code"
    tail = rest.rsplit("/", 1)[-1]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-.")
    if not tail or "$" in path.rsplit("/", 1)[-1] or ":" in tail:
        return "code"
    return tail


def completion_counts(
    succeeded: object, failed: object, replicas: int, ctx: Context, locs: tuple[str, str]
) -> dict[str, int]:
    """OpenPAI's per-role completion counts (v1 ``minSucceededTaskCount`` /
    ``minFailedTaskCount``, v2 ``completion.minSucceededInstances`` / ``minFailedInstances``)
    as pasture's role ``completion`` with FrameworkController's semantics
    (microsoft/frameworkcontroller pkg/apis/frameworkcontroller/v1 CompletionPolicy): -1 or
    null is "all" / "never"; a count above the role's instances can never be reached, so the
    attempt ends when every task has ended, which is the same as -1 (a warning says so).
    Raises TranslateError for a count below -1, 0, or not a whole number."""
    out: dict[str, int] = {}
    if succeeded is not None:
        n = as_int(succeeded, ctx, locs[0], minimum=-1)
        if n == 0:
            raise ctx.refuse(locs[0], "expected -1 (all) or at least 1, got 0", succeeded)
        if n > replicas:
            ctx.warn(locs[0], f"{n} is above the role's {replicas} instances: all of them")
        elif n != -1:
            out["min_succeeded"] = n
    if failed is not None:
        n = as_int(failed, ctx, locs[1], minimum=-1)
        if n == 0:
            raise ctx.refuse(locs[1], "expected -1 (never) or at least 1, got 0", failed)
        if n > replicas:
            ctx.warn(
                locs[1],
                f"{n} is above the role's {replicas} instances, so failures never fail the "
                "job (as -1): it ends when every task has ended",
            )
            n = -1
        out["min_failed"] = n
    return out


def source_loc(loc: str, origins: dict[str, str]) -> str | None:
    """The source field a translated pasture path came from: the longest recorded prefix
    of ``loc`` (see :meth:`Context.origin`) with the rest of the path appended
    (``roles.w.resources.memory`` with ``roles.w -> spec.tasks[0]`` gives
    ``spec.tasks[0] (resources.memory)``); None when no prefix was recorded."""
    parts = loc.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in origins:
            rest = ".".join(parts[n:])
            return origins[key] + (f" ({rest})" if rest else "")
    return None
