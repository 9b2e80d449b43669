"""``pasture job submit --sweep SWEEP.yaml``: one job spec plus parameters, expanded here
into many jobs and submitted in one ``POST /api/v1/jobs:batch``.

The sweep file (YAML or JSON)::

    spec: train.yaml                # a job file (relative to this file) or an inline spec
    name: "lr-{LR}-r{replicas}"     # optional; default "<spec name>-{n}"
    grid:                           # every combination (cartesian product), last key fastest
      roles.worker.env.LR: ["0.1", "0.01"]
      roles.worker.replicas: [1, 2]
    list:                           # optional: explicit combinations, after the grid's
      - {roles.worker.env.LR: "0.5", roles.worker.replicas: 4}

Each key is a ``--set`` path into the pasture-format spec
(:func:`scheduler.cli.jobspec.set_path`), applied after the spec's own format (OpenPAI,
MARO, Volcano) is translated, so one sweep file works for every accepted format. The
shape is Weights & Biases' ``grid`` sweep (``parameters: {lr: {values: [...]}}``) with
pasture's ``--set`` paths as parameter names, plus Katib/W&B-style explicit lists; unlike
a Slurm job array it is expanded client-side, so the server sees ordinary jobs.

The name template: ``{KEY}`` is a key's value, the key named in full or by its last
dotted part when that is unique among the keys; ``{n}`` is the combination's number from
0. Values are lower-cased and each run of characters a job name cannot hold becomes ``-``
(``0.01`` -> ``0-01``). Environment values are strings, so a number or boolean swept into
an ``env`` key is set as its text (``0.1`` -> ``"0.1"``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from scheduler.cli.output import print_json

if TYPE_CHECKING:
    from scheduler.cli.client import ApiClient

MAX_JOBS = 500  # the API's MAX_BATCH_JOBS
FIELDS = ("spec", "name", "grid", "list")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PATH = re.compile(r"^[^.=\s]+(\.[^.=\s]+)*$")


class SweepError(ValueError):
    """A sweep file is invalid. ``field`` says where: ``spec``, ``name``, ``grid``,
    ``grid.<key>``, ``list``, ``list[i]``, ``list[i].<key>`` or ``(file)``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class SweepJob:
    """One expanded job: its ``name``, the ``values`` set (path -> value, in the sweep
    file's order), the pasture-format ``spec`` dict to submit, and ``source`` (``grid``
    or ``list[i]``)."""

    name: str
    values: dict[str, Any]
    spec: dict[str, Any]
    source: str

    def label(self) -> str:
        """``path=value path=value`` (values as JSON, strings bare)."""
        return " ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in self.values.items()
        )


def _short(value: Any) -> str:
    """``repr(value)``, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_key(key: object, field: str) -> str:
    if not isinstance(key, str) or not _PATH.fullmatch(key):
        raise SweepError(
            field, f"expected a dotted spec path such as roles.worker.replicas, got {_short(key)}"
        )
    if key == "name":
        raise SweepError(field, "job names come from the `name` template, not from a key")
    return key


def combinations(sweep: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(source, {path: value})`` combinations of a sweep file's ``grid`` (cartesian
    product, in key order with the last key varying fastest) then ``list``.

    Raises:
        SweepError: grid not a mapping of non-empty lists, list not a list of non-empty
            mappings, a key that is not a dotted path (or is ``name``), no combination at
            all, or more than MAX_JOBS (counted before any is built).
    """
    grid = sweep.get("grid") or {}
    listing = sweep.get("list") or []
    if not isinstance(grid, Mapping):
        raise SweepError("grid", f"expected a mapping of PATH: [values], got {type(grid).__name__}")
    if not isinstance(listing, list):
        raise SweepError(
            "list", f"expected a list of {{PATH: value}}, got {type(listing).__name__}"
        )
    for key, values in grid.items():
        _check_key(key, f"grid.{key}")
        if not isinstance(values, list) or not values:
            raise SweepError(
                f"grid.{key}", f"expected a non-empty list of values, got {_short(values)}"
            )
    for i, item in enumerate(listing):
        if not isinstance(item, Mapping) or not item:
            raise SweepError(
                f"list[{i}]", f"expected a non-empty mapping PATH: value, got {_short(item)}"
            )
        for key in item:
            _check_key(key, f"list[{i}].{key}")
    count = (math.prod(len(v) for v in grid.values()) if grid else 0) + len(listing)
    if count == 0:
        raise SweepError("grid", "no combinations: give grid (PATH: [values]) or list")
    if count > MAX_JOBS:
        raise SweepError(
            "grid" if grid else "list", f"{count} combinations, at most {MAX_JOBS} in one sweep"
        )
    out = [("grid", dict(zip(grid, values, strict=True))) for values in product(*grid.values())]
    return [*(out if grid else []), *((f"list[{i}]", dict(c)) for i, c in enumerate(listing))]


def _resolve(template: str, keys: list[str]) -> dict[str, str | None]:
    """Placeholder -> the key it names (None for ``{n}``). Raises SweepError (``name``)."""
    resolved: dict[str, str | None] = {}
    for ph in _PLACEHOLDER.findall(template):
        if ph == "n":
            resolved[ph] = None
        elif ph in keys:
            resolved[ph] = ph
        else:
            matches = [k for k in keys if k.rsplit(".", 1)[-1] == ph]
            if not matches:
                raise SweepError(
                    "name", f"{{{ph}}} is not a key of grid or list (keys: {keys}) nor {{n}}"
                )
            if len(matches) > 1:
                raise SweepError("name", f"{{{ph}}} matches {matches}; write the full key")
            resolved[ph] = matches[0]
    return resolved


def _env_text(key: str, value: Any) -> Any:
    """An environment variable's value is a string: a number or boolean swept into an
    ``env`` key (``env.X``, ``roles.R.env.X``) is set as its YAML text (0.1 -> "0.1")."""
    parts = key.split(".")
    if len(parts) >= 2 and parts[-2] == "env" and isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def _name_part(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return re.sub(r"[^a-z0-9-]+", "-", text.lower())


def expand(base: Mapping[str, Any], sweep: Mapping[str, Any]) -> list[SweepJob]:
    """The jobs of a sweep: ``base`` (a pasture-format spec dict) with each combination's
    values set and its name rendered; each result is validated as a job spec.

    Pure (no file or network access). Raises:
        SweepError: see :func:`combinations`; ``name`` not a string, naming an unknown
            key, giving a name that is no job name or the same name twice; a combination
            without a value the name uses; a path that cannot be set, or a value that
            makes the job invalid (the field is the combination's source and key).
    """
    from scheduler.cli.jobspec import apply_overrides
    from scheduler.spec import SpecError, parse_job
    from scheduler.spec.model import NAME_RE

    combos = combinations(sweep)
    keys = list(dict.fromkeys(k for _, values in combos for k in values))
    default = f"{str(base.get('name', 'job'))[:55].rstrip('-')}-{{n}}"
    template = sweep.get("name") or default
    if not isinstance(template, str):
        raise SweepError("name", f"expected a template string, got {_short(template)}")
    resolved = _resolve(template, keys)
    jobs: list[SweepJob] = []
    seen: dict[str, int] = {}
    for n, (source, values) in enumerate(combos):

        def part(
            match: re.Match[str], n: int = n, source: str = source, values: dict[str, Any] = values
        ) -> str:
            key = resolved[match.group(1)]
            if key is None:
                return str(n)
            if key not in values:
                raise SweepError(source, f"has no value for {key}, which `name` uses")
            return _name_part(values[key])

        name = _PLACEHOLDER.sub(part, template)
        if not re.fullmatch(NAME_RE, name):
            raise SweepError(
                "name",
                f"gives {name!r} for combination {n}, not a job name (1-63 lowercase letters,"
                " digits and '-', starting and ending with a letter or digit)",
            )
        if name in seen:
            raise SweepError(
                "name",
                f"gives {name!r} for combinations {seen[name]} and {n};"
                " use a key that tells them apart",
            )
        seen[name] = n
        sets = [f"{k}={json.dumps(_env_text(k, v), default=str)}" for k, v in values.items()]
        try:
            spec = apply_overrides(dict(base), name, None, {}, sets)
        except typer.BadParameter as exc:
            raise SweepError(source, exc.message) from None
        try:
            parse_job(spec, require_secret_values=False)
        except SpecError as exc:
            raise SweepError(source, f"job {name} ({_label(values)}) is invalid: {exc}") from None
        jobs.append(SweepJob(name, values, spec, source))
    return jobs


def _label(values: Mapping[str, Any]) -> str:
    return SweepJob("", dict(values), {}, "").label()


def load_sweep(path: Path) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """Read a sweep file: (the pasture-format spec dict of its ``spec``, the secret values
    that spec gives, the sweep document).

    Raises:
        SweepError: not a mapping, unknown fields, ``spec`` missing, a file that does
            not exist, or a spec that does not parse (or is a MARO schedule of several).
    """
    from scheduler.spec import SpecError, load_job, parse_job
    from scheduler.spec.bounded import load_document

    try:
        sweep = load_document(path.read_bytes(), as_json=path.suffix.lower() == ".json")
    except ValueError as exc:
        raise SweepError("(file)", str(exc)) from None
    if not isinstance(sweep, dict):
        raise SweepError(
            "(file)", f"expected a mapping with {list(FIELDS)}, got {type(sweep).__name__}"
        )
    unknown = sorted(set(sweep) - set(FIELDS), key=str)
    if unknown:
        raise SweepError("(file)", f"unknown field(s) {unknown}; expected {list(FIELDS)}")
    spec = sweep.get("spec")
    try:
        if isinstance(spec, str):
            spec_path = path.parent / spec
            if not spec_path.is_file():
                raise SweepError("spec", f"no file {spec_path}")
            as_json = spec_path.suffix.lower() == ".json"
            parsed = load_job(spec_path.read_bytes(), as_json=as_json, require_secret_values=False)
        elif isinstance(spec, dict):
            parsed = parse_job(spec, require_secret_values=False)
        else:
            raise SweepError(
                "spec", f"expected a job file's path or a job spec, got {_short(spec)}"
            )
    except SpecError as exc:
        raise SweepError("spec", str(exc)) from None
    if len(parsed.specs) != 1:
        raise SweepError(
            "spec", f"a MARO schedule of {len(parsed.specs)} jobs; a sweep takes one job"
        )
    return parsed.spec.model_dump(mode="json"), parsed.secrets, sweep


def submit_sweep(
    path: Path,
    *,
    more: list[Path] | None,
    one_job: tuple[Any, ...],
    vc: str | None,
    env: list[str] | None,
    sets: list[str] | None,
    secrets: dict[str, str],
    dry_run: bool,
    as_json: bool,
    client: Callable[[], ApiClient],
) -> int:
    """``pasture job submit --sweep PATH``: expand the sweep file, apply ``--vc/--env/--set``
    and the secrets to its spec first, and submit every job in one batch request (one
    line per job); with ``dry_run`` print each job's name and values, calling no server.
    ``one_job`` are the options that take one job (--follow, --wait, --name): refused
    when given. ``client`` makes the API client (not called for a dry run).

    Returns the exit code: 0 when every job was stored (or printed), 1 otherwise.
    Raises typer.BadParameter: another file given, a one-job option, or a SweepError.
    """
    from scheduler.cli.batch import report
    from scheduler.cli.jobsecrets import attach
    from scheduler.cli.jobspec import apply_overrides, parse_env

    if more or any(one_job):
        raise typer.BadParameter(
            "--sweep takes one sweep file and no --follow, --wait or --name", param_hint="--sweep"
        )
    try:
        base, known, sweep = load_sweep(path)
        jobs = expand(apply_overrides(base, None, vc, parse_env(env), sets), sweep)
    except SweepError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"sweep file {path}") from None
    if dry_run:
        if as_json:
            print_json([{"name": j.name, "values": j.values, "spec": j.spec} for j in jobs])
        for job in [] if as_json else jobs:
            sys.stdout.write(f"{job.name}\t{job.label()}\n")  # NAME TAB VALUES
        return 0
    documents = [attach(j.spec, known, secrets) for j in jobs]
    return report(client().submit_batch(documents), [j.label() for j in jobs], as_json)
